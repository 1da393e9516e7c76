"""A Hugging Face BERT `config.json` as a `BertConfig`, and back: the fields, the GELU names, what kbert cannot run.

Invariant: `bert_config_from_hf` accepts only what kbert computes exactly (a BERT encoder with absolute positions,
no decoder, no cross-attention) and raises one line naming the file, the field and its value otherwise;
`hf_config_of(bert_config_from_hf(c))` gives back every field kbert reads.

Example:

>>> config = bert_config_from_hf({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
...     "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100, "hidden_act": "gelu_pytorch_tanh"})
>>> config.hidden_act, hf_config_of(config, "BertForMaskedLM")["hidden_act"]
('gelu_approximate', 'gelu_pytorch_tanh')
"""

from __future__ import annotations

from typing import Any

from kbert.errors import ConfigError
from kbert.modeling.config import BertConfig

# Hugging Face `hidden_act` -> kbert's name: "gelu" is the exact erf GELU, the others the tanh approximation.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_new",
    "gelu_pytorch_tanh": "gelu_approximate",
    "relu": "relu",
    "silu": "silu",
    "swish": "swish",
    "tanh": "tanh",
}
# kbert's name -> the Hugging Face name written back (gelu_new stays gelu_new, so a round trip is exact).
KBERT_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "gelu_approximate": "gelu_pytorch_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "swish",
    "tanh": "tanh",
}
# The config.json keys that are BertConfig fields of the same name.
_SAME = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
)
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def _refuse(source: str, what: str) -> ConfigError:
    return ConfigError(
        f"{source}: {what}; kbert imports BERT encoders with absolute positions only (a bert-base-style config.json)."
    )


def bert_config_from_hf(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """The `BertConfig` of a Hugging Face BERT `config.json` (its parsed `values`).

    Raises:
      ConfigError: one line naming `source` and the field: another `model_type`, relative positions, a decoder,
        cross-attention, an activation kbert lacks, or a required size missing.
    """
    model_type = values.get("model_type", "bert")
    if model_type != "bert":
        raise _refuse(source, f"model_type={model_type!r} is not BERT")
    position = values.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise _refuse(source, f"position_embedding_type={position!r} is not 'absolute'")
    for flag in ("is_decoder", "add_cross_attention"):
        if values.get(flag):
            raise _refuse(source, f"{flag}=true")
    missing = [key for key in _REQUIRED if key not in values]
    if missing:
        raise ConfigError(f"{source}: no {', '.join(missing)}; a Hugging Face BERT config.json has them all.")
    act = values.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ConfigError(
            f"{source}: hidden_act={act!r} has no kbert equivalent; kbert computes {', '.join(sorted(HF_ACTIVATIONS))}."
        )
    fields = {key: values[key] for key in _SAME if values.get(key) is not None}
    try:
        return BertConfig(hidden_act=HF_ACTIVATIONS[act], **fields)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def hf_config_of(bert: BertConfig, architecture: str) -> dict[str, Any]:
    """The Hugging Face `config.json` of `bert` as `architecture` (BertForPreTraining, BertForMaskedLM or
    BertModel), the fields `transformers.BertConfig` writes.

    Raises:
      ConfigError: the activation has no Hugging Face name.
    """
    if bert.hidden_act not in KBERT_ACTIVATIONS:
        raise ConfigError(
            f"--format=hf: hidden_act={bert.hidden_act} has no Hugging Face equivalent; use --format=google."
        )
    return {
        "architectures": [architecture],
        "model_type": "bert",
        "hidden_act": KBERT_ACTIVATIONS[bert.hidden_act],
        **{key: getattr(bert, key) for key in _SAME},
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "classifier_dropout": None,
        "use_cache": True,
        "torch_dtype": "float32",
    }
