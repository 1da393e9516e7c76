"""keras-hub BERT presets (`BertBackbone.save_to_preset`, maybe a `BertMaskedLM` task) read into kbert's model: the
config, the weight pairs shared with the export (`kbert.finetuning.hub_export`), and the load.

keras-hub's BertBackbone computes the tanh GELU with LayerNorm epsilon 1e-12; its BertMaskedLM head computes the
erf GELU with epsilon 1e-5 (keras-hub's defaults), so a preset's `BertConfig` says both (`mlm_hidden_act`,
`mlm_layer_norm_eps`) and kbert computes what keras-hub does. Query/key/value kernels are [H, heads, head_size]
there, the attention output [heads, head_size, H]: the same values as kbert's [H, H], reshaped.

Invariant: `load_keras_hub_preset` assigns nothing unless every weight of the preset's backbone has the model's
shape; a preset without a BertMaskedLM task leaves the masked-LM head (and the next-sentence head, which keras-hub
has not) with its built weights, and says so in its return value.

Example:

```python
model = BertPretrainer(keras_hub_bert_config(json.load(open("bert_tiny_en/config.json"))))
fresh = load_keras_hub_preset(model, "bert_tiny_en")   # ['masked-LM head', 'next-sentence head']
```
"""

from __future__ import annotations

import json
import os
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.errors import CheckpointMismatchError, ConfigError, MissingFileError
from kbert.modeling.checkpoint_fit import describe_model, mismatch
from kbert.modeling.config import BertConfig
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.google_checkpoint import GOOGLE_LAYOUT_FIX
from kbert.modeling.pretrainer import BertPretrainer

BACKBONE = "BertBackbone"
MASKED_LM = "BertMaskedLM"
TASK_CONFIG = "task.json"
VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")
# What keras-hub's BERT layers compute (BertBackbone's TransformerEncoders; BertMaskedLM's MaskedLMHead).
BACKBONE_ACTIVATION, BACKBONE_EPSILON = "gelu_approximate", 1e-12
HEAD_ACTIVATION, HEAD_EPSILON = "gelu", 1e-5


def keras_hub():
    """The keras_hub module, or a one-line ConfigError saying how to install it."""
    try:
        import keras_hub as module
    except ImportError:
        raise ConfigError("keras-hub presets need keras-hub: pip install 'kbert[hub]' (or keras-hub~=0.32).") from None
    return module


def keras_hub_bert_config(values: dict[str, Any], source: str = "config.json") -> BertConfig:
    """The `BertConfig` of a keras-hub BertBackbone preset's `config.json` (parsed).

    Raises:
      ConfigError: the preset is not a BertBackbone (one line naming `source` and its class).
    """
    if values.get("class_name") != BACKBONE:
        raise ConfigError(
            f"{source}: class_name={values.get('class_name')!r}; kbert imports keras-hub {BACKBONE} presets only."
        )
    c = values["config"]
    return BertConfig(
        vocab_size=c["vocabulary_size"],
        hidden_size=c["hidden_dim"],
        num_hidden_layers=c["num_layers"],
        num_attention_heads=c["num_heads"],
        intermediate_size=c["intermediate_dim"],
        hidden_act=BACKBONE_ACTIVATION,
        hidden_dropout_prob=c.get("dropout", 0.1),
        attention_probs_dropout_prob=c.get("dropout", 0.1),
        max_position_embeddings=c.get("max_sequence_length", 512),
        type_vocab_size=c.get("num_segments", 2),
        layer_norm_eps=BACKBONE_EPSILON,
        mlm_hidden_act=HEAD_ACTIVATION,
        mlm_layer_norm_eps=HEAD_EPSILON,
    )


def computes_keras_hub_head(config: BertConfig) -> bool:
    """Whether kbert's masked-LM head of `config` computes what keras-hub's BertMaskedLM head does."""
    return (config.head_act, config.head_layer_norm_eps) == (HEAD_ACTIVATION, HEAD_EPSILON)


def _keras_hub_variable(name: str, backbone, task=None) -> keras.Variable:
    """The variable a declared keras-hub name (`kbert.modeling.weight_names`) points to: `task/...` an attribute
    path into the BertMaskedLM task, else a BertBackbone layer's name and an attribute path into it."""
    first, *attributes = name.split("/")
    target = task if first == "task" else backbone.get_layer(first)
    for attribute in attributes:
        target = getattr(target, attribute)
    return target


def backbone_pairs(encoder: BertEncoder, backbone) -> list[tuple[keras.Variable, keras.Variable]]:
    """(kbert variable, keras-hub variable) for every weight of `encoder` and a `keras_hub.models.BertBackbone`
    (keras-hub's own BERT converter's mapping), by the names the encoder's parts declare."""
    return [(n.variable, _keras_hub_variable(n.keras_hub, backbone)) for n in encoder.weight_names()]


def head_pairs(model: BertPretrainer, task) -> list[tuple[keras.Variable, keras.Variable]]:
    """(kbert variable, keras-hub variable) for the masked-LM head of `model` and a `BertMaskedLM` (the word table
    is the backbone's, tied in both)."""
    return [(n.variable, _keras_hub_variable(n.keras_hub, task.backbone, task)) for n in model.mlm_head.weight_names()]


def copy_pairs(pairs: list[tuple], to_keras_hub: bool) -> None:
    """Assigns each pair's value from one side to the other (float32, reshaped to the target's shape)."""
    for ours, theirs in pairs:
        target, source = (theirs, ours) if to_keras_hub else (ours, theirs)
        value = np.asarray(keras.ops.convert_to_numpy(source), np.float32)
        target.assign(value.reshape(tuple(target.shape)))


def has_masked_lm_task(directory: str) -> bool:
    """Whether the preset holds a BertMaskedLM task with its weights."""
    path = os.path.join(directory, TASK_CONFIG)
    if not tf.io.gfile.exists(path) or not tf.io.gfile.exists(os.path.join(directory, "task.weights.h5")):
        return False
    with tf.io.gfile.GFile(path) as f:
        return json.load(f).get("class_name") == MASKED_LM


def load_keras_hub_preset(model: BertPretrainer | BertEncoder, directory: str) -> list[str]:
    """Loads a keras-hub BERT preset into `model` (a `BertEncoder` takes the backbone only); returns the parts
    the preset lacks, which keep their built weights ('masked-LM head', 'next-sentence head').

    Raises:
      MissingFileError: no preset there.
      CheckpointMismatchError: a weight of another shape (listed; nothing assigned).
    """
    model.config.require_google_layout(f"{directory}, a keras-hub BERT preset,", GOOGLE_LAYOUT_FIX)
    hub = keras_hub()
    pretrainer = isinstance(model, BertPretrainer)
    with_task = pretrainer and has_masked_lm_task(directory)
    try:
        if with_task:
            task = hub.models.BertMaskedLM.from_preset(directory, preprocessor=None, dtype="float32")
            backbone = task.backbone
        else:
            backbone = hub.models.BertBackbone.from_preset(directory, dtype="float32")
    except (FileNotFoundError, ValueError) as e:
        raise MissingFileError(
            f"{directory}: cannot read it as a keras-hub preset ({str(e).splitlines()[0]})."
        ) from None
    encoder = model.encoder if pretrainer else model
    c = model.config
    if backbone.num_layers != c.num_hidden_layers:
        raise CheckpointMismatchError(
            f"{directory} holds a {backbone.num_layers}-layer BertBackbone, but the model "
            f"has {c.num_hidden_layers} layers; leave the model section unset (it comes "
            "from the preset's config.json)."
        )
    pairs = backbone_pairs(encoder, backbone) + (head_pairs(model, task) if with_task else [])
    shapes = [(ours.path, int(np.prod(ours.shape)), int(np.prod(theirs.shape))) for ours, theirs in pairs]
    error = mismatch(
        directory,
        {path: (size,) for path, size, _ in shapes},
        {path: (size,) for path, _, size in shapes},
        describe_model(c),
        "leave the model section unset (it comes from the preset's config.json).",
    )
    if error:
        raise error
    copy_pairs(pairs, to_keras_hub=False)
    fresh = [] if with_task or not pretrainer else ["masked-LM head"]
    return fresh + (["next-sentence head"] if pretrainer else [])
