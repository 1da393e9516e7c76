"""LAMB: layer-wise adaptive moments (You et al., 2019, https://arxiv.org/abs/1904.00962)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import keras
from keras import ops

from kbert.optimizers.layerwise import (
    DEFAULT_EXCLUDE,
    LayerwiseOptimizer,
    check_non_negative,
    check_unit_interval,
)

WEIGHT_DECAY_MODES = ("lamb", "decoupled")


def _one_minus_power(beta: float, step):
    """1 − β^t without float32 cancellation: 1 − float32(0.999)² is 3e-5 off, −expm1(t·log β) is exact."""
    if beta == 0.0:
        return ops.ones_like(step)
    return -ops.expm1(step * math.log(beta))


def _direction(m, v, w, m_scale, epsilon, weight_decay):
    """m̂ / (√v̂ + ε) from `step_constants`'s scalars, plus λ·w unless `weight_decay` is None."""
    update = (m * m_scale) / (ops.sqrt(v) + epsilon)
    return update if weight_decay is None else update + weight_decay * w


@keras.saving.register_keras_serializable(package="kbert")
class LAMB(LayerwiseOptimizer):
    """LAMB optimizer as in the paper, Model Garden and TF Addons, for Keras 3.

    Per variable w with gradient g, at optimizer step t:

        m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
        r = m̂ / (√v̂ + ε) (+ λ·w in 'lamb' mode)     m̂, v̂ bias-corrected when `bias_correction`
        φ = clip(‖w‖ / ‖r‖, min_trust_ratio, max_trust_ratio) if both norms > 0 else 1
        w ← w − lr·φ·r

    In 'decoupled' mode the decay is applied first, outside the trust ratio, as Keras's `Lamb` does:
    w ← w·(1 − lr·λ), then the step above without λ·w. φ = 1 for variables excluded from layer adaptation
    unless `always_adapt` (NVLAMB). Slots and norms are float32 whatever the variable dtype.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule` (evaluated at optimizer
            steps, also under gradient accumulation).
        beta_1, beta_2: moment decay rates in [0, 1).
        epsilon: added to √v̂.
        weight_decay: λ, >= 0.
        weight_decay_mode: 'lamb' (λ·w inside the trust ratio) or 'decoupled' (outside, Keras `Lamb` style).
        exclude_from_weight_decay: regexes searched in `variable.path`; matching variables get no decay.
        exclude_from_layer_adaptation: regexes; matching variables get φ = 1. Defaults to
            `exclude_from_weight_decay`.
        bias_correction: divide the moments by (1 − β^t).
        always_adapt: apply φ to every variable, ignoring `exclude_from_layer_adaptation` (NVLAMB).
        min_trust_ratio, max_trust_ratio: bounds on φ where it is computed (None: unbounded above).
        global_clipnorm: divide the gradients by max(‖g‖_global / global_clipnorm, 1), with the global norm
            taken over the *all-reduced* gradients (NVLAMB pre-normalisation; independent of replica count).
        **kwargs: other `keras.optimizers.Optimizer` arguments (`gradient_accumulation_steps`, `clipnorm`,
            `use_ema`, `loss_scale_factor`, `name`, ...).

    Example:

    ```python
    model.compile(optimizer=kbert.optimizers.LAMB(1e-3, weight_decay=0.01), loss="mse")
    model.fit(x, y)
    model.optimizer.trust_ratios  # {'dense/kernel': <tensor 0.87>, 'dense/bias': <tensor 1.0>}
    ```
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        weight_decay: float = 0.01,
        weight_decay_mode: str = "lamb",
        exclude_from_weight_decay: Iterable[str] | None = DEFAULT_EXCLUDE,
        exclude_from_layer_adaptation: Iterable[str] | None = None,
        bias_correction: bool = True,
        always_adapt: bool = False,
        min_trust_ratio: float = 0.0,
        max_trust_ratio: float | None = None,
        name: str = "lamb",
        **kwargs,
    ):
        check_unit_interval("beta_1", beta_1)
        check_unit_interval("beta_2", beta_2)
        check_non_negative("epsilon", epsilon)
        check_non_negative("min_trust_ratio", min_trust_ratio)
        check_non_negative("max_trust_ratio", max_trust_ratio)
        if max_trust_ratio is not None and max_trust_ratio < min_trust_ratio:
            raise ValueError(f"`max_trust_ratio` ({max_trust_ratio}) must be >= `min_trust_ratio` ({min_trust_ratio}).")
        if weight_decay_mode not in WEIGHT_DECAY_MODES:
            raise ValueError(
                f"`weight_decay_mode` must be one of {WEIGHT_DECAY_MODES}. Received: {weight_decay_mode!r}"
            )
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            name=name,
            **kwargs,
        )
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.weight_decay_mode = weight_decay_mode
        self.bias_correction = bool(bias_correction)
        self.always_adapt = bool(always_adapt)
        self.min_trust_ratio = float(min_trust_ratio)
        self.max_trust_ratio = None if max_trust_ratio is None else float(max_trust_ratio)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums = self._add_float32_slots(var_list, "momentum")
        self._velocities = self._add_float32_slots(var_list, "velocity")

    def update_step(self, gradient, variable, learning_rate, constants: tuple = ()):
        """`constants`: this step's `step_constants()`, computed here when not given (Keras's own loop)."""
        index, decay, adapt = self._variable_flags(variable)
        g = self._float32(gradient)
        w = ops.cast(variable, "float32")
        lr = ops.cast(learning_rate, "float32")
        m, v = self._momentums[index], self._velocities[index]

        # In-place moment updates and scalar-folded bias correction keep the op count (memory passes) low:
        # m̂ / (√v̂ + ε) = m·(√c2 / c1) / (√v + ε·√c2) with c = 1 − β^t.
        self.assign_add(m, (g - m) * (1.0 - self.beta_1))
        self.assign_add(v, (ops.square(g) - v) * (1.0 - self.beta_2))
        decoupled = decay and self.weight_decay_mode == "decoupled"
        m_scale, epsilon = constants or self.step_constants()
        direction = (m, v, w, m_scale, epsilon, self.weight_decay if decay and not decoupled else None)
        update = _direction(*direction)

        # Decoupled decay shrinks w before the trust ratio: ‖w·(1 − lr·λ)‖ is a scalar rescale of ‖w‖.
        w_scale = 1.0 - lr * self.weight_decay if decoupled else ops.ones((), "float32")
        rate = lr
        if adapt or self.always_adapt:
            update_norm = self._norm_apart(update, _direction, direction)
            ratio = self._safe_ratio(
                w_scale * self._norm(w), update_norm, 1.0, self.min_trust_ratio, self.max_trust_ratio
            )
            self.record_trust_ratio(index, ratio)
            rate = lr * ratio
        delta = rate * update
        if decoupled:
            delta = delta + (lr * self.weight_decay) * w
        self.assign_sub(variable, delta)

    def step_constants(self) -> tuple:
        """(m scale, epsilon) with Adam's bias correction folded in: m̂ / (√v̂ + ε) = m·s / (√v + ε'); built once
        per step under `tf.distribute` (`DistributedMixin`)."""
        if not self.bias_correction:
            return ops.ones((), "float32"), ops.convert_to_tensor(self.epsilon, "float32")
        step = ops.cast(self.iterations + 1, "float32")
        root_c2 = ops.sqrt(_one_minus_power(self.beta_2, step))
        return root_c2 / _one_minus_power(self.beta_1, step), self.epsilon * root_c2

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "weight_decay_mode": self.weight_decay_mode,
                "bias_correction": self.bias_correction,
                "always_adapt": self.always_adapt,
                "min_trust_ratio": self.min_trust_ratio,
                "max_trust_ratio": self.max_trust_ratio,
            }
        )
        return config
