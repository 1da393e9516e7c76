"""A batch-size ramp: the global batch grows from `train.batch_ramp_start` to `train.global_batch_size` over the
first `train.batch_ramp_steps` optimizer steps, one micro-batch at a time, the learning rate scaled with it.

Cramming and ModernBERT warm the batch up: early steps, when the model sits on the unigram plateau, need fewer
samples than late ones. The micro-batch stays `global_batch_size / gradient_accumulation_steps` (all replicas),
so the input and the traced step stay as they are; optimizer step s accumulates

    k(s) = min(K, k0 + (K - k0) * s // ramp_steps)

micro-batches, K = gradient_accumulation_steps and k0 = batch_ramp_start / micro-batch, and trains at the
schedule's rate times (k(s) / K) ** p: p = 0.5 (`sqrt`, LAMB's square-root scaling of You et al.), 1 (`linear`,
Goyal et al.'s for SGD) or 0 (`none`). The peak rate is the full batch's. s counts the optimizer's own steps,
so the ramp and the schedule it scales are in step; a phase after the first, or an MSLT stage after the first,
starts at the full batch (`TrainConfig.without_batch_ramp`).

Example:

>>> ramp = BatchRamp(first=2, full=8, steps=6, rate_scaling="sqrt")
>>> [ramp.micro_batches_at(s) for s in range(8)]
[2, 3, 4, 5, 6, 7, 8, 8]
>>> ramp.micro_batches_between(0, 3)
9
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

RATE_SCALINGS = {"sqrt": 0.5, "linear": 1.0, "none": 0.0}


@dataclasses.dataclass(frozen=True)
class BatchRamp:
    """`first` micro-batches at step 0, `full` from step `steps` on, in whole micro-batches between."""

    first: int
    full: int
    steps: int
    rate_scaling: str = "sqrt"

    def __post_init__(self):
        if not 0 < self.first < self.full or self.steps <= 0 or self.rate_scaling not in RATE_SCALINGS:
            raise ValueError(
                f"BatchRamp(first={self.first}, full={self.full}, steps={self.steps}, rate_scaling="
                f"{self.rate_scaling!r}): needs 0 < first < full, steps > 0 and a rate_scaling of "
                f"{', '.join(RATE_SCALINGS)}."
            )

    def micro_batches(self, step):
        """k(step) as int32, for a step tensor (the optimizer's `iterations`)."""
        step = ops.cast(step, "int64")
        grown = self.first + ops.floor_divide((self.full - self.first) * step, self.steps)
        return ops.cast(ops.minimum(grown, self.full), "int32")

    def micro_batches_at(self, step: int) -> int:
        return min(self.first + (self.full - self.first) * step // self.steps, self.full)

    def micro_batches_between(self, start: int, end: int) -> int:
        """The micro-batches optimizer steps [start, end) accumulate in all."""
        return sum(self.micro_batches_at(s) for s in range(start, min(end, self.steps))) + self.full * max(
            end - max(start, self.steps), 0
        )

    def rate_scale(self, step):
        """(k(step) / full) ** p as float32."""
        share = ops.cast(self.micro_batches(step), "float32") / self.full
        return ops.power(share, RATE_SCALINGS[self.rate_scaling])


@keras.saving.register_keras_serializable(package="kbert")
class RampedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule(step) * ramp.rate_scale(step)`: a learning-rate schedule scaled to a `BatchRamp`'s batch."""

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, ramp: BatchRamp):
        self.schedule = schedule
        self.ramp = ramp

    def __call__(self, step):
        return self.schedule(step) * self.ramp.rate_scale(step)

    def get_config(self):
        return {"schedule": keras.optimizers.schedules.serialize(self.schedule), **dataclasses.asdict(self.ramp)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        schedule = keras.optimizers.schedules.deserialize(config.pop("schedule"))
        return cls(schedule, BatchRamp(**config))
