"""kbert LAMB/LARS against Model Garden's tf_keras LAMB/LARS and Keras 3's Lamb, in the modes where they agree."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from official.modeling.optimization import lamb as mg_lamb
from official.modeling.optimization import lars as mg_lars

from kbert.optimizers import LAMB, LARS

STEPS = 12
SHAPES = {"dense_kernel": (6, 4), "dense_bias": (4,), "LayerNorm_gamma": (4,), "output_kernel": (4, 2)}


def _problem():
    rng = np.random.default_rng(1)
    weights = {n: rng.normal(size=s).astype("float32") for n, s in SHAPES.items()}
    steps = [
        [(rng.normal(size=s) * rng.uniform(0.1, 3.0)).astype("float32") for s in SHAPES.values()] for _ in range(STEPS)
    ]
    return weights, steps


def _run(optimizer, make_variable):
    weights, steps = _problem()
    variables = [make_variable(w, n) for n, w in weights.items()]

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, variables))

    for grads in steps:
        apply([tf.constant(g) for g in grads])
    return [v.numpy() for v in variables]


def _assert_same(kbert_optimizer, peer_optimizer, peer_variable):
    got = _run(kbert_optimizer, lambda w, n: keras.Variable(w, name=n))
    want = _run(peer_optimizer, peer_variable)
    for name, a, b in zip(SHAPES, got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def _tf_variable(w, n):
    return tf.Variable(w, name=n)


LAMB_CASES = {
    "defaults": ({}, {}),
    "no_decay": ({"weight_decay": 0.0}, {"weight_decay_rate": 0.0}),
    "split_exclusions": (
        {"weight_decay": 0.05, "exclude_from_weight_decay": ["bias"], "exclude_from_layer_adaptation": ["gamma"]},
        {"weight_decay_rate": 0.05, "exclude_from_weight_decay": ["bias"], "exclude_from_layer_adaptation": ["gamma"]},
    ),
}


@pytest.mark.parametrize("case", sorted(LAMB_CASES))
def test_lamb_matches_model_garden(case):
    ours, theirs = LAMB_CASES[case]
    defaults = {"weight_decay_rate": 0.01, "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}
    peer = mg_lamb.LAMB(learning_rate=1e-2, epsilon=1e-6, **{**defaults, **theirs})
    _assert_same(LAMB(1e-2, **ours), peer, _tf_variable)


LARS_CASES = {
    "defaults": {},
    "nesterov": {"nesterov": True},
    "non_classic": {"classic_momentum": False},
    "weight_decay": {"weight_decay": 1e-2, "eeta": 0.01},
    "split_exclusions": {
        "weight_decay": 1e-2,
        "exclude_from_weight_decay": ["bias"],
        "exclude_from_layer_adaptation": ["gamma"],
    },
}


@pytest.mark.parametrize("case", sorted(LARS_CASES))
def test_lars_matches_model_garden(case):
    ours = LARS_CASES[case]
    theirs = {"weight_decay_rate" if k == "weight_decay" else k: v for k, v in ours.items()}
    theirs.setdefault("exclude_from_weight_decay", ["LayerNorm", "layer_norm", "bias"])
    _assert_same(LARS(0.5, **ours), mg_lars.LARS(learning_rate=0.5, **theirs), _tf_variable)


def test_decoupled_lamb_without_exclusions_matches_keras_lamb():
    ours = LAMB(1e-2, epsilon=1e-7, weight_decay=0.05, weight_decay_mode="decoupled", exclude_from_weight_decay=[])
    peer = keras.optimizers.Lamb(1e-2, epsilon=1e-7, weight_decay=0.05)
    _assert_same(ours, peer, lambda w, n: keras.Variable(w, name=n))
