"""Shared machinery of the layer-wise adaptive optimizers (LAMB, LARS).

What LAMB and LARS have in common and Keras 3 lacks:

* exclusion lists (regexes on `variable.path`) resolved once at build into static per-variable flags;
* float32 slots and norms whatever the variable dtype;
* `global_clipnorm` applied to the *all-reduced* gradients (Keras clips each replica's gradients before the
  cross-replica sum, so two replicas would take twice the single-device step);
* schedules and bias correction that count optimizer steps, not gradient-accumulation micro-steps;
* the last step's trust ratio of every variable, kept in non-trainable float32 variables (`trust_ratios`).

This module targets the TensorFlow backend, the only one kbert supports.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import keras
import tensorflow as tf

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
        self._adapt_flags = tuple(
            not path_matches(self.exclude_from_layer_adaptation_patterns, path) for path in paths
        )
        self._trust_ratio_variables = self._add_float32_slots(var_list, "trust_ratio", scalar=True)

    def _add_float32_slots(self, var_list, name: str, scalar: bool = False):
        """One float32 optimizer variable per model variable (of its shape, or a scalar)."""
        slots = []
        for variable in var_list:
            colocate = variable.value if isinstance(variable, keras.Variable) else variable
            with self._distribution_strategy.extended.colocate_vars_with(colocate):
                slots.append(
                    self.add_variable(
                        shape=() if scalar else variable.shape,
                        initializer="ones" if scalar else "zeros",
                        dtype="float32",
                        name=f"{variable.path.replace('/', '_')}_{name}",
                    )
                )
        return slots

    @property
    def trust_ratios(self) -> dict[str, tf.Tensor]:
        """The trust ratio each variable's last update used, keyed by `variable.path`.

        1.0 for variables excluded from layer adaptation and before the first step.
        """
        if not self.built:
            return {}
        return {
            path: tf.convert_to_tensor(variable)
            for path, variable in zip(self._variable_paths, self._trust_ratio_variables)
        }

    def _variable_flags(self, variable) -> tuple[int, bool, bool]:
        """(index, apply weight decay, apply layer adaptation) of a model variable."""
        index = self._get_variable_index(variable)
        return index, self._decay_flags[index], self._adapt_flags[index]

    def _record_trust_ratio(self, index: int, ratio) -> None:
        self.assign(self._trust_ratio_variables[index], tf.cast(ratio, tf.float32))

    @staticmethod
    def _float32(tensor) -> tf.Tensor:
        # IndexedSlices become dense here (duplicate rows summed): the layer-wise update and its norms are dense.
        return tf.cast(tf.convert_to_tensor(tensor), tf.float32)

    @staticmethod
    def _norm(tensor) -> tf.Tensor:
        # l2_loss is one fused pass (sum of squares / 2); tf.norm is two.
        return tf.sqrt(2.0 * tf.nn.l2_loss(tensor))

    @staticmethod
    def _safe_ratio(numerator, denominator, fallback, low: float = 0.0, high: float | None = None) -> tf.Tensor:
        """clip(numerator / denominator, low, high) where both are > 0, else `fallback` (no inf or NaN leaks)."""
        valid = tf.logical_and(numerator > 0, denominator > 0)
        ratio = tf.maximum(numerator / tf.where(valid, denominator, 1.0), low)
        if high is not None:
            ratio = tf.minimum(ratio, high)
        return tf.where(valid, ratio, fallback)

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
        # Kept private hook: Keras's global_clipnorm clips each replica's gradients before the all-reduce (two
        # replicas would take twice the single-device step), and keeping `global_clipnorm` as the public name means
        # Keras must be told not to; the clipping happens in _all_reduce_sum_gradients.
        if self.global_clipnorm:
            return grads
        return super()._clip_gradients(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Sums gradients over replicas, then divides them by max(global_norm / global_clipnorm, 1)."""
        # Kept private hook (TF backend): the only code that sees the all-reduced gradients, in replica context,
        # before any variable is updated.
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self.global_clipnorm:
            return grads_and_vars
        grads = [None if g is None else tf.convert_to_tensor(g) for g, _ in grads_and_vars]
        clipped, _ = tf.clip_by_global_norm(grads, self.global_clipnorm)
        return [(g, v) for g, (_, v) in zip(clipped, grads_and_vars)]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay_patterns),
                "exclude_from_layer_adaptation": list(self.exclude_from_layer_adaptation_patterns),
            }
        )
        return config
