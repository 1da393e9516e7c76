"""The input of `model.fit` pretraining: kbert's tf.data pipeline on the host's CPU, the same batches for a seed.

tf.data hands `model.fit` NumPy batches on any Keras backend; under a `keras.distribution` Keras shards each one
over the devices. TensorFlow is kept off the GPUs first: their memory is the backend's (JAX's), and TensorFlow
would otherwise take it all when it starts.

Example:

```python
dataset = fit_dataset("data/train.tfrecord-*", 128, 20, batch_size=256, seed=0, skip_batches=1000)
model.fit(dataset, epochs=1, steps_per_epoch=9000)   # batches 1000, 1001, ... of the run with seed 0
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from kbert.data.pipeline import pretraining_dataset


def _keep_tensorflow_off_the_gpus() -> None:
    """Hides the GPUs from TensorFlow, which reads the records only; a no-op once TensorFlow has started."""
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TensorFlow started before (the caller's own tf.data): its devices are set for good
        pass


def fit_dataset(
    file_pattern: str | Sequence[str],
    seq_length: int,
    max_predictions: int,
    batch_size: int,
    *,
    seed: int,
    skip_batches: int = 0,
    **options: Any,
) -> tf.data.Dataset:
    """Training batches of `batch_size` examples, shuffled by `seed`, the first `skip_batches` left out unparsed.

    Two datasets with the same files, `batch_size` and `seed` yield the same batches (dynamic masks included), so
    one that skips the batches a run has trained continues that run's data.

    Args:
      file_pattern, seq_length, max_predictions: as `kbert.data.pretraining_dataset` takes them.
      batch_size: examples per batch, over all devices (a micro-batch under gradient accumulation).
      seed: shuffles the files and records, and draws dynamic masks.
      skip_batches: batches already trained.
      **options: other `pretraining_dataset` keywords (`dynamic_masking`, `vocab_size`, `shuffle_buffer`, ...).
    """
    _keep_tensorflow_off_the_gpus()
    return pretraining_dataset(
        file_pattern, seq_length, max_predictions, batch_size, seed=seed, skip_batches=skip_batches, **options
    )
