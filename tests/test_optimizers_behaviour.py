"""Edge cases of kbert's LAMB, LARS and PolynomialWarmup: zero weights and gradients, exclusions, dtypes,
argument checking, schedule values."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.optimizers import LAMB, LARS, PolynomialWarmup


def _apply(optimizer, variables, grads, steps=1):
    for _ in range(steps):
        optimizer.apply_gradients(zip([tf.constant(g, tf.float32) for g in grads], variables))


def test_lars_zero_initialised_variable_takes_a_step_like_its_neighbours():
    rng = np.random.default_rng(0)
    kernel = keras.Variable(rng.normal(size=(16, 16)).astype("float32"), name="kernel")
    zero = keras.Variable(np.zeros((16, 16), "float32"), name="zero_kernel")
    grad = rng.normal(size=(16, 16))
    optimizer = LARS(1.0, momentum=0.0, eeta=0.001)
    _apply(optimizer, [kernel, zero], [grad, grad])
    ratios = optimizer.trust_ratios
    assert float(ratios["zero_kernel"]) == pytest.approx(0.001)
    step = np.linalg.norm(zero.numpy())
    assert step == pytest.approx(0.001 * np.linalg.norm(grad), rel=1e-5)
    # The neighbour moves by lr·η·‖w‖ (relative step η); the zero variable by lr·η·‖g‖, not lr·‖g‖ (1000x).
    assert step < 10 * 0.001 * np.linalg.norm(grad)


def test_lamb_zero_initialised_variable_uses_trust_ratio_one():
    zero = keras.Variable(np.zeros((4, 4), "float32"), name="zero_kernel")
    optimizer = LAMB(0.1)
    _apply(optimizer, [zero], [np.ones((4, 4))])
    assert float(optimizer.trust_ratios["zero_kernel"]) == 1.0
    np.testing.assert_allclose(zero.numpy(), -0.1 * np.ones((4, 4)) / (1 + 1e-6), rtol=1e-6)


@pytest.mark.parametrize("make", [lambda: LAMB(0.1, weight_decay=0.0), lambda: LARS(0.1)], ids=["lamb", "lars"])
def test_all_zero_gradients_leave_weights_unchanged(make):
    start = np.arange(6, dtype="float32").reshape(2, 3)
    kernel = keras.Variable(start, name="kernel")
    optimizer = make()
    _apply(optimizer, [kernel], [np.zeros((2, 3))], steps=3)
    np.testing.assert_array_equal(kernel.numpy(), start)
    assert np.isfinite(float(optimizer.trust_ratios["kernel"]))


def test_exclusion_regexes_match_variable_paths():
    # Named: an unnamed Sequential is `sequential_N` after other tests in the same worker built one.
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(4, name="pooler"), keras.layers.Dense(4, name="head")], name="sequential"
    )
    optimizer = LAMB(
        0.1,
        weight_decay=0.5,
        exclude_from_weight_decay=[r"^sequential/pooler/"],
        exclude_from_layer_adaptation=[r"head/bias$"],
    )
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    zeros = [np.zeros(v.shape) for v in model.trainable_variables]
    _apply(optimizer, model.trainable_variables, zeros)
    after = {v.path: v.numpy() for v in model.trainable_variables}
    np.testing.assert_array_equal(after["sequential/pooler/kernel"], before["sequential/pooler/kernel"])
    assert np.linalg.norm(after["sequential/head/kernel"]) < np.linalg.norm(before["sequential/head/kernel"])
    assert float(optimizer.trust_ratios["sequential/head/bias"]) == 1.0
    assert float(optimizer.trust_ratios["sequential/head/kernel"]) == pytest.approx(2.0)  # ‖w‖ / ‖λw‖ = 1/λ


def test_keras_exclude_from_weight_decay_method_is_honoured():
    kernel = keras.Variable(np.ones((2, 2), "float32"), name="frozen_kernel")
    optimizer = LAMB(0.1, weight_decay=0.5)
    optimizer.exclude_from_weight_decay(var_names=["frozen"])
    _apply(optimizer, [kernel], [np.zeros((2, 2))])
    np.testing.assert_array_equal(kernel.numpy(), np.ones((2, 2)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("make", [lambda: LAMB(0.01), lambda: LARS(10.0)], ids=["lamb", "lars"])
def test_low_precision_variables_get_float32_slots(make, dtype):
    kernel = keras.Variable(np.ones((3, 3)), dtype=dtype, name="kernel")
    optimizer = make()
    optimizer.apply_gradients([(tf.ones((3, 3), dtype), kernel)])
    assert kernel.dtype == dtype
    assert {v.dtype for v in optimizer.variables if v.name != "iteration"} == {"float32"}
    assert np.all(kernel.numpy().astype("float32") < 1.0)


BAD_ARGUMENTS = [
    (lambda: LAMB(-1.0), "learning_rate"),
    (lambda: LAMB(beta_1=1.0), "beta_1"),
    (lambda: LAMB(beta_2=-0.1), "beta_2"),
    (lambda: LAMB(epsilon=-1e-6), "epsilon"),
    (lambda: LAMB(weight_decay=-0.01), "weight_decay"),
    (lambda: LAMB(weight_decay_mode="adamw"), "weight_decay_mode"),
    (lambda: LAMB(exclude_from_weight_decay=["bias("]), "exclude_from_weight_decay"),
    (lambda: LAMB(exclude_from_layer_adaptation="bias"), "exclude_from_layer_adaptation"),
    (lambda: LAMB(min_trust_ratio=2.0, max_trust_ratio=1.0), "max_trust_ratio"),
    (lambda: LAMB(global_clipnorm=-1.0), "global_clipnorm"),
    (lambda: LARS(-0.1), "learning_rate"),
    (lambda: LARS(momentum=1.5), "momentum"),
    (lambda: LARS(eeta=-0.001), "eeta"),
    (lambda: LARS(exclude_from_weight_decay=["[bias"]), "exclude_from_weight_decay"),
    (lambda: PolynomialWarmup(-1.0, 10, 100), "peak_learning_rate"),
    (lambda: PolynomialWarmup(1e-3, -1, 100), "warmup_steps"),
    (lambda: PolynomialWarmup(1e-3, 10, 0), "decay_steps"),
    (lambda: PolynomialWarmup(1e-3, 10, 100, step_offset=1.5), "step_offset"),
]


@pytest.mark.parametrize("make,argument", BAD_ARGUMENTS, ids=[a for _, a in BAD_ARGUMENTS])
def test_bad_arguments_raise_a_clear_value_error(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


def test_polynomial_warmup_values():
    schedule = PolynomialWarmup(1.0, warmup_steps=4, decay_steps=10, end_learning_rate=0.1, power=2.0, step_offset=100)
    values = [float(schedule(s)) for s in [0, 100, 102, 104, 109, 114, 200]]
    expected = [0.0, 0.0, 0.5, 1.0, 0.9 * 0.5**2 + 0.1, 0.1, 0.1]
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_polynomial_warmup_round_trips_through_keras_serialization():
    schedule = PolynomialWarmup(1e-3, 10, 100, end_learning_rate=1e-5, power=0.5, step_offset=7)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert restored.get_config() == schedule.get_config()
    steps = [0, 7, 12, 17, 60, 107, 500]  # before the offset, in warmup, at the peak, decaying, at the end, after
    np.testing.assert_array_equal([float(restored(s)) for s in steps], [float(schedule(s)) for s in steps])


@pytest.mark.parametrize(
    "make",
    [
        lambda: LAMB(PolynomialWarmup(1e-3, 10, 100), exclude_from_weight_decay=["x"]),
        lambda: LARS(0.1, nesterov=True, larc_clip=True),
    ],
    ids=["lamb", "lars"],
)
def test_optimizer_config_round_trip(make):
    optimizer = make()
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is type(optimizer)
    assert restored.get_config() == optimizer.get_config()
