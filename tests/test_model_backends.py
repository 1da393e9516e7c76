"""kbert's model on the Keras backend KERAS_BACKEND selects (tools/test.sh runs this file under TensorFlow and JAX):
BertPretrainer against a float64 NumPy BERT on a padded and a packed batch, and against itself under the other
backend; BertEncoder, BertPretrainer and BertClassifier trained with model.fit and kbert's LAMB, and saved and
loaded as .keras; dropout; and that importing kbert.modeling and kbert.optimizers under JAX leaves TensorFlow
unimported."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from model_fixtures import (
    SEQ,
    TINY,
    inference_outputs,
    pack,
    packed_slots,
    randomize,
    tiny_pretrainer,
    to_numpy,
    unpacked,
)
from numpy_bert import encode, google_weights, pretrain_logits, random_batch

from kbert.modeling import BertConfig, BertEncoder, BertPretrainer, MaskedLMHead, NextSentenceHead, google_variable_map
from kbert.modeling.attention import SelfAttention
from kbert.modeling.packing import attention_mask
from kbert.optimizers import LAMB

BACKEND = keras.backend.backend()
OTHER = "jax" if BACKEND == "tensorflow" else "tensorflow"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
DROPOUT = TINY.replace(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)

pytestmark = pytest.mark.usefixtures("float32_policy")


@pytest.fixture
def model():
    return tiny_pretrainer()


def _padded(seed):
    """Two padded rows: the packed batch's shapes, so that JAX compiles its eager ops once for both."""
    return random_batch(np.random.default_rng(seed), TINY, batch_size=2)


def _close(got, ref, err_msg="", stream=None):
    """Within 1e-5 (`stream` None: BERT's post-LayerNorm blocks keep every value near 1), or else float32's rounding
    of the largest value the tensor was computed from: its own, or the residual stream's (`stream`, the largest
    |x| of the blocks' outputs it comes from). A pre-LayerNorm residual stream is not normalised and its values grow
    with depth (|x| ~ 15 here), their rounding with them; the final norm and the heads carry that rounding on, and
    how much of it depends on the CPU's float32 kernels (AMD's EPYC rounds the modern model's packed logits to
    1.9e-5 of the float64 ones, over a bound of 3e-6 of their own magnitude)."""
    atol = 1e-5 if stream is None else max(1e-5, 3e-6 * max(float(np.abs(ref).max()), stream))
    np.testing.assert_allclose(got, ref, atol=atol, rtol=0, err_msg=err_msg)


def _largest(ref_layers) -> float:
    return max(float(np.abs(ref).max()) for ref in ref_layers)


def _matches_reference(model, config, batch, to_scale=False):
    """On a padded `batch`: every layer's output at every token, the pooled output and both heads' logits; to float32's
    rounding of the residual stream where `to_scale` (`_close`)."""
    out = inference_outputs(model, batch)
    w = google_weights(model)
    ref_layers, ref_sequence, ref_pooled = encode(
        w, config, batch["input_ids"], batch["input_mask"], batch["segment_ids"]
    )
    ref_mlm, ref_nsp = pretrain_logits(w, config, batch)
    for i, ref in enumerate(ref_layers):
        _close(out[f"layer_{i}"], ref, f"layer_{i}", _largest(ref_layers[: i + 1]) if to_scale else None)
    stream = _largest(ref_layers) if to_scale else None
    _close(out["sequence_output"], ref_sequence, stream=stream)
    assert ("pooled_output" in out, "nsp_logits" in out) == (ref_pooled is not None, ref_nsp is not None)
    if ref_pooled is not None:
        _close(out["pooled_output"], ref_pooled, stream=stream)
        _close(out["nsp_logits"], ref_nsp, stream=stream)
    _close(out["mlm_logits"], ref_mlm, stream=stream)


def test_forward_matches_float64_numpy_reference(model):
    """A padded batch: every layer's output at every token, the pooled output and both heads' logits."""
    _matches_reference(model, TINY, _padded(1))


def test_packed_forward_matches_float64_numpy_reference_of_each_sequence(model):
    """A packed batch (block-diagonal attention, position ids restarting): each sequence's tokens, masked-LM and
    next-sentence logits equal the float64 reference of that sequence in a padded row of its own."""
    batch = unpacked()
    out = inference_outputs(model, pack(batch))
    w = google_weights(model)
    ref_layers, _, _ = encode(w, TINY, batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    ref_mlm, ref_nsp = pretrain_logits(w, TINY, batch)
    for row, slot, source, offset, length, predicted, count in packed_slots(batch):
        where = f"row {row} slot {slot}"
        for i, ref in enumerate(ref_layers):
            _close(out[f"layer_{i}"][row, offset : offset + length], ref[source, :length], f"layer_{i}, {where}")
        _close(out["mlm_logits"][row, predicted : predicted + count], ref_mlm[source, :count], where)
        _close(out["nsp_logits"][row, slot], ref_nsp[source], where)


# Compositions of the block's parts beyond Google's BERT (kbert.modeling.transformer_block), each against the
# float64 reference: pre-LayerNorm; ModernBERT's choices (pre, no attention norm in block 0, GeGLU, no biases);
# a gated feed-forward after post-LayerNorm blocks with unnormalised embeddings.
COMPOSITIONS = {
    "pre": TINY.replace(norm_placement="pre"),
    "pre_gated_no_bias": TINY.replace(
        norm_placement="pre",
        first_block_attention_norm=False,
        feed_forward="gated",
        use_bias=False,
        hidden_act="gelu_approximate",
    ),
    "post_gated_no_embedding_norm": TINY.replace(feed_forward="gated", embedding_layer_norm=False),
    # ModernBERT's (its preset at TINY's widths): rotary positions (another base in local layers), a band of 7 tokens
    # in blocks 1 and 3, no position or segment table, no sentence head, a head without biases.
    "modern": BertConfig.load("modernbert_tiny").replace(
        **{k: getattr(TINY, k) for k in ("vocab_size", "hidden_size", "num_attention_heads", "intermediate_size")},
        num_hidden_layers=4,
        max_position_embeddings=TINY.max_position_embeddings,
        local_attention=6,
        global_attn_every_n_layers=2,
    ),
}


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_every_composition_of_parts_matches_float64_numpy_reference(name):
    """Padded and packed batches: every block's output, the pooled output and both heads' logits; every weight is
    named once, and the parts' parameter counts add up to the model's weights."""
    config = COMPOSITIONS[name]
    model = BertPretrainer(config)
    randomize(model)
    assert sorted(w.path for w in model.weights) == sorted(v.path for v, _ in google_variable_map(model).values())
    costs = BertEncoder.cost(config, SEQ)
    parts = costs["embeddings"] + costs["final_norm"] + costs["pooler"]
    parts += MaskedLMHead.cost(config, 1) + NextSentenceHead.cost(config)
    parameters = parts.parameters + sum(cost.parameters for cost in costs["blocks"])
    assert parameters == sum(int(np.prod(w.shape)) for w in model.weights)
    for part in (model.encoder.embeddings, *model.encoder.blocks):  # explicit hyperparameters, a full config
        again = type(part).from_config(part.get_config())
        assert again.get_config() == part.get_config()
        again.build()
        assert [w.shape for w in again.weights] == [w.shape for w in part.weights]
    _matches_reference(model, config, _padded(3), to_scale=True)
    batch = unpacked()
    out = inference_outputs(model, pack(batch))
    w = google_weights(model)
    ref_layers, _, _ = encode(w, config, batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    ref_mlm, ref_nsp = pretrain_logits(w, config, batch)
    for row, slot, source, _, length, predicted, count in packed_slots(batch):
        where = f"row {row} slot {slot}"
        stream = _largest(ref[source, :length] for ref in ref_layers)
        _close(out["mlm_logits"][row, predicted : predicted + count], ref_mlm[source, :count], where, stream)
        if ref_nsp is not None:
            _close(out["nsp_logits"][row, slot], ref_nsp[source], where, stream)


# Imported in turn, each then asked whether TensorFlow came with it: under JAX, none may bring it.
MODULES = ["kbert.modeling", "kbert.optimizers"]

# Runs in a process of the other backend: records what importing each of MODULES imported, loads the weights, writes
# its outputs on the saved batches, prints its backend and the record.
OTHER_BACKEND = """
import importlib, json, sys
import keras
imported = {}
for module in MODULES:
    importlib.import_module(module)
    imported[module] = "tensorflow" in sys.modules
import numpy as np
from kbert.modeling import BertConfig, BertPretrainer
from model_fixtures import inference_outputs
config, weights, batches, out = sys.argv[1:]
model = BertPretrainer(BertConfig.from_dict(json.loads(config)))
model.load_weights(weights)
stored = np.load(batches)
names = {key.split("/")[0] for key in stored.files}
results = {}
for name in names:
    batch = {key.split("/")[1]: stored[key] for key in stored.files if key.startswith(name + "/")}
    results.update({f"{name}/{k}": v for k, v in inference_outputs(model, batch).items()})
np.savez(out, **results)
print(json.dumps([keras.backend.backend(), imported]))
""".replace("MODULES", repr(MODULES))


@pytest.fixture(scope="module")
def other_backend(tmp_path_factory):
    """A tiny pretrainer, its padded and packed batches, and from a process of the other backend: its outputs on
    them from the saved weights, its backend, and whether importing each of MODULES imported TensorFlow."""
    tmp_path = tmp_path_factory.mktemp("other_backend")
    model = tiny_pretrainer()
    batches = {"padded": _padded(2), "packed": pack(unpacked())}
    weights, stored, results = (str(tmp_path / name) for name in ("model.weights.h5", "batches.npz", "out.npz"))
    model.save_weights(weights)
    np.savez(stored, **{f"{name}/{k}": v for name, batch in batches.items() for k, v in batch.items()})
    env = dict(
        os.environ,
        KERAS_BACKEND=OTHER,
        JAX_PLATFORMS="cpu",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join([ROOT, TESTS]),
    )
    run = subprocess.run(
        [sys.executable, "-c", OTHER_BACKEND, json.dumps(TINY.to_dict()), weights, stored, results],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    backend, imported = json.loads(run.stdout.splitlines()[-1])
    return model, batches, np.load(results), backend, imported


# The two tests share the other backend's process (under TensorFlow, a JAX one that answers both): one worker.
@pytest.mark.spawns
@pytest.mark.xdist_group("test_model_backends_other")
def test_the_other_backend_gives_the_same_outputs_on_the_same_weights(other_backend):
    model, batches, theirs, backend, _ = other_backend
    assert backend == OTHER
    for name, batch in batches.items():
        ours = inference_outputs(model, batch)
        assert {k for k in theirs.files if k.startswith(name + "/")} == {f"{name}/{k}" for k in ours}
        for key, value in ours.items():
            _close(theirs[f"{name}/{key}"], value, f"{name}/{key}")


def _lamb():
    return LAMB(1e-2, exclude_from_weight_decay=["layer_norm", "bias"])


def _pretrainer():
    model = BertPretrainer(DROPOUT)
    model.compile(optimizer=_lamb())
    return model, None


def _encoder():
    """The bare encoder, with a regression layer on its pooled output: a functional model."""
    inputs = {
        name: keras.Input((SEQ,), dtype="int32", name=name) for name in ("input_ids", "input_mask", "segment_ids")
    }
    encoder = BertEncoder(DROPOUT)
    assert len(encoder.weights) == len(google_variable_map(encoder))  # built on construction, every weight named
    model = keras.Model(inputs, keras.layers.Dense(1, name="regression")(encoder(inputs)["pooled_output"]))
    model.compile(optimizer=_lamb(), loss="mse")
    # Targets around 3, far from the initial outputs around 0: the fall of the loss stands above dropout's noise.
    return model, np.random.default_rng(4).normal(3.0, 1.0, size=(8, 1)).astype(np.float32)


def _classifier():
    from kbert.finetuning.model import BertClassifier  # the package kbert.finetuning imports TensorFlow

    model = BertClassifier(BertEncoder(DROPOUT), num_outputs=3)
    model.compile(optimizer=_lamb(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, np.random.default_rng(4).integers(0, 3, (8,)).astype(np.int32)


@pytest.mark.slow
@pytest.mark.parametrize("make", [_encoder, _pretrainer, _classifier], ids=["encoder", "pretrainer", "classifier"])
def test_fit_with_lamb_then_keras_save_load_gives_the_same_outputs(make, tmp_path):
    keras.utils.set_random_seed(0)
    model, y = make()
    batch = random_batch(np.random.default_rng(3), DROPOUT, batch_size=8)
    x = batch if y is None else {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    before = model.get_weights()
    history = model.fit(x, y, batch_size=4, epochs=4, shuffle=False, verbose=0).history["loss"]  # 8 steps
    assert np.all(np.isfinite(history)) and history[-1] < history[0], history
    # Every weight trained but the attention's key biases: the softmax over keys cancels them (no gradient).
    unchanged = [v.path for v, b in zip(model.weights, before) if np.allclose(to_numpy(v), b)]
    assert all(path.endswith("key/bias") for path in unchanged), unchanged
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is type(model) and type(restored.optimizer) is LAMB
    if isinstance(model, BertPretrainer):
        assert restored.config == DROPOUT
    assert len(restored.get_weights()) == len(model.get_weights())
    for a, b in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    ours, theirs = model(x, training=False), restored(x, training=False)
    for a, b in zip(keras.tree.flatten(ours), keras.tree.flatten(theirs)):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_dropout_changes_training_outputs_and_rate_zero_leaves_them():
    batch = _padded(5)
    without, with_dropout = BertPretrainer(TINY), BertPretrainer(DROPOUT)
    randomize(without)
    with_dropout.set_weights(without.get_weights())
    inference = to_numpy(without(batch, training=False)["mlm_logits"])
    np.testing.assert_array_equal(to_numpy(with_dropout(batch, training=False)["mlm_logits"]), inference)
    np.testing.assert_array_equal(to_numpy(without(batch, training=True)["mlm_logits"]), inference)
    first, second = (to_numpy(with_dropout(batch, training=True)["mlm_logits"]) for _ in range(2))
    assert not np.allclose(first, inference) and not np.allclose(second, first)  # a new mask every call


def test_classifier_dropout_applies_only_in_training():
    from kbert.finetuning.model import BertClassifier

    batch = _padded(5)
    encoder = BertEncoder(TINY)
    randomize(encoder)
    zero, half = BertClassifier(encoder, 3, dropout=0.0), BertClassifier(encoder, 3, dropout=0.5)
    half.classifier.set_weights(zero.classifier.get_weights())
    inference = to_numpy(zero(batch, training=False))
    np.testing.assert_array_equal(to_numpy(zero(batch, training=True)), inference)
    np.testing.assert_array_equal(to_numpy(half(batch, training=False)), inference)
    assert not np.allclose(to_numpy(half(batch, training=True)), inference)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_attention_without_dropout_trains_as_it_infers(packed, monkeypatch):
    """At rate 0 training runs the fused `dot_product_attention` as inference does; with a rate it runs the explicit
    softmax, whose numbers are the same when the dropout drops nothing."""
    batch = pack(unpacked()) if packed else _padded(6)
    mask = attention_mask(batch)
    hidden = keras.ops.convert_to_tensor(
        np.random.default_rng(7).normal(size=(*batch["input_ids"].shape, 32)), "float32"
    )
    fused, explicit = (
        SelfAttention(c.hidden_size, c.num_attention_heads, c.attention_probs_dropout_prob) for c in (TINY, DROPOUT)
    )
    for layer in (fused, explicit):
        layer.build((None, None, TINY.hidden_size))
    randomize(fused)
    inference = to_numpy(fused(hidden, mask, training=False))
    np.testing.assert_array_equal(to_numpy(fused(hidden, mask, training=True)), inference)
    explicit.set_weights(fused.get_weights())
    monkeypatch.setattr(explicit.dropout, "call", lambda inputs, training=False: inputs)  # rate 0.1, drops nothing
    np.testing.assert_allclose(to_numpy(explicit(hidden, mask, training=True)), inference, atol=1e-6, rtol=0)


@pytest.mark.spawns
@pytest.mark.xdist_group("test_model_backends_other")
def test_importing_kbert_modeling_and_optimizers_under_jax_leaves_tensorflow_unimported(request):
    """Each module in turn, in one JAX process: whether TensorFlow is imported after it. Under TensorFlow, that
    process is the other backend's, which imports them first; under JAX, one of its own."""
    if OTHER == "jax":
        _, _, _, backend, imported = request.getfixturevalue("other_backend")
    else:
        code = (
            "import importlib, json, sys, keras\n"
            "imported = {}\n"
            f"for module in {MODULES!r}:\n"
            "    importlib.import_module(module)\n"
            "    imported[module] = 'tensorflow' in sys.modules\n"
            "print(json.dumps([keras.backend.backend(), imported]))"
        )
        run = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"),
        )
        assert run.returncode == 0, run.stderr[-3000:]
        backend, imported = json.loads(run.stdout.splitlines()[-1])
    assert [backend, imported] == ["jax", {m: False for m in MODULES}]
