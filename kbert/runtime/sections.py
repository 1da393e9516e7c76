"""The config sections that pretraining and fine-tuning share, each checking its own values: `model`,
`optimizer` and `schedule`. A key means the same, and is checked the same, in `kbert-pretrain` and
`kbert-finetune`.

`OptimizerConfig` and its per-optimizer sections are kbert.runtime.optimizer_registry's (re-exported here).

Example:

>>> ScheduleConfig(power=-1.0).validate("schedule.")
Traceback (most recent call last):
...
kbert.errors.ConfigError: schedule.power=-1.0 must be >= 0.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from official.modeling.hyperparams import base_config

from kbert.config import Section, need
from kbert.modeling.config import BertConfig
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.runtime.optimizer_registry import OptimizerConfig

__all__ = ["BertOverrides", "ModelConfig", "OptimizerConfig", "ScheduleConfig"]

# One optional override field per `bert_config.json` key, of that key's type, so typos in `model.overrides` are caught
# like any other and YAML's strings for numbers (`layer_norm_eps: 1e-5`) are read as the numbers they are.
_FIELD_TYPES = typing.get_type_hints(BertConfig)
BertOverrides = dataclasses.make_dataclass(
    "BertOverrides",
    [(f.name, _FIELD_TYPES[f.name] | None, None) for f in dataclasses.fields(BertConfig)],
    bases=(base_config.Config,),
)
BertOverrides.__doc__ = "Fields of `bert_config.json` to change; `None` keeps the named config's value."


@dataclasses.dataclass
class ModelConfig(Section):
    """`bert`: a `configs/models` entry (`bert_base`), a `bert_config.json` path, or a Hugging Face or keras-hub
    BERT directory (its config.json); `overrides` change fields."""

    bert: str = "bert_tiny"
    overrides: BertOverrides = dataclasses.field(default_factory=BertOverrides)

    def bert_config(self) -> BertConfig:
        """The named config with the overrides applied (ValueError, FileNotFoundError or TypeError if they do not
        make one)."""
        changes = {k: v for k, v in self.overrides.as_dict().items() if v is not None}
        imported = imported_checkpoint(self.bert)
        return (imported.config if imported else BertConfig.load(self.bert)).replace(**changes)

    def set_fields(self) -> dict[str, Any]:
        """The BERT fields this section sets: the named config's (all of them, when `bert` is set), then the
        overrides."""
        named = self.bert_config().to_dict() if self.bert else {}
        return {**named, **{k: v for k, v in self.overrides.as_dict().items() if v is not None}}


# `schedule.shape`: kbert.optimizers.schedules' PolynomialWarmup, WarmupStableDecay, OneCycle.
SCHEDULE_SHAPES = ("polynomial", "wsd", "one_cycle")
DEFAULT_DECAY_SHARE = 0.1


@dataclasses.dataclass
class ScheduleConfig(Section):
    """The learning rate over the optimizer steps, by `shape` (`kbert.optimizers.schedules`):

    - `polynomial`: linear warmup to `peak_learning_rate`, then polynomial decay (`power`) to `end_learning_rate`.
    - `wsd`: linear warmup, constant at the peak, then a linear decay over the last `decay_share` of the steps.
    - `one_cycle`: linear rise from 0 to the peak at `warmup_steps` (0: at the middle of the steps), then a linear
      fall to `end_learning_rate`. `power` is the polynomial shape's alone.

    The schedule spans `warmup_steps + decay_steps` steps; `decay_steps` defaults to the steps left after the
    warmup, `train.total_steps - step_offset - warmup_steps`. `step_offset` restarts the schedule, warmup included,
    at that optimizer step: a second pretraining phase that resumes the first one's step count sets it to the first
    phase's steps. (Phases and MSLT stages train each on the shape over their own steps.)

    Example:

    >>> ScheduleConfig(shape="wsd", warmup_steps=100, decay_share=0.2).span(1000)
    1000
    """

    peak_learning_rate: float = 1e-4
    warmup_steps: int = 0
    decay_steps: int | None = None
    power: float = 0.5
    end_learning_rate: float = 0.0
    step_offset: int = 0
    shape: str = "polynomial"
    # wsd: the share of the steps the final decay takes (ModernBERT, MiniCPM: 0.1-0.2).
    decay_share: float = DEFAULT_DECAY_SHARE

    def check(self) -> None:
        need(self.peak_learning_rate > 0, f"schedule.peak_learning_rate={self.peak_learning_rate} must be positive.")
        need(
            0 <= self.end_learning_rate <= self.peak_learning_rate,
            f"schedule.end_learning_rate={self.end_learning_rate} must be in [0, peak_learning_rate].",
        )
        need(self.power >= 0, f"schedule.power={self.power} must be >= 0.")
        need(
            self.decay_steps is None or self.decay_steps > 0,
            f"schedule.decay_steps={self.decay_steps} must be positive.",
        )
        need(self.warmup_steps >= 0, f"schedule.warmup_steps={self.warmup_steps} must be >= 0.")
        need(self.step_offset >= 0, f"schedule.step_offset={self.step_offset} must be >= 0.")
        need(
            self.shape in SCHEDULE_SHAPES, f"schedule.shape={self.shape!r}: choose one of {', '.join(SCHEDULE_SHAPES)}."
        )
        need(
            0 < self.decay_share <= 1,
            f"schedule.decay_share={self.decay_share} must be in (0, 1] (the share of "
            "the steps the wsd decay takes, 0.1-0.2 typical).",
        )
        need(
            self.shape == "wsd" or self.decay_share == DEFAULT_DECAY_SHARE,
            f"schedule.decay_share={self.decay_share} is for schedule.shape=wsd, not {self.shape}: set "
            "schedule.shape=wsd or remove schedule.decay_share.",
        )

    def span(self, steps: int, warmup_steps: int | None = None) -> int:
        """The optimizer steps the schedule spans from `step_offset` when it trains `steps` of them: the warmup
        (`warmup_steps`, default `schedule.warmup_steps`) and `decay_steps` (unset: the rest of `steps`).

        Raises:
          ConfigError: a wsd warmup that runs into the decay.
        """
        warmup = self.warmup_steps if warmup_steps is None else warmup_steps
        total = warmup + (self.decay_steps or max(steps - warmup, 1))
        decay_start = (1 - self.decay_share) * total
        need(
            self.shape != "wsd" or warmup <= decay_start,
            f"schedule.warmup_steps={warmup} runs into the wsd decay, which starts at step {decay_start:g} "
            f"((1 - schedule.decay_share) x {total} steps): lower schedule.warmup_steps or schedule.decay_share.",
        )
        return total
