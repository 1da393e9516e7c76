"""Activation lookup by Google's `hidden_act` names."""

from __future__ import annotations

from collections.abc import Callable

import keras


def _gelu_exact(x):
    # Google's "gelu" is the exact erf form; Keras defaults to the tanh approximation.
    return keras.activations.gelu(x, approximate=False)


def _gelu_tanh(x):
    return keras.activations.gelu(x, approximate=True)


_BY_NAME = {
    "gelu": _gelu_exact,
    "gelu_approximate": _gelu_tanh,
    "gelu_new": _gelu_tanh,
    "relu": keras.activations.relu,
    "silu": keras.activations.silu,
    "swish": keras.activations.silu,
    "tanh": keras.activations.tanh,
}


def get_activation(name: str) -> Callable:
    return _BY_NAME[name]
