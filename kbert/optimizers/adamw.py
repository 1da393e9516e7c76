"""AdamW with kbert's distribution mixin: `global_clipnorm` after the all-reduce and optional update-ratio telemetry."""

from __future__ import annotations

import keras

from kbert.optimizers.distributed import DistributedMixin


@keras.saving.register_keras_serializable(package="kbert")
class AdamW(DistributedMixin, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW`, the same numbers, with `DistributedMixin`: `global_clipnorm` divides the
    *all-reduced* gradients by max(‖G‖ / global_clipnorm, 1) (independent of the replica count; Keras's clips each
    replica's before the sum), and schedules count optimizer steps under gradient accumulation.

    Args:
        update_ratios: keep, per variable, the ratio ‖Δw‖ / ‖w‖ of its last Adam update (Keras's decoupled weight
            decay, applied before it, not included) in the `trust_ratios` vector, read as `trust_ratios` and
            written to TensorBoard as LAMB's trust ratios are. Off by default: it adds an optimizer variable (the
            checkpoint's layout) and a copy and two more reads of every weight per step.
        **kwargs: `keras.optimizers.AdamW`'s.

    Example:

    ```python
    optimizer = kbert.optimizers.AdamW(1e-4, weight_decay=0.01, global_clipnorm=1.0, update_ratios=True)
    ```
    """

    def __init__(self, *args, update_ratios: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.records_ratios = bool(update_ratios)

    def update_step(self, gradient, variable, learning_rate):
        self.update_with_ratio(super().update_step, gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "update_ratios": self.records_ratios}
