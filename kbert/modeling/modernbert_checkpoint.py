"""Hugging Face ModernBERT directories (`config.json`, `model.safetensors`) read into kbert's model and written from
it, without torch: the config in both of its forms, and the weights by the names kbert's parts declare
(`WeightName.modernbert`: query, key and value are row blocks of one `Wqkv`).

transformers 4 writes `global_rope_theta`, `local_rope_theta` and `global_attn_every_n_layers`; transformers 5
writes `layer_types` and `rope_parameters`. Both read; keys that change what the model computes are taken where
kbert computes them and refused in one line naming the key otherwise; runtime keys (`reference_compile`,
`deterministic_flash_attn`, `sparse_prediction`, ...) are ignored. `export_modernbert_checkpoint` writes
`ModernBertForMaskedLM` weights with both forms' keys in `config.json`.

Invariant: `load_modernbert_checkpoint` assigns nothing unless every encoder weight is stored with the model's shape
and nothing unknown is; a `ModernBertModel` (no `head.`, no `decoder.bias`) leaves the masked-LM head as built,
and says so.

Example:

```python
model = BertPretrainer(modernbert_config(json.load(open("ModernBERT-base/config.json"))))
fresh = load_modernbert_checkpoint(model, "ModernBERT-base")          # [] for ModernBertForMaskedLM
export_modernbert_checkpoint(model, "export/modern")                  # config.json, model.safetensors
```
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from kbert.choices import CLASSIFIER_POOLINGS
from kbert.errors import CheckpointMismatchError, ConfigError
from kbert.modeling.checkpoint_fit import describe_model, mismatch
from kbert.modeling.config import BertConfig
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.hf_checkpoint import CONFIG, file_shapes, file_tensors, write_hf_directory
from kbert.modeling.hf_config import HF_ACTIVATIONS, KBERT_ACTIVATIONS
from kbert.modeling.pretrainer import BertPretrainer

MODEL_TYPE = "modernbert"
MASKED_LM, MODEL = "ModernBertForMaskedLM", "ModernBertModel"
_PREFIX = "model."  # ModernBertForMaskedLM's encoder names; ModernBertModel's have none
_DECODER = "decoder.weight"  # tied to the token table: not kbert's to load, and equal to it where stored
_HEAD = ("head.", "decoder.")
_FULL, _SLIDING = "full_attention", "sliding_attention"
# Keys that change what the model computes, with the one value kbert computes (the others map to BertConfig fields).
_FIXED = {"decoder_bias": True, "tie_word_embeddings": True}
_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
# The composition ModernBERT's checkpoints hold (besides equal biases in the encoder and the head).
_COMPOSITION = {
    "norm_placement": "pre",
    "embedding_layer_norm": True,
    "first_block_attention_norm": False,
    "feed_forward": "gated",
    "position_embedding": "rotary",
    "type_vocab_size": 0,
    "sentence_head": False,
    "mlm_layer_norm_eps": None,
}


def _refuse(source: str, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{source}: {key}={value!r} is not supported: {why}.")


def _layer_pattern(values: dict[str, Any], source: str) -> tuple[int, float, float]:
    """(global_attn_every_n_layers, global rotary base, local rotary base) of either config form."""
    layers = values.get("num_hidden_layers", 0)  # its absence is said where the model's sizes are read
    every = values.get("global_attn_every_n_layers", 3)
    if "layer_types" in values:
        kinds = list(values["layer_types"])
        globals_ = [i for i, kind in enumerate(kinds) if kind == _FULL]
        every = globals_[1] - globals_[0] if len(globals_) > 1 else layers
        expected = [_FULL if i % every == 0 else _SLIDING for i in range(layers)]
        if kinds != expected or not globals_ or globals_[0] != 0:
            raise _refuse(source, "layer_types", kinds, "kbert attends globally every N-th layer from layer 0")
    rope = values.get("rope_parameters") or {}
    thetas = []
    for kind, old_key, default in ((_FULL, "global_rope_theta", 160000.0), (_SLIDING, "local_rope_theta", 10000.0)):
        parameters = rope.get(kind) or {}
        rope_type = parameters.get("rope_type", "default")
        if rope_type != "default":
            raise _refuse(source, f"rope_parameters.{kind}.rope_type", rope_type, "kbert computes default RoPE")
        thetas.append(float(parameters.get("rope_theta", values.get(old_key, default))))
    return every, thetas[0], thetas[1]


def modernbert_config(values: dict[str, Any], source: str = CONFIG) -> BertConfig:
    """The `BertConfig` of a Hugging Face ModernBERT `config.json` (parsed), of either transformers' form.

    Raises:
      ConfigError: one line naming `source` and the key kbert does not compute (another model type, unequal
        biases, an activation kbert lacks, untied or bias-less decoder, a layer pattern or RoPE type of its own).
    """
    if values.get("model_type") != MODEL_TYPE:
        raise ConfigError(f"{source}: model_type={values.get('model_type')!r} is not {MODEL_TYPE!r}.")
    for key, wanted in _FIXED.items():
        if key in values and values[key] != wanted:
            raise _refuse(source, key, values[key], f"kbert's ModernBERT has {key}={wanted}")
    biases = {key: bool(values.get(key, False)) for key in ("attention_bias", "mlp_bias", "norm_bias")}
    if len(set(biases.values())) > 1:
        key = next(k for k, v in biases.items() if v != biases["norm_bias"])
        raise _refuse(source, key, biases[key], "kbert's encoder has biases everywhere or nowhere (norm_bias too)")
    if bool(values.get("classifier_bias", False)) != biases["norm_bias"]:
        raise _refuse(
            source, "classifier_bias", values.get("classifier_bias"), "the head's dense and norm share one bias flag"
        )
    activations = {}
    for key in ("hidden_activation", "classifier_activation"):
        act = values.get(key, "gelu")
        if act not in HF_ACTIVATIONS:
            raise _refuse(source, key, act, f"kbert computes {', '.join(sorted(HF_ACTIVATIONS))}")
        activations[key] = HF_ACTIVATIONS[act]
    every, global_theta, local_theta = _layer_pattern(values, source)
    hidden_act = activations["hidden_activation"]
    try:
        return BertConfig(
            vocab_size=values["vocab_size"],
            hidden_size=values["hidden_size"],
            num_hidden_layers=values["num_hidden_layers"],
            num_attention_heads=values["num_attention_heads"],
            intermediate_size=values["intermediate_size"],
            hidden_act=hidden_act,
            hidden_dropout_prob=float(max(values.get("embedding_dropout", 0.0), values.get("mlp_dropout", 0.0))),
            attention_probs_dropout_prob=float(values.get("attention_dropout", 0.0)),
            max_position_embeddings=values.get("max_position_embeddings", 8192),
            type_vocab_size=0,
            initializer_range=values.get("initializer_range", 0.02),
            layer_norm_eps=values.get("norm_eps", 1e-5),
            mlm_hidden_act=None
            if activations["classifier_activation"] == hidden_act
            else activations["classifier_activation"],
            norm_placement="pre",
            first_block_attention_norm=False,
            feed_forward="gated",
            use_bias=biases["norm_bias"],
            position_embedding="rotary",
            rope_theta=global_theta,
            local_attention=values.get("local_attention", 128),
            local_rope_theta=local_theta,
            global_attn_every_n_layers=every,
            sentence_head=False,
            head_use_bias=biases["norm_bias"],
        )
    except KeyError as e:
        raise ConfigError(f"{source}: no {e.args[0]}; a ModernBERT config.json has it.") from None
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def classifier_pooling(values: dict[str, Any], source: str = CONFIG) -> str:
    """What a `ModernBertForSequenceClassification` of this `config.json` (parsed) classifies from
    (`classifier_pooling`): "cls", the first token's output, or "mean", the mean over real tokens; transformers'
    default is "cls".

    Raises:
      ConfigError: another value (one line naming `source`).
    """
    pooling = values.get("classifier_pooling", "cls")
    if pooling not in CLASSIFIER_POOLINGS:
        raise _refuse(source, "classifier_pooling", pooling, f"choose one of {', '.join(CLASSIFIER_POOLINGS)}")
    return pooling


def composition_problem(config: BertConfig) -> str | None:
    """What keeps `config` from being a model ModernBERT's checkpoints hold ("field=value"), or None."""
    for field, wanted in _COMPOSITION.items():
        if getattr(config, field) != wanted:
            return f"{field}={getattr(config, field)!r} (ModernBERT's: {wanted!r})"
    if config.head_use_bias != config.use_bias:
        return f"head_use_bias={config.head_use_bias} with use_bias={config.use_bias} (ModernBERT's are one flag)"
    for field in ("hidden_act", "head_act"):
        if getattr(config, field) not in KBERT_ACTIVATIONS:
            return f"{field}={getattr(config, field)!r} (no Hugging Face name)"
    return None


def modernbert_config_json(config: BertConfig, token_ids: dict[str, int] | None = None) -> dict[str, Any]:
    """The `config.json` of `config` as `ModernBertForMaskedLM`, with both transformers forms' keys, and the
    tokenizer's special ids (`pad_token_id`, `cls_token_id`, ...; transformers needs a `pad_token_id` inside the
    vocabulary: 0 where none is given)."""
    kinds = [_FULL if config.layer_is_global(i) else _SLIDING for i in range(config.num_hidden_layers)]
    return {
        "architectures": [MASKED_LM],
        "model_type": MODEL_TYPE,
        **{key: getattr(config, key) for key in _SIZES},
        "hidden_activation": KBERT_ACTIVATIONS[config.hidden_act],
        "classifier_activation": KBERT_ACTIVATIONS[config.head_act],
        "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": config.initializer_range,
        "norm_eps": config.layer_norm_eps,
        "norm_bias": config.use_bias,
        "attention_bias": config.use_bias,
        "mlp_bias": config.use_bias,
        "classifier_bias": config.head_use_bias,
        "decoder_bias": True,
        "tie_word_embeddings": True,
        "embedding_dropout": config.hidden_dropout_prob,
        "mlp_dropout": config.hidden_dropout_prob,
        "attention_dropout": config.attention_probs_dropout_prob,
        "local_attention": config.local_attention or 128,  # unused where every layer is global
        "global_attn_every_n_layers": config.global_attn_every_n_layers if config.local_attention else 1,
        "global_rope_theta": config.rope_theta,
        "local_rope_theta": config.local_rope_theta,
        "layer_types": kinds,
        "rope_parameters": {
            _FULL: {"rope_type": "default", "rope_theta": config.rope_theta},
            _SLIDING: {"rope_type": "default", "rope_theta": config.local_rope_theta},
        },
        "torch_dtype": "float32",
        "pad_token_id": 0,
        **(token_ids or {}),
    }


def _expected(model: BertPretrainer | BertEncoder) -> dict[str, list]:
    """ModernBERT name (without `model.`) -> [(variable, rows or None)] for every weight of `model`."""
    expected: dict[str, list] = {}
    for name in model.weight_names():
        if not name.modernbert:
            raise ConfigError(f"{name.variable.path} has no ModernBERT name: the model is not a ModernBERT.")
        expected.setdefault(name.modernbert, []).append((name.variable, name.modernbert_rows))
    return expected


def _transposed(variable: keras.Variable) -> bool:
    """Whether torch stores `variable` transposed: a Dense kernel, [out, in]."""
    return variable.name == "kernel"


def _torch_shape(pieces: list) -> tuple[int, ...]:
    """The stored shape of a tensor made of `pieces` (kernels stored transposed, row blocks stacked)."""
    shapes = [tuple(v.shape)[::-1] if _transposed(v) else tuple(v.shape) for v, _ in pieces]
    return (sum(shape[0] for shape in shapes), *shapes[0][1:])


def _stored(directory: str) -> dict[str, tuple[int, ...]]:
    """Name (without `model.`) -> shape of the weights of a ModernBERT directory, the tied decoder aside."""
    shapes = {name.removeprefix(_PREFIX): shape for name, shape in file_shapes(directory).items()}
    return {name: shape for name, shape in shapes.items() if name != _DECODER}


def has_masked_lm_head(directory: str) -> bool:
    """Whether a ModernBERT directory holds the masked-LM head (`ModernBertForMaskedLM`; not `ModernBertModel`)."""
    return any(name.startswith(_HEAD) for name in _stored(directory))


def load_modernbert_checkpoint(model: BertPretrainer | BertEncoder, directory: str) -> list[str]:
    """Loads a Hugging Face ModernBERT directory's safetensors weights into `model` (an encoder takes no head);
    returns ['masked-LM head'] where the directory has none (a `ModernBertModel`), else [].

    Raises:
      MissingFileError: no safetensors weights in `directory`.
      CheckpointMismatchError: a weight missing, unexpected or of another shape (listed; nothing assigned), or a
        decoder weight that is not the token table.
    """
    stored = _stored(directory)
    if isinstance(model, BertEncoder):
        stored = {n: s for n, s in stored.items() if not n.startswith(_HEAD)}
    expected = _expected(model)
    has_head = any(n.startswith(_HEAD) for n in stored) or isinstance(model, BertEncoder)
    if not has_head:
        expected = {n: pieces for n, pieces in expected.items() if not n.startswith(_HEAD)}
    error = mismatch(
        directory,
        {name: _torch_shape(pieces) for name, pieces in expected.items()},
        stored,
        describe_model(model.config),
        "leave the model section unset (it comes from the checkpoint's config.json).",
    )
    if error:
        raise error
    tensors = {name.removeprefix(_PREFIX): value for name, value in file_tensors(directory).items()}
    decoder = tensors.get(_DECODER)
    if decoder is not None and not np.array_equal(decoder, tensors["embeddings.tok_embeddings.weight"]):
        raise CheckpointMismatchError(
            f"{directory}: its {_DECODER} is not the token table (untied output embeddings), which kbert ties."
        )
    for name, pieces in expected.items():
        value = np.asarray(tensors[name], np.float32)
        for variable, rows in pieces:
            piece = value[rows[0] : rows[1]] if rows else value
            variable.assign(piece.T if _transposed(variable) else piece)
    return [] if has_head else ["masked-LM head"]


def export_modernbert_checkpoint(model: BertPretrainer, directory: str, token_ids: dict[str, int] | None = None) -> str:
    """Writes `directory/config.json` (with the tokenizer's special `token_ids`, `modernbert_config_json`) and
    `directory/model.safetensors` (float32, torch's layout) of `model` as `ModernBertForMaskedLM`, which
    transformers' `AutoModelForMaskedLM` loads; returns the weights' path.

    Raises:
      ConfigError: the model is not of ModernBERT's composition (`composition_problem`), before anything is
        written.
    """
    problem = composition_problem(model.config)
    if problem:
        raise ConfigError(
            f"--format=hf: Hugging Face's ModernBERT cannot hold this model's {problem}; keep kbert's checkpoints."
        )
    tensors = {}
    for name, pieces in _expected(model).items():
        values = [np.asarray(keras.ops.convert_to_numpy(v), np.float32) for v, _ in pieces]
        values = [value.T if _transposed(v) else value for value, (v, _) in zip(values, pieces)]
        key = name if name.startswith(_HEAD) else _PREFIX + name
        tensors[key] = np.ascontiguousarray(np.concatenate(values) if len(values) > 1 else values[0])
    return write_hf_directory(directory, tensors, modernbert_config_json(model.config, token_ids))
