"""LARS: layer-wise adaptive rate scaling (You, Gitman and Ginsburg, 2017, https://arxiv.org/abs/1708.03888)."""

from __future__ import annotations

from collections.abc import Iterable

import keras
from keras import ops

from kbert.optimizers.layerwise import (
    DEFAULT_EXCLUDE,
    LayerwiseOptimizer,
    check_non_negative,
    check_unit_interval,
)


@keras.saving.register_keras_serializable(package="kbert")
class LARS(LayerwiseOptimizer):
    """LARS with momentum, as Model Garden's `LARS`, for Keras 3.

    Per variable w with gradient g (classic momentum, the default):

        g' = g + λ·w                                  (λ only where weight decay applies)
        φ  = η·‖w‖ / (‖g'‖ + ε) if ‖w‖ > 0 and ‖g'‖ + ε > 0, else η
        u  = μ·u + lr·φ·g';  w ← w − u                (Nesterov: w ← w − (μ·u + lr·φ·g'))

    With `classic_momentum=False` the momentum runs on g' and φ is computed on the momentum update d:
    u = μ·u + g', d = u (Nesterov: μ·u + g'), φ = η·‖w‖ / (‖d‖ + ε), w ← w − lr·φ·d.

    **Zero-norm rule.** Where ‖w‖ or ‖g'‖ is 0 (a zero-initialised variable, a zero gradient), φ = η, i.e. the
    ratio ‖w‖/‖g'‖ is taken as 1. Model Garden uses φ = 1 there, which gives a zero-initialised variable a
    step 1/η = 1000 times larger than its adapted neighbours. Variables excluded from layer adaptation use
    φ = 1 (plain momentum SGD at `learning_rate`), as in Model Garden.

    **LARC clipping** (`larc_clip=True`, NVIDIA apex `LARC(clip=True)`): φ is replaced by min(φ / lr, 1), so a
    variable's local rate lr·φ never exceeds the global rate.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`.
        momentum: μ in [0, 1).
        nesterov: use Nesterov momentum.
        eeta: η, the trust coefficient.
        epsilon: added to the gradient norm in φ's denominator.
        weight_decay: λ, L2 decay added to the gradient.
        classic_momentum: scale the rate before the momentum (True) or the momentum update (False).
        exclude_from_weight_decay: regexes searched in `variable.path`. Default: LayerNorm/layer_norm/bias.
        exclude_from_layer_adaptation: regexes; defaults to `exclude_from_weight_decay`.
        larc_clip: clip the local rate at the global rate (LARC).
        global_clipnorm: pre-normalise gradients by their global norm, taken after the cross-replica sum.
        **kwargs: other `keras.optimizers.Optimizer` arguments.

    Example:

    ```python
    model.compile(optimizer=kbert.optimizers.LARS(1.0, weight_decay=1e-4), loss="mse")
    ```
    """

    def __init__(
        self,
        learning_rate=0.01,
        momentum: float = 0.9,
        nesterov: bool = False,
        eeta: float = 0.001,
        epsilon: float = 0.0,
        weight_decay: float = 0.0,
        classic_momentum: bool = True,
        exclude_from_weight_decay: Iterable[str] | None = DEFAULT_EXCLUDE,
        exclude_from_layer_adaptation: Iterable[str] | None = None,
        larc_clip: bool = False,
        name: str = "lars",
        **kwargs,
    ):
        check_unit_interval("momentum", momentum)
        check_non_negative("eeta", eeta)
        check_non_negative("epsilon", epsilon)
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            name=name,
            **kwargs,
        )
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.eeta = float(eeta)
        self.epsilon = float(epsilon)
        self.classic_momentum = bool(classic_momentum)
        self.larc_clip = bool(larc_clip)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums = self._add_float32_slots(var_list, "momentum")

    def _trust_ratio(self, index: int, adapt: bool, weights, direction, lr):
        if not adapt:
            return ops.ones((), "float32")
        ratio = self.eeta * self._safe_ratio(self._norm(weights), self._norm(direction) + self.epsilon, 1.0)
        if self.larc_clip:
            ratio = ops.minimum(ops.divide_no_nan(ratio, lr), 1.0)
        self.record_trust_ratio(index, ratio)
        return ratio

    def update_step(self, gradient, variable, learning_rate):
        index, decay, adapt = self._variable_flags(variable)
        g = self._float32(gradient)
        w = ops.cast(variable, "float32")
        lr = ops.cast(learning_rate, "float32")
        u = self._momentums[index]
        if decay:
            g = g + self.weight_decay * w

        if self.classic_momentum:
            scaled_lr = lr * self._trust_ratio(index, adapt, w, g, lr)
            u_t = self.momentum * u + scaled_lr * g
            step = self.momentum * u_t + scaled_lr * g if self.nesterov else u_t
        else:
            u_t = self.momentum * u + g
            direction = self.momentum * u_t + g if self.nesterov else u_t
            step = lr * self._trust_ratio(index, adapt, w, direction, lr) * direction
        self.assign(u, u_t)
        self.assign(variable, ops.cast(w - step, variable.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "nesterov": self.nesterov,
                "eeta": self.eeta,
                "epsilon": self.epsilon,
                "classic_momentum": self.classic_momentum,
                "larc_clip": self.larc_clip,
            }
        )
        return config
