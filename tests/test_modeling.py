"""BertPretrainer's loss, padding, Google checkpoints, mixed precision, training and config, on the Keras backend
KERAS_BACKEND selects (tools/test.sh runs it under TensorFlow and JAX). Google's checkpoint files are TensorFlow's
format, so those tests import TensorFlow on any backend; tf.train.Checkpoint runs on TensorFlow only. The forward
pass against the float64 NumPy reference is tests/test_model_backends.py's."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from model_fixtures import TINY, randomize, tiny_pretrainer, to_numpy
from numpy_bert import google_weights, pretrain_logits, random_batch

from kbert.modeling import (
    BertConfig,
    BertEncoder,
    BertPretrainer,
    CheckpointMismatchError,
    export_google_checkpoint,
    load_google_checkpoint,
    pretraining_loss_terms,
    pretraining_metrics,
)

BACKEND = keras.backend.backend()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def model():
    return tiny_pretrainer()


@pytest.fixture
def tf():
    """TensorFlow, for Google's checkpoint files (kbert reads and writes them with it on every backend)."""
    import tensorflow

    return tensorflow


def _loss_and_gradients(model, batch):
    """(outputs, loss, gradients of `model.trainable_variables`) of one training-mode pass: TensorFlow's tape (None
    where no gradient flows) or jax.grad over `stateless_call` (zeros there)."""
    loss_of = lambda outputs: pretraining_metrics(pretraining_loss_terms(batch, outputs))["loss"]
    if BACKEND == "jax":
        import jax

        non_trainable = [v.value for v in model.non_trainable_variables]

        def loss(trainable):
            outputs, _ = model.stateless_call(trainable, non_trainable, batch, training=True)
            return loss_of(outputs), outputs

        step = jax.jit(jax.value_and_grad(loss, has_aux=True))  # one compilation, not one per eager op
        (value, outputs), grads = step([v.value for v in model.trainable_variables])
        return outputs, value, grads
    if BACKEND != "tensorflow":
        pytest.skip(f"no gradient helper for the {BACKEND} backend")
    import tensorflow as tf

    with tf.GradientTape() as tape:
        outputs = model(batch, training=True)
        value = loss_of(outputs)
    return outputs, value, tape.gradient(value, model.trainable_variables)


def _no_gradient(grad):
    """Nothing flows back to the variable: TensorFlow's tape gives None, jax.grad zeros."""
    return grad is None if BACKEND == "tensorflow" else not np.any(to_numpy(grad))


def test_every_random_weight_starts_from_its_own_draw():
    """No two initialised weights share values, not even as a prefix: a Keras 3 initializer shared by two layers
    gives both the same draw (query = key = value, position rows = the first word rows), which Model Garden and
    keras-hub avoid by cloning theirs per layer."""
    keras.utils.set_random_seed(3)
    model = BertPretrainer(TINY)
    drawn = {v.path: to_numpy(v).ravel() for v in model.weights if np.std(to_numpy(v)) > 0}
    assert len(drawn) == 3 + 6 * TINY.num_hidden_layers + 3  # embeddings, each block's kernels, pooler and heads
    names = sorted(drawn)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            n = min(drawn[a].size, drawn[b].size)
            assert not np.array_equal(drawn[a][:n], drawn[b][:n]), (a, b)


def test_the_pretrainer_draws_its_sentence_head_as_model_garden_and_the_encoder_alone_as_bert():
    """The pretrainer's pooler and next-sentence classifier are glorot-uniform, as Model Garden's sentence head
    (the 8-layer plateau in docs/results/time_to_accuracy.md); every other kernel, and a bare encoder's pooler (what
    fine-tuning from scratch starts from), is BERT's truncated normal at initializer_range."""
    keras.utils.set_random_seed(3)
    model, encoder = BertPretrainer(TINY), BertEncoder(TINY)
    h = TINY.hidden_size
    glorot = {
        "bert/pooler/kernel": np.sqrt(2 / (h + h)),
        "seq_relationship/seq_relationship/kernel": np.sqrt(2 / (h + 2)),
    }
    for variable in model.weights:
        std = np.std(to_numpy(variable))
        if variable.path in glorot:
            assert std == pytest.approx(glorot[variable.path], rel=0.3), variable.path
        elif variable.path.endswith(("kernel", "embeddings")):
            assert std == pytest.approx(0.88 * TINY.initializer_range, rel=0.1), variable.path
    assert np.std(to_numpy(encoder.pooler.kernel)) == pytest.approx(0.88 * TINY.initializer_range, rel=0.1)
    assert BertEncoder.from_config(model.encoder.get_config()).pooler_initializer == "glorot_uniform"


def test_loss_matches_reference_formula(model):
    batch = random_batch(np.random.default_rng(2), TINY)
    metrics = pretraining_metrics(pretraining_loss_terms(batch, model(batch)))
    mlm, nsp = pretrain_logits(google_weights(model), TINY, batch)
    log_softmax = lambda z: (
        z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    )
    ce = -np.take_along_axis(log_softmax(mlm), batch["masked_lm_ids"][..., None].astype(np.int64), -1)[..., 0]
    w = batch["masked_lm_weights"]
    mlm_loss = (w * ce).sum() / (w.sum() + 1e-5)
    labels = batch["next_sentence_labels"][:, 0]
    nsp_loss = -log_softmax(nsp)[np.arange(len(labels)), labels].mean()
    np.testing.assert_allclose(float(metrics["masked_lm_loss"]), mlm_loss, rtol=1e-4)
    np.testing.assert_allclose(float(metrics["next_sentence_loss"]), nsp_loss, rtol=1e-4)
    np.testing.assert_allclose(float(metrics["loss"]), mlm_loss + nsp_loss, rtol=1e-4)
    mlm_acc = (w * (mlm.argmax(-1) == batch["masked_lm_ids"])).sum() / w.sum()
    np.testing.assert_allclose(float(metrics["masked_lm_accuracy"]), mlm_acc, rtol=1e-6)


def test_a_hit_is_a_label_strictly_above_every_other_token():
    """Distinct scores: argmax's hits. A tie at the top is a miss, constant logits score 0, a NaN score never hits;
    the labels' shape stays."""
    from kbert.modeling.losses import top1_hits

    logits = np.array([[[0.1, 0.7, 0.2], [0.5, 0.5, -1.0]], [[0.3, 0.2, 0.1], [np.nan, 0.0, 0.0]]], "float32")
    labels = np.array([[1, 1], [2, 0]], "int32")
    np.testing.assert_array_equal(to_numpy(top1_hits(labels, logits)), [[1.0, 0.0], [0.0, 0.0]])
    constant = np.zeros((3, 4, 50), "float32")
    np.testing.assert_array_equal(to_numpy(top1_hits(np.arange(12).reshape(3, 4), constant)), np.zeros((3, 4)))
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(4, 6, 50)).astype("float32"), rng.integers(0, 50, (4, 6)).astype("int32")
    labels[:, 0] = logits[:, 0].argmax(-1)
    np.testing.assert_array_equal(to_numpy(top1_hits(labels, logits)), logits.argmax(-1) == labels)


def test_constant_logits_score_accuracy_zero():
    """The metrics a run reports and stops on: a model that scores every class alike is right nowhere."""
    from kbert.modeling.losses import pretraining_loss_terms, pretraining_metrics

    batch = {
        "input_ids": np.ones((2, 8), "int32"),
        "masked_lm_ids": np.array([[3, 4], [5, 0]], "int32"),
        "masked_lm_weights": np.array([[1.0, 1.0], [1.0, 0.0]], "float32"),
        "next_sentence_labels": np.array([[0], [1]], "int32"),
    }
    outputs = {"mlm_logits": np.zeros((2, 2, 16), "float32"), "nsp_logits": np.zeros((2, 2), "float32")}
    metrics = pretraining_metrics(pretraining_loss_terms(batch, outputs))
    assert float(metrics["masked_lm_accuracy"]) == 0.0
    assert float(metrics["next_sentence_accuracy"]) == 0.0


def test_cross_entropy_of_a_label_outside_the_logits_is_never_finite():
    """On GPUs the gather reads 0 for an out-of-range label; the loss must still be NaN (or the op fail, as TF's
    CPU gather does), never a finite number the run would train on."""
    from kbert.modeling.losses import sparse_cross_entropy

    logits = np.random.default_rng(0).normal(size=(2, 3, 7)).astype("float32")
    for bad in (7, 9, -1):
        labels = np.array([[0, 1, 2], [3, bad, 5]], "int32")
        try:
            values = to_numpy(sparse_cross_entropy(labels, logits))
        except Exception as error:  # TensorFlow's CPU gather refuses the index
            assert "InvalidArgument" in type(error).__name__ or "indices" in str(error), error
            continue
        assert np.isnan(values[1, 1]), values
        assert np.isfinite(np.delete(values.ravel(), 4)).all(), values


def test_cross_entropy_and_its_gradient_match_float64():
    """The written-out gradient is softmax minus the one-hot, times the upstream weights; large logits stay finite."""
    from kbert.modeling.losses import sparse_cross_entropy

    rng = np.random.default_rng(4)
    logits = (rng.normal(size=(3, 4, 29)) * 4).astype("float32")
    logits[0, 0, 5] = 300.0  # exp() of it overflows float32 unless the maximum is taken out first
    labels = rng.integers(0, 29, (3, 4)).astype("int32")
    weights = rng.uniform(size=(3, 4)).astype("float32")
    weights[2, 3] = 0.0
    z = logits.astype(np.float64)
    log_probs = z - z.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    expected_ce = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    expected_grad = (np.exp(log_probs) - np.eye(29)[labels]) * weights[..., None]
    weighted = lambda x: keras.ops.sum(sparse_cross_entropy(labels, x) * weights)
    if BACKEND == "jax":
        import jax

        grad = jax.grad(weighted)(logits)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        x = tf.constant(logits)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = weighted(x)
        grad = tape.gradient(value, x)
    else:
        pytest.skip(f"no gradient helper for the {BACKEND} backend")
    np.testing.assert_allclose(to_numpy(sparse_cross_entropy(labels, logits)), expected_ce, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(grad), expected_grad, atol=1e-6)


def test_padding_does_not_change_real_tokens(model):
    batch = random_batch(np.random.default_rng(3), TINY)
    changed = dict(batch)
    ids = batch["input_ids"].copy()
    ids[batch["input_mask"] == 0] = 7
    changed["input_ids"] = ids
    a = to_numpy(model.encoder(batch)["sequence_output"])
    b = to_numpy(model.encoder(changed)["sequence_output"])
    real = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(a[real], b[real], atol=1e-6)
    np.testing.assert_allclose(to_numpy(model(batch)["mlm_logits"]), to_numpy(model(changed)["mlm_logits"]), atol=1e-5)


def test_google_checkpoint_from_tf1_names_matches_reference(tmp_path, tf):
    """A TF1-named checkpoint written from random arrays (no optimizer slots) loads and reproduces the reference."""
    donor = BertPretrainer(TINY)
    randomize(donor, seed=5)
    arrays = google_weights(donor)
    path = str(tmp_path / "bert_model.ckpt")
    names = sorted(arrays)
    tf.raw_ops.SaveV2(
        prefix=path,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(arrays[n], tf.float32) for n in names],
    )
    model = BertPretrainer(TINY)
    report = load_google_checkpoint(model, path)
    assert len(report["loaded"]) == len(names) and not report["missing"]
    batch = random_batch(np.random.default_rng(4), TINY)
    ref_mlm, ref_nsp = pretrain_logits(arrays, TINY, batch)
    out = model(batch)
    np.testing.assert_allclose(to_numpy(out["nsp_logits"]), ref_nsp, atol=1e-5)
    np.testing.assert_allclose(to_numpy(out["mlm_logits"]), ref_mlm, atol=1e-5 * np.abs(ref_mlm).max())


def test_export_and_reload_round_trip(model, tmp_path, tf):
    path = export_google_checkpoint(model, str(tmp_path / "export" / "bert_model.ckpt"))
    assert BertConfig.from_json_file(str(tmp_path / "export" / "bert_config.json")) == TINY
    reader = tf.train.load_checkpoint(str(tmp_path / "export"))
    assert reader.get_variable_to_shape_map()["cls/seq_relationship/output_weights"] == [2, TINY.hidden_size]
    assert "bert/encoder/layer_1/attention/self/query/kernel" in reader.get_variable_to_shape_map()
    other = BertPretrainer(TINY)
    load_google_checkpoint(other, path)
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    encoder = BertEncoder(TINY)  # encoder-only loads bert/ and ignores the heads
    load_google_checkpoint(encoder, path)
    np.testing.assert_array_equal(encoder.pooler.kernel.numpy(), model.encoder.pooler.kernel.numpy())


def test_an_export_is_found_after_its_folder_moves(model, tmp_path, tf):
    export_google_checkpoint(model, str(tmp_path / "export" / "bert_model.ckpt"))
    shutil.move(str(tmp_path / "export"), str(tmp_path / "moved"))
    assert tf.train.latest_checkpoint(str(tmp_path / "moved")) == str(tmp_path / "moved" / "bert_model.ckpt")


def test_mismatched_checkpoint_lists_every_problem(model, tmp_path):
    path = export_google_checkpoint(model, str(tmp_path / "bert_model.ckpt"))
    deeper = BertPretrainer(TINY.replace(num_hidden_layers=3, vocab_size=98))
    before = [v.numpy().copy() for v in deeper.weights]
    with pytest.raises(CheckpointMismatchError) as err:
        load_google_checkpoint(deeper, path)
    message = str(err.value)
    assert message.splitlines()[0] == (
        f"{path} does not fit the model (3 layers, hidden 32, vocab 98) (16 missing, 2 wrong-shape variables): "
        "check that bert_config.json matches the checkpoint (strict=False loads a partial match)."
    )
    assert "missing from the checkpoint (16)" in message
    assert "bert/encoder/layer_2/attention/self/query/kernel" in message
    assert "bert/embeddings/word_embeddings: checkpoint [97, 32] vs model [98, 32]" in message
    assert "cls/predictions/output_bias" in message
    for v, b in zip(deeper.weights, before):  # nothing assigned on error
        np.testing.assert_array_equal(v.numpy(), b)
    shallower = BertPretrainer(TINY.replace(num_hidden_layers=1))
    with pytest.raises(CheckpointMismatchError, match="unexpected in the checkpoint"):
        load_google_checkpoint(shallower, path)
    report = load_google_checkpoint(shallower, path, strict=False)
    assert "bert/encoder/layer_1/output/dense/kernel" in report["unexpected"]
    with pytest.raises(FileNotFoundError, match="No TF checkpoint"):
        load_google_checkpoint(model, str(tmp_path / "nothing"))


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_forward_backward_is_finite(policy):
    model = BertPretrainer(TINY, dtype=policy)
    batch = random_batch(np.random.default_rng(7), TINY)
    assert model.encoder.blocks[0].attention.query.compute_dtype == policy.split("_")[1]
    assert all(v.dtype == "float32" for v in model.weights)
    out, loss, grads = _loss_and_gradients(model, batch)
    assert {keras.backend.standardize_dtype(out[k].dtype) for k in ("mlm_logits", "nsp_logits")} == {"float32"}
    assert np.isfinite(float(loss)) and all(np.isfinite(to_numpy(g)).all() for g in grads)
    # Close to float32: bf16 has ~3 significant digits.
    f32 = BertPretrainer(TINY)
    f32.set_weights(model.get_weights())
    ref = float(pretraining_metrics(pretraining_loss_terms(batch, f32(batch)))["loss"])
    assert abs(float(loss) - ref) < 0.05 * abs(ref)


def test_fit_lowers_loss_on_repeated_batch():
    keras.utils.set_random_seed(0)
    model = BertPretrainer(TINY)
    batch = random_batch(np.random.default_rng(8), TINY, batch_size=4)
    repeated = {k: np.concatenate([v] * 40) for k, v in batch.items()}  # 40 steps of the same 4 rows
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = model.fit(repeated, batch_size=4, epochs=1, shuffle=False, verbose=0)
    first = model.evaluate(batch, batch_size=4, verbose=0, return_dict=True)
    assert set(history.history) >= {
        "loss",
        "masked_lm_accuracy",
        "masked_lm_loss",
        "next_sentence_accuracy",
        "next_sentence_loss",
    }
    assert history.history["loss"][0] < 5.0  # chance for vocab 97 is ln(97) + ln(2) = 5.27
    assert first["masked_lm_accuracy"] > 0.5


def test_stop_gradient_below_cuts_the_backward_pass():
    model = BertPretrainer(TINY, stop_gradient_below=1)
    batch = random_batch(np.random.default_rng(9), TINY)
    grads = dict(zip([v.path for v in model.trainable_variables], _loss_and_gradients(model, batch)[2]))
    assert _no_gradient(grads["bert/layer_0/attention/query/kernel"])
    assert not _no_gradient(grads["bert/layer_1/attention/query/kernel"])
    # The tied embedding table still learns through the MLM output projection.
    assert not _no_gradient(grads["bert/embeddings/word_embeddings/embeddings"])
    assert _no_gradient(grads["bert/embeddings/position_embeddings/embeddings"])


def test_config_validation_and_presets(tmp_path):
    with pytest.raises(ValueError, match="divisible by num_attention_heads"):
        BertConfig(hidden_size=100, num_attention_heads=12)
    with pytest.raises(ValueError, match="hidden_act='gelux'"):
        BertConfig(hidden_act="gelux")
    with pytest.raises(ValueError, match="num_hidden_layers must be a positive integer"):
        BertConfig(num_hidden_layers=0)
    bad = tmp_path / "bert_config.json"
    bad.write_text(json.dumps({"hidden_size": 128, "num_hiden_layers": 2}))
    with pytest.raises(ValueError, match=r"bert_config.json: unknown BERT config keys \['num_hiden_layers'\]"):
        BertConfig.from_json_file(str(bad))
    with pytest.raises(ValueError, match="Unknown BERT preset 'bert_huge'"):
        BertConfig.load("bert_huge")
    for name, (layers, hidden) in {
        "bert_tiny": (2, 128),
        "bert_mini": (4, 256),
        "bert_small": (4, 512),
        "bert_medium": (8, 512),
        "bert_base": (12, 768),
        "bert_large": (24, 1024),
    }.items():
        config = BertConfig.load(name)
        assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size) == (
            layers,
            hidden,
            hidden // 64,
            4 * hidden,
        )
        assert BertConfig.from_json_file(os.path.join(REPO, "configs", "models", f"{name}.json")) == config
    for name in ("modernbert_tiny", "modernbert_base", "modernbert_large"):
        config = BertConfig.load(name)
        assert config.position_embedding == "rotary" and not config.sentence_head and config.layout_changes()
        assert BertConfig.from_json_file(os.path.join(REPO, "configs", "models", f"{name}.json")) == config


def test_the_block_part_fields_are_checked_and_stay_out_of_a_google_config(tmp_path):
    with pytest.raises(ValueError, match="norm_placement='middle': choose one of"):
        BertConfig(norm_placement="middle")
    with pytest.raises(ValueError, match="feed_forward='moe': choose one of"):
        BertConfig(feed_forward="moe")
    with pytest.raises(ValueError, match="first_block_attention_norm=false needs norm_placement='pre'"):
        BertConfig(first_block_attention_norm=False)
    with pytest.raises(ValueError, match="use_bias must be true or false"):
        BertConfig(use_bias="no")
    assert set(BertConfig().to_dict()) == set(
        json.load(open(os.path.join(REPO, "configs", "models", "bert_base.json")))
    )
    pre = TINY.replace(norm_placement="pre", feed_forward="gated")
    pre.to_json_file(str(tmp_path / "bert_config.json"))
    assert BertConfig.from_json_file(str(tmp_path / "bert_config.json")) == pre
    assert pre.layout_changes() == {"norm_placement": "pre", "feed_forward": "gated"}


# The variable paths of a 1-block BertPretrainer as 00ccd6e named them, and the ones weight decay applies to:
# checkpoints key weights by path and the decay exclusions match paths, so neither may change with the parts.
PATHS_OF_00CCD6E = [
    *(
        f"bert/embeddings/{table}/embeddings"
        for table in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    ),
    "bert/embeddings/layer_norm/gamma",
    "bert/embeddings/layer_norm/beta",
    *(f"bert/layer_0/attention/{part}/{v}" for part in ("query", "key", "value") for v in ("kernel", "bias")),
    *(f"bert/layer_0/{part}/{v}" for part in ("attention_output",) for v in ("kernel", "bias")),
    "bert/layer_0/attention_layer_norm/gamma",
    "bert/layer_0/attention_layer_norm/beta",
    *(f"bert/layer_0/{part}/{v}" for part in ("intermediate", "output") for v in ("kernel", "bias")),
    "bert/layer_0/output_layer_norm/gamma",
    "bert/layer_0/output_layer_norm/beta",
    "bert/pooler/kernel",
    "bert/pooler/bias",
    "predictions/output_bias",
    "predictions/transform/kernel",
    "predictions/transform/bias",
    "predictions/layer_norm/gamma",
    "predictions/layer_norm/beta",
    "seq_relationship/seq_relationship/kernel",
    "seq_relationship/seq_relationship/bias",
]
DECAYED_IN_00CCD6E = [p for p in PATHS_OF_00CCD6E if p.endswith(("kernel", "embeddings"))]


def test_variable_paths_and_the_weights_decay_excludes_are_those_of_00ccd6e():
    from kbert.optimizers import LAMB

    model = BertPretrainer(TINY.replace(num_hidden_layers=1))
    assert [w.path for w in model.weights] == PATHS_OF_00CCD6E
    optimizer = LAMB(1e-3, weight_decay=0.01)  # kbert's default exclusions, searched in each path
    optimizer.build(model.weights)
    decayed = [w.path for w, decays in zip(model.weights, optimizer._decay_flags) if decays]
    assert decayed == DECAYED_IN_00CCD6E


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the Hugging Face and keras-hub files are read through tf.io")
def test_formats_that_hold_bert_alone_refuse_another_composition_in_one_line(tmp_path, tf):
    from kbert.errors import ConfigError
    from kbert.finetuning.hub_export import check_exportable
    from kbert.modeling.hf_checkpoint import export_hf_checkpoint, load_hf_checkpoint

    model = BertPretrainer(TINY.replace(norm_placement="pre"))
    attempts = {
        "google export": lambda: export_google_checkpoint(model, str(tmp_path / "g" / "bert_model.ckpt")),
        "google load": lambda: load_google_checkpoint(model, str(tmp_path / "g" / "bert_model.ckpt")),
        "hf export": lambda: export_hf_checkpoint(model, str(tmp_path / "hf")),
        "hf load": lambda: load_hf_checkpoint(model, str(tmp_path / "hf")),
        "keras-hub export": lambda: check_exportable(model.encoder, allow_gelu_approximation=True),
    }
    for what, attempt in attempts.items():
        with pytest.raises(ConfigError, match=r"holds Google's BERT layout only .* sets norm_placement=pre: ") as e:
            attempt()
        assert "\n" not in str(e.value) and "ckpt-N" in str(e.value), what
    assert not (tmp_path / "g").exists() and not (tmp_path / "hf").exists()  # refused before writing anything


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow only: tf.train.Checkpoint tracks tf.Variables")
def test_tf_train_checkpoint_saves_and_restores_every_weight(model, tmp_path, tf):
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    stored = [n for n, _ in tf.train.list_variables(path) if n.endswith("VARIABLE_VALUE")]
    assert len(stored) == len(model.weights)
    other = BertPretrainer(TINY)
    tf.train.Checkpoint(model=other).read(path).assert_consumed()
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
