"""Encoding pretraining instances as `tf.train.Example` (schema.py's features) and writing them to sharded files.

Example:

```python
with ShardedWriter(["out-0.tfrecord", "out-1.tfrecord"], gzip=False) as writer:
    writer.write(encode_instance(instance, seq_length=128, max_predictions=20))
```
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data import schema
from kbert.data.instances import Instance


def _int64(values: np.ndarray) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values.tolist()))


def encode_instance(
    instance: Instance, seq_length: int, max_predictions: int | None, use_v2_feature_names: bool = False
) -> bytes:
    """Serializes one instance, 0-padded to `seq_length`; `max_predictions=None` writes an unmasked record.

    Features and dtypes are google-research/bert's exactly (schema.py), so Google's, Model Garden's and NVIDIA's
    readers parse the files.
    """
    n = len(instance.input_ids)
    padded = np.zeros([3, seq_length], np.int64)
    padded[0, :n] = instance.input_ids
    padded[1, :n] = 1
    padded[2, :n] = instance.segment_ids
    name = lambda key: schema.file_name(key, use_v2_feature_names)  # noqa: E731
    features = {
        name("input_ids"): _int64(padded[0]),
        name("input_mask"): _int64(padded[1]),
        name("segment_ids"): _int64(padded[2]),
    }
    if max_predictions is not None:
        p = len(instance.masked_positions)
        predictions = np.zeros([2, max_predictions], np.int64)
        predictions[0, :p] = instance.masked_positions
        predictions[1, :p] = instance.masked_ids
        weights = np.zeros([max_predictions], np.float32)
        weights[:p] = 1.0
        features["masked_lm_positions"] = _int64(predictions[0])
        features["masked_lm_ids"] = _int64(predictions[1])
        features["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(value=weights.tolist()))
    features["next_sentence_labels"] = tf.train.Feature(
        int64_list=tf.train.Int64List(value=[instance.next_sentence_label])
    )
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString(deterministic=True)


class ShardedWriter:
    """Writes records round-robin over `paths`, as Google's script does.

    Each file is written under `<path>.incomplete` and renamed only when the writer closes without an error, so a
    crash never leaves a file that looks finished; on an error the partial files are removed.
    """

    def __init__(self, paths: Sequence[str], gzip: bool = False):
        self.paths = list(paths)
        options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
        self._temp = [f"{p}.incomplete" for p in self.paths]
        for path in self.paths:
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            if parent and not tf.io.gfile.exists(parent):
                tf.io.gfile.makedirs(parent)
        self._writers = [tf.io.TFRecordWriter(t, options) for t in self._temp]
        self._next = 0
        self.count = 0

    def write(self, record: bytes) -> None:
        self._writers[self._next].write(record)
        self._next = (self._next + 1) % len(self._writers)
        self.count += 1

    def __enter__(self) -> "ShardedWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for writer in self._writers:
            writer.close()
        for temp, path in zip(self._temp, self.paths):
            if exc_type is None:
                tf.io.gfile.rename(temp, path, overwrite=True)
            else:
                tf.io.gfile.remove(temp)
