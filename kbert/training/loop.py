"""The pretraining loop: train one stage in loops of `steps_per_loop`, checkpoint, evaluate, report.

`train` is the loop itself and knows no stages: it takes a trainer its caller built and restored
(`kbert.training.engine` does, once per stage of a run). The builders here (optimizer, trainer, checkpoints,
evaluator) are what the engine and the benchmarks assemble a run from; the model, its input and its loss come from
a task (`kbert.training.task`).

Example:

```python
with strategy.scope():
    model = task.build_model()
    optimizer = build_optimizer(config, model.trainable_variables)
layout = first_layout(config.data.train_files)
trainer = make_trainer(config, strategy, task, model, optimizer, layout)  # the input, built once
checkpoints = open_checkpoints(config, strategy, trainer, "/tmp/run")
checkpoints.restore_latest()
with PreemptionWatcher(strategy) as preemption:
    result = train(config, strategy, trainer, checkpoints, until_step=1000, preemption=preemption)
result["train"]["loss"], evaluate(config, strategy, task, model)["masked_lm_accuracy"]
```
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.data import RecordLayout
from kbert.data.pipeline import distribute_options
from kbert.errors import InputDataError, NonFiniteLossError
from kbert.optimizers.distributed import ratio_optimizer
from kbert.runtime.checkpointing import TrainingCheckpoints
from kbert.runtime.devices import find_accelerators
from kbert.runtime.optimizer_factory import make_optimizer, make_schedule
from kbert.runtime.preemption import PreemptionWatcher
from kbert.training.batch_ramp import RampedSchedule
from kbert.training.config import PretrainingConfig
from kbert.training.eval_schedule import EvalSchedule
from kbert.training.peak_flops import peak_flops_of
from kbert.training.reporting import ProgressReporter, check_finite_weights
from kbert.training.task import PretrainingTask
from kbert.training.trainer import PretrainingTrainer


def learning_rate_schedule(config: PretrainingConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """`config.schedule`'s shape over the run's `train.total_steps` (`make_schedule`), scaled to the batch during
    `train.batch_ramp_*`'s ramp."""
    schedule = make_schedule(config.schedule, config.train.total_steps - config.schedule.step_offset)
    ramp = config.train.batch_ramp()
    return RampedSchedule(schedule, ramp) if ramp else schedule


def build_optimizer(
    config: PretrainingConfig, variables: Sequence[keras.Variable] = (), learning_rate=None
) -> keras.optimizers.Optimizer:
    """`config.optimizer` at `learning_rate` (default: `learning_rate_schedule(config)`), with the precision's loss
    scaling (call in `strategy.scope()`)."""
    return make_optimizer(
        config.optimizer,
        learning_rate if learning_rate is not None else learning_rate_schedule(config),
        mixed_precision=config.train.mixed_precision,
        variables=variables,
    )


@dataclasses.dataclass(frozen=True)
class InputStart:
    """Where a run's training input starts, decided once before it is built (`input_start`)."""

    restores_position: bool  # checkpoints hold the input position: a restore moves the input on
    seed_offset: int  # the shuffle is seeded with train.seed + seed_offset


def input_start(config: PretrainingConfig, strategy: tf.distribute.Strategy, start_step: int = 0) -> InputStart:
    """Checkpoints hold the input position with `data.checkpoint_input`, except on TPU (`kbert.training.inputs`):
    the input then starts with the run's first shuffle, and restoring a checkpoint moves it to where that one
    stopped. Elsewhere a trainer that starts at global step `start_step` (where its run resumes, or its stage's
    first step) reads a fresh shuffle seeded with `train.seed + start_step`: it does not start over with the
    run's first batches, nor continue where the checkpoint stopped; examples seen before can come again."""
    if config.data.checkpoint_input and not isinstance(strategy, tf.distribute.TPUStrategy):
        return InputStart(restores_position=True, seed_offset=0)
    return InputStart(restores_position=False, seed_offset=start_step)


def make_trainer(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    task: PretrainingTask,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    layout: RecordLayout,
    initial_step: int = 0,
) -> PretrainingTrainer:
    """The `PretrainingTrainer` of `config.train` and `task`'s input of `config.data` for the variables that
    train on records of `layout` (builds the optimizer's slots and the input, once, where `input_start` says it
    starts); its step counter starts at `initial_step` (a restore moves it on)."""
    t = config.train
    start = input_start(config, strategy, initial_step)
    with strategy.scope():
        global_step = tf.Variable(
            initial_step,
            dtype=tf.int64,
            trainable=False,
            name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        return PretrainingTrainer(
            strategy,
            model,
            optimizer,
            task.dataset_fn(config, True, start.seed_offset),
            task=task,
            global_step=global_step,
            global_batch_size=t.global_batch_size,
            accumulation_steps=t.gradient_accumulation_steps,
            batch_ramp=t.batch_ramp(),
            trainable_variables=task.trained_variables(model, layout),
            jit_compile=t.jit_compile,
            checkpointable_input=start.restores_position,
        )


def open_checkpoints(
    config: PretrainingConfig, strategy: tf.distribute.Strategy, trainer: PretrainingTrainer, model_dir: str
) -> TrainingCheckpoints:
    """The trainer's checkpoints in `model_dir` (the input position too, where the trainer's input can be saved:
    with `data.checkpoint_input`, not on TPU)."""
    t = config.train
    return TrainingCheckpoints(
        trainer.model,
        trainer.optimizer,
        trainer.global_step,
        trainer.input.checkpointable,
        model_dir,
        strategy,
        max_to_keep=t.max_checkpoints,
        interval=t.checkpoint_interval,
        async_writes=t.async_checkpoint,
        counters={"sequences_trained": trainer.sequences_trained},
    )


def _save(checkpoints: TrainingCheckpoints, trainer: PretrainingTrainer, step: int, final: bool = False) -> None:
    if checkpoints.due(step, final):  # only weights about to be saved need the check
        check_finite_weights(step, trainer.weights_are_finite())
        checkpoints.save(step, final)


def _reporter(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    trainer: PretrainingTrainer,
    checkpoints: TrainingCheckpoints,
    until_step: int,
    labels: Mapping[str, str] | None,
    print_fn,
) -> ProgressReporter:
    """The progress lines (chief), TensorBoard scalars and MFU of `train`."""
    chief = strategy.extended.should_checkpoint
    writer = tf.summary.create_file_writer(os.path.join(checkpoints.model_dir, "train")) if chief else None
    layerwise = ratio_optimizer(trainer.optimizer) is not None
    compute_dtype = keras.mixed_precision.Policy(config.train.mixed_precision).compute_dtype
    peak, _ = peak_flops_of(strategy, find_accelerators().model, compute_dtype)
    flops = trainer.task.flops_per_sequence(trainer.model, config)
    return ProgressReporter(
        until_step,
        writer,
        config.train.summary_interval,
        trainer.optimizer if layerwise else None,
        print_fn=print_fn if chief else _silent,
        flops_per_row=flops,
        peak_flops=peak,
        labels=labels,
    )


def _silent(*args, **kwargs) -> None:
    """A non-chief worker's print: every worker runs the loop, the chief alone reports."""


def schedule_for(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    evaluate: Callable[[], dict[str, float]],
    samples_done: int = 0,
    print_fn=print,
    labels: Mapping[str, str] | None = None,
) -> EvalSchedule | None:
    """The held-out evaluation schedule of `eval.interval_samples` / `eval.protocol`, calling `evaluate` (counting
    on from `samples_done`, the samples trained so far; its lines show the metrics `labels` names), or None
    without one."""
    interval = config.eval.interval(config.train.global_batch_size)
    if not interval:
        return None
    return EvalSchedule(
        interval,
        config.eval.target(),
        evaluate,
        print_fn if strategy.extended.should_checkpoint else _silent,
        mlperf=config.eval.protocol == "mlperf",
        samples_done=samples_done,
        labels=labels,
    )


def train(
    config: PretrainingConfig,
    strategy: tf.distribute.Strategy,
    trainer: PretrainingTrainer,
    checkpoints: TrainingCheckpoints,
    *,
    until_step: int,
    preemption: PreemptionWatcher,
    print_fn=print,
    schedule: EvalSchedule | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Trains from the trainer's step (restored by the caller) up to `until_step` optimizer steps, or until the
    `schedule`'s held-out evaluation reaches its target.

    Loops end on multiples of `train.steps_per_loop`; after each loop: a progress line, a checkpoint every
    `train.checkpoint_interval` steps (written in the background with `train.async_checkpoint`), a held-out
    evaluation when the schedule says, and a preemption check. `labels`: the metrics the progress line shows
    after the loss (metric -> short label; the task's `progress_labels`). The last step is always saved, and every
    save is on disk when it returns. A non-finite loss or non-finite weights stop it with NonFiniteLossError before they
    are saved; the checkpoints they make suspect are set aside, so a rerun resumes from the last good one. On
    preemption it saves and raises `Preempted`.

    Returns:
      `{"global_step", "train": last loop's metrics, "sequences_per_second", "sequences_trained"}`, and the
      schedule's evaluations and time to target.
    """
    t = config.train
    reporter = _reporter(config, strategy, trainer, checkpoints, until_step, labels, print_fn)
    metrics: dict[str, float] = {}
    step = int(trainer.global_step.numpy())
    try:
        while step < until_step:
            steps = min(t.steps_per_loop - step % t.steps_per_loop, until_step - step)
            metrics = trainer.train(steps)
            step, samples = int(trainer.global_step.numpy()), int(trainer.sequences_trained.numpy())
            reporter(step, metrics, steps)
            _save(checkpoints, trainer, step)
            if schedule is not None and schedule.due(samples) and schedule(step, samples, schedule.seconds()):
                break
            preemption.check(checkpoints.manager, step)
        _save(checkpoints, trainer, step, final=True)
    except NonFiniteLossError as error:
        raise NonFiniteLossError(
            f"{error} {checkpoints.set_aside_from(error.bad_from_step)}", error.bad_from_step
        ) from None
    finally:
        checkpoints.close()
    return {
        "global_step": step,
        "train": metrics,
        "sequences_per_second": reporter.mean_throughput(),
        "sequences_trained": int(trainer.sequences_trained.numpy()),
        **(schedule.summary() if schedule is not None else {}),
    }


def evaluator(
    config: PretrainingConfig, strategy: tf.distribute.Strategy, task: PretrainingTask, model: keras.Model
) -> Callable[[], dict[str, float]]:
    """A function that evaluates `model` as it is when called: `task`'s metrics (BERT: MLM/NSP loss and
    accuracy) over `data.eval_files` (every record, or `eval.steps` batches), summed globally. Its dataset and
    graph are built once, so a run that evaluates on a schedule pays for them once; with one replica, its
    iterator too (`_passes_of_one_iterator`)."""
    make = task.dataset_fn(config, False)
    steps = config.eval.steps

    def records(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make(context).take(steps) if steps > 0 else make(context)

    # Only the loop over the batches needs autograph; converting the model's every function would double tracing.
    @tf.autograph.experimental.do_not_convert
    def replica_terms(batch):
        return task.terms(batch, model(batch, training=False))

    def add(totals: dict[str, tf.Tensor], batch) -> dict[str, tf.Tensor]:
        terms = strategy.run(replica_terms, (batch,))
        return {
            name: totals[name] + tf.cast(strategy.reduce("SUM", terms[name], axis=None), tf.float64)
            for name in task.loss_terms
        }

    if strategy.num_replicas_in_sync == 1:
        totals_of = _passes_of_one_iterator(strategy, records, add, task.loss_terms)
    else:
        dataset = strategy.distribute_datasets_from_function(records, distribute_options(strategy))

        @tf.function
        def totals_of():
            totals = _no_totals(task.loss_terms)
            for batch in dataset:  # the distributed iterator splits the last batches among the replicas
                totals = add(totals, batch)
            return totals

    def evaluate_now() -> dict[str, float]:
        totals = {k: np.float64(v) for k, v in totals_of().items()}
        if totals["sequence_count"] == 0:
            raise InputDataError(
                f"data.eval_files={config.data.eval_files!r}: no record was evaluated; check that "
                "the files hold records (kbert-inspect-tfrecords)."
            )
        metrics = {k: float(v) for k, v in task.metrics(totals).items()}
        metrics["sequences"] = float(totals["sequence_count"])
        return metrics

    return evaluate_now


def _no_totals(names: Sequence[str]) -> dict[str, tf.Tensor]:
    return {name: tf.constant(0.0, tf.float64) for name in names}


def _passes_of_one_iterator(
    strategy: tf.distribute.Strategy,
    records: Callable[[tf.distribute.InputContext], tf.data.Dataset],
    add: Callable,
    names: Sequence[str],
) -> Callable[[], dict[str, tf.Tensor]]:
    """One replica's evaluation totals: the batches of one pass over `records` are counted once, and one iterator
    reads the records over and over, each call taking exactly one pass through `add`.

    With an iterator of its own read to its end, an evaluation of a 2-layer model on 523 records took 1.3 s or
    2.6 s about half the time (TF 2.20, 2 CPU cores): after the last batch, nothing ran until the iterator ended.
    A pass of the kept iterator takes the model's 0.6 s every time. Several replicas keep an iterator for each
    evaluation: only its end shares a pass's last, uneven batches among them.
    """
    one_pass = records(tf.distribute.InputContext())  # one replica's context: one pipeline, the whole batch
    batches = int(one_pass.reduce(0, lambda count, _: count + 1))
    iterator = iter(
        strategy.distribute_datasets_from_function(lambda _: one_pass.repeat(), distribute_options(strategy))
    )

    @tf.function
    def totals_of():
        totals = _no_totals(names)
        for _ in tf.range(batches):
            totals = add(totals, next(iterator))
        return totals

    return totals_of


def evaluate(
    config: PretrainingConfig, strategy: tf.distribute.Strategy, task: PretrainingTask, model: keras.Model
) -> dict[str, float]:
    """`evaluator(config, strategy, task, model)()`: one evaluation of the model as it is."""
    return evaluator(config, strategy, task, model)()
