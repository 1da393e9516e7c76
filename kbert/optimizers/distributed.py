"""`DistributedMixin`: what every optimizer kbert builds adds to a Keras optimizer, and the one home of the private
Keras hooks kbert overrides.

* `global_clipnorm` applied to the *all-reduced* gradients: Keras clips each replica's gradients before the
  cross-replica sum, so two replicas would take twice the single-device step;
* schedules evaluated at optimizer steps (`iterations`), not gradient-accumulation micro-steps;
* scalars every variable's update shares (`step_constants`) built once per step under `tf.distribute`, passed to
  `update_step` as an argument;
* telemetry: one float32 optimizer variable `trust_ratios` holding, per model variable, the last step's trust ratio
  (LAMB, LARS: `record_trust_ratio`) or the ratio ‖Δw‖ / ‖w‖ of the last update (`update_with_ratio`, AdamW);
* weight decay left to `update_step` where a subclass applies it there (`decays_in_update_step`).

The math is `keras.ops` and runs on every Keras backend. What only the TensorFlow backend has (replicas under
`tf.distribute`, slot colocation, `_all_reduce_sum_gradients`, `IndexedSlices`) is used only under it, through
Keras's own strategy attribute and hooks; TensorFlow is imported only there, never with this module.

Example:

```python
class ClippedSGD(DistributedMixin, keras.optimizers.SGD):
    pass  # global_clipnorm now clips after the all-reduce; SGD's numbers otherwise
```
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import ops


def on_tensorflow() -> bool:
    """Whether Keras runs on the TensorFlow backend (replicas, `tf.distribute`), where the TF-only paths run."""
    return keras.backend.backend() == "tensorflow"


def on_jax() -> bool:
    """Whether Keras runs on the JAX backend, where a training step is one XLA program (`jax.jit`)."""
    return keras.backend.backend() == "jax"


def to_dense(tensor) -> Any:
    """A gradient as a dense tensor: TF's IndexedSlices summed into their rows (repeated rows added)."""
    if on_tensorflow():
        import tensorflow as tf  # IndexedSlices are TF's; keras.ops.convert_to_tensor keeps them sparse

        return tf.convert_to_tensor(tensor)
    return ops.convert_to_tensor(tensor, sparse=False)


def sum_of_squares(tensor) -> Any:
    """Σ x², in one pass over `tensor` where the backend has a fused op.

    Under TensorFlow `2·tf.nn.l2_loss` reads the tensor once, where `sum(square(x))` without XLA first writes x²
    out in full; both give the same bits (eager, graph and XLA, checked on BERT shapes). Under jit, the other
    backends fuse the square into the sum themselves.
    """
    if on_tensorflow():
        import tensorflow as tf  # the TensorFlow backend's own; other backends never import it

        return 2.0 * tf.nn.l2_loss(tensor)
    return ops.sum(ops.square(tensor))


def norm(tensor) -> Any:
    """‖tensor‖ (`sum_of_squares`)."""
    return ops.sqrt(sum_of_squares(tensor))


def global_norm(tensors) -> Any:
    """‖G‖ over a list of dense tensors, summed as `tf.linalg.global_norm` sums (bit-identical under TF)."""
    return ops.sqrt(ops.sum(ops.stack([sum_of_squares(t) for t in tensors])))


def clip_by_global_norm(tensors, clip_norm: float) -> list:
    """Divides dense tensors by max(‖G‖ / clip_norm, 1); NaN everywhere when ‖G‖ is not finite, as TF's."""
    total = global_norm(tensors)
    clip = ops.convert_to_tensor(clip_norm, total.dtype)
    scale = clip * ops.minimum(1.0 / total, 1.0 / clip) + (total - total)
    return [t * scale for t in tensors]


def safe_ratio(numerator, denominator, fallback, low: float = 0.0, high: float | None = None) -> Any:
    """clip(numerator / denominator, low, high) where both are > 0, else `fallback` (no inf or NaN leaks)."""
    valid = ops.logical_and(numerator > 0, denominator > 0)
    ratio = ops.maximum(numerator / ops.where(valid, denominator, 1.0), low)
    if high is not None:
        ratio = ops.minimum(ratio, high)
    return ops.where(valid, ratio, fallback)


class DistributedMixin:
    """Mixin for a `keras.optimizers.Optimizer` subclass (listed before it): replica-correct `global_clipnorm`,
    schedules at optimizer steps, once-per-step scalars and per-variable ratio telemetry (module docstring).

    Subclasses set `decays_in_update_step` (their `update_step` applies `weight_decay`, so Keras's decoupled
    decay is skipped) and `records_ratios` (build keeps the `trust_ratios` vector), and may override
    `step_constants`.
    """

    decays_in_update_step: bool = False
    records_ratios: bool = False

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._variable_paths = tuple(v.path for v in var_list)
        if not self.records_ratios:
            return
        # One vector, not a scalar variable each: under jax.jit every optimizer variable is a buffer into and out of
        # the step, and on an H200 BERT-base's 199 scalar ratios and their writes made a LAMB step 2.4x AdamW's, the
        # vector 0.96x (docs/results/optimizers.md). Entries never written (variables not adapted) stay 1.0.
        with self._colocated_with(var_list[0] if var_list else None):
            self._trust_ratios = self.add_variable(
                shape=(len(var_list),), initializer="ones", dtype="float32", name="trust_ratios"
            )

    def _colocated_with(self, variable):
        """Under TF, places a slot with its variable under the strategy in scope, as Keras's own slots are."""
        if variable is None or not on_tensorflow():
            return contextlib.nullcontext()
        colocate = variable.value if isinstance(variable, keras.Variable) else variable
        # `_distribution_strategy` is set by Keras's TensorFlow optimizer only (tests/test_keras_contract.py).
        return self._distribution_strategy.extended.colocate_vars_with(colocate)

    # -- once-per-step scalars ---------------------------------------------------------------------------------

    def step_constants(self) -> tuple:
        """Scalars every variable's update shares this step (LAMB: its bias correction); none by default. A subclass
        that returns some takes them as `update_step(gradient, variable, learning_rate, constants=())`: passed once
        per step under `tf.distribute`, empty elsewhere (jit folds the repeated scalars itself)."""
        return ()

    # -- telemetry ---------------------------------------------------------------------------------------------

    @property
    def trust_ratios(self) -> dict[str, Any]:
        """Each variable's last ratio (LAMB/LARS: trust ratio; AdamW: ‖Δw‖ / ‖w‖), keyed by `variable.path`.

        1.0 for variables excluded from layer adaptation and before the first step; {} when not recorded.
        """
        if not self.built or not self.records_ratios:
            return {}
        ratios = ops.convert_to_tensor(self._trust_ratios)  # a tensor read now, not the variable
        return {path: ratios[index] for index, path in enumerate(self._variable_paths)}

    def trust_ratio_paths(self) -> tuple[str, list[str]]:
        """(the path of the `trust_ratios` vector, the path each entry had as a scalar optimizer variable of its own,
        the layout before 2026-12-04), for reading checkpoints written in that layout."""
        folder = self._trust_ratios.path.rpartition("/")[0]
        scalars = [f"{folder}/{path.replace('/', '_')}_trust_ratio" for path in self._variable_paths]
        return self._trust_ratios.path, scalars

    def load_own_variables(self, store):
        """Loads the optimizer state of a `.keras` file, also one saved with a scalar variable per trust ratio (kbert
        before 2026-12-04; `trust_ratio_paths`): its scalars fill the vector, where Keras would skip the whole state
        (another variable count) with a warning."""
        # Another count than the scalar layout's: the present layout, or a mismatch Keras reports; read once, by Keras.
        if (
            not self.built
            or not self.records_ratios
            or len(store.keys()) != len(self.variables) - 1 + len(self._variable_paths)
        ):
            return super().load_own_variables(store)
        count, first = (
            len(self._variable_paths),
            next(i for i, v in enumerate(self.variables) if v is self._trust_ratios),
        )
        values = [np.asarray(store[str(i)]) for i in range(len(store.keys()))]
        if all(v.shape == () for v in values[first : first + count]):
            store = {
                str(i): v
                for i, v in enumerate(
                    values[:first] + [np.stack(values[first : first + count])] + values[first + count :]
                )
            }
        super().load_own_variables(store)

    def record_trust_ratio(self, index: int, ratio) -> None:
        """Writes a computed ratio into its entry. The entry is a constant mask, not a scatter: under jit, XLA fuses
        the variables' writes into a few elementwise passes over the vector (two on an H200), not one kernel each."""
        entry = np.arange(len(self._variable_paths)) == index
        ratios = ops.convert_to_tensor(self._trust_ratios)
        self.assign(self._trust_ratios, ops.where(entry, ops.cast(ratio, "float32"), ratios))

    def update_with_ratio(self, update: Callable, gradient, variable, learning_rate) -> None:
        """Runs `update(gradient, variable, learning_rate)` (an `update_step`), recording ‖Δw‖ / ‖w‖ when
        `records_ratios` (0 where ‖w‖ = 0). Costs a copy of w and two more reads of it."""
        if not self.records_ratios:
            return update(gradient, variable, learning_rate)
        # ops.copy: a read of the value now (TF's convert_to_tensor of a variable is the variable itself).
        before = ops.cast(ops.copy(variable), "float32")
        update(gradient, variable, learning_rate)
        after = ops.cast(ops.copy(variable), "float32")
        index = self._get_variable_index(variable)
        self.record_trust_ratio(index, safe_ratio(norm(after - before), norm(before), 0.0))

    # -- private Keras hooks, each checked by tests/test_keras_contract.py --------------------------------------

    def _get_current_learning_rate(self):
        # Kept private hook: Keras calls a schedule with its micro-step counter and no public hook picks the step;
        # under gradient accumulation the schedule must see optimizer steps (`iterations`). Wrapping the schedule
        # instead would change what `learning_rate`, its setter and get_config hold.
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _apply_weight_decay(self, variables):
        # Kept private hook: Keras applies its own decoupled decay whenever `weight_decay` is set, which stays the
        # public argument, attribute and config key; the only public off switch, exclude_from_weight_decay(), is
        # the user's. A subclass whose update_step applies the decay (LAMB, LARS) turns Keras's off here.
        if not self.decays_in_update_step:
            super()._apply_weight_decay(variables)

    def _clip_gradients(self, grads):
        # Kept private hook, every backend: Keras's `_backend_apply_gradients` (base, JAX and TF alike) calls it on
        # each step's gradients, after averaging accumulated ones, before `_backend_update_step`. Under TF those are
        # one replica's gradients: Keras's global_clipnorm would clip them before the all-reduce (two replicas would
        # take twice the single-device step), so TF clips in _all_reduce_sum_gradients instead. On the other
        # backends gradients are already global (no replicas; JAX shards arrays, it does not split the sum), and
        # this is the last hook that sees them all before any variable is updated: they are clipped here.
        if not self.global_clipnorm:
            return super()._clip_gradients(grads)
        if on_tensorflow():
            return grads
        return self._clip_by_global_norm(grads)

    def _clip_by_global_norm(self, grads) -> list:
        """Dense `grads` divided by max(‖G‖ / global_clipnorm, 1): the NVLAMB pre-normalisation, every backend."""
        return clip_by_global_norm([to_dense(g) for g in grads], self.global_clipnorm)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Sums gradients over replicas, then divides them by max(global_norm / global_clipnorm, 1)."""
        # Kept private hook (TF backend only, which alone calls it): the only code that sees the all-reduced
        # gradients, in replica context, before any variable is updated.
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self.global_clipnorm:
            return grads_and_vars
        kept = [(g, v) for g, v in grads_and_vars if g is not None]
        clipped = iter(self._clip_by_global_norm([g for g, _ in kept]))
        return [(g if g is None else next(clipped), v) for g, v in grads_and_vars]

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        # Kept private hook (TF backend only, which alone calls it): the one place that runs once per step, after the
        # all-reduce, around the per-variable updates. Building `step_constants` here rather than in update_step
        # makes LAMB's training graph ~20% smaller (~4 s less to build per graph, every MSLT stage). Public `apply`
        # runs per replica before the all-reduce, so its values could reach update_step only through shared state;
        # here they are arguments of the same per-variable loop as Keras's (tests/test_keras_contract.py: both agree).
        constants = self.step_constants()
        if not constants:
            return super()._distributed_tf_update_step(distribution, grads_and_vars, learning_rate)

        def update(variable, gradient, learning_rate, constants):
            return self.update_step(gradient, variable, learning_rate, constants)

        for gradient, variable in grads_and_vars:
            distribution.extended.update(variable, update, args=(gradient, learning_rate, constants), group=False)


def ratio_optimizer(optimizer) -> DistributedMixin | None:
    """The kbert optimizer that `optimizer` is or wraps (a LossScaleOptimizer's `inner_optimizer`) when it records
    per-variable ratios (`trust_ratios`), else None."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return inner if isinstance(inner, DistributedMixin) and inner.records_ratios else None
