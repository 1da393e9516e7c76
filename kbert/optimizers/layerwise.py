"""Shared machinery of the layer-wise adaptive optimizers (LAMB, LARS).

What LAMB and LARS have in common and Keras 3 lacks:

* exclusion lists (regexes on `variable.path`) resolved once at build into static per-variable flags;
* float32 slots and norms whatever the variable dtype;
* `global_clipnorm` applied to the *all-reduced* gradients (Keras clips each replica's gradients before the
  cross-replica sum, so two replicas would take twice the single-device step);
* schedules and bias correction that count optimizer steps, not gradient-accumulation micro-steps;
* the last step's trust ratio of every variable, kept in one float32 optimizer variable (`trust_ratios`).

The math is `keras.ops` and runs on every Keras backend. What only the TensorFlow backend has (replicas under
`tf.distribute`, slot colocation, `_all_reduce_sum_gradients`, `IndexedSlices`) is used only under it, through
Keras's own strategy attribute and hooks; TensorFlow is imported only there, never with this module.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

DEFAULT_EXCLUDE = ("LayerNorm", "layer_norm", "bias")


def check_non_negative(name: str, value: float | None) -> None:
    """Raises a ValueError naming `name` when `value` is negative (or not a number)."""
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise ValueError(f"`{name}` must be a number >= 0. Received: {name}={value!r}")


def check_unit_interval(name: str, value: float) -> None:
    """Raises a ValueError naming `name` unless 0 <= value < 1."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")


def compile_patterns(name: str, patterns: Iterable[str] | None) -> tuple[str, ...]:
    """Checks that `patterns` is a list of valid regexes; returns them as a tuple of strings."""
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        raise ValueError(
            f"`{name}` must be a list of regexes, not a single string. "
            f"Received: {name}={patterns!r}; pass [{patterns!r}] instead."
        )
    patterns = tuple(patterns)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as error:
            raise ValueError(
                f"`{name}` holds an invalid regex {pattern!r}: {error}. "
                "Patterns are Python regexes searched in `variable.path`."
            ) from None
    return patterns


def path_matches(patterns: Sequence[str], path: str) -> bool:
    """Whether any of the regexes is found in a `variable.path`: how every kbert exclusion list is matched."""
    return any(re.search(pattern, path) for pattern in patterns)


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


def global_norm(tensors) -> Any:
    """‖G‖ over a list of dense tensors, summed as `tf.linalg.global_norm` sums (bit-identical under TF)."""
    return ops.sqrt(ops.sum(ops.stack([sum_of_squares(t) for t in tensors])))


def clip_by_global_norm(tensors, clip_norm: float) -> list:
    """Divides dense tensors by max(‖G‖ / clip_norm, 1); NaN everywhere when ‖G‖ is not finite, as TF's."""
    norm = global_norm(tensors)
    clip = ops.convert_to_tensor(clip_norm, norm.dtype)
    scale = clip * ops.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)
    return [t * scale for t in tensors]


def _learning_rate_argument(learning_rate):
    """Lets integer rates through Keras's float-only check and rejects negative ones."""
    if isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool):
        check_non_negative("learning_rate", learning_rate)
        return float(learning_rate)
    return learning_rate


class LayerwiseOptimizer(keras.optimizers.Optimizer):
    """Base class of `LAMB` and `LARS`; not meant to be used directly.

    Subclasses implement `update_step` with the helpers below and call `_record_trust_ratio`.
    `weight_decay` is applied inside `update_step`, never by Keras's decoupled `_apply_weight_decay`.
    """

    def __init__(
        self,
        learning_rate,
        weight_decay: float,
        exclude_from_weight_decay: Iterable[str] | None,
        exclude_from_layer_adaptation: Iterable[str] | None,
        global_clipnorm: float | None = None,
        **kwargs,
    ):
        check_non_negative("weight_decay", weight_decay)
        check_non_negative("global_clipnorm", global_clipnorm)
        decay_patterns = compile_patterns("exclude_from_weight_decay", exclude_from_weight_decay)
        adaptation_patterns = (
            decay_patterns
            if exclude_from_layer_adaptation is None
            else compile_patterns("exclude_from_layer_adaptation", exclude_from_layer_adaptation)
        )
        super().__init__(
            learning_rate=_learning_rate_argument(learning_rate),
            global_clipnorm=global_clipnorm,
            **kwargs,
        )
        self.weight_decay = float(weight_decay)
        self.exclude_from_weight_decay_patterns = decay_patterns
        self.exclude_from_layer_adaptation_patterns = adaptation_patterns

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        paths = tuple(v.path for v in var_list)
        self._variable_paths = paths
        # Static Python flags: the traced update has no branch on tensors.
        self._decay_flags = tuple(
            self.weight_decay > 0
            and self._use_weight_decay(v)  # private, but Keras's only reader of exclude_from_weight_decay()
            and not path_matches(self.exclude_from_weight_decay_patterns, path)
            for v, path in zip(var_list, paths)
        )
        self._adapt_flags = tuple(not path_matches(self.exclude_from_layer_adaptation_patterns, path) for path in paths)
        # One vector, not a scalar variable each: under jax.jit every optimizer variable is a buffer into and out of
        # the step, and on an H200 BERT-base's 199 scalar ratios and their writes made a LAMB step 2.4x AdamW's, the
        # vector 0.96x (docs/optimizers.md). Entries of variables excluded from adaptation stay 1.0, never written.
        with self._colocated_with(var_list[0] if var_list else None):
            self._trust_ratios = self.add_variable(
                shape=(len(var_list),), initializer="ones", dtype="float32", name="trust_ratios"
            )

    def _add_float32_slots(self, var_list, name: str):
        """One float32 optimizer variable of its shape per model variable."""
        slots = []
        for variable in var_list:
            with self._colocated_with(variable):
                slots.append(
                    self.add_variable(
                        shape=variable.shape,
                        initializer="zeros",
                        dtype="float32",
                        name=f"{variable.path.replace('/', '_')}_{name}",
                    )
                )
        return slots

    def _colocated_with(self, variable):
        """Under TF, places a slot with its variable under the strategy in scope, as Keras's own slots are."""
        if variable is None or not on_tensorflow():
            return contextlib.nullcontext()
        colocate = variable.value if isinstance(variable, keras.Variable) else variable
        # `_distribution_strategy` is set by Keras's TensorFlow optimizer only (tests/test_keras_contract.py).
        return self._distribution_strategy.extended.colocate_vars_with(colocate)

    @property
    def trust_ratios(self) -> dict[str, Any]:
        """The trust ratio each variable's last update used, keyed by `variable.path`.

        1.0 for variables excluded from layer adaptation and before the first step.
        """
        if not self.built:
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
        if not self.built or len(store.keys()) != len(self.variables) - 1 + len(self._variable_paths):
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

    def _variable_flags(self, variable) -> tuple[int, bool, bool]:
        """(index, apply weight decay, apply layer adaptation) of a model variable."""
        index = self._get_variable_index(variable)
        return index, self._decay_flags[index], self._adapt_flags[index]

    def _record_trust_ratio(self, index: int, ratio) -> None:
        """Writes a computed ratio into its entry. The entry is a constant mask, not a scatter: under jit, XLA fuses
        the variables' writes into a few elementwise passes over the vector (two on an H200), not one kernel each."""
        entry = np.arange(len(self._variable_paths)) == index
        ratios = ops.convert_to_tensor(self._trust_ratios)
        self.assign(self._trust_ratios, ops.where(entry, ops.cast(ratio, "float32"), ratios))

    @staticmethod
    def _float32(tensor) -> Any:
        # Sparse gradients become dense here: the layer-wise update and its norms are dense.
        return ops.cast(to_dense(tensor), "float32")

    @staticmethod
    def _norm(tensor) -> Any:
        return ops.sqrt(sum_of_squares(tensor))

    @staticmethod
    def _norm_apart(tensor, build, inputs: Sequence) -> Any:
        """‖tensor‖ for `tensor = build(*inputs)`; under JAX, of `build` rerun on `inputs` behind an XLA barrier.

        Under `jax.jit` XLA merges equal expressions, so a direction read by both its norm and the weight update is
        computed once and, its sqrt and divide being too costly to fuse into both, materialized in between: every
        variable's at once, 437 MB of temporaries on BERT-base, allocated and page-faulted afresh each step. Behind the
        barrier (scalars too, whose broadcasts would be shared as well) the norm's copy is its own and fuses into the
        reduction: one more read of the inputs, no temporary. Elsewhere the one `tensor` serves both (TensorFlow's
        weights stay as they were).
        """
        if not on_jax():
            return LayerwiseOptimizer._norm(tensor)
        import jax  # the JAX backend's; TensorFlow runs never import it

        inputs = [None if x is None else ops.convert_to_tensor(x) for x in inputs]
        return LayerwiseOptimizer._norm(build(*jax.lax.optimization_barrier(inputs)))

    @staticmethod
    def _safe_ratio(numerator, denominator, fallback, low: float = 0.0, high: float | None = None) -> Any:
        """clip(numerator / denominator, low, high) where both are > 0, else `fallback` (no inf or NaN leaks)."""
        valid = ops.logical_and(numerator > 0, denominator > 0)
        ratio = ops.maximum(numerator / ops.where(valid, denominator, 1.0), low)
        if high is not None:
            ratio = ops.minimum(ratio, high)
        return ops.where(valid, ratio, fallback)

    def _get_current_learning_rate(self):
        # Kept private hook: Keras calls a schedule with its micro-step counter and no public hook picks the step;
        # under gradient accumulation the schedule must see optimizer steps (`iterations`). Wrapping the schedule
        # instead would change what `learning_rate`, its setter and get_config hold.
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _apply_weight_decay(self, variables):
        """No-op: weight decay is applied inside `update_step`, once."""
        # Kept private hook: Keras applies its own decoupled decay whenever `weight_decay` is set, which stays the
        # public argument, attribute and config key; the only public off switch, exclude_from_weight_decay(), is
        # the user's (build honours it).

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

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay_patterns),
                "exclude_from_layer_adaptation": list(self.exclude_from_layer_adaptation_patterns),
            }
        )
        return config


def layerwise_optimizer(optimizer) -> LayerwiseOptimizer | None:
    """The LAMB or LARS that `optimizer` is or wraps (a LossScaleOptimizer's `inner_optimizer`), else None."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return inner if isinstance(inner, LayerwiseOptimizer) else None
