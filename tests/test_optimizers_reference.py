"""kbert LAMB and LARS against float64 NumPy references (tests/optimizer_reference.py), every flag, 12 steps.

Runs on the Keras backend KERAS_BACKEND selects (tools/test.sh runs it under TensorFlow and JAX): under TensorFlow
the embedding gradients are IndexedSlices with a repeated row, under JAX the same gradients dense.
"""

import keras
import numpy as np
import optimizer_reference
import pytest
from optimizer_steps import BACKEND, traced_step

from kbert.optimizers import LAMB, LARS, PolynomialWarmup

STEPS = 12
SHAPES = {
    "dense_kernel": (6, 4),
    "dense_bias": (4,),
    "LayerNorm_gamma": (4,),
    "zero_kernel": (5, 3),  # zero-initialised, adapted
    "idle_kernel": (3, 3),  # all-zero gradients
    "embeddings": (10, 4),  # IndexedSlices gradients with repeated rows
}
EMBEDDING_ROWS = np.array([1, 3, 3, 7])


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    weights = {n: (np.zeros(s) if n == "zero_kernel" else rng.normal(size=s)) for n, s in SHAPES.items()}
    steps = []
    for _ in range(STEPS):
        grads = {n: rng.normal(size=s) * rng.uniform(0.1, 3.0) for n, s in SHAPES.items()}
        grads["idle_kernel"] = np.zeros(SHAPES["idle_kernel"])
        grads["embeddings"] = rng.normal(size=(len(EMBEDDING_ROWS), 4))  # rows of the sparse gradient
        steps.append(grads)
    return weights, steps


def _dense(name, grad):
    if name != "embeddings":
        return grad
    dense = np.zeros(SHAPES["embeddings"])
    np.add.at(dense, EMBEDDING_ROWS, grad)
    return dense


def _gradients(grads):
    """One step's gradients as the backend gives them (TensorFlow: the embedding's as IndexedSlices)."""
    if BACKEND != "tensorflow":
        return [keras.ops.convert_to_tensor(_dense(n, g).astype("float32")) for n, g in grads.items()]
    import tensorflow as tf

    tensors = [tf.constant(g, tf.float32) for g in grads.values()]
    index = list(grads).index("embeddings")
    tensors[index] = tf.IndexedSlices(tensors[index], tf.constant(EMBEDDING_ROWS), tf.constant(SHAPES["embeddings"]))
    return tensors


def _run_kbert(optimizer, weights, steps):
    variables = [keras.Variable(w.astype("float32"), name=n) for n, w in weights.items()]
    apply = traced_step(optimizer, variables)
    for grads in steps:
        apply(_gradients({n: grads[n] for n in weights}))
    return [keras.ops.convert_to_numpy(v) for v in variables]


def _compare(optimizer, reference, **reference_kwargs):
    weights, steps = _problem()
    got = _run_kbert(optimizer, weights, steps)
    dense_steps = [[_dense(n, g[n]) for n in weights] for g in steps]
    want, want_ratios = reference(list(weights.values()), dense_steps, list(weights), **reference_kwargs)
    for name, a, b in zip(weights, got, want):
        error = np.max(np.abs(a - b)) / np.max(np.abs(b))
        assert error < 1e-5, f"{name}: max relative error {error:.2e}"
    got_ratios = [float(r) for r in optimizer.trust_ratios.values()]
    np.testing.assert_allclose(got_ratios, want_ratios, rtol=1e-5)


def _schedule():
    return PolynomialWarmup(peak_learning_rate=0.02, warmup_steps=3, decay_steps=8, end_learning_rate=1e-3, power=0.5)


def _schedule_reference(step):
    if step < 3:
        return 0.02 * step / 3
    return (0.02 - 1e-3) * (1 - min((step - 3) / 8, 1)) ** 0.5 + 1e-3


LAMB_CASES = {
    "defaults": {},
    "decoupled": {"weight_decay_mode": "decoupled", "weight_decay": 0.1},
    "no_bias_correction": {"bias_correction": False},
    "always_adapt": {"always_adapt": True},
    "trust_bounds": {"min_trust_ratio": 0.5, "max_trust_ratio": 2.0},
    "global_clipnorm": {"global_clipnorm": 0.5},
    "custom_exclusions": {"exclude_from_weight_decay": ["gamma$"], "exclude_from_layer_adaptation": ["^dense_"]},
    "no_decay": {"weight_decay": 0.0, "epsilon": 1e-3, "beta_1": 0.5, "beta_2": 0.9},
}


@pytest.mark.parametrize("case", sorted(LAMB_CASES))
def test_lamb_matches_float64_reference(case):
    kwargs = LAMB_CASES[case]
    _compare(LAMB(1e-2, **kwargs), optimizer_reference.lamb, lr=1e-2, **kwargs)


def test_lamb_schedule_matches_reference():
    _compare(LAMB(_schedule()), optimizer_reference.lamb, lr=_schedule_reference)


LARS_CASES = {
    "defaults": {},
    "nesterov": {"nesterov": True},
    "non_classic": {"classic_momentum": False},
    "non_classic_nesterov": {"classic_momentum": False, "nesterov": True},
    "weight_decay": {"weight_decay": 1e-2, "eeta": 0.01},
    "larc_clip": {"larc_clip": True, "eeta": 0.5, "weight_decay": 1e-3},
    "epsilon": {"epsilon": 1e-2},
    "global_clipnorm": {"global_clipnorm": 0.5},
    "custom_exclusions": {
        "weight_decay": 1e-2,
        "exclude_from_weight_decay": [],
        "exclude_from_layer_adaptation": ["bias"],
    },
}


@pytest.mark.parametrize("case", sorted(LARS_CASES))
def test_lars_matches_float64_reference(case):
    kwargs = LARS_CASES[case]
    _compare(LARS(0.5, **kwargs), optimizer_reference.lars, lr=0.5, **kwargs)


def test_lars_schedule_matches_reference():
    _compare(LARS(_schedule(), weight_decay=1e-3), optimizer_reference.lars, lr=_schedule_reference, weight_decay=1e-3)
