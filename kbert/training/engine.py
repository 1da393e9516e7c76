"""The pretraining engine: one object runs every stage of a run in one model_dir, and resumes it at any step.

Layout of `model_dir`:

    checkpoints/ckpt-STEP            every stage's training checkpoints, by global step (and input/worker_I/)
    train/                           TensorBoard scalars
    stages.json                      a run of several stages: their boundaries (a resumed run must have the same)
    stage_N/export/                  a run of several stages: stage N's model as its task exports it (BERT: Google's
                                     format, bert_model.ckpt), when it ends
    stage_N/summary.json             ... and what it trained
    summary.json                     the whole run (written by `kbert.experiment.run`)

Resume is one rule: the global step N of the newest checkpoint says where the run is. The stage that trains
step N next resumes from its own newest checkpoint when it has one; else it starts at its first step, from the
checkpoint the stage before it saved last (grown or taken over as when the run goes straight on: the stage's task
says how). Evaluation scores the newest checkpoint, on a model of the stage that saved it (`evaluated_model`). The
engine knows no model and no stage kind: it calls the stages' tasks (`kbert.training.task`).

Example:

```python
run = PretrainingRun(with_layouts(phase_stages(config, task_of)), "/tmp/run", strategy, preemption)
results = run.train()           # {"stages": [...], "global_step", "train", "sequences_trained", ...}
model, stage, path = run.evaluated_model()
```
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
import tensorflow as tf

from kbert.errors import ConfigError, MissingFileError, PlanError
from kbert.runtime import checkpoint_files, checkpointing
from kbert.runtime.checkpointing import TrainingCheckpoints
from kbert.runtime.convert_mslt_run import has_old_layout
from kbert.runtime.preemption import PreemptionWatcher
from kbert.training.build_ahead import BuildAhead, can_build_ahead
from kbert.training.eval_schedule import EvalSchedule
from kbert.training.evaluation_history import read_summary
from kbert.training.loop import build_optimizer, evaluator, make_trainer, open_checkpoints, schedule_for, train
from kbert.training.reporting import write_summary_json
from kbert.training.stage import TrainingStage, stage_at
from kbert.training.trainer import PretrainingTrainer

STAGES_FILE = "stages.json"


class _Begun(NamedTuple):
    """A stage ready for the loop (`PretrainingRun._begin`)."""

    model: keras.Model
    trainer: PretrainingTrainer
    checkpoints: TrainingCheckpoints
    resumed: str | None  # the checkpoint it resumed from
    build_seconds: float
    started: float


class _Setup(NamedTuple):
    model: keras.Model
    trainer: PretrainingTrainer
    build_seconds: float = 0.0  # spent building it ahead, while the stage before trained


def _start_session(stage: TrainingStage, fresh_thread: bool = False) -> None:
    """Same Keras names and random state for a stage whether the process trained the stages before or just
    resumed: checkpoints key variables by path, and auto-named ones (dropout seed states) count up per process.
    A new thread starts clean; it must not clear the session, which would clear the training thread's too."""
    if not fresh_thread:
        keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(stage.config.train.mixed_precision)
    keras.utils.set_random_seed(stage.seed)


def _title(label: str) -> str:
    """'phase 2/2' -> 'Phase 2/2' (a line starts with the stage's label)."""
    return label[:1].upper() + label[1:]


class PretrainingRun:
    """The stages of one run in `model_dir`: the strategy, the stage's model, optimizer, trainer and
    checkpoints, the progress lines, the held-out evaluation schedule and the sample count, stage after stage.

    Raises (before anything is built):
      PlanError: `model_dir` holds a run of other stages.
      ConfigError: `model_dir` holds an MSLT run in the per-stage layout of kbert before this engine.
    """

    def __init__(
        self,
        stages: Sequence[TrainingStage],
        model_dir: str,
        strategy: tf.distribute.Strategy,
        preemption: PreemptionWatcher,
        print_fn=print,
    ):
        self.stages, self.model_dir, self.strategy = list(stages), model_dir, strategy
        self.preemption, self.print_fn = preemption, print_fn
        self.directory = os.path.join(model_dir, "checkpoints")
        self.chief = strategy.extended.should_checkpoint
        self.build_ahead = any(s.build_ahead for s in self.stages[1:]) and can_build_ahead(strategy)
        self.model: keras.Model | None = None  # the model of `self.stage`, trained in this process
        self.stage: TrainingStage | None = None
        self.samples = 0  # sequences trained by the stages before the one training
        self.schedule: EvalSchedule | None = None  # held-out evaluations, carried over the stages
        self._evaluate = None  # the evaluator of the stage training now
        self._ahead: BuildAhead[_Setup] | None = None
        self._resume_step = 0  # the newest whole checkpoint's step when `train` began
        self._check_old_layout()

    # -- the run -------------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Trains every stage not finished yet; returns what the run's summary gains: `stages` (each stage's
        results), and for the whole run `global_step`, `train` (the last loop's metrics), `sequences_trained`,
        `sequences_per_second`, `restored_from` and the schedule's evaluations."""
        self._check_same_stages()
        self._resume_step = self._newest_step()
        first = stage_at(self.stages, self._resume_step)
        results = [self._finished(stage) for stage in self.stages[:first]]
        restored_from = None
        for stage in self.stages[first:]:
            begun = self._begin(stage)
            result = train(
                stage.config,
                self.strategy,
                begun.trainer,
                begun.checkpoints,
                until_step=stage.end_step,
                preemption=self.preemption,
                print_fn=self.print_fn,
                schedule=self.schedule,
                labels=stage.task.progress_labels(stage.layout),
            )
            results.append(self._end(stage, begun, result))
            restored_from = restored_from or results[-1]["restored_from"]
            if self.schedule is not None and self.schedule.reached:
                break  # the target is reached: the later stages are not needed
        last = results[-1]  # trained here: the last stage always is, if only to find it finished
        if self.schedule is not None:
            self.schedule.finish(last["global_step"], self.samples)
        summary = {
            "stages": results,
            "global_step": last["global_step"],
            "train": last["train"],
            "sequences_trained": self.samples,
            "sequences_per_second": last["sequences_per_second"],
            "restored_from": restored_from,
        }
        if self.schedule is not None:
            summary.update(self.schedule.summary())
        return summary

    def evaluated_model(self) -> tuple[keras.Model, TrainingStage, str]:
        """The model that evaluation scores: the newest checkpoint's, on the stage that saved it (the one trained
        here, if it is that stage's); a run with no checkpoint scores its `init_checkpoint`. Returns the model,
        its stage (whose `config` says the eval data) and the checkpoint."""
        newest = checkpointing.latest_checkpoint(self.model_dir)
        path = newest or self.stages[0].init_checkpoint
        if not path:
            raise MissingFileError(
                f"--mode=eval: no checkpoint in {self.directory} and no train.init_checkpoint to evaluate."
            )
        # checkpoint N was saved by the stage that trained step N - 1
        stage = self.stages[stage_at(self.stages, checkpoint_files.step_of(path) - 1) if newest else 0]
        if self.model is not None and self.stage is stage:
            return self.model, stage, path
        with self.strategy.scope():
            model = stage.task.build_model()
        if newest:
            checkpointing.load_init_checkpoint(model, path)
        else:  # the init checkpoint, as the first stage starts from it (grown, for an MSLT plan that deepens it)
            self._load(stage, model, path)
        return model, stage, path

    # -- one stage ------------------------------------------------------------------------------------------

    def _begin(self, stage: TrainingStage) -> _Begun:
        """Sets the stage up (or takes the build made ahead), resumes or starts it, and starts building the next
        one: the stage is then ready for the loop."""
        model, trainer, build_seconds = self._set_up(stage)
        checkpoints = open_checkpoints(stage.config, self.strategy, trainer, self.model_dir)
        resumed = checkpoints.restore_latest(after_step=stage.start_step, up_to_step=stage.end_step)
        for note in checkpoints.notes:
            self.print_fn(note, flush=True)
        if resumed:
            self.print_fn(f"Resumed from {resumed} at step {int(trainer.global_step.numpy())}.", flush=True)
        else:
            self._start(stage, model, trainer, checkpoints)
        built = f", its graph built ahead in {build_seconds:.1f} s" if build_seconds else ""
        if len(self.stages) > 1:
            self.print_fn(
                f"{_title(stage.label)}: {stage.description}, {len(trainer.train_variables)} variables, "
                f"global steps {stage.start_step}-{stage.end_step}{' (resuming)' if resumed else ''}"
                f"{built}.",
                flush=True,
            )
        if self.schedule is None:
            self.schedule = schedule_for(
                stage.config,
                self.strategy,
                self._evaluate_now,
                int(trainer.sequences_trained.numpy()),
                self.print_fn,
                labels=stage.task.eval_labels,
            )
        evaluates = self.schedule is not None
        self._evaluate = evaluator(stage.config, self.strategy, stage.task, model) if evaluates else None
        if self.build_ahead and int(trainer.global_step.numpy()) < stage.end_step:
            trainer.build_graph()  # traced before the next stage's build competes for the cores
            self._build_next(stage)
        return _Begun(model, trainer, checkpoints, resumed, build_seconds, time.time())

    def _end(self, stage: TrainingStage, begun: _Begun, result: dict[str, Any]) -> dict[str, Any]:
        """The stage's results; a run of several stages exports the stage and records it (chief)."""
        self.model, self.stage, self.samples = begun.model, stage, result["sequences_trained"]
        layout = stage.layout
        result = {
            "stage": stage.number,
            "label": stage.label,
            "num_layers": stage.num_layers,
            "trainable_variables": len(begun.trainer.train_variables),
            "start_step": stage.start_step,
            "end_step": stage.end_step,
            "wall_seconds": time.time() - begun.started,
            "built_ahead_seconds": begun.build_seconds,
            "restored_from": begun.resumed,
            "checkpoint": checkpointing.latest_checkpoint(self.model_dir),
            **stage.facts,
            **result,
            "train_data": {
                "layout": layout.describe(),
                "objective": stage.task.objective(layout),
            },
        }
        if self.chief and len(self.stages) > 1 and result["global_step"] >= stage.end_step:
            stage_dir = os.path.join(self.model_dir, stage.name)
            result["export"] = stage.task.export(begun.model, stage_dir)
            write_summary_json(stage_dir, result)
        return result

    def _set_up(self, stage: TrainingStage, fresh_thread: bool = False) -> _Setup:
        """The stage's model with its built weights, optimizer and trainer: the build made ahead for it, else
        built now. Its global step starts at the stage's first step, or where the run resumes inside it."""
        pending, self._ahead = self._ahead, None
        if pending is not None and pending.key == stage.number:
            built = pending.result(self.print_fn)
            if built is not None:
                return built._replace(build_seconds=pending.seconds)
        _start_session(stage, fresh_thread)  # resets the default graph: outside any strategy scope
        with self.strategy.scope():
            model = stage.task.build_model()
            optimizer = build_optimizer(stage.config, model.trainable_variables)
        start = max(stage.start_step, min(self._resume_step, stage.end_step))  # later stages: their first step
        trainer = make_trainer(stage.config, self.strategy, stage.task, model, optimizer, stage.layout, start)
        return _Setup(model, trainer)

    def _build_next(self, stage: TrainingStage) -> None:
        following = next((s for s in self.stages if s.number == stage.number + 1), None)
        if following is not None and following.build_ahead:

            def build() -> _Setup:
                setup = self._set_up(following, fresh_thread=True)
                setup.trainer.build_graph()
                return setup

            self._ahead = BuildAhead(following.number, _title(following.label), build)

    def _start(
        self, stage: TrainingStage, model: keras.Model, trainer: PretrainingTrainer, checkpoints: TrainingCheckpoints
    ) -> None:
        """A stage at its first step: from the stage before (trained here, else its last checkpoint, which this
        run's stages cannot lose: checkpoints are kept by step), from `init_checkpoint`, or fresh."""
        index = self.stages.index(stage)
        previous = self.stages[index - 1] if index else None
        boundary = os.path.join(self.directory, f"ckpt-{stage.start_step}")
        if previous is not None and self.stage is previous:
            stage.task.carry_over(model, self.model)
            trainer.sequences_trained.assign(self.samples)
        elif previous is not None:
            if checkpoint_files.missing_files(boundary):
                raise MissingFileError(
                    f"{boundary}: {previous.label} ended there, and {stage.label} starts from it, "
                    "but it is gone. Restore it from a backup, or train into a new --model_dir."
                )
            self._load(stage, model, boundary)
            trainer.sequences_trained.assign(checkpointing.saved_counter(boundary, "sequences_trained"))
            self.print_fn(f"{_title(stage.label)} starts from {boundary}.", flush=True)
        elif stage.init_checkpoint:
            kind = self._load(stage, model, stage.init_checkpoint)
            self.print_fn(f"Initialised the model from {kind} checkpoint {stage.init_checkpoint}.", flush=True)
        if previous is not None and stage.same_data(previous):
            checkpoints.restore_input(boundary)

    def _load(self, stage: TrainingStage, model: keras.Model, path: str) -> str:
        """Sets `model` from checkpoint `path` as the stage's task says (whole, or grown); returns its kind."""
        return stage.task.load(model, path, self.print_fn, self.strategy.scope)

    def _finished(self, stage: TrainingStage) -> dict[str, Any]:
        """What a stage finished by an earlier process recorded (its summary, if the process got to write it)."""
        stage_dir = os.path.join(self.model_dir, stage.name)
        if tf.io.gfile.exists(os.path.join(stage_dir, "summary.json")):
            recorded = read_summary(stage_dir)
            self.samples = recorded.get("sequences_trained", self.samples)
            return recorded
        return {
            "stage": stage.number,
            "label": stage.label,
            "start_step": stage.start_step,
            "end_step": stage.end_step,
            "restored_from": None,
        }

    # -- evaluation during training -------------------------------------------------------------------------

    def _evaluate_now(self) -> dict[str, float]:
        """The held-out metrics of the stage training now (the schedule carries over the stages)."""
        return self._evaluate()

    # -- the run directory ----------------------------------------------------------------------------------

    def _newest_step(self) -> int:
        """The step of the newest checkpoint whose files are all there (a rerun cannot go on from the others)."""
        whole = (
            checkpoint_files.step_of(p)
            for p in checkpoint_files.listed(self.directory)
            if checkpoint_files.missing_files(p) is None
        )
        return next(whole, 0)

    def _check_same_stages(self) -> None:
        """A model_dir holds one run: resuming with other stage boundaries would mix stages."""
        if len(self.stages) == 1:
            return  # a one-stage run may be resumed with more steps
        path = os.path.join(self.model_dir, STAGES_FILE)
        layout = [stage.record() for stage in self.stages]
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                written = json.load(f)
            if written != layout:
                changed = next(
                    (f"stage {w.get('stage')}: {w} now {n}" for w, n in zip(written, layout) if w != n),
                    f"{len(written)} stages now {len(layout)}",
                )
                raise PlanError(
                    f"--model_dir={self.model_dir} holds a run of other stages ({changed}). Resume it "
                    "with the config it was started with, or train into a new --model_dir."
                )
        elif self.chief:
            tf.io.gfile.makedirs(self.model_dir)
            with tf.io.gfile.GFile(path, "w") as f:
                json.dump(layout, f, indent=2)

    def _check_old_layout(self) -> None:
        if has_old_layout(self.model_dir):
            raise ConfigError(
                f"--model_dir={self.model_dir} holds an MSLT run in the per-stage layout (stage_N/checkpoints) that "
                f"this kbert no longer trains in: convert it with `kbert-convert-mslt-run --model_dir="
                f"{self.model_dir}`, then rerun the same command."
            )
