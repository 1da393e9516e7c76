"""kbert-export --format=tf_hub: preprocess/ and encoder/ load in a process that imports TensorFlow and
tensorflow-text only, tokenize as kbert and as TF Hub's BertTokenizer, pack as kbert and as Model Garden, and compute
kbert's encoder and masked LM within float32 rounding; saved_model_cli lists the signatures docs/finetuning.md
names."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from finetuning_fixtures import kbert_model_dir
from serving_fixtures import run_without_kbert
from test_serving_classifier import SAVED_MODEL_CLI
from tfrecord_fixtures import write_vocab

from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.exporting import checkpoint_pretrainer
from kbert.finetuning.pretrained import has_masked_lm_head
from kbert.finetuning.serving.tf_hub_export import export_tf_hub
from kbert.modeling import BertConfig, BertPretrainer, export_google_checkpoint

# Its tests share an expensive module-scoped fixture: one worker runs them all and builds it once
# (tools/test.sh: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_serving_tf_hub")

# Words for accents, punctuation, CJK and pieces; the rest of the vocabulary is the fixtures' w0.. and ##p0..
EXTRA_TOKENS = ["hello", "world", "cafe", "naive", "un", "##known", "##s", ",", ".", "!", "'", "中", "文", "ss"]
TEXTS = [
    "Hello, World!",
    "Café naïve résumé",
    "中文 hello中world",
    "unknown unknowns w1W2p0",
    "Straße isn't",
    "w3 " * 20,
    "",
    "ÀÉÎ w5...",
    "w7 ##p3 # w8",
]
SEQ_LENGTH, PAIR_LENGTH = 16, 12
POSITIONS = [[1, 2, 5]] * len(TEXTS)

LOAD_AND_RUN = (
    """
import tensorflow as tf
import tensorflow_text as text

export, vocab_file = arguments
a = tf.constant(TEXTS)
b = tf.constant(TEXTS[::-1])
preprocess = tf.saved_model.load(export + "/preprocess")
encoder = tf.saved_model.load(export + "/encoder")
inputs = preprocess(a)
tokens_a, tokens_b = preprocess.tokenize(a), preprocess.tokenize(b)
pair = preprocess.bert_pack_inputs([tokens_a, tokens_b], seq_length=PAIR_LENGTH)
# What TF Hub's preprocessors run: tensorflow-text's BertTokenizer over the vocabulary file, and Model Garden's
# BertPackInputs (round-robin trimming, combine_segments, pad_model_inputs).
table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
    vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)
hub_tokens = text.BertTokenizer(table, lower_case=True).tokenize(a)
special = {k: int(v) for k, v in preprocess.tokenize.get_special_tokens_dict().items()}
trimmed = text.RoundRobinTrimmer(PAIR_LENGTH - 3).trim([t.merge_dims(1, -1) for t in (tokens_a, tokens_b)])
ids, segments = text.combine_segments(trimmed, special["start_of_sequence_id"], special["end_of_segment_id"])
mg_ids, mg_mask = text.pad_model_inputs(ids, PAIR_LENGTH, special["padding_id"])
mg_types, _ = text.pad_model_inputs(segments, PAIR_LENGTH, 0)
outputs = encoder(inputs)
dropout = encoder(inputs, training=True)
mlm = encoder.mlm({**inputs, "masked_lm_positions": tf.constant(POSITIONS)})
result = {
    "inputs": {k: v.numpy().tolist() for k, v in inputs.items()},
    "tokens": tokens_a.to_list(), "hub_tokens": hub_tokens.to_list(), "special": special,
    "pair": {k: v.numpy().tolist() for k, v in pair.items()},
    "model_garden_pair": [mg_ids.numpy().tolist(), mg_mask.numpy().tolist(), mg_types.numpy().tolist()],
    "outputs": {k: tf.nest.map_structure(lambda t: t.numpy().tolist(), v) for k, v in outputs.items()},
    "dropout_pooled": dropout["pooled_output"].numpy().tolist(),
    "mlm_logits": mlm["mlm_logits"].numpy().tolist(),
    "saved_model_cli": shown,
}
""".replace("TEXTS", repr(TEXTS))
    .replace("PAIR_LENGTH", str(PAIR_LENGTH))
    .replace("POSITIONS", repr(POSITIONS))
)


@pytest.fixture(scope="module")
def hub_export(tmp_path_factory):
    """A kbert pretraining run (erf GELU, large weights) exported with its masked-LM head, the run's model, and
    what the export computes (and saved_model_cli shows of it) in a process without kbert."""
    tmp = tmp_path_factory.mktemp("tf_hub")
    vocab = str(tmp / "vocab.txt")
    tokens = write_vocab(vocab) + EXTRA_TOKENS
    with open(vocab, "w") as f:
        f.write("\n".join(tokens) + "\n")
    keras.utils.set_random_seed(0)
    # initializer_range 0.5 puts the GELU inputs around 1, where an erf and a tanh GELU would differ visibly.
    pretrainer = BertPretrainer(
        BertConfig(
            vocab_size=len(tokens),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            initializer_range=0.5,
        )
    )
    model_dir = kbert_model_dir(tmp / "pretrain", pretrainer)
    loaded, has_mlm = checkpoint_pretrainer(model_dir, "", vocab)
    difference = export_tf_hub(loaded, has_mlm, vocab, str(tmp / "export"), seq_length=SEQ_LENGTH)
    show = [str(tmp / "export" / "preprocess"), str(tmp / "export" / "encoder")]
    served = run_without_kbert(f"show_dirs = {show!r}\n" + SAVED_MODEL_CLI + LOAD_AND_RUN, str(tmp / "export"), vocab)
    return tmp, vocab, pretrainer, difference, served


@pytest.mark.spawns
def test_outputs_equal_kbert_in_a_process_without_kbert(hub_export):
    _, vocab, pretrainer, difference, served = hub_export
    ours = PairEncoder(vocab, SEQ_LENGTH)
    batch = ours.encode(tf.constant(TEXTS))
    assert served["inputs"] == {
        "input_word_ids": batch["input_ids"].numpy().tolist(),
        "input_mask": batch["input_mask"].numpy().tolist(),
        "input_type_ids": batch["segment_ids"].numpy().tolist(),
    }
    expected = pretrainer.encoder(batch, training=False)
    outputs = served["outputs"]
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(outputs[name], expected[name], atol=1e-5)
    for theirs, kbert in zip(outputs["encoder_outputs"], expected["encoder_outputs"], strict=True):
        np.testing.assert_allclose(theirs, kbert, atol=1e-5)
    assert outputs["default"] == outputs["pooled_output"] and difference < 1e-5
    assert np.abs(np.asarray(served["dropout_pooled"]) - outputs["pooled_output"]).max() > 1e-3  # training=True
    mlm = pretrainer({**batch, "masked_lm_positions": tf.constant(POSITIONS)}, training=False)["mlm_logits"]
    np.testing.assert_allclose(served["mlm_logits"], mlm, atol=1e-5)


@pytest.mark.spawns
def test_tokens_and_packing_are_kberts_and_tf_hubs(hub_export):
    _, vocab, _, _, served = hub_export
    ours = PairEncoder(vocab, PAIR_LENGTH)
    assert [sum(words, []) for words in served["tokens"]] == ours.tokenize(tf.constant(TEXTS)).to_list()
    assert served["tokens"] == served["hub_tokens"]  # words and pieces alike
    assert any(len(word) > 1 for words in served["tokens"] for word in words)  # the texts have ## pieces
    pair = ours.encode(tf.constant(TEXTS), tf.constant(TEXTS[::-1]))
    expected = [
        pair["input_ids"].numpy().tolist(),
        pair["input_mask"].numpy().tolist(),
        pair["segment_ids"].numpy().tolist(),
    ]
    assert [served["pair"][k] for k in ("input_word_ids", "input_mask", "input_type_ids")] == expected
    assert served["model_garden_pair"] == expected
    assert served["special"] == {
        "vocab_size": len(ours.vocab),
        "start_of_sequence_id": 101,
        "end_of_segment_id": 102,
        "padding_id": 0,
        "mask_id": 103,
    }


@pytest.mark.spawns
def test_saved_model_cli_lists_the_signatures_and_readme_says_the_gelu(hub_export):
    tmp, served = hub_export[0], hub_export[4]
    preprocess, encoder = served["saved_model_cli"]
    for name in ("sentences", "input_word_ids", "input_mask", "input_type_ids"):
        assert f"['{name}']" in preprocess
    for name in (
        "input_word_ids",
        "input_mask",
        "input_type_ids",
        "default",
        "pooled_output",
        "sequence_output",
        "encoder_outputs_0",
        "encoder_outputs_1",
    ):
        assert f"['{name}']" in encoder
    assert "signature_def['serving_default']" in preprocess and "signature_def['serving_default']" in encoder
    readme = (tmp / "export" / "README.md").read_text()
    assert "hidden_act=gelu`, the exact erf GELU" in readme and "tf-models-official 2.20.0" in readme


def test_masked_lm_head_is_found_only_where_the_checkpoint_has_it(tmp_path):
    pretrainer = BertPretrainer(
        BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    )
    assert has_masked_lm_head(export_google_checkpoint(pretrainer, str(tmp_path / "full" / "bert_model.ckpt")))
    assert not has_masked_lm_head(
        export_google_checkpoint(pretrainer.encoder, str(tmp_path / "encoder" / "bert_model.ckpt"))
    )
