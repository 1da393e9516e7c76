"""kbert optimizers inside Keras: model.fit (XLA, steps_per_execution), gradient accumulation, .keras save/load,
TensorBoard telemetry."""

import glob

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.optimizers import (
    LAMB,
    LARS,
    LossScaleOptimizer,
    PolynomialWarmup,
    TrustRatioCallback,
    write_trust_ratio_summaries,
)
from kbert.optimizers.layerwise import layerwise_optimizer


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


def _schedule():
    return PolynomialWarmup(peak_learning_rate=0.02, warmup_steps=2, decay_steps=6, power=0.5)


OPTIMIZERS = {
    "lamb": lambda: LAMB(_schedule(), weight_decay=0.01),
    "lars": lambda: LARS(_schedule(), eeta=0.01, weight_decay=1e-3, nesterov=True),
}


def _eager_reference(make_optimizer, x, y, batch):
    model, optimizer = _model(), make_optimizer()
    for start in range(0, len(x), batch):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(
                keras.losses.mean_squared_error(y[start : start + batch], model(x[start : start + batch]))
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return model


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("jit_compile,steps_per_execution", [(False, 1), (True, 4)])
def test_fit_equals_eager_loop(name, jit_compile, steps_per_execution):
    x, y = _data()
    model = _model()
    model.compile(OPTIMIZERS[name](), "mse", jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    model.fit(x, y, batch_size=4, shuffle=False, verbose=0)
    reference = _eager_reference(OPTIMIZERS[name], x, y, batch=4)
    assert int(model.optimizer.iterations) == 8
    for a, b in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_gradient_accumulation_equals_one_big_step(name):
    """k micro-batches with gradient_accumulation_steps=k == one step on their concatenation, 3 times."""
    k, micro = 4, 4
    x, y = _data(3 * k * micro)
    accumulated = _model()
    optimizer = OPTIMIZERS[name]()
    optimizer.gradient_accumulation_steps = k
    for start in range(0, len(x), micro):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(
                keras.losses.mean_squared_error(y[start : start + micro], accumulated(x[start : start + micro]))
            )
        optimizer.apply_gradients(
            zip(tape.gradient(loss, accumulated.trainable_variables), accumulated.trainable_variables)
        )
    reference = _eager_reference(OPTIMIZERS[name], x, y, batch=k * micro)
    assert int(optimizer.iterations) == 3
    for a, b in zip(accumulated.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _summary_tags(log_dir):
    tags = {}
    for path in glob.glob(f"{log_dir}/**/events.out.tfevents.*", recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    return tags


def test_trust_ratio_callback_writes_histogram_and_per_variable_scalars(tmp_path):
    x, y = _data()
    model = _model()
    model.compile(LAMB(0.01), "mse", steps_per_execution=3)
    model.fit(x, y, batch_size=4, verbose=0, callbacks=[TrustRatioCallback(str(tmp_path), every_n_steps=2)])
    tags = _summary_tags(tmp_path)
    kernel = model.layers[0].kernel.path
    assert tags["trust_ratio/all"] == [3, 6, 8]  # end of each execution that crossed a multiple of 2
    assert tags[f"trust_ratio/{kernel}"] == [3, 6, 8]
    assert len([t for t in tags if t.startswith("trust_ratio/")]) == 1 + len(model.trainable_variables)


def test_write_trust_ratio_summaries_inside_tf_function(tmp_path):
    model = _model()
    optimizer = LARS(0.1)
    writer = tf.summary.create_file_writer(str(tmp_path))
    x, y = _data(4)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.losses.mean_squared_error(y, model(x)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        write_trust_ratio_summaries(optimizer, optimizer.iterations, writer)

    step()
    writer.flush()
    assert _summary_tags(tmp_path)["trust_ratio/all"] == [1]


def test_callback_rejects_a_non_layerwise_optimizer(tmp_path):
    x, y = _data(4)
    model = _model()
    model.compile(keras.optimizers.Adam(), "mse")
    with pytest.raises(ValueError, match="kbert LAMB or LARS"):
        model.fit(x, y, verbose=0, callbacks=[TrustRatioCallback(str(tmp_path))])


def test_layerwise_optimizer_unwraps_loss_scaling_and_names_what_it_is_not():
    lamb, adam = LAMB(0.01), keras.optimizers.Adam()
    assert layerwise_optimizer(lamb) is lamb
    assert layerwise_optimizer(LossScaleOptimizer(lamb)) is lamb
    assert layerwise_optimizer(adam) is None and layerwise_optimizer(LossScaleOptimizer(adam)) is None
    with pytest.raises(ValueError, match="LAMB or LARS optimizer; got Adam"):
        write_trust_ratio_summaries(LossScaleOptimizer(adam), 0)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_tf_train_checkpoint_restores_optimizer_state(tmp_path, name):
    x, y = _data()
    model, optimizer = _model(), OPTIMIZERS[name]()
    model.compile(optimizer, "mse")
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))

    restored_model, restored = _model(seed=1), OPTIMIZERS[name]()
    restored.build(restored_model.trainable_variables)
    tf.train.Checkpoint(model=restored_model, optimizer=restored).restore(path).assert_existing_objects_matched()
    assert int(restored.iterations) == 4
    for a, b in zip(restored.variables, optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert [float(v) for v in restored.trust_ratios.values()] == [float(v) for v in optimizer.trust_ratios.values()]
