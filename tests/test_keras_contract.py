"""The private parts of Keras that kbert's optimizers rely on, checked against the Keras installed.

kbert.optimizers overrides private hooks of Keras's optimizer (three of them the TensorFlow backend's), calls two
private methods and reads two private attributes; kbert/optimizers says next to each why no public hook does it.
Keras may change any of them in a minor release without notice; a hook that is renamed or no longer called would
make kbert's override dead code, silently (weight decay applied twice, clipping before the all-reduce, ...). These
tests fail first, naming the hook and the Keras version. setup.cfg pins the range that passes them
(keras>=3.15,<3.16); moving it means updating kbert/optimizers until these pass.
"""

import inspect

import keras
import pytest
import tensorflow as tf
from keras.src.optimizers import base_optimizer, loss_scale_optimizer

from kbert.optimizers import LAMB, LARS, PolynomialWarmup
from kbert.optimizers.distributed import DistributedMixin
from kbert.optimizers.loss_scale import LossScaleOptimizer

# Keras class whose private method kbert overrides or calls -> the parameters kbert expects (after self).
HOOKS = {
    # TensorFlow backend (keras/src/backend/tensorflow/optimizer.py)
    (keras.optimizers.Optimizer, "_apply_weight_decay"): ("variables",),
    (keras.optimizers.Optimizer, "_all_reduce_sum_gradients"): ("grads_and_vars",),
    (keras.optimizers.Optimizer, "_distributed_tf_update_step"): ("distribution", "grads_and_vars", "learning_rate"),
    # Every backend (keras/src/optimizers/base_optimizer.py)
    (keras.optimizers.Optimizer, "_clip_gradients"): ("grads",),
    (keras.optimizers.Optimizer, "_get_current_learning_rate"): (),
    (keras.optimizers.Optimizer, "_get_variable_index"): ("variable",),
    (keras.optimizers.Optimizer, "_use_weight_decay"): ("variable",),
    (keras.optimizers.LossScaleOptimizer, "check_finite"): ("grads",),
}
# kbert class -> the hooks it overrides (each must keep Keras's signature).
OVERRIDES = {
    DistributedMixin: (
        "_apply_weight_decay",
        "_all_reduce_sum_gradients",
        "_clip_gradients",
        "_get_current_learning_rate",
        "_distributed_tf_update_step",
    ),
    LossScaleOptimizer: ("check_finite",),
}


def _where(owner: type, name: str) -> str:
    return f"Keras {keras.__version__} ({keras.backend.backend()} backend): {owner.__name__}.{name}"


def _parameters(function) -> tuple[str, ...]:
    return tuple(inspect.signature(function).parameters)[1:]  # without self


@pytest.mark.parametrize("owner,name", list(HOOKS), ids=[name for _, name in HOOKS])
def test_keras_still_has_the_hook_with_the_same_signature(owner, name):
    hook = getattr(owner, name, None)
    assert callable(hook), f"{_where(owner, name)} is gone; kbert.optimizers relies on it (see {__file__})."
    assert _parameters(hook) == HOOKS[owner, name], (
        f"{_where(owner, name)} now takes {_parameters(hook)}, kbert expects {HOOKS[owner, name]}; "
        "update kbert/optimizers before widening setup.cfg's keras range."
    )


@pytest.mark.parametrize("owner,name", list(HOOKS), ids=[name for _, name in HOOKS])
def test_keras_still_calls_the_hook(owner, name):
    """A hook kbert overrides does something only while Keras's own code still calls it."""
    keras_class = next(c for c in owner.__mro__ if name in vars(c))
    modules = {inspect.getmodule(c) for c in owner.__mro__ if c.__module__.startswith("keras.")}
    modules |= {base_optimizer, loss_scale_optimizer}
    calls = sum(inspect.getsource(m).count(f"self.{name}") for m in modules)
    assert calls > 0, f"{_where(keras_class, name)} is defined but no longer called by Keras; kbert's override is dead."


@pytest.mark.parametrize("kbert_class", list(OVERRIDES), ids=[c.__name__ for c in OVERRIDES])
def test_kbert_overrides_match_keras_signatures(kbert_class):
    for name in OVERRIDES[kbert_class]:
        assert name in vars(kbert_class), f"{kbert_class.__name__} no longer overrides {name}: update OVERRIDES."
        keras_owner = next(owner for owner, hook in HOOKS if hook == name)
        assert _parameters(vars(kbert_class)[name]) == _parameters(getattr(keras_owner, name)), (
            f"{kbert_class.__name__}.{name} takes {_parameters(vars(kbert_class)[name])}, but "
            f"{_where(keras_owner, name)} takes {_parameters(getattr(keras_owner, name))}."
        )


@pytest.mark.parametrize("make", [LAMB, LARS], ids=["lamb", "lars"])
def test_learning_rate_attribute_holds_the_schedule(make):
    """DistributedMixin._get_current_learning_rate reads `_learning_rate` and calls it when it is a schedule."""
    schedule = PolynomialWarmup(1e-3, warmup_steps=2, decay_steps=4)
    optimizer = make(schedule)
    assert getattr(optimizer, "_learning_rate", None) is schedule, (
        f"Keras {keras.__version__}: Optimizer._learning_rate no longer holds the schedule given as learning_rate; "
        "kbert/optimizers/layerwise.py _get_current_learning_rate reads it."
    )


def test_get_variable_index_numbers_built_variables():
    """LayerwiseOptimizer._variable_flags indexes its per-variable tables with `_get_variable_index`."""
    variables = [keras.Variable([1.0], name="a"), keras.Variable([2.0, 3.0], name="b")]
    optimizer = LAMB(1e-3)
    optimizer.build(variables)
    assert [optimizer._get_variable_index(v) for v in variables] == [0, 1], (
        f"Keras {keras.__version__}: Optimizer._get_variable_index no longer numbers variables in build order; "
        "kbert/optimizers/layerwise.py _variable_flags relies on it."
    )


def test_distribution_strategy_attribute_is_the_strategy_in_scope():
    """LayerwiseOptimizer._add_float32_slots colocates its float32 slots through `_distribution_strategy`."""
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        optimizer = LAMB(1e-3)
    assert getattr(optimizer, "_distribution_strategy", None) is strategy, (
        f"Keras {keras.__version__}: Optimizer._distribution_strategy no longer holds the strategy in scope at "
        "construction; kbert/optimizers/layerwise.py _add_float32_slots reads it."
    )


@pytest.mark.slow
def test_lamb_per_step_hook_updates_as_keras_loop_over_update_step():
    """DistributedMixin._distributed_tf_update_step replaces Keras's loop over `update_step` for LAMB (its
    step_constants as arguments); a change to that loop shows here."""

    class KerasLoop(LAMB):
        _distributed_tf_update_step = keras.optimizers.Optimizer._distributed_tf_update_step

    def train(make):
        variables = [keras.Variable([[1.0, -2.0], [0.5, 3.0]], name="kernel"), keras.Variable([0.1, 0.2], name="bias")]
        optimizer = make(PolynomialWarmup(1e-2, warmup_steps=2, decay_steps=4), weight_decay=0.1)
        step = tf.function(lambda grads: optimizer.apply_gradients(zip(grads, variables)))
        for scale in (1.0, -0.5, 2.0):
            step([tf.fill(v.shape, scale) * tf.convert_to_tensor(v) for v in variables])
        return [v.numpy() for v in variables]

    for ours, keras_loop in zip(train(LAMB), train(KerasLoop)):
        assert (ours == keras_loop).all(), (
            f"Keras {keras.__version__}: LAMB._distributed_tf_update_step and Keras's own loop over update_step no "
            "longer update alike; compare it with keras/src/backend/tensorflow/optimizer.py."
        )
