"""The optimizer of a config's `optimizer` section (any registered one: kbert.runtime.optimizer_registry) and the
learning-rate schedule of its `schedule` section, shared by pretraining and fine-tuning.

Example:

```python
schedule = make_schedule(config.schedule, config.train.total_steps - config.schedule.step_offset)
with strategy.scope():
    optimizer = make_optimizer(config.optimizer, schedule, mixed_precision="bfloat16", variables=model.weights)
```
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from kbert.optimizers import LossScaleOptimizer, OneCycle, PolynomialWarmup, WarmupStableDecay
from kbert.runtime.optimizer_registry import OptimizerConfig, registered_optimizer


def make_schedule(
    section, steps: int, warmup_steps: int | None = None
) -> keras.optimizers.schedules.LearningRateSchedule:
    """The `schedule.shape` of a `schedule` section over `steps` optimizer steps after its `step_offset`
    (`ScheduleConfig.span`); `warmup_steps` replaces `schedule.warmup_steps` (fine-tuning's `warmup_fraction`).

    Raises:
      ConfigError: a wsd warmup that runs into the decay.
    """
    s = section
    warmup = s.warmup_steps if warmup_steps is None else warmup_steps
    total = s.span(steps, warmup)
    if s.shape == "wsd":
        return WarmupStableDecay(
            s.peak_learning_rate,
            warmup,
            total,
            decay_share=s.decay_share,
            end_learning_rate=s.end_learning_rate,
            step_offset=s.step_offset,
        )
    if s.shape == "one_cycle":
        return OneCycle(
            s.peak_learning_rate,
            total,
            warmup_steps=warmup or None,
            end_learning_rate=s.end_learning_rate,
            step_offset=s.step_offset,
        )
    return PolynomialWarmup(
        peak_learning_rate=s.peak_learning_rate,
        warmup_steps=warmup,
        decay_steps=total - warmup,
        end_learning_rate=s.end_learning_rate,
        power=s.power,
        step_offset=s.step_offset,
    )


def make_optimizer(
    section: OptimizerConfig,
    learning_rate,
    *,
    mixed_precision: str = "float32",
    variables: Sequence[keras.Variable] = (),
) -> keras.optimizers.Optimizer:
    """The registered optimizer `optimizer.type` names, built from the `optimizer` section and its own
    `optimizer.<type>` (call in `strategy.scope()`); `mixed_float16` adds loss scaling whose finiteness check spans
    all replicas (`kbert.optimizers.LossScaleOptimizer`).

    `variables`: the model's, for builders that resolve exclusions against them (AdamW).

    Raises:
      ConfigError: `optimizer.type` is not registered.
    """
    entry = registered_optimizer(section.type)
    optimizer = entry.build(section, section.get(), learning_rate, variables)
    if mixed_precision == "mixed_float16":
        optimizer = LossScaleOptimizer(optimizer)
    return optimizer
