"""Learning-rate schedules for BERT pretraining: polynomial warmup-decay (Google's, NVIDIA's), warmup-stable-decay
(ModernBERT's, MiniCPM's) and the triangular one-cycle (Cramming's). All are backend-agnostic (`keras.ops`) and
`.keras`-serialisable, and restart at `step_offset`."""

from __future__ import annotations

import keras
from keras import ops

from kbert.optimizers.layerwise import check_non_negative


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")


def _steps_since(step, step_offset: int):
    """max(step − step_offset, 0) as float32: where a schedule that restarts at `step_offset` is."""
    return ops.maximum(ops.cast(step, "float32") - step_offset, 0.0)


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
            s = _steps_since(step, self.step_offset)
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


class _LinearPieces(keras.optimizers.schedules.LearningRateSchedule):
    """Linear between `(step, rate)` knots, the last knot's rate after it; subclasses give `knots()`."""

    def __init__(
        self, peak_learning_rate: float, total_steps: int, end_learning_rate: float, step_offset: int, name: str
    ):
        check_non_negative("peak_learning_rate", peak_learning_rate)
        check_non_negative("end_learning_rate", end_learning_rate)
        _check_count("total_steps", total_steps, 1)
        _check_count("step_offset", step_offset, 0)
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = total_steps
        self.end_learning_rate = float(end_learning_rate)
        self.step_offset = step_offset
        self.name = name

    def knots(self) -> list[tuple[float, float]]:
        raise NotImplementedError

    def __call__(self, step):
        with keras.name_scope(self.name):
            s = _steps_since(step, self.step_offset)
            knots = self.knots()
            rate = ops.full((), knots[-1][1], "float32")
            # From the last piece back, so each step takes the first piece it falls before the end of; a piece
            # of no width is never taken.
            for (x0, y0), (x1, y1) in reversed(list(zip(knots, knots[1:]))):
                piece = y0 + (y1 - y0) * (s - x0) / ((x1 - x0) or 1.0)
                rate = ops.where(s < x1, piece, rate)
            return rate

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
            "step_offset": self.step_offset,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package="kbert")
class WarmupStableDecay(_LinearPieces):
    """Warmup-stable-decay (ModernBERT, MiniCPM): linear warmup, constant at the peak, then a linear decay over the
    last `decay_share` of the steps.

    With s = max(step − step_offset, 0), T = total_steps, w = warmup_steps and d = (1 − decay_share) · T:

        lr(s) = peak · s / w                               for s < w
        lr(s) = peak                                       for w <= s < d
        lr(s) = peak − (peak − end) · (s − d) / (T − d)    for d <= s < T
        lr(s) = end                                        for s >= T

    The warmup must end before the decay starts (w <= d). The stable phase can be resumed from and branched
    off: only the last `decay_share` depends on T.

    Example:

    ```python
    schedule = WarmupStableDecay(peak_learning_rate=8e-4, warmup_steps=300, total_steps=10_000, decay_share=0.1)
    float(schedule(5000))  # 8e-4: the stable phase; the decay runs from step 9000 to 10000
    ```
    """

    def __init__(
        self,
        peak_learning_rate: float,
        warmup_steps: int,
        total_steps: int,
        decay_share: float = 0.1,
        end_learning_rate: float = 0.0,
        step_offset: int = 0,
        name: str = "warmup_stable_decay",
    ):
        super().__init__(peak_learning_rate, total_steps, end_learning_rate, step_offset, name)
        _check_count("warmup_steps", warmup_steps, 0)
        if isinstance(decay_share, bool) or not isinstance(decay_share, (int, float)) or not 0 < decay_share <= 1:
            raise ValueError(f"`decay_share` must be in (0, 1]. Received: decay_share={decay_share!r}")
        if warmup_steps > (1 - decay_share) * total_steps:
            raise ValueError(
                f"`warmup_steps` must end before the decay starts at (1 - decay_share) * total_steps = "
                f"{(1 - decay_share) * total_steps:g}. Received: warmup_steps={warmup_steps}"
            )
        self.warmup_steps = warmup_steps
        self.decay_share = float(decay_share)

    def knots(self) -> list[tuple[float, float]]:
        decay_start = (1 - self.decay_share) * self.total_steps
        peak = self.peak_learning_rate
        return [(0.0, 0.0), (self.warmup_steps, peak), (decay_start, peak), (self.total_steps, self.end_learning_rate)]

    def get_config(self):
        return {**super().get_config(), "warmup_steps": self.warmup_steps, "decay_share": self.decay_share}


@keras.saving.register_keras_serializable(package="kbert")
class OneCycle(_LinearPieces):
    """Triangular one-cycle (Cramming): a linear rise from 0 to the peak, then a linear fall to the end rate.

    With s = max(step − step_offset, 0), T = total_steps and m = warmup_steps (None: T / 2, Cramming's middle):

        lr(s) = peak · s / m                               for s < m
        lr(s) = peak − (peak − end) · (s − m) / (T − m)    for m <= s < T
        lr(s) = end                                        for s >= T

    Example:

    ```python
    schedule = OneCycle(peak_learning_rate=1e-3, total_steps=1000)
    float(schedule(500)), float(schedule(750))  # 1e-3 at the middle, 5e-4 halfway down
    ```
    """

    def __init__(
        self,
        peak_learning_rate: float,
        total_steps: int,
        warmup_steps: int | None = None,
        end_learning_rate: float = 0.0,
        step_offset: int = 0,
        name: str = "one_cycle",
    ):
        super().__init__(peak_learning_rate, total_steps, end_learning_rate, step_offset, name)
        if warmup_steps is not None:
            _check_count("warmup_steps", warmup_steps, 0)
            if warmup_steps > total_steps:
                raise ValueError(
                    f"`warmup_steps` must be <= total_steps={total_steps}. Received: warmup_steps={warmup_steps}"
                )
        self.warmup_steps = warmup_steps

    def knots(self) -> list[tuple[float, float]]:
        peak_step = self.total_steps / 2 if self.warmup_steps is None else self.warmup_steps
        return [(0.0, 0.0), (peak_step, self.peak_learning_rate), (self.total_steps, self.end_learning_rate)]

    def get_config(self):
        return {**super().get_config(), "warmup_steps": self.warmup_steps}
