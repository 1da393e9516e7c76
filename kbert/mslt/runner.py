"""Runs an MSLT plan: the pretraining loop once per stage, on a model grown for the stage, resumable anywhere.

Layout of `model_dir`:

    mslt_plan.json                  the plan's stage boundaries (a resumed run must have the same)
    stage_N/checkpoints/ckpt-STEP   kbert training checkpoints of stage N (global steps)
    stage_N/export/bert_model.ckpt  the finished stage in Google's TF1 format, with bert_config.json
    stage_N/summary.json            written last: stage N is finished
    summary.json                    the whole run

Stage boundaries are global steps: a run killed in stage N restarts from `stage_N/checkpoints` with stage N's
depth, frozen set and optimizer; a stage not started yet grows from the previous stage's export.

With `mslt.build_ahead` (one device, MirroredStrategy), stage N+1's model, optimizer and training graph are built
on a thread once stage N's first step has run; when stage N ends, only its weights are carried over.

Example:

```python
config = load_experiment(["configs/experiments/bert_tiny_mslt_cpu.yaml"])
summary = run_mslt(config, "/tmp/mslt", make_strategy("one_device"), mode="train_and_eval")
summary["stages"][-1]["train"]["masked_lm_accuracy"], summary["eval"]["masked_lm_accuracy"]
```
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

import keras
import tensorflow as tf

from kbert.modeling import BertPretrainer, export_google_checkpoint
from kbert.mslt.grow import carry_over, grow, load_stage_export
from kbert.mslt.plan import PlanError, Stage, StagePlan, build_plan
from kbert.optimizers import PolynomialWarmup
from kbert.training import checkpointing
from kbert.training.config import ExperimentConfig
from kbert.training.loop import MODES, build_optimizer, evaluate, make_trainer, train
from kbert.training.reporting import eval_line, write_summary_json
from kbert.training.trainer import PretrainingTrainer

PLAN_FILE = "mslt_plan.json"
EXPORT = os.path.join("export", "bert_model.ckpt")
STAGE_DONE = "summary.json"


def plan_for(config: ExperimentConfig) -> StagePlan:
    """The experiment's validated stage plan; the `schedule` section gives the stages' default rates."""
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


def _start_stage_session(config: ExperimentConfig, stage: Stage, fresh_thread: bool = False) -> None:
    """Same Keras names and random state for a stage whether the process ran earlier stages or just resumed:
    checkpoints key variables by path, and auto-named ones (dropout seed states) count up per process.

    Keras keeps that state per thread, so a new thread starts clean; it must not clear the session, which
    would also clear the state of the thread that is training."""
    if not fresh_thread:
        keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(config.train.mixed_precision)
    keras.utils.set_random_seed(config.train.seed + stage.number)


def _stage_config(config: ExperimentConfig, strategy: tf.distribute.Strategy, stage: Stage) -> ExperimentConfig:
    if isinstance(strategy, tf.distribute.TPUStrategy):
        # A TPU's input position is not checkpointed (kbert.training.inputs): reshuffle per stage instead, so
        # later stages do not replay the first stage's examples.
        return config.replace(train={"seed": config.train.seed + stage.number - 1})
    return config


class _StageSetup(NamedTuple):
    model: BertPretrainer
    trainer: PretrainingTrainer
    build_seconds: float  # spent building it ahead, while the previous stage trained (0: built when it started)


def _set_up_stage(config: ExperimentConfig, plan: StagePlan, stage: Stage, strategy: tf.distribute.Strategy,
                  previous: Optional[BertPretrainer]) -> _StageSetup:
    """The stage's model (grown from `previous`, else with built weights), its optimizer and trainer."""
    with strategy.scope():
        model = grow(plan.bert, stage, previous=previous, new_layer_init=plan.new_layer_init,
                     frozen_dropout=plan.frozen_dropout)
        optimizer = build_optimizer(config, learning_rate=stage_schedule(stage))
        global_step = tf.Variable(stage.start_step, dtype=tf.int64, trainable=False, name="global_step",
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    trainer = make_trainer(_stage_config(config, strategy, stage), strategy, model, optimizer,
                           trainable_variables=model.trainable_variables, global_step=global_step)
    return _StageSetup(model, trainer, 0.0)


class _BuildAhead:
    """Sets up a stage and builds its training graph on a daemon thread (a crash or SIGTERM need not wait)."""

    def __init__(self, config: ExperimentConfig, plan: StagePlan, stage: Stage, strategy: tf.distribute.Strategy):
        self.stage = stage
        self._setup: Optional[_StageSetup] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._build, args=(config, plan, stage, strategy), daemon=True,
                                        name=f"kbert-mslt-build-{stage.name}")
        self._thread.start()

    def _build(self, config, plan, stage, strategy):
        started = time.time()
        try:
            _start_stage_session(config, stage, fresh_thread=True)
            setup = _set_up_stage(config, plan, stage, strategy, previous=None)
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


def _can_build_ahead(config: ExperimentConfig, strategy: tf.distribute.Strategy) -> bool:
    # Multi-worker and TPU graphs hold collectives whose keys each worker assigns as it traces; tracing one on a
    # thread beside the running stage is not something those strategies are tested for here.
    return config.mslt.build_ahead and not isinstance(
        strategy, (tf.distribute.TPUStrategy, tf.distribute.MultiWorkerMirroredStrategy))


def run_mslt(config: ExperimentConfig, model_dir: str, strategy: tf.distribute.Strategy, mode: str = "train",
             print_fn=print) -> dict[str, Any]:
    """Trains the stages not finished yet in `model_dir`, then evaluates if `mode` says so.

    Returns (and writes as `model_dir/summary.json`): per-stage results, the final eval, wall time.

    Raises:
      PlanError: a bad plan or a model_dir of another plan, before anything is built.
    """
    if mode not in MODES:
        raise ValueError(f"--mode={mode}: choose one of {', '.join(MODES)}.")
    plan = plan_for(config)
    print_fn(plan.describe(), flush=True)
    chief = strategy.extended.should_checkpoint
    tf.io.gfile.makedirs(model_dir)
    _check_same_plan(model_dir, plan, chief)
    if config.train.deterministic:
        tf.config.experimental.enable_op_determinism()
    started = time.time()
    summary: dict[str, Any] = {"mode": mode, "strategy": type(strategy).__name__,
                               "replicas": strategy.num_replicas_in_sync, "config": config.as_dict(),
                               "plan": _stage_layout(plan), "stages": []}
    model: Optional[BertPretrainer] = None
    if mode != "eval":
        ahead: dict[int, _BuildAhead] = {}  # stage number -> its build, started while the stage before trained
        for index, stage in enumerate(plan.stages):
            done = os.path.join(model_dir, stage.name, STAGE_DONE)
            if tf.io.gfile.exists(done):
                model = None
                with tf.io.gfile.GFile(done) as f:
                    summary["stages"].append(json.load(f))
                continue
            pending = ahead.pop(stage.number, None)
            built = pending.result(print_fn) if pending else None
            following = plan.stages[index + 1] if index + 1 < len(plan.stages) else None
            build_next = None
            if following is not None and _can_build_ahead(config, strategy):
                def build_next(following=following):
                    ahead[following.number] = _BuildAhead(config, plan, following, strategy)
            model, result = _train_stage(config, plan, stage, model_dir, strategy, model, print_fn, built,
                                         build_next)
            summary["stages"].append(result)
    if mode in ("eval", "train_and_eval"):
        model, summary["evaluated_checkpoint"] = _latest_model(plan, model_dir, strategy, model)
        summary["eval"] = evaluate(config, strategy, model)
        print_fn(eval_line(summary["eval"]), flush=True)
    summary["wall_seconds"] = time.time() - started
    if chief:
        write_summary_json(model_dir, summary)
    return summary


def _train_stage(config: ExperimentConfig, plan: StagePlan, stage: Stage, model_dir: str,
                 strategy: tf.distribute.Strategy, previous: Optional[BertPretrainer], print_fn,
                 built: Optional[_StageSetup] = None,
                 build_next: Optional[Callable[[], None]] = None) -> tuple[BertPretrainer, dict]:
    """Trains the stage's steps on its model (grown, as checkpointed, or `built` ahead), exports it (chief).

    `build_next` is called once the stage's first step has run, to start building the following stage.
    """
    stage_dir = os.path.join(model_dir, stage.name)
    previous_dir = os.path.join(model_dir, f"stage_{stage.number - 1}")
    resuming = checkpointing.latest_checkpoint(stage_dir) is not None
    if resuming or stage.number == 1:
        previous = None  # the stage's own checkpoint restores every weight
    elif previous is None:
        with strategy.scope():
            previous = load_stage_export(plan.bert, stage.previous_layers, os.path.join(previous_dir, EXPORT))
    if built is not None:
        if previous is not None:
            carry_over(built.model, previous, stage, plan.new_layer_init)
    else:
        _start_stage_session(config, stage)  # resets the default graph: outside any strategy scope
        built = _set_up_stage(config, plan, stage, strategy, previous)
    model, trainer = built.model, built.trainer
    trainable = trainer.train_variables
    built_note = f", its graph built ahead in {built.build_seconds:.1f} s" if built.build_seconds else ""
    print_fn(f"MSLT stage {stage.number}/{len(plan.stages)}: {stage.num_layers} layers, training blocks "
             f"{list(stage.trainable_layers)} (backward cut below block {stage.stop_gradient_below}), "
             f"{len(trainable)} variables, global steps {stage.start_step}-{stage.end_step}"
             f"{' (resuming)' if resuming else ''}{built_note}.", flush=True)
    started = time.time()
    result = train(_stage_config(config, strategy, stage), strategy, stage_dir, model, trainer.optimizer,
                   trainer=trainer, until_step=stage.end_step, print_fn=print_fn, after_first_step=build_next,
                   continue_input_from=checkpointing.latest_checkpoint(previous_dir) if stage.number > 1 else None)
    result = {"stage": stage.number, "num_layers": stage.num_layers, "trainable_layers": list(stage.trainable_layers),
              "trainable_variables": len(trainable), "trainable_parameters": stage.trainable_parameters(plan.bert),
              "start_step": stage.start_step, "end_step": stage.end_step, "wall_seconds": time.time() - started,
              "built_ahead_seconds": built.build_seconds,
              "checkpoint": checkpointing.latest_checkpoint(stage_dir), **result}
    if strategy.extended.should_checkpoint:
        result["export"] = export_google_checkpoint(model, os.path.join(stage_dir, EXPORT))
        write_summary_json(stage_dir, result)
    return model, result


def _latest_model(plan: StagePlan, model_dir: str, strategy: tf.distribute.Strategy,
                  model: Optional[BertPretrainer]) -> tuple[BertPretrainer, str]:
    """The model to evaluate: the one trained last in this run, else the newest stage checkpoint's."""
    for stage in reversed(plan.stages):
        path = checkpointing.latest_checkpoint(os.path.join(model_dir, stage.name))
        if path:
            break
    else:
        raise FileNotFoundError(f"--mode=eval: no MSLT stage checkpoint under {model_dir}/stage_*/checkpoints.")
    if model is None:
        with strategy.scope():
            model = BertPretrainer(plan.bert.replace(num_hidden_layers=stage.num_layers))
        checkpointing.load_init_checkpoint(model, path)
    return model, path
