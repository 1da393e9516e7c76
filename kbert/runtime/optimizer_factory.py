"""The optimizer of a config's `optimizer` section (LAMB, LARS or AdamW) and the learning-rate schedule of its
`schedule` section, shared by pretraining and fine-tuning.

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

from kbert.errors import ConfigError
from kbert.optimizers import LAMB, LARS, LossScaleOptimizer, OneCycle, PolynomialWarmup, WarmupStableDecay
from kbert.optimizers.layerwise import path_matches


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
    section, learning_rate, *, mixed_precision: str = "float32", variables: Sequence[keras.Variable] = ()
) -> keras.optimizers.Optimizer:
    """LAMB, LARS or AdamW from an `optimizer` config section (call in `strategy.scope()`); `mixed_float16` adds
    loss scaling whose finiteness check spans all replicas (`kbert.optimizers.LossScaleOptimizer`).

    `variables`: the model's, for AdamW, whose exclusions Keras matches against `variable.name` only
    ('gamma', not 'layer_norm'); kbert applies the `variable.path` regexes to them here.
    """
    o = section
    if o.type == "lamb":
        optimizer = LAMB(
            learning_rate,
            beta_1=o.beta_1,
            beta_2=o.beta_2,
            epsilon=o.epsilon,
            weight_decay=o.weight_decay,
            exclude_from_weight_decay=list(o.exclude_from_weight_decay),
            exclude_from_layer_adaptation=list(o.exclude_from_layer_adaptation),
            global_clipnorm=o.global_clipnorm,
        )
    elif o.type == "lars":
        optimizer = LARS(
            learning_rate,
            momentum=o.momentum,
            nesterov=o.nesterov,
            eeta=o.eeta,
            weight_decay=o.weight_decay,
            exclude_from_weight_decay=list(o.exclude_from_weight_decay),
            exclude_from_layer_adaptation=list(o.exclude_from_layer_adaptation),
            global_clipnorm=o.global_clipnorm,
        )
    else:
        if o.global_clipnorm:
            raise ConfigError(
                "optimizer.global_clipnorm is not supported with optimizer.type=adamw: Keras AdamW "
                "clips each replica's gradients before the all-reduce, so the step would depend on "
                "the number of replicas. Use lamb or lars (which clip after it), or unset it."
            )
        optimizer = keras.optimizers.AdamW(
            learning_rate,
            weight_decay=o.weight_decay,
            beta_1=o.beta_1,
            beta_2=o.beta_2,
            epsilon=o.epsilon,
            global_clipnorm=o.global_clipnorm,
        )
        optimizer.exclude_from_weight_decay(
            var_list=[v for v in variables if path_matches(o.exclude_from_weight_decay, v.path)]
        )
    if mixed_precision == "mixed_float16":
        optimizer = LossScaleOptimizer(optimizer)
    return optimizer
