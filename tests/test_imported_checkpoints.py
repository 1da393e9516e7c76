"""Hugging Face and keras-hub BERT checkpoints, imported: their outputs against a float64 NumPy BERT, each layout
(BertForPreTraining, BertForMaskedLM, BertModel, old LayerNorm names, a stored tied decoder), exact round trips,
and the one-line refusals of what kbert cannot compute or load exactly."""

import json
import os
import struct

import numpy as np
import numpy_bert
import pytest
from imported_fixtures import HF_CONFIG, google_weights_of_hf, hf_tensors, write_hf, write_keras_hub_preset
from safetensors.numpy import load_file, save_file

from kbert.errors import CheckpointMismatchError, ConfigError, KbertError, MissingFileError
from kbert.finetuning import pretrained
from kbert.finetuning.exporting import checkpoint_pretrainer, export_hf
from kbert.finetuning.hub_export import export_preset
from kbert.modeling import BertEncoder, BertPretrainer
from kbert.modeling.hf_checkpoint import export_hf_checkpoint
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.runtime.checkpointing import load_init_checkpoint
from kbert.runtime.sections import ModelConfig


def _batch(config, seed=1):
    return numpy_bert.random_batch(np.random.default_rng(seed), config, batch_size=3, seq_length=16)


@pytest.mark.parametrize("hidden_act, eps", [("gelu", 1e-12), ("gelu_new", 1e-7), ("gelu_pytorch_tanh", 1e-5)])
def test_imported_hf_model_computes_the_numpy_reference(tmp_path, hidden_act, eps):
    values = dict(HF_CONFIG, hidden_act=hidden_act, layer_norm_eps=eps)
    tensors = hf_tensors(values, architecture="BertForPreTraining")
    source = imported_checkpoint(write_hf(tmp_path / "hf", values, tensors=tensors))
    assert (source.kind, source.architecture, source.config.layer_norm_eps) == (
        "Hugging Face",
        "BertForPreTraining",
        eps,
    )
    model = BertPretrainer(source.config)
    assert source.load(model) == []
    batch = _batch(source.config)
    mlm, nsp = numpy_bert.pretrain_logits(google_weights_of_hf(tensors), source.config, batch)
    ours = model(batch, training=False)
    assert np.abs(mlm).max() > 1.0  # outputs large enough for a wrong GELU or epsilon to show
    np.testing.assert_allclose(ours["mlm_logits"], mlm, atol=1e-5, rtol=0)
    np.testing.assert_allclose(ours["nsp_logits"], nsp, atol=1e-5, rtol=0)


def test_the_gelu_form_is_the_checkpoints(tmp_path):
    """Read as erf GELU, a tanh-GELU checkpoint would be off by far more than the tolerance above."""
    values = dict(HF_CONFIG, hidden_act="gelu_new")
    tensors = hf_tensors(values)
    source = imported_checkpoint(write_hf(tmp_path / "hf", values, tensors=tensors))
    wrong = source.config.replace(hidden_act="gelu")
    model = BertPretrainer(wrong)
    source.load(model)
    batch = _batch(wrong)
    reference = numpy_bert.mlm_logits(google_weights_of_hf(tensors), source.config, batch)
    assert np.abs(np.asarray(model(batch, training=False)["mlm_logits"]) - reference).max() > 1e-3


@pytest.mark.parametrize(
    "architecture, fresh",
    [
        ("BertForPreTraining", []),
        ("BertForMaskedLM", ["next-sentence head", "pooler"]),
        ("BertModel", ["masked-LM head", "next-sentence head"]),
    ],
)
def test_each_hf_layout_round_trips_exactly(tmp_path, architecture, fresh):
    tensors = hf_tensors(HF_CONFIG, architecture=architecture)
    source = imported_checkpoint(write_hf(tmp_path / "hf", tensors=tensors))
    assert source.architecture == architecture and source.has_masked_lm_head == (architecture != "BertModel")
    model = BertPretrainer(source.config)
    assert source.load(model) == fresh
    line = source.fresh_line(fresh)
    assert "\n" not in line and all(part in line for part in fresh) and ("fresh" in line) == bool(fresh)
    export_hf_checkpoint(model, str(tmp_path / "out"), architecture)
    back = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert sorted(back) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    written = json.load(open(tmp_path / "out" / "config.json"))
    assert {k: written[k] for k in HF_CONFIG if k != "architectures"} == {
        k: v for k, v in HF_CONFIG.items() if k != "architectures"
    }
    assert written["architectures"] == [architecture]


def test_old_layer_norm_names_a_stored_decoder_and_a_bert_model_encoder(tmp_path):
    tensors = hf_tensors(HF_CONFIG, legacy_norms=True)
    assert "bert.embeddings.LayerNorm.gamma" in tensors
    tensors["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
    tensors["cls.predictions.decoder.bias"] = tensors.pop("cls.predictions.bias")
    tensors["bert.embeddings.position_ids"] = np.arange(32, dtype=np.int64)[None]
    source = imported_checkpoint(write_hf(tmp_path / "hf", tensors=tensors))
    model = BertPretrainer(source.config)
    assert source.load(model) == []
    np.testing.assert_array_equal(model.mlm_head.output_bias.numpy(), tensors["cls.predictions.decoder.bias"])
    np.testing.assert_array_equal(
        model.encoder.embeddings.layer_norm.gamma.numpy(), tensors["bert.embeddings.LayerNorm.gamma"]
    )
    # An encoder (fine-tuning) takes the trunk and pooler and leaves the heads.
    encoder = BertEncoder(source.config)
    assert load_init_checkpoint(encoder, str(tmp_path / "hf")) == "Hugging Face"
    np.testing.assert_array_equal(encoder.pooler.kernel.numpy(), tensors["bert.pooler.dense.weight"].T)
    # An untied decoder cannot be computed by a tied model: refused before anything is assigned.
    tensors["cls.predictions.decoder.weight"] = tensors["cls.predictions.decoder.weight"] + 1
    untied = imported_checkpoint(write_hf(tmp_path / "untied", tensors=tensors))
    with pytest.raises(CheckpointMismatchError, match="untied"):
        untied.load(BertPretrainer(untied.config))


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"model_type": "roberta"}, "model_type='roberta'"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
        ({"is_decoder": True}, "is_decoder=true"),
        ({"hidden_act": "quick_gelu"}, "hidden_act='quick_gelu'"),
    ],
)
def test_what_kbert_cannot_compute_is_one_line(tmp_path, changes, named):
    directory = write_hf(tmp_path / "hf", changes)
    with pytest.raises(ConfigError) as raised:
        imported_checkpoint(directory)
    assert named in str(raised.value) and "config.json" in str(raised.value) and "\n" not in str(raised.value)


def test_sharded_and_half_precision_weights(tmp_path):
    tensors = hf_tensors(HF_CONFIG)
    directory = write_hf(tmp_path / "hf", tensors={})
    os.remove(os.path.join(directory, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, members in shards.items():
        save_file({n: tensors[n].astype(np.float16) for n in members}, os.path.join(directory, shard))
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {n: shard for shard, members in shards.items() for n in members}}, f)
    source = imported_checkpoint(directory)
    model = BertPretrainer(source.config)
    assert source.load(model) == []
    np.testing.assert_array_equal(
        model.mlm_head.output_bias.numpy(), tensors["cls.predictions.bias"].astype(np.float16).astype(np.float32)
    )


def test_missing_weights_and_wrong_shapes_are_named(tmp_path):
    directory = write_hf(tmp_path / "torch", tensors={})
    os.remove(os.path.join(directory, "model.safetensors"))
    open(os.path.join(directory, "pytorch_model.bin"), "wb").close()
    with pytest.raises(MissingFileError, match="only pytorch_model.bin") as raised:
        imported_checkpoint(directory)
    assert "\n" not in str(raised.value)
    bf16 = write_hf(tmp_path / "bf16", tensors={"bert.embeddings.word_embeddings.weight": np.zeros(4, np.float16)})
    path = os.path.join(bf16, "model.safetensors")
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header["bert.embeddings.word_embeddings.weight"]["dtype"] = "BF16"  # as a bfloat16 export labels its tensors
    text = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + length :])
    with pytest.raises(CheckpointMismatchError, match="BF16 tensors") as raised:
        imported_checkpoint(bf16)
    assert "\n" not in str(raised.value)
    tensors = hf_tensors(HF_CONFIG)
    name = "bert.encoder.layer.1.intermediate.dense.weight"
    tensors[name] = tensors[name][:32]
    source = imported_checkpoint(write_hf(tmp_path / "shape", tensors=tensors))
    with pytest.raises(CheckpointMismatchError) as raised:
        source.load(BertPretrainer(source.config))
    first, *listing = str(raised.value).splitlines()
    assert "1 wrong-shape" in first and any("layer.1.intermediate.dense.weight" in line for line in listing)


def test_finetuning_and_export_take_an_hf_directory(tmp_path):
    tensors = hf_tensors(HF_CONFIG, architecture="BertForMaskedLM")
    directory = write_hf(tmp_path / "hf", tensors=tensors)
    prefix = pretrained.resolve_checkpoint(directory)
    assert prefix == directory
    bert = pretrained.bert_config_for(ModelConfig(bert=""), prefix)
    pretrained.check_checkpoint_fits(prefix, bert, 64, os.path.join(directory, "vocab.txt"))
    with pytest.raises(ConfigError, match=r"hidden_size=48 \(checkpoint: 32\)"):
        pretrained.bert_config_for(ModelConfig(bert="", overrides={"hidden_size": 48}), prefix)
    lines = []
    encoder = BertEncoder(bert)
    assert pretrained.load_encoder(encoder, prefix, lambda line, **_: lines.append(line)) == "Hugging Face"
    assert lines == [f"{directory} (Hugging Face BertForMaskedLM) has no pooler: it starts fresh."]
    model, has_mlm = checkpoint_pretrainer(directory, "", "")  # the checkpoint's vocab.txt
    assert has_mlm
    export_hf(model, os.path.join(directory, "vocab.txt"), str(tmp_path / "out"), "BertForMaskedLM")
    back = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert sorted(back) == sorted(tensors) and all(np.array_equal(back[n], tensors[n]) for n in tensors)
    assert sorted(os.listdir(tmp_path / "out")) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    # tokenizer.json (what transformers 5's AutoTokenizer reads) splits text as kbert's own tokenizer does
    from tokenizers import Tokenizer

    from kbert.data.wordpiece.tokenizer import WordpieceTokenizer

    text = "Héllo w1w2 unseenword, w3!"
    ours, _ = WordpieceTokenizer(os.path.join(directory, "vocab.txt"), lower_case=True).tokenize([text])
    theirs = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json")).encode(text, add_special_tokens=False)
    assert theirs.ids == ours.tolist() and len(theirs.ids) > 3


def test_a_head_hf_cannot_compute_is_refused(tmp_path):
    model = BertPretrainer(imported_checkpoint(write_hf(tmp_path / "hf")).config.replace(mlm_layer_norm_eps=1e-5))
    with pytest.raises(ConfigError, match="--hf_architecture=BertModel") as raised:
        export_hf_checkpoint(model, str(tmp_path / "out"), "BertForMaskedLM")
    assert "\n" not in str(raised.value) and not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("masked_lm", [True, False])
def test_keras_hub_preset_imports_exactly_and_round_trips(tmp_path, masked_lm):
    keras_hub = pytest.importorskip("keras_hub")
    theirs = write_keras_hub_preset(tmp_path / "preset", masked_lm=masked_lm)
    source = imported_checkpoint(str(tmp_path / "preset"))
    assert (source.kind, source.has_masked_lm_head) == ("keras-hub", masked_lm)
    assert source.vocab_file.endswith("vocabulary.txt")
    assert (source.config.hidden_act, source.config.layer_norm_eps) == ("gelu_approximate", 1e-12)
    model = BertPretrainer(source.config)
    assert source.load(model) == ([] if masked_lm else ["masked-LM head"]) + ["next-sentence head"]
    batch = _batch(source.config)
    inputs = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    if masked_lm:  # keras-hub's own outputs, its erf-GELU, epsilon-1e-5 head included
        expected = theirs({**inputs, "mask_positions": batch["masked_lm_positions"]})
        np.testing.assert_allclose(model(batch, training=False)["mlm_logits"], expected, atol=1e-5, rtol=0)
    else:
        expected = theirs(inputs)["sequence_output"]
        ours = model.encoder(batch, training=False)["sequence_output"]
        real = batch["input_mask"].astype(bool)
        np.testing.assert_allclose(np.asarray(ours)[real], np.asarray(expected)[real], atol=1e-5, rtol=0)
    export_preset(model.encoder, source.vocab_file, str(tmp_path / "back"), masked_lm=model if masked_lm else None)
    kind = keras_hub.models.BertMaskedLM if masked_lm else keras_hub.models.BertBackbone
    extra = {"preprocessor": None} if masked_lm else {}
    before, after = (kind.from_preset(str(tmp_path / d), **extra) for d in ("preset", "back"))
    assert [w.path for w in before.weights] == [w.path for w in after.weights]
    for a, b in zip(before.weights, after.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_errors_are_kbert_errors(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(KbertError):
        imported_checkpoint(str(tmp_path / "bad"))
    assert imported_checkpoint(str(tmp_path / "nothing")) is None and imported_checkpoint("bert_base") is None
