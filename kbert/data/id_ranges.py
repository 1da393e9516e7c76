"""Every id a record feeds the model stays inside the table it indexes, checked on every record of every file.

An out-of-range id is not an error TensorFlow reports well: on CPUs the embedding gather fails deep inside a
training step, naming no file; on GPUs it reads zeros and the loss stays finite and wrong. So the input pipeline
checks each file's records as they are read, before files are interleaved, and the first bad one stops the run
with its file and index (`checked_records`); the up-front checks and `kbert-inspect-tfrecords` use the same
bounds on NumPy arrays (`check_ids`).

| feature | must be below | |
|---|---|---|
| `input_ids`, `masked_lm_ids` | `vocab_size` | the vocabulary |
| `segment_ids` | `type_vocab_size` | the segment (token type) table |
| `positions` (packed rows) | `max_position_embeddings` | the position table |

Example:

```python
spec, v2 = layout.spec(), layout.use_v2_feature_names
bounds = id_bounds(spec, v2, vocab_size=30522, type_vocab_size=2, max_position_embeddings=512)
records = checked_records(path, tf.data.TFRecordDataset(path), spec, v2, bounds)
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from kbert.data import schema
from kbert.errors import InputDataError

# What bounds each id-valued feature, and what the user does about an id outside it.
_BOUNDS = {
    "input_ids": "vocab_size",
    "masked_lm_ids": "vocab_size",
    "segment_ids": "type_vocab_size",
    "positions": "max_position_embeddings",
}
_FIXES = {
    "vocab_size": "use the vocabulary the file was made with (--vocab_file / --vocab_size), or regenerate the file "
    "with this vocabulary",
    "type_vocab_size": "give the model a type_vocab_size that covers the file's segments, or regenerate the file (a "
    "model without a segment table, type_vocab_size=0, takes segment id 0 alone)",
    "max_position_embeddings": "give the model a max_position_embeddings above the file's rows, or repack the "
    "file at this length",
}
# Marks the message that a failed in-graph check carries inside TensorFlow's InvalidArgumentError.
_MARK = "kbert-id-check: "
_MARKED = re.compile(re.escape(_MARK) + r"(.*)\]")
# Records parsed and checked at once.
CHUNK_RECORDS = 256


def message(path: str, record: str | int, name: str, value: str | int, limit: int) -> str:
    """The one line that names the file, the record and the fix."""
    setting = _BOUNDS[name]
    return (
        f"{path}: record {record} has {name} id {value}, outside [0, {limit}) of {setting}={limit}; the model "
        f"would train on a wrong loss or stop without naming the file: {_FIXES[setting]}."
    )


def id_bounds(
    layout_spec: Mapping[str, object],
    use_v2_feature_names: bool,
    vocab_size: int | None,
    type_vocab_size: int | None = None,
    max_position_embeddings: int | None = None,
) -> dict[str, int]:
    """feature -> bound, for the id-valued features a file's records have (`layout_spec`) and the bounds given."""
    given = {
        "vocab_size": vocab_size,
        # a model without a segment table (ModernBERT's) takes segment id 0 alone
        "type_vocab_size": None if type_vocab_size is None else max(1, type_vocab_size),
        "max_position_embeddings": max_position_embeddings,
    }
    return {
        name: given[setting]
        for name, setting in _BOUNDS.items()
        if given[setting] is not None and schema.file_name(name, use_v2_feature_names) in layout_spec
    }


def check_ids(path: str, name: str, ids: np.ndarray, limit: int, first_record: int = 0) -> None:
    """Raises `InputDataError` at the first record of `ids` ([records, ...]) with an id outside [0, limit)."""
    bad = np.argwhere((ids >= limit) | (ids < 0))
    if bad.size:
        raise InputDataError(message(path, first_record + int(bad[0][0]), name, int(ids[tuple(bad[0])]), limit))


def checked_records(
    path: tf.Tensor,
    records: tf.data.Dataset,
    spec: Mapping[str, tf.io.FixedLenFeature],
    use_v2_feature_names: bool,
    bounds: Mapping[str, int],
) -> tf.data.Dataset:
    """One file's serialized `records`, unchanged and in order, each checked against `bounds` as it is read.

    A record with an id outside its bound fails the pipeline with TensorFlow's `InvalidArgumentError` carrying
    `message` (`id_error` turns it back into `InputDataError`); the records after it are never yielded.
    """
    keys = {name: schema.file_name(name, use_v2_feature_names) for name in bounds}
    id_spec = {keys[name]: spec[keys[name]] for name in bounds}

    @tf.autograph.experimental.do_not_convert  # no Python control flow on tensors: nothing to convert
    def check(chunk: tf.Tensor, serialized: tf.Tensor) -> tf.Tensor:
        parsed = tf.io.parse_example(serialized, id_spec)
        checks = []
        for name, limit in bounds.items():
            ids = parsed[keys[name]]
            bad = tf.logical_or(ids < 0, ids >= limit)
            bad_rows = tf.reduce_any(bad, axis=1)
            row = tf.argmax(tf.cast(bad_rows, tf.int32), output_type=tf.int64)
            value = tf.gather(ids[row], tf.argmax(tf.cast(bad[row], tf.int32)))
            record = chunk * CHUNK_RECORDS + row
            texts = message("\0", "\0", name, "\0", limit).split("\0")
            line = tf.strings.join(
                [_MARK + texts[0], path, texts[1], tf.strings.as_string(record), texts[2]]
                + [tf.strings.as_string(value), texts[3]]
            )
            checks.append(tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad_rows)), [line]))
        with tf.control_dependencies(checks):
            return tf.identity(serialized)

    return records.batch(CHUNK_RECORDS).enumerate().map(check).unbatch()


def id_error(error: BaseException) -> InputDataError | None:
    """The `InputDataError` a failed `checked_records` check raised inside TensorFlow, or None for any other error."""
    found = _MARKED.search(str(getattr(error, "message", error)))
    return InputDataError(found.group(1)) if found else None
