"""An MSLT plan as the stages of a pretraining run: each growth stage a `TrainingStage` whose task is BERT's at the
stage's depth, frozen as the stage says, and grown from the stage before (`GrowingBertTask`, `kbert.mslt.grow`).

The plan trains on the experiment's first phase (`phase_config(config, 0, ...)`): its records, batch and model;
each stage has its own schedule, and the plan's steps replace phase 1's. Stage 1 grows from `train.init_checkpoint`
when `mslt.init_layers` names that model's depth (a Hugging Face or keras-hub checkpoint names its own), and starts
fresh otherwise.

Example:

```python
plan = plan_for(config)
stages = mslt_stages(config, plan)         # then the later phases, if any: phase_stages(config, task, first=1, ...)
[(s.label, s.num_layers, s.start_step, s.end_step) for s in stages]
```
"""

from __future__ import annotations

from collections.abc import Callable

import keras

from kbert.errors import PlanError
from kbert.modeling import BertPretrainer
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.mslt.grow import build_stage_model, carry_over
from kbert.mslt.plan import MsltPlan, MsltStage, build_plan
from kbert.tasks.bert import BertPretrainingTask
from kbert.training.config import PretrainingConfig
from kbert.training.phases import phase_config
from kbert.training.stage import TrainingStage

# Said after a config error of an MSLT stage's schedule.
_HINT = " (an MSLT stage warms up for its mslt.stages[].warmup_steps, default mslt.warmup_fraction of its steps)"


class GrowingBertTask(BertPretrainingTask):
    """BERT at an MSLT stage's depth, frozen as the stage says, grown from the model of the stage before: in
    memory (`carry_over`) or from its checkpoint (`load`, through a model of that depth). Stage 1 of a plan that
    starts fresh grows from nothing: it loads a checkpoint whole."""

    def __init__(self, plan: MsltPlan, stage: MsltStage):
        super().__init__(plan.bert)
        self.plan, self.stage = plan, stage

    def build_model(self) -> BertPretrainer:
        return build_stage_model(self.plan.bert, self.stage, self.plan.frozen_dropout)

    def carry_over(self, model: keras.Model, previous: keras.Model) -> None:
        if not self.stage.previous_layers:
            return super().carry_over(model, previous)
        carry_over(model, previous, self.stage, self.plan.new_layer_init)

    def load(self, model: keras.Model, path: str, print_fn: Callable[..., None], scope: Callable[[], object]) -> str:
        if not self.stage.previous_layers:
            return super().load(model, path, print_fn, scope)
        with scope():
            previous = BertPretrainer(model.config.replace(num_hidden_layers=self.stage.previous_layers))
        kind = super().load(previous, path, print_fn, scope)
        self.carry_over(model, previous)
        return kind


def _init_layers(config: PretrainingConfig) -> int:
    """The depth stage 1 grows from: `mslt.init_layers`, which an imported `train.init_checkpoint` (Hugging Face,
    keras-hub) supplies itself."""
    init, layers = config.train.init_checkpoint, config.mslt.init_layers
    source = imported_checkpoint(init) if init else None
    if source is None:
        if bool(init) != bool(layers):
            raise PlanError(
                f"mslt.init_layers={layers} with train.init_checkpoint={init!r}: to grow a pretrained "
                "model, set both (init_layers is that checkpoint's number of layers); to grow from "
                "scratch, neither."
            )
        return layers
    depth, target = source.config.num_hidden_layers, config.model.bert_config().num_hidden_layers
    if layers not in (0, depth):
        raise PlanError(
            f"mslt.init_layers={layers}, but train.init_checkpoint={init} has {depth} layers: unset "
            "mslt.init_layers (it comes from the checkpoint)."
        )
    if depth >= target:
        raise PlanError(
            f"train.init_checkpoint={init} has {depth} layers and the model {target}: an MSLT plan grows "
            "the checkpoint, so set model.overrides.num_hidden_layers to the depth it grows to (more "
            f"than {depth}), or drop the mslt section to continue the model as it is."
        )
    return depth


def plan_for(config: PretrainingConfig) -> MsltPlan:
    """The validated stage plan of a config with an `mslt` section; `schedule` gives the stages' default rates."""
    if config.mslt is None:
        raise PlanError("The experiment has no `mslt` section.")
    s = config.schedule
    return build_plan(
        config.mslt.replace(init_layers=_init_layers(config)),
        config.model.bert_config(),
        peak_learning_rate=s.peak_learning_rate,
        decay_power=s.power,
        end_learning_rate=s.end_learning_rate,
    )


def _stage_config(config: PretrainingConfig, stage: MsltStage) -> PretrainingConfig:
    """The first phase's config, trained for the stage's steps on the stage's own schedule (stage 1 alone ramps
    the batch)."""
    first = phase_config(config, 0, stage.steps)
    schedule = first.schedule.replace(
        peak_learning_rate=stage.learning_rate,
        warmup_steps=stage.warmup_steps,
        decay_steps=max(stage.steps - stage.warmup_steps, 1),
        end_learning_rate=stage.end_learning_rate,
        power=stage.decay_power,
        step_offset=0,
    )
    return first.replace(
        train=first.train if stage.number == 1 else first.train.without_batch_ramp(), schedule=schedule
    )


def _training_stage(config: PretrainingConfig, plan: MsltPlan, stage: MsltStage) -> TrainingStage:
    return TrainingStage(
        number=stage.number,
        label=f"MSLT stage {stage.number}/{len(plan.stages)}",
        config=_stage_config(config, stage),
        start_step=stage.start_step,
        end_step=stage.end_step,
        task=GrowingBertTask(plan, stage),
        num_layers=stage.num_layers,
        seed=config.train.seed + stage.number,
        init_checkpoint=config.train.init_checkpoint if stage.number == 1 else "",
        description=f"{stage.num_layers} layers, training blocks {list(stage.trainable_layers)} "
        f"(backward cut below block {stage.stop_gradient_below})",
        facts={
            "trainable_layers": list(stage.trainable_layers),
            "trainable_parameters": stage.trainable_parameters(plan.bert),
        },
        hint=_HINT,
        build_ahead=config.mslt.build_ahead,
    )


def mslt_stages(config: PretrainingConfig, plan: MsltPlan) -> list[TrainingStage]:
    """The run's stages of `plan`, numbered from 1 at global step 0; with `mslt.build_ahead` each is built on a
    thread while the one before trains."""
    return [_training_stage(config, plan, stage) for stage in plan.stages]
