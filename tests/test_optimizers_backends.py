"""kbert's optimizers on the Keras backend KERAS_BACKEND selects (tools/test.sh runs this file under TensorFlow and
JAX): global_clipnorm, gradient accumulation, loss scaling, model.fit with .keras save/load and trust-ratio
summaries. That importing kbert.optimizers under JAX leaves TensorFlow unimported is checked with kbert.modeling's
import, in one process (tests/test_model_backends.py)."""

import glob

import keras
import numpy as np
import pytest
from optimizer_steps import traced_step

from kbert.optimizers import LAMB, LARS, LossScaleOptimizer, PolynomialWarmup, TrustRatioCallback


def _variables(seed=0):
    rng = np.random.default_rng(seed)
    return [
        keras.Variable(rng.normal(size=(4, 3)).astype("float32"), name="kernel"),
        keras.Variable(rng.normal(size=(3,)).astype("float32"), name="bias"),
    ]


def _numpy(variables):
    return [keras.ops.convert_to_numpy(v) for v in variables]


def test_global_clipnorm_clips_the_gradients():
    """Plain SGD (LARS, no momentum, no adaptation): the step is lr·g/max(‖G‖/c, 1), ‖G‖ over all variables."""
    variables = _variables()
    before = _numpy(variables)
    grads = [np.full((4, 3), 2.0, "float32"), np.full((3,), -1.0, "float32")]
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))  # 7.14: clipped to 0.5
    optimizer = LARS(0.1, momentum=0.0, exclude_from_layer_adaptation=[".*"], global_clipnorm=0.5)
    traced_step(optimizer, variables)([keras.ops.convert_to_tensor(g) for g in grads])
    for b, a, g in zip(before, _numpy(variables), grads):
        np.testing.assert_allclose(b - a, 0.1 * g * 0.5 / norm, rtol=1e-5)


@pytest.mark.parametrize("make", [LAMB, LARS], ids=["lamb", "lars"])
def test_trust_ratios_are_one_vector_and_excluded_entries_stay_one(make):
    """One optimizer variable holds every trust ratio (under jit each variable is a buffer into and out of the step);
    a traced step writes the adapted variables' entries and leaves the excluded ones (the bias) at 1.0."""
    variables = _variables()
    optimizer = make(0.1)
    traced_step(optimizer, variables)([keras.ops.ones((4, 3)), keras.ops.ones((3,))])
    vectors = [v for v in optimizer.variables if "trust_ratio" in v.path]
    assert [(v.path, tuple(v.shape)) for v in vectors] == [(f"{optimizer.name}/trust_ratios", (2,))]
    ratios = {path: float(ratio) for path, ratio in optimizer.trust_ratios.items()}
    assert list(ratios) == ["kernel", "bias"] and ratios["bias"] == 1.0 and 0.0 < ratios["kernel"] != 1.0
    legacy = [f"{optimizer.name}/{name}_trust_ratio" for name in ("kernel", "bias")]
    assert optimizer.trust_ratio_paths() == (f"{optimizer.name}/trust_ratios", legacy)


def test_keras_state_with_a_scalar_per_trust_ratio_loads():
    """A `.keras` file's optimizer state from before the vector (a scalar per ratio, right where the vector is now)
    loads whole, its scalars into the vector; the present layout loads as Keras loads it."""
    optimizer = LAMB(0.1, exclude_from_layer_adaptation=[])
    traced_step(optimizer, _variables())([keras.ops.ones((4, 3)), keras.ops.ones((3,))])
    saved = _numpy(optimizer.variables)
    first = next(i for i, v in enumerate(optimizer.variables) if v.path.endswith("/trust_ratios"))
    scalars = saved[:first] + list(saved[first]) + saved[first + 1 :]
    assert len(set(saved[first].tolist())) == 2  # two different ratios: a mix-up would show
    for store in (scalars, saved):
        restored = LAMB(0.1, exclude_from_layer_adaptation=[])
        restored.build(_variables(seed=1))
        restored.load_own_variables({str(i): np.asarray(v) for i, v in enumerate(store)})
        for got, want in zip(_numpy(restored.variables), saved):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "make",
    [
        lambda **k: LAMB(PolynomialWarmup(0.02, 2, 4), **k),
        lambda **k: LARS(PolynomialWarmup(0.5, 2, 4), eeta=0.01, **k),
    ],
    ids=["lamb", "lars"],
)
def test_gradient_accumulation_equals_one_step_on_the_mean_gradient(make):
    """k micro-steps make one optimizer step (schedule and bias correction count it once), clipped after the mean."""
    k, rng = 3, np.random.default_rng(1)
    micro = [[rng.normal(size=(4, 3)) * 4, rng.normal(size=(3,)) * 4] for _ in range(3 * k)]
    accumulated, reference = _variables(), _variables()
    step = traced_step(make(gradient_accumulation_steps=k, global_clipnorm=1.0), accumulated)
    for grads in micro:
        step([keras.ops.convert_to_tensor(g.astype("float32")) for g in grads])
    step = traced_step(make(global_clipnorm=1.0), reference)
    for i in range(0, len(micro), k):
        mean = [np.mean([m[j] for m in micro[i : i + k]], axis=0).astype("float32") for j in range(2)]
        step([keras.ops.convert_to_tensor(g) for g in mean])
    for a, b in zip(_numpy(accumulated), _numpy(reference)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_loss_scale_optimizer_skips_a_non_finite_step_and_halves_the_scale():
    variables = _variables()
    before = _numpy(variables)
    optimizer = LossScaleOptimizer(LAMB(0.01), initial_scale=1024.0)
    step = traced_step(optimizer, variables)
    step([keras.ops.convert_to_tensor(np.full((4, 3), np.inf, "float32")), keras.ops.ones((3,))])
    for a, b in zip(_numpy(variables), before):
        np.testing.assert_array_equal(a, b)
    assert float(optimizer.dynamic_scale) == 512.0 and int(optimizer.iterations) == 0
    step([keras.ops.ones((4, 3)), keras.ops.ones((3,))])
    assert int(optimizer.iterations) == 1 and not np.allclose(_numpy(variables)[0], before[0])


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.LayerNormalization(),
            keras.layers.Dense(1),
        ]
    )


def _data(n=32):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 8)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


SAVED = {
    "lamb": lambda: LAMB(
        PolynomialWarmup(0.02, 2, 6, power=0.5),
        exclude_from_weight_decay=["gamma$", "bias"],
        exclude_from_layer_adaptation=["beta"],
        max_trust_ratio=10.0,
        global_clipnorm=1.0,
    ),
    "lars": lambda: LARS(
        PolynomialWarmup(0.02, 2, 6, power=0.5), exclude_from_weight_decay=["bias"], larc_clip=True, weight_decay=1e-4
    ),
}


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("name", sorted(SAVED))
def test_fit_then_keras_save_load_keeps_config_state_and_training(tmp_path, name, jit_compile):
    x, y = _data()
    model = _model()
    model.compile(SAVED[name](), "mse", jit_compile=jit_compile)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)

    assert type(restored.optimizer) is type(model.optimizer)
    assert restored.optimizer.get_config() == model.optimizer.get_config()
    assert restored.optimizer.exclude_from_weight_decay_patterns == model.optimizer.exclude_from_weight_decay_patterns
    # The schedule came back as a schedule, not frozen at the saved step's rate: the rate moves on with the step.
    steps = [0, 3, 50]
    np.testing.assert_allclose(
        [float(restored.optimizer._learning_rate(s)) for s in steps],
        [float(SAVED[name]()._learning_rate(s)) for s in steps],
        rtol=1e-7,
    )
    assert len(restored.optimizer.variables) == len(model.optimizer.variables) > 2  # iterations, rate, slots
    for a, b in zip(restored.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    model.train_on_batch(x[:8], y[:8])
    restored.train_on_batch(x[:8], y[:8])
    assert len(restored.get_weights()) == len(model.get_weights()) > 0
    for a, b in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_trust_ratio_callback_writes_per_variable_scalars(tmp_path):
    x, y = _data()
    model = _model()
    model.compile(LAMB(0.01), "mse", steps_per_execution=3)
    model.fit(x, y, batch_size=4, verbose=0, callbacks=[TrustRatioCallback(str(tmp_path), every_n_steps=2)])
    import tensorflow as tf  # reading the event files

    tags = {}
    for path in glob.glob(f"{tmp_path}/**/events.out.tfevents.*", recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    assert tags["trust_ratio/all"] == [3, 6, 8]
    assert len([t for t in tags if t.startswith("trust_ratio/")]) == 1 + len(model.trainable_variables)
