"""kbert-export: keras-hub presets that load with keras-hub and compute kbert's encoder, the GELU rule, and the
Google format."""

import os

import keras
import keras_hub  # in the test extra: a missing one fails here, never skips the Google-format tests below
import numpy as np
import pytest
import tensorflow as tf
from cli_batch import assert_refused, run_batch
from finetuning_fixtures import vocab_file

from kbert.errors import ConfigError
from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.exporting import checkpoint_encoder, export_google
from kbert.finetuning.hub_export import check_exportable, export_preset, max_difference, sample_batch
from kbert.modeling import BertConfig, BertEncoder, BertPretrainer, export_google_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# initializer_range 0.5 puts the GELU inputs around 1, where its erf and tanh forms differ visibly.
TINY = BertConfig(
    vocab_size=200,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
    initializer_range=0.5,
)


def _encoder(hidden_act):
    keras.utils.set_random_seed(0)  # the same weights every run, so the tolerances below are not a lottery
    return BertEncoder(TINY.replace(hidden_act=hidden_act))


@pytest.fixture(scope="module")
def tanh_preset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preset")
    encoder = _encoder("gelu_approximate")
    vocab = vocab_file(tmp)
    export_preset(encoder, vocab, str(tmp / "preset"))
    return encoder, vocab, str(tmp / "preset")


def test_backbone_from_preset_computes_kbert_encoder(tanh_preset):
    encoder, _, preset = tanh_preset
    backbone = keras_hub.models.BertBackbone.from_preset(preset)
    batch = sample_batch(encoder, batch_size=3, seq_length=32)
    ours = encoder(batch, training=False)
    theirs = backbone(
        {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    )
    real = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(
        np.asarray(theirs["sequence_output"])[real], np.asarray(ours["sequence_output"])[real], atol=1e-4
    )
    np.testing.assert_allclose(theirs["pooled_output"], ours["pooled_output"], atol=1e-4)
    assert np.abs(np.asarray(ours["pooled_output"])).max() > 0.1  # not a trivially small output


def test_text_classifier_from_preset_tokenizes_like_kbert(tanh_preset):
    _, vocab, preset = tanh_preset
    classifier = keras_hub.models.BertTextClassifier.from_preset(preset, num_classes=3)
    assert classifier.predict(["w1 w2", "w3"], verbose=0).shape == (2, 3)
    pair = ("w1 W2p0 wx", "w3")  # W2p0: w2 ##p0; wx: [UNK]
    # y=None said outright: keras-hub 0.32 reads a lone tuple as (x, y).
    theirs = classifier.preprocessor((tf.constant([pair[0]]), tf.constant([pair[1]])), None)
    ours = PairEncoder(vocab, seq_length=32).encode(tf.constant([pair[0]]), tf.constant([pair[1]]))
    np.testing.assert_array_equal(theirs["token_ids"], ours["input_ids"])
    np.testing.assert_array_equal(theirs["segment_ids"], ours["segment_ids"])
    np.testing.assert_array_equal(theirs["padding_mask"], ours["input_mask"].numpy().astype(bool))


def test_erf_gelu_is_refused_unless_allowed_and_the_difference_shows(tmp_path):
    erf = _encoder("gelu")
    with pytest.raises(ConfigError, match="--allow_gelu_approximation") as raised:
        export_preset(erf, vocab_file(tmp_path), str(tmp_path / "refused"))
    assert "\n" not in str(raised.value) and not os.path.exists(tmp_path / "refused")
    backbone = export_preset(erf, vocab_file(tmp_path), str(tmp_path / "allowed"), allow_gelu_approximation=True)
    exact = _encoder("gelu_approximate")
    exact.set_weights(erf.get_weights())
    # The same function in two float32 implementations differs by rounding (about 1e-5 on outputs near 3);
    # the erf and tanh forms differ by two orders of magnitude more.
    assert max_difference(erf, backbone) > 1e-3 > 1e-4 > max_difference(exact, backbone)


@pytest.mark.parametrize("changes", [{"hidden_act": "relu"}, {"layer_norm_eps": 1e-6}])
def test_what_keras_hub_cannot_compute_is_refused(changes):
    with pytest.raises(ConfigError, match="--format=google"):
        check_exportable(BertEncoder(TINY.replace(**changes)), allow_gelu_approximation=True)


def test_google_export_of_a_kbert_checkpoint_round_trips(tmp_path):
    pretrainer = BertPretrainer(TINY)
    google = export_google_checkpoint(pretrainer, str(tmp_path / "in" / "bert_model.ckpt"))
    vocab = vocab_file(tmp_path)
    export_google(checkpoint_encoder(google, "", vocab), vocab, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out"))[:3] == [
        "bert_config.json",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index",
    ]
    again = checkpoint_encoder(str(tmp_path / "out"), "", str(tmp_path / "out" / "vocab.txt"))
    for ours, theirs in zip(again.weights, pretrainer.encoder.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.spawns
def test_cli_refuses_in_one_line(tmp_path):
    checkpoint = export_google_checkpoint(BertPretrainer(TINY), str(tmp_path / "g" / "bert_model.ckpt"))
    common = [f"--checkpoint={checkpoint}", f"--output_dir={tmp_path}/out"]
    vocab = f"--vocab_file={vocab_file(tmp_path)}"
    gelu, google_tokenizer, both = run_batch(
        "export",
        [
            [*common, vocab, "--format=keras_hub"],
            [*common, "--tokenizer=bpe", "--format=google"],
            [*common, vocab, "--tokenizer=bpe", "--format=hf"],
        ],
    )
    assert_refused(gelu, "kbert-export", "hidden_act=gelu, the exact erf GELU")
    assert_refused(google_tokenizer, "kbert-export", "--tokenizer is --format=hf's", "--format=google")
    assert_refused(both, "kbert-export", "--tokenizer and --vocab_file both name the model's tokenizer")
    assert not os.path.exists(tmp_path / "out")
