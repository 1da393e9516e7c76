"""kbert.fit_pretraining under KERAS_BACKEND=jax (tools/test.sh's second run, on two logical CPU devices): loss
falls, two devices under DataParallel reach one device's weights, a resumed run equals an uninterrupted one,
bfloat16 with gradient accumulation, skip_batches, and kbert-pretrain's one line under JAX."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

if keras.backend.backend() != "jax":
    pytest.skip("model.fit on the JAX backend (KERAS_BACKEND=jax)", allow_module_level=True)

import jax  # noqa: E402
from tfrecord_fixtures import make_instances, write_records  # noqa: E402
from training_fixtures import cli_env  # noqa: E402

from kbert.fit_pretraining import fit_dataset, fit_pretraining, newest_checkpoint  # noqa: E402
from kbert.fit_pretraining.checkpoints import PROGRESS_FILE, list_checkpoints  # noqa: E402
from kbert.modeling import BertConfig, BertPretrainer  # noqa: E402
from kbert.optimizers import LAMB  # noqa: E402

SEQ, PRED, VOCAB, BATCH = 32, 5, 160, 8
CONFIG = BertConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=SEQ,
)
STEPS, EVERY, CRASH = 24, 8, 12


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """Runs of the same model share their compiled step (most of a tiny run's time on CPU)."""
    saved = {
        name: getattr(jax.config, name)
        for name in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    }
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    yield
    for name, value in saved.items():
        jax.config.update(name, value)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    for shard in range(2):
        write_records(directory / f"train-{shard}.tfrecord", make_instances(64, SEQ, PRED, VOCAB, seed=shard))
    return str(directory / "train-*.tfrecord")


def _builder(dtype=None, **optimizer_kwargs):
    def build():
        model = BertPretrainer(CONFIG, dtype=dtype)  # dropout 0.1
        model.compile(optimizer=LAMB(1e-2, **optimizer_kwargs))
        return model

    return build


def _devices(n):
    return keras.distribution.DataParallel(devices=keras.distribution.list_devices()[:n])


def _fit(records, checkpoint_dir, build=None, devices=1, steps=STEPS, callbacks=()):
    return fit_pretraining(
        build or _builder(),
        records,
        SEQ,
        PRED,
        BATCH,
        steps,
        str(checkpoint_dir),
        distribution=_devices(devices),
        checkpoint_every=EVERY,
        keep_checkpoints=2,
        callbacks=callbacks,
        verbose=0,
        shuffle_buffer=32,
        vocab_size=VOCAB,
    )


def _weights(model):
    return [keras.ops.convert_to_numpy(v) for v in model.weights]


class _Losses(keras.callbacks.Callback):
    """Each batch's loss, from the running mean `fit` logs."""

    def __init__(self):
        super().__init__()
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    @property
    def losses(self):
        sums = np.arange(1, len(self.means) + 1) * np.array(self.means)
        return np.diff(sums, prepend=0.0)


class _Killed(Exception):
    pass


class _Crash(keras.callbacks.Callback):
    """Ends the run as a kill would: no end-of-training checkpoint."""

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 == CRASH:
            raise _Killed


@pytest.fixture(scope="module")
def uninterrupted(records, tmp_path_factory):
    directory = tmp_path_factory.mktemp("uninterrupted")
    losses, traces = _Losses(), []

    def build():
        model = _builder()()
        train_step = model.train_step

        def traced(*args):  # runs in Python each time JAX traces the step
            traces.append(1)
            return train_step(*args)

        model.train_step = traced
        return model

    model, _ = _fit(records, directory, build=build, callbacks=[losses])
    return model, losses.losses, directory, len(traces)


@pytest.mark.slow
def test_loss_falls_and_the_step_is_traced_once(uninterrupted):
    """On a mesh of one device too (StateOnTheMesh), through three checkpoints' state syncs."""
    _, losses, _, traces = uninterrupted
    assert traces == 1
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-6:]) < np.mean(losses[:3]) - 0.2, losses


@pytest.mark.slow
def test_a_resumed_run_equals_an_uninterrupted_one(records, uninterrupted, tmp_path):
    reference, _, reference_dir, _ = uninterrupted
    with pytest.raises(_Killed):
        _fit(records, tmp_path, callbacks=[_Crash()])
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == ["ckpt-8"]
    resumed = _Losses()
    model, _ = _fit(records, tmp_path, callbacks=[resumed])  # from ckpt-8: batches 8..11 again, then on
    assert len(resumed.means) == STEPS - EVERY
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == ["ckpt-16", "ckpt-24"]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-16", "ckpt-24"]  # no partial write left
    with open(os.path.join(newest_checkpoint(tmp_path), PROGRESS_FILE)) as f:
        progress = json.load(f)
    assert (progress["batches"], progress["batch_size"]) == (STEPS, BATCH)
    assert int(model.optimizer.iterations) == int(reference.optimizer.iterations) == STEPS
    for resumed, uninterrupted_weight in zip(_weights(model), _weights(reference)):
        np.testing.assert_array_equal(resumed, uninterrupted_weight)
    for resumed, uninterrupted_state in zip(model.optimizer.variables, reference.optimizer.variables):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(resumed), keras.ops.convert_to_numpy(uninterrupted_state)
        )
    with open(os.path.join(newest_checkpoint(reference_dir), PROGRESS_FILE)) as f:
        assert json.load(f) == progress  # dropout's RNG states too
    assert _fit(records, tmp_path)[1].history == {}  # complete: nothing left to train


@pytest.mark.slow
@pytest.mark.skipif(len(jax.devices()) < 2, reason="two devices: XLA_FLAGS=--xla_force_host_platform_device_count=2")
def test_two_devices_reach_the_weights_of_one(records, uninterrupted, tmp_path):
    """Dropout included: JAX's partitionable threefry (jax_threefry_partitionable, the default since jax 0.5) draws
    the same mask for the global batch however it is sharded."""
    one, _, _, _ = uninterrupted
    two, _ = _fit(records, tmp_path, devices=2)
    assert len(two.weights[0].value.sharding.device_set) == 2
    for a, b in zip(_weights(one), _weights(two)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_bfloat16_with_gradient_accumulation_stays_finite(records, tmp_path):
    build = _builder(dtype="mixed_bfloat16", gradient_accumulation_steps=2)
    model, history = _fit(records, tmp_path, build=build, steps=3)
    assert model.dtype_policy.compute_dtype == "bfloat16"
    assert int(model.optimizer.iterations) == 3
    assert np.isfinite(history.history["loss"][0])
    assert all(np.all(np.isfinite(w)) for w in _weights(model))
    with open(os.path.join(newest_checkpoint(tmp_path), PROGRESS_FILE)) as f:
        assert json.load(f)["batch_size"] == BATCH // 2


@pytest.mark.slow
def test_a_pre_layer_norm_model_trains_and_resumes(records, tmp_path):
    """norm_placement=pre with ModernBERT's choices (no attention norm in block 0, GeGLU, no biases) through
    kbert.fit_pretraining: the loss falls, and the run resumes from its checkpoint with every weight as saved."""
    config = CONFIG.replace(
        norm_placement="pre", first_block_attention_norm=False, feed_forward="gated", use_bias=False
    )

    def build():
        model = BertPretrainer(config)
        model.compile(optimizer=LAMB(1e-2))
        return model

    losses = _Losses()
    model, _ = _fit(records, tmp_path, build=build, steps=16, callbacks=[losses])
    assert model.encoder.final_layer_norm is not None and model.encoder.blocks[0].attention_layer_norm is None
    assert np.mean(losses.losses[-4:]) < np.mean(losses.losses[:4])
    resumed, history = _fit(records, tmp_path, build=build, steps=16)
    assert int(resumed.optimizer.iterations) == 16 and not history.history  # nothing left to train
    for a, b in zip(_weights(model), _weights(resumed)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_modernbert_class_model_trains_on_mlm_only_records(tmp_path):
    """Rotary positions, local layers, GeGLU, no biases, no sentence head, through kbert.fit_pretraining under
    JAX on records of one segment without sentence labels: the loss falls."""
    instances = make_instances(64, SEQ, PRED, VOCAB, seed=5)
    for instance in instances:
        del instance["next_sentence_labels"]
        instance["segment_ids"] = [0] * SEQ
    write_records(tmp_path / "mlm.tfrecord", instances)
    config = BertConfig.load("modernbert_tiny").replace(
        vocab_size=VOCAB,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=48,
        num_hidden_layers=3,
        max_position_embeddings=SEQ,
        local_attention=8,
    )

    def build():
        model = BertPretrainer(config)
        model.compile(optimizer=LAMB(1e-2))
        return model

    losses = _Losses()
    _fit(str(tmp_path / "mlm.tfrecord"), tmp_path / "run", build=build, steps=16, callbacks=[losses])
    assert np.mean(losses.losses[-4:]) < np.mean(losses.losses[:4])


def test_skip_batches_continues_the_data_of_the_same_seed(records):
    def batches(skip, count):
        dataset = fit_dataset(records, SEQ, PRED, BATCH, seed=3, skip_batches=skip, shuffle_buffer=32)
        return [batch["input_ids"] for batch in dataset.take(count).as_numpy_iterator()]

    whole, rest = batches(0, 20), batches(17, 3)
    for a, b in zip(whole[17:], rest):
        np.testing.assert_array_equal(a, b)  # past the 16 batches of one pass: the second pass's order too


@pytest.mark.spawns
def test_kbert_pretrain_says_it_is_the_tensorflow_engine(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "kbert.run_pretraining", f"--model_dir={tmp_path}"],
        env=cli_env(KERAS_BACKEND="jax"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("kbert-pretrain:")]
    assert len(lines) == 1 and lines[0].startswith("kbert-pretrain: error: KERAS_BACKEND=jax: "), result.stderr
    assert "kbert.fit_pretraining.fit_pretraining" in lines[0] and "docs/jax.md" in lines[0]
