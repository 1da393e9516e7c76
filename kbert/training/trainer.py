"""The distributed pretraining step: gradient accumulation, global loss normalisation, cross-replica loss scaling.

`PretrainingTrainer.train(n)` runs `n` optimizer steps inside one `tf.function` (a `tf.while_loop` around
`strategy.run`) and returns the metrics of those steps. The model's loss and metrics are its task's
(`kbert.training.task`).

Example:

```python
task = BertPretrainingTask(BertConfig.load("bert_tiny"))
with strategy.scope():
    model = task.build_model()
    optimizer = kbert.optimizers.LAMB(1e-3)
    trainer = PretrainingTrainer(strategy, model, optimizer, task.dataset_fn(config, True), task=task,
                                 global_step=tf.Variable(0, dtype=tf.int64), global_batch_size=256)
trainer.train(100)  # {'loss': 7.1, 'masked_lm_accuracy': 0.02, ...}
```
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.choices import JIT_COMPILE, WHOLE_STEP, is_jit_compile_choice
from kbert.errors import ConfigError
from kbert.training.batch_ramp import BatchRamp
from kbert.training.inputs import make_input
from kbert.training.reporting import check_finite
from kbert.training.task import PretrainingTask


def _replica_local_scalar(name: str) -> tf.Variable:
    """A float32 accumulator each replica updates on its own; reading it cross-replica sums the replicas."""
    return tf.Variable(
        0.0,
        trainable=False,
        name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
    )


def _all_finite(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


def _dense(grads: Sequence) -> list[tf.Tensor]:
    """Gradients with an IndexedSlices (a gathered table's: one slice per token) summed into its table's shape:
    `global_norm` would square each slice, where repeated rows must add up first (the token-type table's two)."""
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def whole_step_compiles(strategy: tf.distribute.Strategy) -> bool:
    """Whether XLA can compile a whole replica step, all-reduces included, under `strategy`.

    A mirrored strategy all-reduces through `merge_call`, which XLA cannot compile; TF replaces it with XLA
    collectives only when every replica is a GPU (`MirroredExtended._use_merge_call`). One device needs neither.
    """
    if not isinstance(strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)):
        return True
    return all(tf.DeviceSpec.from_string(d).device_type == "GPU" for d in strategy.extended.worker_devices)


def _xla(fn: Callable, compile_it: bool) -> Callable:
    return tf.function(fn, jit_compile=True, autograph=False) if compile_it else fn


def _whole_step(jit_compile: bool | str, strategy: tf.distribute.Strategy) -> bool:
    """Whether `jit_compile` asks for the whole replica step (refused where XLA cannot compile it)."""
    if not is_jit_compile_choice(jit_compile):
        raise ValueError(f"jit_compile={jit_compile!r}: choose one of {', '.join(map(repr, JIT_COMPILE))}.")
    if jit_compile != WHOLE_STEP:
        return False
    if not whole_step_compiles(strategy):
        raise ConfigError(
            f"train.jit_compile=step: TF compiles a replica step with its all-reduce only on GPUs, not "
            f"under {type(strategy).__name__} on {strategy.extended.worker_devices[0]}; use "
            "train.jit_compile=true (forward and backward only) or --strategy=one_device."
        )
    return not isinstance(strategy, tf.distribute.TPUStrategy)  # a TPU compiles every step whole anyway


class PretrainingTrainer:
    """Runs optimizer steps of a pretraining task under any `tf.distribute` strategy.

    Per optimizer step each replica runs `accumulation_steps` micro-batches. Every micro-batch's loss is the
    replica's share of the global-batch loss: the task's loss terms scaled by counts all-reduced from the inputs
    (for BERT `mlm_loss_sum / (W + 1e-5) + nsp_loss_sum / N`, W the masked weight sum, N the sentence labels), so
    one device and N replicas with the same global batch compute the same gradient. Local gradients are summed in
    replica-local variables; the optimizer's `apply_gradients` does the step's single gradient all-reduce.

    Under fp16 pass a `kbert.optimizers.LossScaleOptimizer`: its finiteness check is agreed across replicas (a
    non-finite gradient on any replica skips the step everywhere; Keras's own only looks at replica 0).

    Args:
      strategy: the distribution strategy; model and optimizer must have been created in its scope.
      model: the task's model, called on a batch dict.
      optimizer: a Keras optimizer (LAMB, LARS, AdamW, or one wrapped in `LossScaleOptimizer`).
      dataset_fn: `input_context -> tf.data.Dataset` of micro-batches (see `kbert.training.inputs`).
      task: the model's objective: its loss terms, their scales and metrics (`kbert.training.task`).
      global_step: counts optimizer steps; incremented here, checkpointed by the caller (as is
        `sequences_trained`, the sequences the steps trained on).
      global_batch_size: sequences per optimizer step over all replicas.
      accumulation_steps: micro-batches per optimizer step.
      batch_ramp: fewer micro-batches in the first steps (`kbert.training.batch_ramp`; its `full` is
        `accumulation_steps`); the optimizer's learning rate should be a `RampedSchedule` of it.
      trainable_variables: what the optimizer updates (MSLT trains a subset); default `model.trainable_variables`.
      jit_compile: what to XLA-compile (`JIT_COMPILE`): False nothing, True the forward and backward pass,
        "step" the whole replica step (forward, backward, accumulation, clipping, optimizer update) in one cluster,
        which mirrored strategies allow on GPUs only (`whole_step_compiles`).
      checkpointable_input: feed from an iterator whose position a checkpoint can hold, or (False, and always on
        TPU) from TF's distributed iterator, which prefetches to the devices (`kbert.training.inputs`).

    Raises:
      ConfigError: `jit_compile="step"` under a mirrored strategy whose replicas are not all GPUs.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
        *,
        task: PretrainingTask,
        global_step: tf.Variable,
        global_batch_size: int,
        accumulation_steps: int = 1,
        batch_ramp: BatchRamp | None = None,
        trainable_variables: Sequence[keras.Variable] | None = None,
        jit_compile: bool | str = False,
        checkpointable_input: bool = True,
    ):
        if global_batch_size % (accumulation_steps * strategy.num_replicas_in_sync):
            raise ValueError(
                f"train.global_batch_size={global_batch_size} must be a multiple of gradient_accumulation_steps "
                f"({accumulation_steps}) x replicas ({strategy.num_replicas_in_sync})."
            )
        self.strategy = strategy
        self.task = task
        self.model = model
        self.optimizer = optimizer
        self.global_step = global_step
        self.global_batch_size = global_batch_size
        if batch_ramp is not None and batch_ramp.full != accumulation_steps:
            raise ValueError(f"batch_ramp.full={batch_ramp.full} must be accumulation_steps={accumulation_steps}.")
        self.accumulation_steps = accumulation_steps
        self.batch_ramp = batch_ramp
        self.train_variables = list(model.trainable_variables if trainable_variables is None else trainable_variables)
        self._loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        whole_step = _whole_step(jit_compile, strategy)
        self._gradients = _xla(self._gradients_fn, jit_compile is True)
        self._accumulate_step = _xla(self._accumulate, whole_step)
        self._apply_step = _xla(self._apply, whole_step)
        with strategy.scope():
            optimizer.build(self.train_variables)
            self.input = make_input(strategy, dataset_fn, checkpointable_input)
            self._sums = {name: _replica_local_scalar(name) for name in task.loss_terms + ("grad_sq_sum", "nonfinite")}
            # The sequences trained on so far (a packed row holds several): the run's sample count, checkpointed.
            self.sequences_trained = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="sequences_trained",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            self._first_nonfinite_step = tf.Variable(
                -1,
                dtype=tf.int64,
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            self._accumulators = (
                [
                    tf.Variable(
                        tf.zeros(v.shape, v.dtype),
                        trainable=False,
                        name="grad_accumulator",
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM,
                    )
                    for v in self.train_variables
                ]
                if accumulation_steps > 1
                else []
            )
        self._loop = tf.function(self._loop_fn, autograph=False)
        self._weights_finite = tf.function(lambda: _all_finite([w.value for w in model.weights]), autograph=False)

    # -- replica functions -------------------------------------------------------------------------------------

    def _micro_batches(self) -> int | tf.Tensor:
        """Micro-batches in this optimizer step: `accumulation_steps`, or the ramp's at the optimizer's step."""
        if self.batch_ramp is None:
            return self.accumulation_steps
        return self.batch_ramp.micro_batches(self.optimizer.iterations)

    def _gradients_fn(self, batch, scales, micro_batches):
        with tf.GradientTape() as tape:
            outputs = self.model(batch, training=True)
            terms = self.task.terms(batch, outputs)
            loss = self.task.loss(terms, scales) / micro_batches
            scaled_loss = self.optimizer.scale_loss(loss)
        return tape.gradient(scaled_loss, self.train_variables), terms

    def _micro_step(self, batch):
        """Local gradients of this replica's share of the global loss, and the metric sums."""
        context = tf.distribute.get_replica_context()
        # The counts are known from the inputs before the forward pass: one all-reduce makes the loss global.
        counts = tf.unstack(context.all_reduce(tf.distribute.ReduceOp.SUM, self.task.loss_counts(batch)))
        micro_batches = self._micro_batches()
        grads, terms = self._gradients(
            batch,
            self.task.loss_scales(counts),
            micro_batches if isinstance(micro_batches, int) else tf.cast(micro_batches, tf.float32),
        )
        for name in self.task.loss_terms:
            self._sums[name].assign_add(terms[name])
        finite = _all_finite(list(terms.values()))
        self._sums["nonfinite"].assign_add(1.0 - tf.cast(finite, tf.float32))
        mark = tf.logical_and(tf.logical_not(finite), self._first_nonfinite_step < 0)
        self._first_nonfinite_step.assign(tf.where(mark, self.global_step.read_value(), self._first_nonfinite_step))
        return grads

    def _accumulate(self, batch):
        for accumulator, grad in zip(self._accumulators, self._micro_step(batch)):
            accumulator.assign_add(grad)

    def _apply(self, batch):
        grads = self._micro_step(batch)
        if self._accumulators:
            grads = [a.read_value() + g for a, g in zip(self._accumulators, grads)]
            for accumulator in self._accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
        unscale = 1.0 / self.optimizer.dynamic_scale if self._loss_scaling else 1.0
        self._sums["grad_sq_sum"].assign_add(tf.square(tf.linalg.global_norm(_dense(grads)) * unscale))
        self.optimizer.apply_gradients(zip(grads, self.train_variables))

    def _reset(self):
        for variable in self._sums.values():
            variable.assign(0.0)
        self._first_nonfinite_step.assign(-1)

    # -- cross-replica loop ------------------------------------------------------------------------------------

    def _loop_fn(self, num_steps):
        # Traced without autograph (the loops are tf.while_loop, the rest has no tensor-dependent Python): it would
        # convert every function the step calls, model and optimizer included, for half of each graph's tracing.
        def accumulate(i):
            self.strategy.run(self._accumulate_step, (self.input.next_batch(),))
            return i + 1

        def step(i):
            if self.accumulation_steps > 1:  # a loop of 0 iterations would still trace a second forward/backward
                micro_batches = self._micro_batches()
                tf.while_loop(lambda j: j < micro_batches - 1, accumulate, [tf.constant(0)])
            self.strategy.run(self._apply_step, (self.input.next_batch(),))
            self.global_step.assign_add(1)  # the run's step (a Keras 3 optimizer counts only its own)
            return i + 1

        self.strategy.run(self._reset)
        tf.while_loop(lambda i: i < num_steps, step, [tf.constant(0)])

    def build_graph(self) -> None:
        """Traces and optimises the training loop without running a step, e.g. while another model trains."""
        self._loop(tf.constant(0, tf.int32))

    def train(self, num_steps: int | tf.Tensor) -> dict[str, float]:
        """Runs `num_steps` optimizer steps; returns their metrics.

        Raises:
          NonFiniteLossError: a step's loss was NaN/Inf on some replica (naming the first such step); the
            weights it made are in the variables, and nothing is saved here.
        """
        start, first = time.perf_counter(), int(self.optimizer.iterations.numpy())
        self._loop(tf.constant(num_steps, tf.int32))
        sums = {name: float(variable.read_value()) for name, variable in self._sums.items()}
        now = time.perf_counter()
        steps = int(num_steps)
        totals = {k: np.float64(sums[k]) for k in self.task.loss_terms}
        metrics = {k: float(v) for k, v in self.task.metrics(totals).items()}
        metrics["gradient_norm"] = float(np.sqrt(sums["grad_sq_sum"] / steps))
        metrics["learning_rate"] = float(np.asarray(self.optimizer.learning_rate))
        # Sequences, not rows: a packed row holds several.
        metrics["sequences_per_second"] = sums["sequence_count"] / max(now - start, 1e-9)
        micro_batches = (
            self.batch_ramp.micro_batches_between(first, first + steps)
            if self.batch_ramp
            else steps * self.accumulation_steps
        )
        metrics["rows_per_second"] = (
            micro_batches * self.global_batch_size // self.accumulation_steps / max(now - start, 1e-9)
        )
        self.sequences_trained.assign_add(round(sums["sequence_count"]))
        metrics["nonfinite_micro_steps"] = sums["nonfinite"]
        check_finite(int(self.global_step.numpy()), steps, metrics, self.first_nonfinite_step())
        return metrics

    def weights_are_finite(self) -> bool:
        """Whether every model weight is finite (checked before a checkpoint is written)."""
        return bool(self._weights_finite())

    def first_nonfinite_step(self) -> int:
        """The first optimizer step of the last `train` call whose loss was NaN/Inf on a local replica, or -1."""
        marks = [int(v) for v in self.strategy.experimental_local_results(self._first_nonfinite_step)]
        bad = [m for m in marks if m >= 0]
        return min(bad) if bad else -1
