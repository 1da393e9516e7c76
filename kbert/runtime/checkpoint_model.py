"""The model section of a run that starts from an imported checkpoint (Hugging Face or keras-hub): what the
checkpoint's config.json says, with the user's model fields checked against it before anything is built.

Invariant: a field that fixes the weights' shapes or the function they compute (sizes, depth, vocabulary,
positions, segments, GELU form, LayerNorm epsilon) comes from the checkpoint; the user may set it only to the
checkpoint's value, and any other value is one ConfigError naming the field and both values. Fields the weights do
not fix (dropout, initializer range) are the user's. The checkpoint's vocabulary is the run's.

Example:

```python
source = imported_checkpoint("bert-base-uncased")
bert = checkpoint_bert_config(config.model, source)         # the checkpoint's, dropout overrides applied
vocab = checkpoint_vocab_file(source, config.data.vocab_file)
```
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from kbert.errors import ConfigError, VocabularyError
from kbert.modeling import BertConfig
from kbert.modeling.imported_checkpoint import ImportedCheckpoint
from kbert.runtime.sections import ModelConfig

# The fields a checkpoint fixes.
CHECKPOINT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "mlm_hidden_act",
    "mlm_layer_norm_eps",
)


def checkpoint_bert_config(
    model: ModelConfig,
    source: ImportedCheckpoint,
    checkpoint_key: str = "train.init_checkpoint",
    free: Sequence[str] = (),
) -> BertConfig:
    """The model of `source` with `model`'s fields on top: the fields the checkpoint fixes must agree with it
    (those in `free`, such as an MSLT run's target depth, may differ), the others are applied.

    Raises:
      ConfigError: one line naming every disagreeing field with the user's and the checkpoint's value.
    """
    try:
        user = model.set_fields()
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise ConfigError(f"model.bert={model.bert!r}: {e}") from None
    checkpoint = source.config.to_dict()
    where = f"model.bert={model.bert}" if model.bert else "model.overrides"
    differ = [
        f"{field}={user[field]!r} (checkpoint: {checkpoint.get(field)!r})"
        for field in CHECKPOINT_FIELDS
        if field in user and field not in free and user[field] != checkpoint.get(field)
    ]
    if differ:
        raise ConfigError(
            f"{where} sets {', '.join(differ)}, but {checkpoint_key}={source.path} is a "
            f"{source.kind} BERT of another shape or function: leave model.bert and these "
            "model.overrides unset (the model comes from the checkpoint's config.json)."
        )
    try:
        return source.config.replace(**{k: v for k, v in _overrides(model) if k not in CHECKPOINT_FIELDS or k in free})
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model.overrides: {e}") from None


def _overrides(model: ModelConfig) -> list[tuple[str, object]]:
    return [(k, v) for k, v in model.overrides.as_dict().items() if v is not None]


def _tokens(path: str) -> list[str]:
    with tf.io.gfile.GFile(path) as f:
        return f.read().splitlines()


def checkpoint_vocab_file(source: ImportedCheckpoint, vocab_file: str, key: str = "data.vocab_file") -> str:
    """The run's vocabulary: the checkpoint's (`vocab_file` may name it, or a file of the same tokens); `vocab_file`
    itself where the checkpoint has none.

    Raises:
      VocabularyError: `vocab_file` holds other tokens than the checkpoint's vocabulary.
    """
    if source.vocab_file is None or not vocab_file or vocab_file == source.vocab_file:
        return vocab_file or source.vocab_file or ""
    if _tokens(vocab_file) != _tokens(source.vocab_file):
        raise VocabularyError(
            f"{key}={vocab_file} is not the vocabulary of the checkpoint ({source.vocab_file}); "
            "records and the model must share the checkpoint's: unset it, and make the records "
            f"with kbert-create-pretraining-data --vocab_file={source.vocab_file}."
        )
    return vocab_file
