"""Where a fine-tuning (or export) model comes from: the checkpoint `train.init_checkpoint` names, the BERT config
that goes with it, and the checks that both fit the vocabulary, before anything is built or trained.

Invariant: `check_checkpoint_fits` raises before any weight is assigned when the checkpoint's vocabulary, width or
depth differ from the model's or the vocabulary file's; `load_encoder` then loads every encoder weight or fails
naming the checkpoint.

Accepted checkpoints: a kbert pretraining `model_dir` (its newest `checkpoints/ckpt-N`) or checkpoint prefix; an
MSLT run (its last `stage_N/export`) or one stage's `export/` (Google format); a Google TF1 download
(`bert_model.ckpt` with `bert_config.json` beside it); a Hugging Face BERT directory or a keras-hub BERT preset
(`kbert.modeling.imported_checkpoint`: the directory stands for itself, its config.json is the model's).

Example:

```python
path = resolve_checkpoint("runs/bert_tiny")          # runs/bert_tiny/checkpoints/ckpt-300
bert = bert_config_for(config.model, path)           # model.bert, or what comes with the checkpoint
check_checkpoint_fits(path, bert, vocab_size=30522, vocab_file="vocab.txt")
load_encoder(model.encoder, path)                    # 'kbert'
```
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable

import keras
import tensorflow as tf

from kbert.errors import CheckpointMismatchError, ConfigError, MissingFileError, VocabularyError
from kbert.modeling import BertConfig, BertEncoder, BertPretrainer
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.runtime import checkpointing
from kbert.runtime.checkpoint_model import checkpoint_bert_config
from kbert.runtime.sections import ModelConfig

BERT_CONFIG = "bert_config.json"


@dataclasses.dataclass(frozen=True)
class Keys:
    """The config keys (or flags) that name the checkpoint, the BERT config, the vocabulary and its lower-casing in
    messages."""

    checkpoint: str = "train.init_checkpoint"
    bert: str = "model.bert"
    vocab: str = "data.vocab_file"
    lower_case: str = "data.lower_case"
    tokenizer: str = "data.tokenizer"


FINETUNE_KEYS = Keys()
_MSLT_EXPORT = re.compile(r"stage_(\d+)$")
_LAYER = re.compile(r"layer_(\d+)")


def _last_mslt_export(model_dir: str) -> str | None:
    stages = [d.rstrip("/") for d in tf.io.gfile.glob(os.path.join(model_dir, "stage_*"))]
    stages = sorted((int(_MSLT_EXPORT.search(d).group(1)), d) for d in stages if _MSLT_EXPORT.search(d))
    for _, stage in reversed(stages):
        found = tf.train.latest_checkpoint(os.path.join(stage, "export"))
        if found:
            return found
    return None


def resolve_checkpoint(path: str, keys: Keys = FINETUNE_KEYS) -> str:
    """The checkpoint prefix `path` stands for (see the module docstring).

    Raises:
      MissingFileError: nothing loadable there.
    """
    source = imported_checkpoint(path)
    if source is not None:
        return source.path
    resolved = path
    if tf.io.gfile.isdir(path):
        resolved = checkpointing.latest_checkpoint(path) or tf.train.latest_checkpoint(path) or _last_mslt_export(path)
    if not resolved or not tf.io.gfile.exists(resolved + ".index"):
        raise MissingFileError(
            f"{keys.checkpoint}={path!r}: no checkpoint there; give a kbert model_dir, an MSLT run or stage "
            "export, a checkpoint prefix (.../ckpt-1000, .../bert_model.ckpt), a directory with a 'checkpoint' "
            "file, a Hugging Face BERT directory or a keras-hub preset."
        )
    return resolved


@dataclasses.dataclass(frozen=True)
class CheckpointSize:
    vocab_size: int
    hidden_size: int
    num_layers: int


def checkpoint_size(prefix: str) -> CheckpointSize:
    """Vocabulary, width and depth of the BERT in a kbert or Google checkpoint, read from its variable shapes (an
    imported one's from its config.json)."""
    source = imported_checkpoint(prefix)
    if source is not None:
        c = source.config
        return CheckpointSize(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_layers=c.num_hidden_layers)
    shapes = dict(tf.train.list_variables(prefix))
    # kbert keys model weights "model/<variable.path>" (slashes escaped as ".S"); Google names them "bert/...".
    weights = {n.replace(".S", "/"): s for n, s in shapes.items() if n.startswith(("model/", "bert/"))}
    tables = [s for n, s in weights.items() if "word_embeddings" in n and len(s) == 2]
    if not tables:
        raise CheckpointMismatchError(f"{prefix} holds no BERT word embeddings: it is not a BERT checkpoint.")
    layers = {int(m.group(1)) for n in weights for m in [_LAYER.search(n)] if m}
    return CheckpointSize(vocab_size=tables[0][0], hidden_size=tables[0][1], num_layers=len(layers))


def _summary_model(prefix: str, model_config: ModelConfig) -> BertConfig | None:
    """The model section of the pretraining run's summary.json (prefix `model_dir/checkpoints/ckpt-N`), with
    `model_config`'s overrides on top."""
    path = os.path.join(os.path.dirname(os.path.dirname(prefix)), "summary.json")
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        model = json.load(f).get("config", {}).get("model")
    if not model:
        return None
    config = ModelConfig()
    config.override(model, is_strict=False)
    config.override({"overrides": {k: v for k, v in model_config.overrides.as_dict().items() if v is not None}})
    return config.bert_config()


def bert_config_for(model_config: ModelConfig, prefix: str | None, keys: Keys = FINETUNE_KEYS) -> BertConfig:
    """`model.bert` (with `model.overrides`) if set, else what the checkpoint `prefix` comes with; an imported
    checkpoint's own, with the model fields set checked against it (`checkpoint_bert_config`).

    Raises:
      ConfigError: neither `model.bert` nor a config beside the checkpoint, or a model field that disagrees with
        an imported checkpoint.
    """
    source = imported_checkpoint(prefix) if prefix else None
    if source is not None:
        return checkpoint_bert_config(model_config, source, keys.checkpoint)
    if model_config.bert:
        try:
            return model_config.bert_config()
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{keys.bert}={model_config.bert!r}: {e}") from None
    if prefix:
        beside = os.path.join(os.path.dirname(prefix), BERT_CONFIG)
        if tf.io.gfile.exists(beside):
            return dataclasses.replace(model_config, bert=beside).bert_config()
        from_summary = _summary_model(prefix, model_config)
        if from_summary is not None:
            return from_summary
    raise ConfigError(
        f"{keys.bert} is not set and no bert_config.json comes with {keys.checkpoint}: set {keys.bert} to a "
        f"preset (bert_base, ...) or to the bert_config.json the model was {'pretrained' if prefix else 'built'} "
        "with."
    )


def check_checkpoint_fits(
    prefix: str, bert: BertConfig, vocab_size: int, vocab_file: str, keys: Keys = FINETUNE_KEYS, tokenizer: bool = False
) -> None:
    """Raises VocabularyError or CheckpointMismatchError, naming both sides, if the checkpoint cannot be loaded.
    A `tokenizer` (a tokenizer.json, `vocab_size` one more than its largest id) needs its ids inside the word table
    (ModernBERT's is padded past its tokenizer's); a vocabulary file, a table of its size."""
    size = checkpoint_size(prefix)
    if tokenizer and size.vocab_size < vocab_size:
        raise VocabularyError(
            f"{keys.tokenizer}={vocab_file} gives ids up to {vocab_size - 1} but the word table of "
            f"{keys.checkpoint} {prefix} has {size.vocab_size} rows; use the tokenizer that model was pretrained with."
        )
    if not tokenizer and size.vocab_size != vocab_size:
        raise VocabularyError(
            f"{keys.vocab}={vocab_file} has {vocab_size} tokens but {keys.checkpoint} {prefix} was "
            f"pretrained with {size.vocab_size}; use the vocabulary file of that pretraining run."
        )
    if (size.hidden_size, size.num_layers) != (bert.hidden_size, bert.num_hidden_layers):
        raise CheckpointMismatchError(
            f"{keys.checkpoint} {prefix} holds a {size.num_layers}-layer BERT of hidden size "
            f"{size.hidden_size}, but the model config has {bert.num_hidden_layers} layers of hidden size "
            f"{bert.hidden_size}; set {keys.bert} to the bert_config.json (or preset) it was pretrained with."
        )


def has_masked_lm_head(prefix: str) -> bool:
    """Whether a checkpoint holds the masked-LM head (kbert's `model/predictions/...`, Google's
    `cls/predictions/...`, an imported one's; optimizer slots aside)."""
    source = imported_checkpoint(prefix)
    if source is not None:
        return source.has_masked_lm_head
    return any(
        name.startswith(("model/", "cls/")) and "predictions/output_bias" in name.replace(".S", "/")
        for name, _ in tf.train.list_variables(prefix)
    )


def _is_google(prefix: str) -> bool:
    return any(name.startswith("bert/embeddings/") for name, _ in tf.train.list_variables(prefix))


def load_encoder(encoder: BertEncoder, prefix: str, print_fn: Callable[..., None] | None = None) -> str:
    """Loads the encoder's weights from a kbert, Google, Hugging Face or keras-hub checkpoint (heads and optimizer
    slots ignored); returns its kind ('kbert', 'google', 'Hugging Face', 'keras-hub'). `print_fn` gets the line
    that says what an imported checkpoint lacks (a BertForMaskedLM's pooler).

    Raises:
      CheckpointMismatchError: some weight is missing, unexpected or of another shape (listed).
    """
    if imported_checkpoint(prefix) is not None:
        return checkpointing.load_init_checkpoint(encoder, prefix, print_fn)
    if _is_google(prefix):
        return checkpointing.load_init_checkpoint(encoder, prefix)  # a Google load into an encoder skips cls/
    # A kbert checkpoint holds a whole pretrainer, and load_init_checkpoint loads a model's exact weights: load it
    # into a pretrainer of this size, then take its encoder's weights (the same paths, in the same order).
    pretrainer = BertPretrainer(encoder.config)
    kind = checkpointing.load_init_checkpoint(pretrainer, prefix)
    _copy(pretrainer.encoder.weights, encoder.weights)
    return kind


def load_masked_lm_transform(layers: list[keras.layers.Layer], config: BertConfig, prefix: str) -> bool:
    """Loads the masked-LM head's transform (its dense layer, then its LayerNorm) of the checkpoint `prefix`, of a
    model of `config`, into `layers` (layers of the same shapes); False, nothing loaded, where the checkpoint holds
    no masked-LM head. transformers' `ModernBertForSequenceClassification.from_pretrained` starts its classifier
    head so: the masked-LM head's and the classifier's are both named `head.dense` and `head.norm`."""
    if not has_masked_lm_head(prefix):
        return False
    pretrainer = BertPretrainer(config)
    checkpointing.load_init_checkpoint(pretrainer, prefix)
    head = pretrainer.mlm_head
    _copy(head.transform.weights + head.layer_norm.weights, [w for layer in layers for w in layer.weights])
    return True


def _copy(sources: list, targets: list) -> None:
    for target, source in zip(targets, sources, strict=True):
        target.assign(source)
