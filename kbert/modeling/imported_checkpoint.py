"""Checkpoints kbert imports: a Hugging Face BERT directory (`config.json`, `model.safetensors`, `vocab.txt`,
`tokenizer_config.json`), a Hugging Face ModernBERT directory (`config.json` of `model_type: modernbert`,
`model.safetensors`, `tokenizer.json`) or a keras-hub BERT preset (`config.json` of a BertBackbone,
`model.weights.h5`, `assets/tokenizer/vocabulary.txt`, `tokenizer.json`), told apart by their `config.json`; each
with the model it holds, its vocabulary, its lower-casing and its load.

Example:

```python
source = imported_checkpoint("bert-base-uncased")      # None for anything else (a kbert run, a Google download)
source.kind, source.architecture, source.config.num_hidden_layers, source.vocab_file
source.lower_case, source.tokenizer_config   # True, 'bert-base-uncased/tokenizer_config.json' (None: it says none)
fresh = source.load(BertPretrainer(source.config))     # [] or the parts that start fresh: ['masked-LM head', ...]
print(source.fresh_line(fresh))
```
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf

from kbert.errors import ConfigError
from kbert.modeling import hf_checkpoint, keras_hub_checkpoint, modernbert_checkpoint
from kbert.modeling.config import BertConfig
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.hf_config import bert_config_from_hf
from kbert.modeling.pretrainer import BertPretrainer

HUGGING_FACE = "Hugging Face"
MODERNBERT = "Hugging Face ModernBERT"
KERAS_HUB = "keras-hub"
# Each kind's tokenizer config, and the field of it that says whether the tokenizer lower-cases.
TOKENIZER_CONFIGS = {
    HUGGING_FACE: ("tokenizer_config.json", "do_lower_case"),
    MODERNBERT: ("tokenizer_config.json", "do_lower_case"),
    KERAS_HUB: ("tokenizer.json", "lowercase"),
}


@dataclasses.dataclass(frozen=True)
class ImportedCheckpoint:
    """A Hugging Face BERT or ModernBERT directory or a keras-hub BERT preset: `kind` (HUGGING_FACE, MODERNBERT or
    KERAS_HUB), the model it holds (`config`), `architecture` (BertForPreTraining, BertForMaskedLM or BertModel by
    the weights stored; ModernBertForMaskedLM or ModernBertModel; BertMaskedLM or BertBackbone), its vocabulary
    file (None where it has none), whether it holds the masked-LM head, its tokenizer config file (None where it has
    none), whether that says the tokenizer lower-cases (None where it says nothing) and, for ModernBERT, what its
    sequence classifier pools (`classifier_pooling`: "cls" or "mean"; None for BERT)."""

    path: str
    kind: str
    config: BertConfig
    architecture: str
    vocab_file: str | None
    has_masked_lm_head: bool
    tokenizer_config: str | None
    lower_case: bool | None
    classifier_pooling: str | None = None

    def load(self, model: BertPretrainer | BertEncoder) -> list[str]:
        """Loads the weights into `model` (an encoder takes no heads); returns the parts that keep their built
        weights because the checkpoint has none ('masked-LM head', 'next-sentence head', 'pooler')."""
        if self.kind == HUGGING_FACE:
            return hf_checkpoint.load_hf_checkpoint(model, self.path)
        if self.kind == MODERNBERT:
            return modernbert_checkpoint.load_modernbert_checkpoint(model, self.path)
        return keras_hub_checkpoint.load_keras_hub_preset(model, self.path)

    def fresh_line(self, parts: list[str]) -> str:
        """The one line that says which parts start fresh ('' for none)."""
        if not parts:
            return ""
        listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
        return (
            f"{self.path} ({self.kind} {self.architecture}) has no {listed}: "
            f"{'they start' if len(parts) > 1 else 'it starts'} fresh."
        )


def _directory(path: str) -> str:
    return os.path.dirname(path) if os.path.basename(path) == hf_checkpoint.CONFIG else path.rstrip("/")


def _existing(path: str) -> str | None:
    return path if tf.io.gfile.exists(path) else None


def _json(path: str) -> dict:
    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from None


def _tokenizer(directory: str, kind: str) -> tuple[str | None, bool | None]:
    """The tokenizer config file of a checkpoint of `kind` and its lower-casing field's value (None: not there).

    Raises:
      ConfigError: the file is not JSON, or the field is not true or false.
    """
    name, field = TOKENIZER_CONFIGS[kind]
    path = _existing(os.path.join(directory, name))
    if path is None:
        return None, None
    values = _json(path)
    if kind == KERAS_HUB:
        values = values.get("config") or {}  # a Keras object: its settings are under "config"
    value = values.get(field)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{path}: {field}={value!r} must be true or false.")
    return path, value


def imported_checkpoint(path: str) -> ImportedCheckpoint | None:
    """The Hugging Face or keras-hub BERT at `path` (its directory or its `config.json`), or None when `path`
    holds no `config.json` (a kbert run, a Google checkpoint, a preset name).

    Raises:
      ConfigError: a `config.json` or tokenizer config that is not JSON, of a model kbert cannot compute, or
        whose lower-casing is not true or false (one line, naming it).
      MissingFileError: a Hugging Face config without safetensors weights.
    """
    directory = _directory(path)
    config_path = os.path.join(directory, hf_checkpoint.CONFIG)
    if "://" not in path and not os.path.exists(config_path):
        return None  # a local path without one, or a preset name such as bert_base
    if not tf.io.gfile.exists(config_path):
        return None
    values = _json(config_path)
    if "class_name" in values:  # a Keras object: a keras-hub preset
        task = keras_hub_checkpoint.has_masked_lm_task(directory)
        return ImportedCheckpoint(
            directory,
            KERAS_HUB,
            keras_hub_checkpoint.keras_hub_bert_config(values, config_path),
            keras_hub_checkpoint.MASKED_LM if task else keras_hub_checkpoint.BACKBONE,
            _existing(os.path.join(directory, keras_hub_checkpoint.VOCABULARY)),
            task,
            *_tokenizer(directory, KERAS_HUB),
        )
    if values.get("model_type") == modernbert_checkpoint.MODEL_TYPE:
        config = modernbert_checkpoint.modernbert_config(values, config_path)
        head = modernbert_checkpoint.has_masked_lm_head(directory)
        return ImportedCheckpoint(
            directory,
            MODERNBERT,
            config,
            modernbert_checkpoint.MASKED_LM if head else modernbert_checkpoint.MODEL,
            None,  # a BPE tokenizer.json: records come from "Any tokenizer"'s tools
            head,
            *_tokenizer(directory, MODERNBERT),
            modernbert_checkpoint.classifier_pooling(values, config_path),
        )
    config = bert_config_from_hf(values, config_path)
    stored = hf_checkpoint.stored_shapes(directory)
    heads = {part for part, prefix in hf_checkpoint.OPTIONAL_PARTS.items() if any(n.startswith(prefix) for n in stored)}
    architecture = (
        "BertForPreTraining"
        if "next-sentence head" in heads
        else "BertForMaskedLM"
        if "masked-LM head" in heads
        else "BertModel"
    )
    return ImportedCheckpoint(
        directory,
        HUGGING_FACE,
        config,
        architecture,
        _existing(os.path.join(directory, "vocab.txt")),
        "masked-LM head" in heads,
        *_tokenizer(directory, HUGGING_FACE),
    )
