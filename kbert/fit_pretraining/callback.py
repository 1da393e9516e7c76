"""The callbacks of a `model.fit` pretraining run: `FitCheckpoint` checkpoints it
(`kbert.fit_pretraining.checkpoints`); `StateOnTheMesh` keeps JAX from compiling its step twice on one device."""

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


class StateOnTheMesh(keras.callbacks.Callback):
    """Under JAX and a `keras.distribution` whose mesh has one device, puts every variable of the model, its
    optimizer and its metrics that Keras left on that device (not laid out on the mesh) on the mesh, at each epoch's
    start (after `fit` has built them and reset the metrics); elsewhere it does nothing.

    Keras leaves a fresh value where it is when the mesh has a single device, since that is equivalent to any
    layout on it; the first step's outputs come back laid out on the mesh, so without this callback JAX traces and
    compiles the train step again at step 2 (4.5 s more for a 2-layer BERT on a CPU; a compilation's time grows with
    the model). On a mesh of several devices Keras lays every value out itself, and this callback changes nothing.

    Example:

    ```python
    model.fit(dataset, epochs=1, steps_per_epoch=1000, callbacks=[StateOnTheMesh(), checkpoint])
    ```
    """

    def on_epoch_begin(self, epoch, logs=None):
        distribution = keras.distribution.distribution()
        if keras.backend.backend() != "jax" or distribution is None:
            return
        import jax

        mesh = distribution.device_mesh.backend_mesh
        if mesh.size != 1:
            return
        on_the_mesh = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        model = self.model
        for variable in model.variables + model.optimizer.variables + model.metrics_variables:
            if not isinstance(variable.value.sharding, jax.sharding.NamedSharding):
                variable.assign(jax.device_put(variable.value, on_the_mesh))
