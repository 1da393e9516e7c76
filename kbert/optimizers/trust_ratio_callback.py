"""TensorBoard telemetry of LAMB/LARS trust ratios (and kbert AdamW's update ratios), for `model.fit` and custom
loops.

Summaries are written with `tf.summary` (as Keras's own TensorBoard callback does on every backend): TensorFlow is
imported when summaries are written or a writer is made, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras

from kbert.optimizers.distributed import DistributedMixin, on_tensorflow, ratio_optimizer

if TYPE_CHECKING:
    import tensorflow as tf


def _layerwise(optimizer) -> DistributedMixin:
    """The LAMB/LARS (or AdamW recording update ratios) inside `optimizer` (maybe a LossScaleOptimizer), or a clear
    error."""
    inner = ratio_optimizer(optimizer)
    if inner is None:
        name = type(getattr(optimizer, "inner_optimizer", optimizer)).__name__
        raise ValueError(
            f"Trust-ratio telemetry needs a kbert LAMB or LARS optimizer; got {name} "
            "(kbert.optimizers.AdamW(update_ratios=True) records update ratios)."
        )
    return inner


def write_trust_ratio_summaries(optimizer, step, writer: tf.summary.SummaryWriter | None = None) -> None:
    """Writes the last step's trust ratios: one histogram `trust_ratio/all` and one scalar per variable path.

    Call it from a custom training loop after `apply_gradients`: under TensorFlow eagerly, or inside a
    `tf.function` in cross-replica context; on other backends outside jit (the ratios are read as NumPy).
    `writer` defaults to the current default summary writer.

    Example:

    ```python
    writer = tf.summary.create_file_writer("/tmp/logs")
    write_trust_ratio_summaries(optimizer, optimizer.iterations, writer)
    ```
    """
    import tensorflow as tf

    ratios = _layerwise(optimizer).trust_ratios
    if not ratios:
        return
    if not on_tensorflow():
        ratios = {path: keras.ops.convert_to_numpy(ratio) for path, ratio in ratios.items()}
        step = keras.ops.convert_to_numpy(step)
    writer = writer or tf.summary.experimental.get_default_writer()
    if writer is None:
        raise ValueError("No summary writer: pass `writer=` or enter `writer.as_default()`.")
    with writer.as_default(step=tf.cast(step, tf.int64)):
        tf.summary.histogram("trust_ratio/all", tf.stack(list(ratios.values())))
        for path, ratio in ratios.items():
            tf.summary.scalar(f"trust_ratio/{path}", ratio)


@keras.saving.register_keras_serializable(package="kbert")
class TrustRatioCallback(keras.callbacks.Callback):
    """Writes the optimizer's trust ratios to TensorBoard every `every_n_steps` optimizer steps.

    Works with `steps_per_execution > 1` (writes when a multiple of `every_n_steps` was crossed) and with a
    `LossScaleOptimizer` wrapping LAMB/LARS.

    Example:

    ```python
    model.fit(x, y, callbacks=[TrustRatioCallback("/tmp/logs", every_n_steps=100)])
    ```
    """

    def __init__(self, log_dir: str, every_n_steps: int = 100):
        super().__init__()
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"`every_n_steps` must be an integer >= 1. Received: {every_n_steps!r}")
        self.log_dir = log_dir
        self.every_n_steps = every_n_steps
        self._writer = None
        self._last_written = 0

    def on_train_begin(self, logs=None):
        import tensorflow as tf

        _layerwise(self.model.optimizer)
        self._writer = self._writer or tf.summary.create_file_writer(self.log_dir)

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations)
        if step // self.every_n_steps > self._last_written // self.every_n_steps:
            write_trust_ratio_summaries(self.model.optimizer, step, self._writer)
            self._last_written = step

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()

    def get_config(self):
        return {"log_dir": self.log_dir, "every_n_steps": self.every_n_steps}
