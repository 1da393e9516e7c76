"""`FitCheckpoint`: the callback that checkpoints a `model.fit` pretraining run
(`kbert.fit_pretraining.checkpoints`)."""

from __future__ import annotations

import keras

from kbert.fit_pretraining.checkpoints import Progress, write_checkpoint


class FitCheckpoint(keras.callbacks.Callback):
    """Writes a checkpoint whenever the batches trained reach a multiple of `every_n_batches`, and when `fit`
    ends with batches trained since the last one.

    The batches count from `initial_batches`, those a resumed run had trained before this `fit`, so the checkpoints
    of a resumed run fall where the uninterrupted run's would.

    Example:

    ```python
    checkpoint = FitCheckpoint("runs/tiny/checkpoints", every_n_batches=1000, batch_size=32, keep=3)
    model.fit(dataset, epochs=1, steps_per_epoch=10_000, callbacks=[checkpoint])   # ckpt-1000 ... ckpt-10000
    ```
    """

    def __init__(self, directory: str, every_n_batches: int, batch_size: int, keep: int = 3, initial_batches: int = 0):
        super().__init__()
        if every_n_batches < 1 or keep < 1:
            raise ValueError(f"every_n_batches ({every_n_batches}) and keep ({keep}) must be at least 1.")
        self.directory = directory
        self.every_n_batches = every_n_batches
        self.batch_size = batch_size
        self.keep = keep
        self.initial_batches = initial_batches
        self.batches = self._saved = initial_batches

    def _write(self) -> None:
        # `self.model` first brings the JAX trainer's state back into the model's variables.
        write_checkpoint(self.model, self.directory, Progress(self.batches, self.batch_size), self.keep)
        self._saved = self.batches

    def on_train_batch_end(self, batch, logs=None):
        self.batches = self.initial_batches + batch + 1  # `batch`: the last of those this call trained
        if self.batches // self.every_n_batches > self._saved // self.every_n_batches:
            self._write()

    def on_train_end(self, logs=None):
        if self.batches > self._saved:
            self._write()
