import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.modeling import (BertConfig, BertEncoder, BertPretrainer, CheckpointMismatchError,
                            export_google_checkpoint, load_google_checkpoint, pretraining_loss_terms,
                            pretraining_metrics)
from numpy_bert import encode, google_weights, pretrain_logits, random_batch

TINY = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def randomize(model, seed=0, scale=0.3):
    """Weights far from their init (LayerNorm gains near 1, other weights O(scale)) so every term matters."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        base = 1.0 if v.path.endswith("gamma") else 0.0
        v.assign(base + scale * rng.standard_normal(v.shape).astype(np.float32))


@pytest.fixture
def model():
    m = BertPretrainer(TINY)
    randomize(m)
    return m


def test_forward_matches_float64_numpy_reference(model):
    batch = random_batch(np.random.default_rng(1), TINY)
    out = model(batch)
    encoded = model.encoder(batch)
    w = google_weights(model)
    ref_layers, ref_pooled = encode(w, TINY, batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    ref_mlm, ref_nsp = pretrain_logits(w, TINY, batch)
    for got, ref in zip(encoded["encoder_outputs"], ref_layers):
        np.testing.assert_allclose(got.numpy(), ref, atol=1e-5, rtol=0)
    np.testing.assert_allclose(encoded["pooled_output"].numpy(), ref_pooled, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["nsp_logits"].numpy(), ref_nsp, atol=1e-5, rtol=0)
    # Vocabulary logits sum over hidden_size products of O(1) values: compare relative to their scale.
    np.testing.assert_allclose(out["mlm_logits"].numpy(), ref_mlm, atol=1e-5 * np.abs(ref_mlm).max(), rtol=0)


def test_loss_matches_reference_formula(model):
    batch = random_batch(np.random.default_rng(2), TINY)
    metrics = pretraining_metrics(pretraining_loss_terms(batch, model(batch)))
    mlm, nsp = pretrain_logits(google_weights(model), TINY, batch)
    log_softmax = lambda z: z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
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


def test_padding_does_not_change_real_tokens(model):
    batch = random_batch(np.random.default_rng(3), TINY)
    changed = dict(batch)
    ids = batch["input_ids"].copy()
    ids[batch["input_mask"] == 0] = 7
    changed["input_ids"] = ids
    a = model.encoder(batch)["sequence_output"].numpy()
    b = model.encoder(changed)["sequence_output"].numpy()
    real = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(a[real], b[real], atol=1e-6)
    np.testing.assert_allclose(model(batch)["mlm_logits"].numpy(), model(changed)["mlm_logits"].numpy(), atol=1e-5)


def test_google_checkpoint_from_tf1_names_matches_reference(tmp_path):
    """A TF1-named checkpoint written from random arrays (no optimizer slots) loads and reproduces the reference."""
    donor = BertPretrainer(TINY)
    randomize(donor, seed=5)
    arrays = google_weights(donor)
    path = str(tmp_path / "bert_model.ckpt")
    names = sorted(arrays)
    tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[n], tf.float32) for n in names] )
    model = BertPretrainer(TINY)
    report = load_google_checkpoint(model, path)
    assert len(report["loaded"]) == len(names) and not report["missing"]
    batch = random_batch(np.random.default_rng(4), TINY)
    ref_mlm, ref_nsp = pretrain_logits(arrays, TINY, batch)
    out = model(batch)
    np.testing.assert_allclose(out["nsp_logits"].numpy(), ref_nsp, atol=1e-5)
    np.testing.assert_allclose(out["mlm_logits"].numpy(), ref_mlm, atol=1e-5 * np.abs(ref_mlm).max())


def test_export_and_reload_round_trip(model, tmp_path):
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


def test_an_export_is_found_after_its_folder_moves(model, tmp_path):
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
        "check that bert_config.json matches the checkpoint (strict=False loads a partial match).")
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


def test_keras_save_load_round_trip(model, tmp_path):
    batch = random_batch(np.random.default_rng(6), TINY)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertPretrainer) and restored.config == TINY
    np.testing.assert_allclose(restored(batch)["mlm_logits"].numpy(), model(batch)["mlm_logits"].numpy(), atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_forward_backward_is_finite(policy):
    model = BertPretrainer(TINY, dtype=policy)
    batch = random_batch(np.random.default_rng(7), TINY)
    assert model.encoder.blocks[0].attention.query.compute_dtype == policy.split("_")[1]
    assert all(v.dtype == "float32" for v in model.weights)
    with tf.GradientTape() as tape:
        out = model(batch, training=True)
        loss = pretraining_metrics(pretraining_loss_terms(batch, out))["loss"]
    assert out["mlm_logits"].dtype == tf.float32 and out["nsp_logits"].dtype == tf.float32
    grads = tape.gradient(loss, model.trainable_variables)
    assert np.isfinite(float(loss)) and all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads)
    # Close to float32: bf16 has ~3 significant digits.
    f32 = BertPretrainer(TINY)
    f32.set_weights(model.get_weights())
    ref = float(pretraining_metrics(pretraining_loss_terms(batch, f32(batch)))["loss"])
    assert abs(float(loss) - ref) < 0.05 * abs(ref)


def test_fit_lowers_loss_on_repeated_batch():
    keras.utils.set_random_seed(0)
    model = BertPretrainer(TINY)
    batch = random_batch(np.random.default_rng(8), TINY, batch_size=4)
    ds = tf.data.Dataset.from_tensors(batch).repeat(40)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = model.fit(ds, epochs=1, verbose=0)
    first = model.evaluate(tf.data.Dataset.from_tensors(batch), verbose=0, return_dict=True)
    assert set(history.history) >= {"loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                                    "next_sentence_loss"}
    assert history.history["loss"][0] < 5.0  # chance for vocab 97 is ln(97) + ln(2) = 5.27
    assert first["masked_lm_accuracy"] > 0.5


def test_stop_gradient_below_cuts_the_backward_pass():
    model = BertPretrainer(TINY, stop_gradient_below=1)
    batch = random_batch(np.random.default_rng(9), TINY)
    with tf.GradientTape() as tape:
        loss = pretraining_metrics(pretraining_loss_terms(batch, model(batch)))["loss"]
    grads = dict(zip([v.path for v in model.trainable_variables], tape.gradient(loss, model.trainable_variables)))
    assert grads["bert/layer_0/attention/query/kernel"] is None
    assert grads["bert/layer_1/attention/query/kernel"] is not None
    # The tied embedding table still learns through the MLM output projection.
    assert grads["bert/embeddings/word_embeddings/embeddings"] is not None
    assert grads["bert/embeddings/position_embeddings/embeddings"] is None


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
    for name, (layers, hidden) in {"bert_tiny": (2, 128), "bert_mini": (4, 256), "bert_small": (4, 512),
                                   "bert_medium": (8, 512), "bert_base": (12, 768),
                                   "bert_large": (24, 1024)}.items():
        config = BertConfig.load(name)
        assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
                config.intermediate_size) == (layers, hidden, hidden // 64, 4 * hidden)
        assert BertConfig.from_json_file(os.path.join(REPO, "configs", "models", f"{name}.json")) == config


def test_tf_train_checkpoint_saves_and_restores_every_weight(model, tmp_path):
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    stored = [n for n, _ in tf.train.list_variables(path) if n.endswith("VARIABLE_VALUE")]
    assert len(stored) == len(model.weights)
    other = BertPretrainer(TINY)
    tf.train.Checkpoint(model=other).read(path).assert_consumed()
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
