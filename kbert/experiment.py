"""The pretraining experiment: its root config, loading it, and running it as a list of stages.

A run is the stages of `kbert.training.engine.PretrainingRun`: one for a plain run, one per phase for BERT's two
phases (`phases:`), one per MSLT growth stage (`mslt:`, which is phase 1 when both are set), all in one model_dir.
This module sits above `kbert.training` (the engine and the loop, which know no MSLT) and `kbert.mslt` (the plan
and how a model grows): `kbert-pretrain` loads an experiment here and runs it.

Example:

```python
config = load_experiment(["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=50")
summary = run(config, "/tmp/run", make_strategy("auto"), mode="train_and_eval")
summary["train"]["loss"], summary["eval"]["masked_lm_accuracy"]
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from kbert.choices import MODES
from kbert.config import load_config
from kbert.errors import ConfigError
from kbert.mslt.plan import MsltConfig
from kbert.mslt.stages import mslt_stages, plan_for
from kbert.runtime import checkpointing
from kbert.runtime.cpu_isa import bfloat16_note
from kbert.runtime.lease import Lease
from kbert.runtime.preemption import PreemptionWatcher
from kbert.tasks.bert import BertPretrainingTask
from kbert.training.config import PretrainingConfig, check_batch_sizes
from kbert.training.engine import PretrainingRun
from kbert.training.loop import evaluate
from kbert.training.phases import check_phases, phase_stages
from kbert.training.reporting import eval_line, write_summary_json
from kbert.training.stage import TrainingStage, with_layouts


@dataclasses.dataclass
class ExperimentConfig(PretrainingConfig):
    """Everything `kbert-pretrain` needs besides the model dir and the strategy."""

    # Multi-stage layerwise training (kbert.mslt); None trains the whole model at once.
    mslt: MsltConfig | None = None

    def grows_init_checkpoint(self) -> bool:
        return self.mslt is not None

    def check(self) -> None:
        super().check()
        plan = plan_for(self) if self.mslt is not None else None  # a bad plan fails here, before anything is built
        check_phases(self, plan.total_steps if plan is not None else None)
        stages = stages_of(self)
        # The first stage's batch ramp fits its batch and steps; each stage's schedule shape fits its own steps (a
        # wsd warmup ends before its decay).
        check_each_stage(stages, lambda stage: stage.config.train.check_batch_ramp())
        check_each_stage(
            stages,
            lambda stage: stage.config.schedule.span(
                stage.config.train.total_steps - stage.config.schedule.step_offset
            ),
            hinted=True,
        )


def check_each_stage(stages: Sequence[TrainingStage], check: Callable[[TrainingStage], Any], hinted=False) -> None:
    """`check(stage)` for every stage; its ConfigError is named by the stage (with the stage's `hint` after it,
    when `hinted`) where the run has more than one."""
    for stage in stages:
        try:
            check(stage)
        except ConfigError as error:
            hint = stage.hint if hinted else ""
            raise ConfigError(f"{stage.label}: {error}{hint}" if len(stages) > 1 else str(error)) from None


def load_experiment(config_files: Sequence[str] = (), params_override: str = "") -> ExperimentConfig:
    """Defaults, then each YAML file in order, then `params_override`; validated, the MSLT plan included.

    Raises:
      ConfigError: an unknown key (named, with the file or flag), a bad value, or an unreadable file.
      PlanError: a bad `mslt` section (a ConfigError too).
    """
    return load_config(ExperimentConfig, config_files, params_override)


def _set_up_session(config: ExperimentConfig) -> None:
    """Op determinism (`train.deterministic`), the seed and the precision policy, before anything is built."""
    if config.train.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.train.seed)
    keras.mixed_precision.set_global_policy(config.train.mixed_precision)


def _lease(model_dir: str, strategy: tf.distribute.Strategy, mode: str, print_fn) -> contextlib.AbstractContextManager:
    """The model_dir's lease for a run that trains (the chief holds it for the job); evaluating needs none."""
    if mode == "eval" or not strategy.extended.should_checkpoint:
        return contextlib.nullcontext()
    return Lease.take(model_dir, print_fn)


def _input_as_saved(config: ExperimentConfig, model_dir: str, print_fn: Callable) -> ExperimentConfig:
    """`config` reading its records as the input positions saved in `model_dir` were read, so a resumed run can
    continue them: whether every record's ids are checked as it is read (`data.check_vocab_size`) shapes the saved
    pipeline. Positions saved before that was recorded are of unchecked records."""
    saved = checkpointing.saved_input_format(model_dir)
    checked = config.data.check_vocab_size
    if saved is None or saved.get("records_checked", False) == checked:
        return config
    if saved:
        line = f"its saved input positions were read with data.check_vocab_size={str(not checked).lower()}"
    else:
        line = "its saved input positions predate the check of every record's ids"
    print_fn(f"{model_dir}: {line}; it goes on reading its records as then, to continue them.", flush=True)
    return config.replace(data={"check_vocab_size": not checked})


def task_of(config: PretrainingConfig) -> BertPretrainingTask:
    """What `config` pretrains: its model section's BERT, on masked LM and next-sentence prediction."""
    return BertPretrainingTask(config.model.bert_config())


def stages_of(config: ExperimentConfig) -> list[TrainingStage]:
    """The run's stages, composed from each kind's builder: an MSLT plan's growth stages (phase 1) and the later
    phases', or one per phase (one in all for a run without phases)."""
    growth = mslt_stages(config, plan_for(config)) if config.mslt is not None else []
    return growth + phase_stages(config, task_of, growth)


def _say_if_bfloat16_is_slow(
    stages: Sequence[TrainingStage], strategy: tf.distribute.Strategy, print_fn: Callable
) -> None:
    """One line where a stage trains in mixed_bfloat16 on a CPU without bfloat16 units (cpu_isa.bfloat16_note)."""
    device_type = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type
    notes = {bfloat16_note(stage.config.train.mixed_precision, device_type) for stage in stages} - {None}
    for note in sorted(notes):
        print_fn(note, flush=True)


def run(
    config: ExperimentConfig, model_dir: str, strategy: tf.distribute.Strategy, mode: str = "train", print_fn=print
) -> dict[str, Any]:
    """Trains the stages not finished yet and/or evaluates the newest checkpoint, as `mode` says; writes
    `model_dir/summary.json` (chief only; `eval_summary.json` with `mode="eval"`, which leaves the trainer's
    summary alone and takes no lease, so a model can be evaluated while it trains) and returns it."""
    if mode not in MODES:
        raise ConfigError(f"--mode={mode}: choose one of {', '.join(MODES)}.")
    if mode != "eval":
        config = _input_as_saved(config, model_dir, print_fn)
    stages = stages_of(config)
    # Each phase's batch splits over the replicas.
    check_each_stage(stages, lambda stage: check_batch_sizes(stage.config, strategy.num_replicas_in_sync))
    if mode != "eval":
        stages = with_layouts(
            stages, evaluates=mode != "train" or bool(config.eval.interval(config.train.global_batch_size))
        )
    _set_up_session(config)
    if mode != "eval":
        _say_if_bfloat16_is_slow(stages, strategy, print_fn)
    tf.io.gfile.makedirs(model_dir)
    started = time.time()
    summary: dict[str, Any] = {
        "mode": mode,
        "strategy": type(strategy).__name__,
        "replicas": strategy.num_replicas_in_sync,
        "config": config.as_dict(),
    }
    if config.mslt is not None:
        print_fn(plan_for(config).describe(), flush=True)
    with _lease(model_dir, strategy, mode, print_fn), PreemptionWatcher(strategy) as preemption:
        engine = PretrainingRun(
            stages,
            model_dir,
            strategy,
            preemption,
            print_fn,
        )
        if mode != "eval":
            if (
                config.data.checkpoint_input
                and strategy.extended.should_checkpoint
                and checkpointing.saved_input_format(model_dir) is None
            ):
                checkpointing.record_input_format(model_dir, {"records_checked": config.data.check_vocab_size})
            summary.update(engine.train())
            summary["train_data"] = summary["stages"][-1]["train_data"]
    if mode in ("eval", "train_and_eval"):
        model, stage, summary["evaluated_checkpoint"] = engine.evaluated_model()
        summary["eval"] = evaluate(stage.config, strategy, stage.task, model)
        print_fn(eval_line(summary["eval"], stage.task.eval_labels), flush=True)
    summary["wall_seconds"] = time.time() - started
    if strategy.extended.should_checkpoint:
        write_summary_json(model_dir, summary, "eval_summary.json" if mode == "eval" else "summary.json")
    return summary
