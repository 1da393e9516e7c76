"""Float64 NumPy references of kbert's LAMB and LARS, written from the equations in docs/optimizers.md."""

import re

import numpy as np


def _matches(patterns, name):
    return any(re.search(p, name) for p in patterns)


def _prenormalize(grads, global_clipnorm):
    if not global_clipnorm:
        return grads
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    return [g / max(norm / global_clipnorm, 1.0) for g in grads]


def lamb(
    weights,
    grad_steps,
    names,
    lr=1e-2,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    weight_decay=0.01,
    weight_decay_mode="lamb",
    exclude_from_weight_decay=("LayerNorm", "layer_norm", "bias"),
    exclude_from_layer_adaptation=None,
    bias_correction=True,
    always_adapt=False,
    min_trust_ratio=0.0,
    max_trust_ratio=None,
    global_clipnorm=None,
):
    """Runs LAMB over `grad_steps` (a list of per-step gradient lists); `lr` is a float or a function of t-1."""
    if exclude_from_layer_adaptation is None:
        exclude_from_layer_adaptation = exclude_from_weight_decay
    w = [np.asarray(x, np.float64) for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    ratios = []
    for t, grads in enumerate(grad_steps, start=1):
        rate = lr(t - 1) if callable(lr) else lr
        grads = _prenormalize([np.asarray(g, np.float64) for g in grads], global_clipnorm)
        ratios = []
        for i, (g, name) in enumerate(zip(grads, names)):
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            m_hat, v_hat = m[i], v[i]
            if bias_correction:
                m_hat, v_hat = m[i] / (1 - beta_1**t), v[i] / (1 - beta_2**t)
            r = m_hat / (np.sqrt(v_hat) + epsilon)
            decay = weight_decay > 0 and not _matches(exclude_from_weight_decay, name)
            if decay and weight_decay_mode == "decoupled":
                w[i] = w[i] * (1 - rate * weight_decay)
            elif decay:
                r = r + weight_decay * w[i]
            phi = 1.0
            if always_adapt or not _matches(exclude_from_layer_adaptation, name):
                w_norm, r_norm = np.linalg.norm(w[i]), np.linalg.norm(r)
                if w_norm > 0 and r_norm > 0:
                    phi = max(w_norm / r_norm, min_trust_ratio)
                    phi = phi if max_trust_ratio is None else min(phi, max_trust_ratio)
            ratios.append(phi)
            w[i] = w[i] - rate * phi * r
    return w, ratios


def lars(
    weights,
    grad_steps,
    names,
    lr=0.5,
    momentum=0.9,
    nesterov=False,
    eeta=0.001,
    epsilon=0.0,
    weight_decay=0.0,
    classic_momentum=True,
    exclude_from_weight_decay=("LayerNorm", "layer_norm", "bias"),
    exclude_from_layer_adaptation=None,
    larc_clip=False,
    global_clipnorm=None,
):
    """Runs LARS (kbert's zero-norm rule: φ = η where ‖w‖ or the direction's norm is 0)."""
    if exclude_from_layer_adaptation is None:
        exclude_from_layer_adaptation = exclude_from_weight_decay
    w = [np.asarray(x, np.float64) for x in weights]
    u = [np.zeros_like(x) for x in w]
    ratios = []

    def trust_ratio(name, weights_i, direction, rate):
        if _matches(exclude_from_layer_adaptation, name):
            return 1.0
        w_norm, d_norm = np.linalg.norm(weights_i), np.linalg.norm(direction) + epsilon
        phi = eeta * (w_norm / d_norm if w_norm > 0 and d_norm > 0 else 1.0)
        return min(phi / rate, 1.0) if larc_clip else phi

    for t, grads in enumerate(grad_steps, start=1):
        rate = lr(t - 1) if callable(lr) else lr
        grads = _prenormalize([np.asarray(g, np.float64) for g in grads], global_clipnorm)
        ratios = []
        for i, (g, name) in enumerate(zip(grads, names)):
            if weight_decay > 0 and not _matches(exclude_from_weight_decay, name):
                g = g + weight_decay * w[i]
            if classic_momentum:
                phi = trust_ratio(name, w[i], g, rate)
                u[i] = momentum * u[i] + rate * phi * g
                step = momentum * u[i] + rate * phi * g if nesterov else u[i]
            else:
                u[i] = momentum * u[i] + g
                direction = momentum * u[i] + g if nesterov else u[i]
                phi = trust_ratio(name, w[i], direction, rate)
                step = rate * phi * direction
            ratios.append(phi)
            w[i] = w[i] - step
    return w, ratios
