"""The pretraining driver: build, resume, train in loops of `steps_per_loop`, checkpoint, evaluate, report.

`run_experiment` is what `kbert-pretrain` runs. `train` takes a model and optimizer built by the caller (in
`strategy.scope()`), the variables to train and the step to stop at, so a multi-stage schedule (kbert.mslt) can call
it once per stage with a model it grew.

Example:

```python
config = load_experiment(["configs/experiments/bert_tiny_cpu.yaml"])
strategy = make_strategy("auto")
summary = run_experiment(config, "/tmp/run", strategy, mode="train_and_eval")
summary["train"]["loss"], summary["eval"]["masked_lm_accuracy"]
```
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from typing import Any, Callable, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.data import pretraining_dataset
from kbert.modeling import BertPretrainer
from kbert.modeling.losses import LOSS_TERMS, pretraining_loss_terms, pretraining_metrics
from kbert.optimizers import LAMB, LARS, LossScaleOptimizer, PolynomialWarmup
from kbert.optimizers.layerwise import path_matches
from kbert.training import checkpointing
from kbert.training.config import ConfigError, ExperimentConfig
from kbert.training.reporting import ProgressReporter, check_finite, eval_line, write_summary_json
from kbert.training.trainer import PretrainingTrainer

MODES = ("train", "eval", "train_and_eval")


# The exit status of a preempted run, as TF's PreemptionCheckpointHandler uses: "saved, restart me".
PREEMPTED_EXIT_CODE = 42


class Preempted(RuntimeError):
    """SIGTERM arrived; a checkpoint of the current step was written. Exit with PREEMPTED_EXIT_CODE."""


def learning_rate_schedule(config: ExperimentConfig) -> PolynomialWarmup:
    s = config.schedule
    decay_steps = s.decay_steps or max(config.train.total_steps - s.step_offset - s.warmup_steps, 1)
    return PolynomialWarmup(peak_learning_rate=s.peak_learning_rate, warmup_steps=s.warmup_steps,
                            decay_steps=decay_steps, end_learning_rate=s.end_learning_rate, power=s.power,
                            step_offset=s.step_offset)


def build_optimizer(config: ExperimentConfig, variables: Sequence[keras.Variable] = (),
                    learning_rate=None) -> keras.optimizers.Optimizer:
    """LAMB, LARS or AdamW from `config.optimizer` (call in `strategy.scope()`); fp16 adds loss scaling whose
    finiteness check spans all replicas (`kbert.optimizers.LossScaleOptimizer`).

    `variables`: the model's, for AdamW, whose exclusions Keras matches against `variable.name` only
    ('gamma', not 'layer_norm'); kbert applies the `variable.path` regexes to them here.
    """
    o = config.optimizer
    learning_rate = learning_rate if learning_rate is not None else learning_rate_schedule(config)
    if o.type == "lamb":
        optimizer = LAMB(learning_rate, beta_1=o.beta_1, beta_2=o.beta_2, epsilon=o.epsilon,
                         weight_decay=o.weight_decay, exclude_from_weight_decay=list(o.exclude_from_weight_decay),
                         exclude_from_layer_adaptation=list(o.exclude_from_layer_adaptation),
                         global_clipnorm=o.global_clipnorm)
    elif o.type == "lars":
        optimizer = LARS(learning_rate, momentum=o.momentum, nesterov=o.nesterov, eeta=o.eeta,
                         weight_decay=o.weight_decay, exclude_from_weight_decay=list(o.exclude_from_weight_decay),
                         exclude_from_layer_adaptation=list(o.exclude_from_layer_adaptation),
                         global_clipnorm=o.global_clipnorm)
    else:
        if o.global_clipnorm:
            raise ConfigError("optimizer.global_clipnorm is not supported with optimizer.type=adamw: Keras AdamW "
                              "clips each replica's gradients before the all-reduce, so the step would depend on "
                              "the number of replicas. Use lamb or lars (which clip after it), or unset it.")
        optimizer = keras.optimizers.AdamW(learning_rate, weight_decay=o.weight_decay, beta_1=o.beta_1,
                                           beta_2=o.beta_2, epsilon=o.epsilon, global_clipnorm=o.global_clipnorm)
        optimizer.exclude_from_weight_decay(var_list=[
            v for v in variables if path_matches(o.exclude_from_weight_decay, v.path)])
    if config.train.mixed_precision == "mixed_float16":
        optimizer = LossScaleOptimizer(optimizer)
    return optimizer


def build_model(config: ExperimentConfig) -> BertPretrainer:
    """The `BertPretrainer` of `config.model` (call in `strategy.scope()` after setting the precision policy)."""
    return BertPretrainer(config.model.bert_config())


def dataset_fn(config: ExperimentConfig, is_training: bool, vocab_size: Optional[int]):
    """`input_context -> tf.data.Dataset` of micro-batches (train) or eval batches."""
    d = config.data
    files = d.train_files if is_training else d.eval_files
    if not files:
        raise ConfigError(f"data.{'train' if is_training else 'eval'}_files is empty: set it in the config file "
                         f"or with --params_override=data.{'train' if is_training else 'eval'}_files=PATTERN.")
    if d.dynamic_masking and not d.vocab_file:
        raise ConfigError("data.dynamic_masking needs data.vocab_file: the [CLS]/[SEP]/[MASK] ids and the ## pieces "
                          "come from the vocabulary the records were written with. Set "
                          "--params_override=data.vocab_file=PATH.")
    batch = (config.train.global_batch_size // config.train.gradient_accumulation_steps if is_training
             else config.eval.global_batch_size)

    def make(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pretraining_dataset(files, d.seq_length, d.max_predictions, batch, input_context,
                                   is_training=is_training, dynamic_masking=d.dynamic_masking,
                                   vocab_size=vocab_size if d.check_vocab_size or d.dynamic_masking else None,
                                   vocab_file=d.vocab_file or None, whole_word_masking=d.whole_word_masking,
                                   seed=config.train.seed)
    return make


class _SigtermFlag:
    """Turns SIGTERM into a flag checked between loops (single-host strategies; see `_preemption_check`)."""

    def __init__(self):
        self.raised = False
        # Python only lets the main thread install handlers; a loop run from another thread keeps the default.
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.raised = True

    def close(self):
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)


def _preemption_check(strategy, manager, global_step):
    """A callable run after each loop: saves and raises Preempted on SIGTERM / a TPU maintenance event."""
    if isinstance(strategy, (tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.TPUStrategy)):
        # Agrees on one step across workers before saving; exits the process after the save.
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(strategy.cluster_resolver, manager)
        return (lambda: handler.save_checkpoint_if_preempted(checkpoint_number=int(global_step.numpy()),
                                                             check_interval=False)), (lambda: None)
    flag = _SigtermFlag()

    def check():
        if flag.raised:
            path = manager.save(checkpoint_number=int(global_step.numpy()), check_interval=False)
            raise Preempted(f"SIGTERM: saved {path} at step {int(global_step.numpy())}; rerun the same command "
                            "to resume.")
    return check, flag.close


def make_trainer(config: ExperimentConfig, strategy: tf.distribute.Strategy, model: keras.Model,
                 optimizer: keras.optimizers.Optimizer, *,
                 trainable_variables: Optional[Sequence[keras.Variable]] = None,
                 global_step: Optional[tf.Variable] = None) -> PretrainingTrainer:
    """The `PretrainingTrainer` of `config.train` and `config.data` (builds the optimizer's slots and the input)."""
    t = config.train
    with strategy.scope():
        if global_step is None:
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        return PretrainingTrainer(
            strategy, model, optimizer, dataset_fn(config, True, model.config.vocab_size),
            global_step=global_step, global_batch_size=t.global_batch_size,
            accumulation_steps=t.gradient_accumulation_steps, trainable_variables=trainable_variables,
            jit_compile=t.jit_compile)


def train(
    config: ExperimentConfig,
    strategy: tf.distribute.Strategy,
    model_dir: str,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    *,
    trainable_variables: Optional[Sequence[keras.Variable]] = None,
    global_step: Optional[tf.Variable] = None,
    until_step: Optional[int] = None,
    continue_input_from: Optional[str] = None,
    trainer: Optional[PretrainingTrainer] = None,
    after_first_step: Optional[Callable[[], None]] = None,
    print_fn=print,
) -> dict[str, Any]:
    """Trains from the newest checkpoint in `model_dir` (or from scratch) up to `until_step` optimizer steps.

    `continue_input_from`: a training checkpoint whose input position a run without a checkpoint of its own
    starts from (an MSLT stage continues the data where the previous stage stopped).
    `trainer`: one `make_trainer` built for this model and optimizer beforehand (e.g. with its graph built while
    the previous MSLT stage trained; its own variables and step counter are then used); by default one is made
    here.
    `after_first_step`: called once the graph is built and has run one step (the first loop is then one step).

    Checkpoints every `train.checkpoint_interval` steps and at the end; stops with NonFiniteLossError before
    saving non-finite weights; on SIGTERM saves and raises `Preempted`.

    Returns:
      `{"global_step", "train": last loop's metrics, "sequences_per_second", "restored_from"}`.
    """
    t = config.train
    until_step = until_step or t.total_steps
    if trainer is None:
        trainer = make_trainer(config, strategy, model, optimizer, trainable_variables=trainable_variables,
                               global_step=global_step)
    global_step = trainer.global_step
    checkpoint = checkpointing.training_checkpoint(
        model, optimizer, global_step, trainer.input.checkpointable if config.data.checkpoint_input else None)
    restored = checkpointing.restore_latest(checkpoint, model_dir)
    if not restored and continue_input_from and trainer.input.checkpointable is not None \
            and config.data.checkpoint_input:
        tf.train.Checkpoint(train_iterator=trainer.input.checkpointable).restore(continue_input_from).expect_partial()
    manager = checkpointing.checkpoint_manager(checkpoint, model_dir, strategy, t.max_checkpoints,
                                               t.checkpoint_interval, global_step)
    chief = strategy.extended.should_checkpoint
    writer = tf.summary.create_file_writer(os.path.join(model_dir, "train")) if chief else None
    layerwise = hasattr(getattr(optimizer, "inner_optimizer", optimizer), "trust_ratios")
    reporter = ProgressReporter(until_step, writer, t.summary_interval, optimizer if layerwise else None,
                                print_fn=print_fn if chief else (lambda *a, **k: None))
    preemption_check, close = _preemption_check(strategy, manager, global_step)
    metrics: dict[str, float] = {}
    try:
        step = int(global_step.numpy())
        if restored:
            print_fn(f"Resumed from {restored} at step {step}.", flush=True)
        while step < until_step:
            steps = 1 if after_first_step is not None else min(t.steps_per_loop - step % t.steps_per_loop, until_step - step)
            metrics = trainer.train(tf.constant(steps, tf.int32))
            step = int(global_step.numpy())
            check_finite(step, metrics, trainer.first_nonfinite_step())
            reporter(step, metrics, steps)
            if after_first_step is not None:  # no checkpoint: it would hold just one step more than the last
                after_first_step()
                after_first_step = None
            else:
                manager.save(checkpoint_number=step, check_interval=True)
            preemption_check()
        if manager.latest_checkpoint is None or not manager.latest_checkpoint.endswith(f"-{step}"):
            manager.save(checkpoint_number=step, check_interval=False)
    finally:
        close()
        if not chief:
            shutil.rmtree(manager.directory, ignore_errors=True)
    return {"global_step": int(global_step.numpy()), "train": metrics,
            "sequences_per_second": reporter.mean_throughput(), "restored_from": restored}


def evaluate(config: ExperimentConfig, strategy: tf.distribute.Strategy, model: keras.Model) -> dict[str, float]:
    """MLM/NSP loss and accuracy over `data.eval_files` (all of it, or `eval.steps` batches), summed globally."""
    make = dataset_fn(config, False, model.config.vocab_size)
    steps = config.eval.steps
    dataset = strategy.distribute_datasets_from_function(
        lambda context: make(context).take(steps) if steps > 0 else make(context))

    def replica_terms(batch):
        return pretraining_loss_terms(batch, model(batch, training=False))

    @tf.function
    def run(dataset):
        totals = {name: tf.constant(0.0, tf.float64) for name in LOSS_TERMS}
        for batch in dataset:
            terms = strategy.run(replica_terms, (batch,))
            totals = {name: totals[name] + tf.cast(strategy.reduce("SUM", terms[name], axis=None), tf.float64)
                      for name in LOSS_TERMS}
        return totals

    totals = {k: np.float64(v) for k, v in run(dataset).items()}
    metrics = {k: float(v) for k, v in pretraining_metrics(totals).items()}
    metrics["sequences"] = float(totals["nsp_count"])
    return metrics


def _restore_weights_for_eval(model: keras.Model, model_dir: str, init_checkpoint: str) -> str:
    path = checkpointing.latest_checkpoint(model_dir) or init_checkpoint
    if not path:
        raise FileNotFoundError(f"--mode=eval: no checkpoint in {model_dir}/checkpoints and no "
                                "train.init_checkpoint to evaluate.")
    checkpointing.load_init_checkpoint(model, path)
    return path


def run_experiment(config: ExperimentConfig, model_dir: str, strategy: tf.distribute.Strategy,
                   mode: str = "train", print_fn=print) -> dict[str, Any]:
    """Trains and/or evaluates as `mode` says and writes `model_dir/summary.json` (chief only)."""
    if mode not in MODES:
        raise ValueError(f"--mode={mode}: choose one of {', '.join(MODES)}.")
    t = config.train
    if t.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(t.seed)
    keras.mixed_precision.set_global_policy(t.mixed_precision)
    tf.io.gfile.makedirs(model_dir)
    started = time.time()
    summary: dict[str, Any] = {"mode": mode, "strategy": type(strategy).__name__,
                               "replicas": strategy.num_replicas_in_sync, "config": config.as_dict()}
    with strategy.scope():
        model = build_model(config)
    if mode == "eval":
        summary["evaluated_checkpoint"] = _restore_weights_for_eval(model, model_dir, t.init_checkpoint)
    else:
        with strategy.scope():
            optimizer = build_optimizer(config, model.trainable_variables)
        if t.init_checkpoint and not checkpointing.latest_checkpoint(model_dir):
            kind = checkpointing.load_init_checkpoint(model, t.init_checkpoint)
            print_fn(f"Initialised the model from {kind} checkpoint {t.init_checkpoint}.", flush=True)
        summary.update(train(config, strategy, model_dir, model, optimizer, print_fn=print_fn))
    if mode in ("eval", "train_and_eval"):
        summary["eval"] = evaluate(config, strategy, model)
        print_fn(eval_line(summary["eval"]), flush=True)
    summary["wall_seconds"] = time.time() - started
    if strategy.extended.should_checkpoint:
        write_summary_json(model_dir, summary)
    return summary
