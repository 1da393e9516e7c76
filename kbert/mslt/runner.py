"""Runs an MSLT plan: the pretraining loop once per stage, on a model grown for the stage, resumable anywhere.

Layout of `model_dir`:

    mslt_plan.json                  the plan's stage boundaries (a resumed run must have the same)
    stage_N/checkpoints/ckpt-STEP   kbert training checkpoints of stage N (global steps)
    stage_N/export/bert_model.ckpt  the finished stage in Google's TF1 format, with bert_config.json
    stage_N/summary.json            written last: stage N is finished
    summary.json                    the whole run (written by `kbert.experiment.run`)

Stage boundaries are global steps: a run killed in stage N restarts from `stage_N/checkpoints` with stage N's
depth, frozen set and optimizer; a stage not started yet grows from the previous stage's model (in memory, else
its export).

With `mslt.build_ahead` (one device, MirroredStrategy), stage N+1's model, optimizer and training graph are built
on a thread once stage N's first step has run; when stage N ends, only its weights are carried over.

Example:

```python
config = load_experiment(["configs/experiments/bert_tiny_mslt_cpu.yaml"])
with PreemptionWatcher(strategy) as preemption:
    model, results = run_stages(config, plan_for(config), "/tmp/mslt", strategy, "train", preemption)
results["stages"][-1]["train"]["masked_lm_accuracy"]
```
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, NamedTuple, Optional

import keras
import tensorflow as tf

from kbert.errors import MissingFileError, PlanError
from kbert.modeling import BertPretrainer, export_google_checkpoint
from kbert.mslt.grow import build_stage_model, carry_over, load_stage_export
from kbert.mslt.plan import Stage, StagePlan, build_plan
from kbert.optimizers import PolynomialWarmup
from kbert.runtime import checkpointing
from kbert.training.config import PretrainingConfig
from kbert.training.eval_schedule import EvalSchedule
from kbert.training.loop import (build_optimizer, evaluator, make_trainer, open_checkpoints, resume, run_steps,
                                 schedule_for, train)
from kbert.runtime.preemption import PreemptionWatcher
from kbert.training.reporting import write_summary_json
from kbert.training.trainer import PretrainingTrainer

PLAN_FILE = "mslt_plan.json"
EXPORT = os.path.join("export", "bert_model.ckpt")
STAGE_DONE = "summary.json"


def plan_for(config: PretrainingConfig) -> StagePlan:
    """The validated stage plan of a config with an `mslt` section; `schedule` gives the stages' default rates."""
    if config.mslt is None:
        raise PlanError("The experiment has no `mslt` section.")
    if config.train.init_checkpoint:
        raise PlanError(f"train.init_checkpoint={config.train.init_checkpoint!r}: MSLT grows the model from "
                        "scratch; remove the init_checkpoint or the mslt section.")
    s = config.schedule
    return build_plan(config.mslt, config.model.bert_config(), peak_learning_rate=s.peak_learning_rate,
                      decay_power=s.power, end_learning_rate=s.end_learning_rate)


def stage_schedule(stage: Stage) -> PolynomialWarmup:
    """Warmup then polynomial decay over the stage's own steps (each stage has a fresh optimizer)."""
    return PolynomialWarmup(peak_learning_rate=stage.learning_rate, warmup_steps=stage.warmup_steps,
                            decay_steps=max(stage.steps - stage.warmup_steps, 1),
                            end_learning_rate=stage.end_learning_rate, power=stage.decay_power)


def _stage_layout(plan: StagePlan) -> list[dict]:
    return [{"stage": s.number, "num_layers": s.num_layers, "trainable_layers": list(s.trainable_layers),
             "start_step": s.start_step, "end_step": s.end_step} for s in plan.stages]


def _check_same_plan(model_dir: str, plan: StagePlan, chief: bool) -> None:
    """A model_dir holds one plan: resuming with other stage boundaries would mix stages."""
    path = os.path.join(model_dir, PLAN_FILE)
    layout = _stage_layout(plan)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            written = json.load(f)
        if written != layout:
            changed = next((f"stage {w.get('stage')}: {w} now {n}" for w, n in zip(written, layout) if w != n),
                           f"{len(written)} stages now {len(layout)}")
            raise PlanError(f"--model_dir={model_dir} holds a run of another MSLT plan ({changed}). Resume it with "
                            "the mslt section it was started with, or train into a new --model_dir.")
    elif chief:
        with tf.io.gfile.GFile(path, "w") as f:
            json.dump(layout, f, indent=2)


def _start_stage_session(config: PretrainingConfig, stage: Stage, fresh_thread: bool = False) -> None:
    """Same Keras names and random state for a stage whether the process ran earlier stages or just resumed:
    checkpoints key variables by path, and auto-named ones (dropout seed states) count up per process.

    Keras keeps that state per thread, so a new thread starts clean; it must not clear the session, which
    would also clear the state of the thread that is training."""
    if not fresh_thread:
        keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(config.train.mixed_precision)
    keras.utils.set_random_seed(config.train.seed + stage.number)


class _StageSetup(NamedTuple):
    model: BertPretrainer
    trainer: PretrainingTrainer
    build_seconds: float  # spent building it ahead, while the previous stage trained (0: built when it started)


def _set_up_stage(config: PretrainingConfig, plan: StagePlan, stage: Stage, strategy: tf.distribute.Strategy,
                  stage_dir: str) -> _StageSetup:
    """The stage's model with the weights it is built with (frozen as the stage says), its optimizer, trainer."""
    with strategy.scope():
        model = build_stage_model(plan.bert, stage, plan.frozen_dropout)
        optimizer = build_optimizer(config, learning_rate=stage_schedule(stage))
    trainer = make_trainer(config, strategy, model, optimizer, initial_step=stage.start_step, model_dir=stage_dir)
    return _StageSetup(model, trainer, 0.0)


class _BuildAhead:
    """Sets up a stage and builds its training graph on a daemon thread (a crash or SIGTERM need not wait)."""

    def __init__(self, config: PretrainingConfig, plan: StagePlan, stage: Stage, strategy: tf.distribute.Strategy,
                 stage_dir: str):
        self.stage = stage
        self._setup: Optional[_StageSetup] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._build, args=(config, plan, stage, strategy, stage_dir),
                                        daemon=True, name=f"kbert-mslt-build-{stage.name}")
        self._thread.start()

    def _build(self, config, plan, stage, strategy, stage_dir):
        started = time.time()
        try:
            _start_stage_session(config, stage, fresh_thread=True)
            setup = _set_up_stage(config, plan, stage, strategy, stage_dir)
            setup.trainer.build_graph()
            self._setup = setup._replace(build_seconds=time.time() - started)
        except Exception as error:  # reported, then the stage is built the usual way
            self._error = error

    def result(self, print_fn) -> Optional[_StageSetup]:
        self._thread.join()
        if self._error is not None:
            print_fn(f"MSLT stage {self.stage.number}: building it ahead failed ({type(self._error).__name__}: "
                     f"{self._error}); building it now.", flush=True)
        return self._setup


def _can_build_ahead(plan_config, strategy: tf.distribute.Strategy) -> bool:
    # Multi-worker and TPU graphs hold collectives whose keys each worker assigns as it traces; tracing one on a
    # thread beside the running stage is not something those strategies are tested for here.
    return plan_config.build_ahead and not isinstance(
        strategy, (tf.distribute.TPUStrategy, tf.distribute.MultiWorkerMirroredStrategy))


class _Stages:
    """The state that passes from one stage to the next within a run."""

    def __init__(self, config: PretrainingConfig, plan: StagePlan, model_dir: str, strategy: tf.distribute.Strategy,
                 preemption: PreemptionWatcher, print_fn):
        self.config, self.plan, self.model_dir, self.strategy = config, plan, model_dir, strategy
        self.preemption, self.print_fn = preemption, print_fn
        self.model: Optional[BertPretrainer] = None  # the last stage trained in this process
        self.ahead: Optional[_BuildAhead] = None     # the next stage, being built while this one trains
        self.samples = 0  # sequences the stages before this one trained on
        self.schedule: Optional[EvalSchedule] = None  # held-out evaluations, carried over the stages

    def schedule_for(self, trainer: PretrainingTrainer) -> Optional[EvalSchedule]:
        """The run's evaluation schedule, now evaluating this stage's model."""
        if self.schedule is None:
            self.schedule = schedule_for(self.config, self.strategy, trainer, self.print_fn)
        else:
            self.schedule.evaluate = evaluator(self.config, self.strategy, trainer.model)
        return self.schedule

    def stage_dir(self, stage: Stage) -> str:
        return os.path.join(self.model_dir, stage.name)

    def previous_model(self, stage: Stage) -> BertPretrainer:
        """The model of the stage before `stage`: trained in this process, else read from its export."""
        if self.model is not None:
            return self.model
        export = os.path.join(self.model_dir, f"stage_{stage.number - 1}", EXPORT)
        with self.strategy.scope():
            return load_stage_export(self.plan.bert, stage.previous_layers, export)

    def set_up(self, stage: Stage) -> _StageSetup:
        """The stage's model and trainer: built ahead if a build was started for it, else built now."""
        pending, self.ahead = self.ahead, None
        built = pending.result(self.print_fn) if pending is not None and pending.stage == stage else None
        if built is not None:
            return built
        _start_stage_session(self.config, stage)  # resets the default graph: outside any strategy scope
        return _set_up_stage(self.config, self.plan, stage, self.strategy, self.stage_dir(stage))

    def build_ahead(self, stage: Stage) -> None:
        """Starts building the stage after `stage`, if there is one and the strategy allows it."""
        following = next((s for s in self.plan.stages if s.number == stage.number + 1), None)
        if following is not None and _can_build_ahead(self.config.mslt, self.strategy):
            self.ahead = _BuildAhead(self.config, self.plan, following, self.strategy, self.stage_dir(following))
def run_stages(config: PretrainingConfig, plan: StagePlan, model_dir: str, strategy: tf.distribute.Strategy,
               mode: str, preemption: PreemptionWatcher, print_fn=print) -> tuple[Optional[BertPretrainer], dict]:
    """Trains the stages of `plan` not finished yet in `model_dir` (none with `mode="eval"`).

    Returns the model to evaluate (the last one trained here, else the newest stage checkpoint's, in the eval
    modes; with `mode="train"` the last one trained here or None) and what the run's summary gains: the plan,
    per-stage results and, in the eval modes, `evaluated_checkpoint`.

    Raises:
      PlanError: `model_dir` holds a run of another plan, before anything is built.
    """
    print_fn(plan.describe(), flush=True)
    _check_same_plan(model_dir, plan, strategy.extended.should_checkpoint)
    results: dict[str, Any] = {"plan": _stage_layout(plan), "stages": []}
    stages = _Stages(config, plan, model_dir, strategy, preemption, print_fn)
    for stage in plan.stages if mode != "eval" else ():
        done = os.path.join(stages.stage_dir(stage), STAGE_DONE)
        if tf.io.gfile.exists(done):
            stages.model = None  # the next stage reads this one's export
            with tf.io.gfile.GFile(done) as f:
                results["stages"].append(json.load(f))
        else:
            results["stages"].append(_train_stage(stages, stage))
        stages.samples = results["stages"][-1].get("sequences_trained", 0)
        if stages.schedule is not None and stages.schedule.reached:
            break  # the target is reached: the later stages are not needed
    results["sequences_trained"] = stages.samples
    if stages.schedule is not None:
        results.update(stages.schedule.summary())
    if mode == "train":
        return stages.model, results
    model, results["evaluated_checkpoint"] = _latest_model(plan, model_dir, strategy, stages.model)
    return model, results


def _train_stage(stages: _Stages, stage: Stage) -> dict:
    """Trains one stage to its last step and exports it (chief); its model is left in `stages.model`.

    1. The model and trainer: built ahead while the previous stage trained, else built now.
    2. The weights: the stage's own newest checkpoint (a resumed stage); else the previous stage's model carried
       over (stage 2 on; stage 1 keeps its built weights), the input continuing where that stage stopped.
    3. One step, which builds the training graph; then the next stage's build starts beside this one.
    4. The loop, to the stage's last step; the export.
    """
    config, plan, strategy, print_fn = stages.config, stages.plan, stages.strategy, stages.print_fn
    stage_dir = stages.stage_dir(stage)
    setup = stages.set_up(stage)
    model, trainer = setup.model, setup.trainer
    checkpoints = open_checkpoints(config, strategy, trainer, stage_dir)
    resumed = resume(checkpoints, trainer, print_fn)
    if not resumed:
        trainer.sequences_trained.assign(stages.samples)
    if not resumed and stage.number > 1:
        carry_over(model, stages.previous_model(stage), stage, plan.new_layer_init)
        previous = checkpointing.latest_checkpoint(os.path.join(stages.model_dir, f"stage_{stage.number - 1}"))
        if previous:
            checkpoints.restore_input(previous)
    built_note = f", its graph built ahead in {setup.build_seconds:.1f} s" if setup.build_seconds else ""
    print_fn(f"MSLT stage {stage.number}/{len(plan.stages)}: {stage.num_layers} layers, training blocks "
             f"{list(stage.trainable_layers)} (backward cut below block {stage.stop_gradient_below}), "
             f"{len(trainer.train_variables)} variables, global steps {stage.start_step}-{stage.end_step}"
             f"{' (resuming)' if resumed else ''}{built_note}.", flush=True)
    started = time.time()
    if int(trainer.global_step.numpy()) < stage.end_step:
        run_steps(trainer, 1)  # not saved: a checkpoint would hold one step more than the last
        stages.build_ahead(stage)
    result = train(config, strategy, trainer, checkpoints, until_step=stage.end_step,
                   preemption=stages.preemption, print_fn=print_fn, schedule=stages.schedule_for(trainer))
    result = {"stage": stage.number, "num_layers": stage.num_layers, "trainable_layers": list(stage.trainable_layers),
              "trainable_variables": len(trainer.train_variables),
              "trainable_parameters": stage.trainable_parameters(plan.bert), "start_step": stage.start_step,
              "end_step": stage.end_step, "wall_seconds": time.time() - started,
              "built_ahead_seconds": setup.build_seconds, "restored_from": resumed,
              "checkpoint": checkpointing.latest_checkpoint(stage_dir), **result}
    if strategy.extended.should_checkpoint:
        result["export"] = export_google_checkpoint(model, os.path.join(stage_dir, EXPORT))
        write_summary_json(stage_dir, result)
    stages.model = model
    return result


def _latest_model(plan: StagePlan, model_dir: str, strategy: tf.distribute.Strategy,
                  model: Optional[BertPretrainer]) -> tuple[BertPretrainer, str]:
    """The model to evaluate: the one trained last in this run, else the newest stage checkpoint's."""
    for stage in reversed(plan.stages):
        path = checkpointing.latest_checkpoint(os.path.join(model_dir, stage.name))
        if path:
            break
    else:
        raise MissingFileError(f"--mode=eval: no MSLT stage checkpoint under {model_dir}/stage_*/checkpoints.")
    if model is None:
        with strategy.scope():
            model = BertPretrainer(plan.bert.replace(num_hidden_layers=stage.num_layers))
        checkpointing.load_init_checkpoint(model, path)
    return model, path
