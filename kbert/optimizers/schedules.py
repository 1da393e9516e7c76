"""Learning-rate schedules for large-batch BERT pretraining."""

from __future__ import annotations

import keras
from keras import ops

from kbert.optimizers.layerwise import check_non_negative


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")


@keras.saving.register_keras_serializable(package="kbert")
class PolynomialWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to a peak, then polynomial decay to an end rate.

    With s = max(step − step_offset, 0):

        lr(s) = peak · s / warmup_steps                                  for s < warmup_steps
        lr(s) = (peak − end) · (1 − min((s − warmup_steps) / decay_steps, 1))^power + end   otherwise

    `power` 1.0 is Google BERT's linear decay, 0.5 NVIDIA's. `step_offset` restarts the schedule (warmup
    included) at a later global step, for a second pretraining phase or an MSLT stage that keeps the global
    step counter. Note that Google's `num_train_steps` counts the warmup: there
    `decay_steps = num_train_steps − warmup_steps`.

    Example:

    ```python
    schedule = PolynomialWarmup(peak_learning_rate=6e-3, warmup_steps=2000, decay_steps=5000, power=0.5)
    optimizer = kbert.optimizers.LAMB(schedule)
    ```
    """

    def __init__(
        self,
        peak_learning_rate: float,
        warmup_steps: int,
        decay_steps: int,
        end_learning_rate: float = 0.0,
        power: float = 1.0,
        step_offset: int = 0,
        name: str = "polynomial_warmup",
    ):
        check_non_negative("peak_learning_rate", peak_learning_rate)
        check_non_negative("end_learning_rate", end_learning_rate)
        check_non_negative("power", power)
        _check_count("warmup_steps", warmup_steps, 0)
        _check_count("decay_steps", decay_steps, 1)
        _check_count("step_offset", step_offset, 0)
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)
        self.step_offset = step_offset
        self.name = name

    def __call__(self, step):
        with keras.name_scope(self.name):
            s = ops.maximum(ops.cast(step, "float32") - self.step_offset, 0.0)
            warmup = self.peak_learning_rate * s / max(self.warmup_steps, 1)
            progress = ops.minimum((s - self.warmup_steps) / self.decay_steps, 1.0)
            decay = (self.peak_learning_rate - self.end_learning_rate) * ops.power(
                1.0 - ops.maximum(progress, 0.0), self.power
            ) + self.end_learning_rate
            return ops.where(s < self.warmup_steps, warmup, decay)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "decay_steps": self.decay_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "step_offset": self.step_offset,
            "name": self.name,
        }
