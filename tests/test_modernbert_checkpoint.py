"""Hugging Face ModernBERT directories in and out, without torch: both config.json forms, the keys kbert refuses, a
model without its head, and bit-exact round trips. (Against transformers itself, outside the suite:
tools/modernbert_against_transformers.py.)"""

import json
import os

import numpy as np
import pytest
from model_fixtures import randomize

from kbert.errors import CheckpointMismatchError, ConfigError
from kbert.modeling import BertConfig, BertEncoder, BertPretrainer
from kbert.modeling.imported_checkpoint import MODERNBERT, imported_checkpoint
from kbert.modeling.modernbert_checkpoint import (
    export_modernbert_checkpoint,
    load_modernbert_checkpoint,
    modernbert_config,
)

MODERN = BertConfig.load("modernbert_tiny").replace(
    vocab_size=101, num_hidden_layers=6, max_position_embeddings=64, local_attention=8
)


def _exported(directory) -> BertPretrainer:
    model = BertPretrainer(MODERN)
    randomize(model)
    export_modernbert_checkpoint(model, str(directory), {"pad_token_id": 3})
    return model


def _config(directory) -> dict:
    with open(os.path.join(directory, "config.json")) as f:
        return json.load(f)


def _rewrite(directory, drop=(), **changes) -> None:
    values = {k: v for k, v in _config(directory).items() if k not in drop}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**values, **changes}, f)


def _same_weights(a, b) -> None:
    assert [w.path for w in a.weights] == [w.path for w in b.weights]
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_array_equal(np.asarray(x.numpy()), np.asarray(y.numpy()), err_msg=x.path)


@pytest.mark.parametrize("form", ["transformers 5", "transformers 4"])
def test_an_export_reads_back_bit_exact_from_either_config_form(tmp_path, form):
    model = _exported(tmp_path)
    values = _config(tmp_path)
    assert values["architectures"] == ["ModernBertForMaskedLM"] and values["pad_token_id"] == 3
    assert values["layer_types"][:4] == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    if form == "transformers 5":
        _rewrite(tmp_path, drop=("global_rope_theta", "local_rope_theta", "global_attn_every_n_layers"))
    else:
        _rewrite(tmp_path, drop=("layer_types", "rope_parameters"))
    source = imported_checkpoint(str(tmp_path))
    assert (source.kind, source.architecture, source.has_masked_lm_head) == (MODERNBERT, "ModernBertForMaskedLM", True)
    assert source.config == MODERN
    again = BertPretrainer(source.config)
    assert source.load(again) == []
    _same_weights(model, again)
    encoder = BertEncoder(source.config)  # an encoder takes the encoder's weights and leaves the head
    load_modernbert_checkpoint(encoder, str(tmp_path))
    _same_weights(model.encoder, encoder)


def test_a_model_without_its_head_loads_and_says_the_head_starts_fresh(tmp_path):
    from safetensors.numpy import load_file, save_file

    model = _exported(tmp_path)
    path = os.path.join(tmp_path, "model.safetensors")
    tensors = load_file(path)
    # ModernBertModel: no `model.` prefix, no head.
    save_file(
        {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}, path, {"format": "pt"}
    )
    source = imported_checkpoint(str(tmp_path))
    assert source.architecture == "ModernBertModel" and not source.has_masked_lm_head
    again = BertPretrainer(source.config)
    assert source.load(again) == ["masked-LM head"]
    _same_weights(model.encoder, again.encoder)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"attention_bias": True}, "attention_bias=True is not supported"),
        ({"classifier_bias": True}, "classifier_bias=True is not supported"),
        ({"decoder_bias": False}, "decoder_bias=False is not supported"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False is not supported"),
        ({"hidden_activation": "gelu_fast"}, "hidden_activation='gelu_fast' is not supported"),
        (
            {"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0}}},
            "rope_parameters.full_attention.rope_type='yarn' is not supported",
        ),
        ({"layer_types": ["sliding_attention"] * 6}, "layer_types=.* is not supported"),
        ({"model_type": "bert"}, "model_type='bert' is not 'modernbert'"),
    ],
)
def test_a_key_that_changes_the_function_is_refused_in_one_line_naming_it(tmp_path, changes, message):
    values = {**json.loads(json.dumps(_config_of(MODERN))), **changes}
    with pytest.raises(ConfigError, match=message) as e:
        modernbert_config(values, "dir/config.json")
    assert str(e.value).startswith("dir/config.json: ") and "\n" not in str(e.value)


def _config_of(config: BertConfig) -> dict:
    from kbert.modeling.modernbert_checkpoint import modernbert_config_json

    return modernbert_config_json(config)


def test_runtime_keys_are_ignored_and_the_dropouts_map():
    values = {
        **_config_of(MODERN),
        "reference_compile": True,
        "deterministic_flash_attn": True,
        "sparse_prediction": True,
        "repad_logits_with_grad": False,
        "mlp_dropout": 0.1,
        "attention_dropout": 0.05,
    }
    config = modernbert_config(values)
    assert config.hidden_dropout_prob == 0.1 and config.attention_probs_dropout_prob == 0.05


def test_a_checkpoint_of_other_sizes_is_refused_before_anything_is_assigned(tmp_path):
    _exported(tmp_path)
    other = BertPretrainer(MODERN.replace(hidden_size=64, intermediate_size=96))
    before = [np.asarray(w.numpy()).copy() for w in other.weights]
    with pytest.raises(CheckpointMismatchError, match="layers.0.attn.Wqkv.weight"):
        load_modernbert_checkpoint(other, str(tmp_path))
    for value, w in zip(before, other.weights):
        np.testing.assert_array_equal(value, w.numpy())


def test_only_a_model_of_modernberts_composition_exports_and_a_bert_refuses_in_one_line(tmp_path):
    bert = BertPretrainer(MODERN.replace(norm_placement="post", first_block_attention_norm=True))
    with pytest.raises(
        ConfigError, match="--format=hf: Hugging Face's ModernBERT cannot hold this model's norm_placement"
    ):
        export_modernbert_checkpoint(bert, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_kbert_export_writes_a_modern_model_as_modernbert_with_its_tokenizer_and_tf_hub_refuses(tmp_path):
    from kbert.finetuning.exporting import export_hf
    from kbert.finetuning.serving.tf_hub_export import export_tf_hub

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(96))]) + "\n")
    model = BertPretrainer(MODERN)
    randomize(model)
    export_hf(model, str(vocab), str(tmp_path / "hf"), "BertForPreTraining", lower_case=False)
    values = _config(tmp_path / "hf")
    assert values["model_type"] == "modernbert" and values["architectures"] == ["ModernBertForMaskedLM"]
    assert (values["pad_token_id"], values["cls_token_id"], values["sep_token_id"]) == (0, 2, 3)
    assert sorted(os.listdir(tmp_path / "hf")) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    again = BertPretrainer(imported_checkpoint(str(tmp_path / "hf")).config)
    load_modernbert_checkpoint(again, str(tmp_path / "hf"))
    _same_weights(model, again)
    with pytest.raises(ConfigError, match="--format=tf_hub: .* has no pooler .* --format=hf") as e:
        export_tf_hub(model, True, str(vocab), str(tmp_path / "hub"))
    assert "\n" not in str(e.value) and not (tmp_path / "hub").exists()


def test_kbert_export_carries_a_tokenizer_json_and_its_special_ids(tmp_path):
    from tokenizer_fixtures import write_tokenizer

    from kbert.errors import VocabularyError
    from kbert.finetuning.exporting import checkpoint_pretrainer, export_hf
    from kbert.finetuning.vocabulary import checkpoint_tokenizer

    tokenizer = write_tokenizer(tmp_path / "bpe", ("<s>", "<pad>", "</s>", "<unk>", "<mask>"), vocab_size=300)
    (tmp_path / "bpe" / "tokenizer_config.json").write_text(json.dumps({"cls_token": "<s>", "sep_token": "</s>"}))
    model = BertPretrainer(MODERN.replace(vocab_size=320))  # a table larger than the tokenizer, as ModernBERT's
    randomize(model)
    export_hf(model, "", str(tmp_path / "hf"), "BertForPreTraining", tokenizer=str(tmp_path / "bpe"))
    assert sorted(os.listdir(tmp_path / "hf")) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == tokenizer.read_bytes()
    values = _config(tmp_path / "hf")
    ids = {name: values[f"{name}_token_id"] for name in ("cls", "sep", "pad", "bos", "eos")}
    assert ids == {"cls": 0, "sep": 2, "pad": 1, "bos": 0, "eos": 2}  # RoBERTa's ids, read from the tokenizer

    # Exported again from that directory, the tokenizer it brings goes along; a larger one is refused.
    assert checkpoint_tokenizer(str(tmp_path / "hf")) == str(tmp_path / "hf" / "tokenizer.json")
    again, has_mlm = checkpoint_pretrainer(str(tmp_path / "hf"), "", "", tokenizer=str(tmp_path / "hf"))
    assert has_mlm
    _same_weights(model, again)
    large = write_tokenizer(tmp_path / "large", vocab_size=400)
    with pytest.raises(VocabularyError, match=r"has 400 pieces but --checkpoint .* has 320 embedding rows") as e:
        checkpoint_pretrainer(str(tmp_path / "hf"), "", "", tokenizer=str(large))
    assert "\n" not in str(e.value)
