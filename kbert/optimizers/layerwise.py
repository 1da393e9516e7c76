"""Shared machinery of the layer-wise adaptive optimizers (LAMB, LARS).

What LAMB and LARS have in common and Keras 3 lacks:

* exclusion lists (regexes on `variable.path`) resolved once at build into static per-variable flags;
* float32 slots and norms whatever the variable dtype;
* weight decay applied inside `update_step` (Keras's decoupled decay off);
* the last step's trust ratio of every variable recorded (`DistributedMixin.record_trust_ratio`).

Clipping after the all-reduce, schedules at optimizer steps and the private Keras hooks are `DistributedMixin`'s
(kbert/optimizers/distributed.py), shared with kbert's AdamW.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import keras
from keras import ops

from kbert.optimizers.distributed import (  # noqa: F401 (re-exported: kbert's helpers were imported from here)
    DistributedMixin,
    clip_by_global_norm,
    global_norm,
    norm,
    on_jax,
    on_tensorflow,
    safe_ratio,
    sum_of_squares,
    to_dense,
)

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


def _learning_rate_argument(learning_rate):
    """Lets integer rates through Keras's float-only check and rejects negative ones."""
    if isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool):
        check_non_negative("learning_rate", learning_rate)
        return float(learning_rate)
    return learning_rate


class LayerwiseOptimizer(DistributedMixin, keras.optimizers.Optimizer):
    """Base class of `LAMB` and `LARS`; not meant to be used directly.

    Subclasses implement `update_step` with the helpers below and call `record_trust_ratio`.
    `weight_decay` is applied inside `update_step`, never by Keras's decoupled decay.
    """

    decays_in_update_step = True
    records_ratios = True

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
        super().build(var_list)  # Keras's variables, then the `trust_ratios` vector (DistributedMixin)
        paths = self._variable_paths
        # Static Python flags: the traced update has no branch on tensors.
        self._decay_flags = tuple(
            self.weight_decay > 0
            and self._use_weight_decay(v)  # private, but Keras's only reader of exclude_from_weight_decay()
            and not path_matches(self.exclude_from_weight_decay_patterns, path)
            for v, path in zip(var_list, paths)
        )
        self._adapt_flags = tuple(not path_matches(self.exclude_from_layer_adaptation_patterns, path) for path in paths)

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

    def _variable_flags(self, variable) -> tuple[int, bool, bool]:
        """(index, apply weight decay, apply layer adaptation) of a model variable."""
        index = self._get_variable_index(variable)
        return index, self._decay_flags[index], self._adapt_flags[index]

    @staticmethod
    def _float32(tensor) -> Any:
        # Sparse gradients become dense here: the layer-wise update and its norms are dense.
        return ops.cast(to_dense(tensor), "float32")

    _norm = staticmethod(norm)
    _safe_ratio = staticmethod(safe_ratio)

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
            return norm(tensor)
        import jax  # the JAX backend's; TensorFlow runs never import it

        inputs = [None if x is None else ops.convert_to_tensor(x) for x in inputs]
        return norm(build(*jax.lax.optimization_barrier(inputs)))

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
