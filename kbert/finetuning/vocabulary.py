"""The vocabulary and lower-casing that `kbert-finetune` and `kbert-export` tokenize with: the user's, else those
a Hugging Face or keras-hub checkpoint brings (`vocab.txt` and `tokenizer_config.json`'s `do_lower_case`; a
preset's `assets/tokenizer/vocabulary.txt` and `tokenizer.json`'s `lowercase`), else lower-casing (BERT's uncased
default); or a tokenizer.json in their place: the user's (`data.tokenizer`), else a Hugging Face ModernBERT
checkpoint's (`tokenizer_for`). A fine-tuning run records what it took, so `kbert-predict` and `kbert-export` of
the run use the same.

Invariant: a lower-casing the user sets that contradicts the checkpoint's tokenizer config is one ConfigError naming
the key (or flag), the file and the fix, raised before anything is built; `Casing.line` says which value was taken
and from where.

Example:

```python
vocab_file_for("bert-base-cased", "")    # 'bert-base-cased/vocab.txt'
casing = casing_for("bert-base-cased", None)
casing.lower_case    # False
casing.line          # 'lower_case: false, from bert-base-cased/tokenizer_config.json.'
```
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from kbert.data.hf_tokenizer import TOKENIZER_FILE
from kbert.errors import ConfigError, MissingFileError
from kbert.finetuning.pretrained import FINETUNE_KEYS, Keys
from kbert.modeling.imported_checkpoint import MODERNBERT, TOKENIZER_CONFIGS, ImportedCheckpoint, imported_checkpoint


def _source(checkpoint: str) -> ImportedCheckpoint | None:
    return imported_checkpoint(checkpoint) if checkpoint else None


def _word(value: bool) -> str:
    return "true" if value else "false"


def checkpoint_tokenizer(checkpoint: str) -> str | None:
    """The tokenizer.json in the directory of a Hugging Face ModernBERT `checkpoint`, None for any other."""
    source = _source(checkpoint)
    if source is None or source.kind != MODERNBERT:
        return None
    path = os.path.join(source.path, TOKENIZER_FILE)
    return path if tf.io.gfile.exists(path) else None


def tokenizer_for(
    checkpoint: str, tokenizer: str, vocab_file: str, lower_case: bool | None, keys: Keys = FINETUNE_KEYS
) -> str | None:
    """The tokenizer.json to tokenize with (`tokenizer`, else a ModernBERT `checkpoint`'s where no `vocab_file`
    is given), or None: WordPiece over a vocabulary file (`vocab_file_for`).

    Raises:
      ConfigError: both `tokenizer` and `vocab_file`, or a lower-casing set beside a tokenizer.json.
      MissingFileError: no `tokenizer` there.
    """
    if tokenizer and vocab_file:
        raise ConfigError(
            f"{keys.tokenizer}={tokenizer} and {keys.vocab}={vocab_file} both say how to tokenize; give one of them."
        )
    if tokenizer and not tf.io.gfile.exists(tokenizer):
        raise MissingFileError(
            f"{keys.tokenizer}={tokenizer} is not there; give a Hugging Face tokenizer.json or the directory "
            "holding one."
        )
    found = tokenizer or (None if vocab_file else checkpoint_tokenizer(checkpoint))
    if found and lower_case is not None:
        raise ConfigError(
            f"{keys.lower_case} applies to a {keys.vocab}; the normalizer of the tokenizer.json {found} decides "
            f"casing: unset {keys.lower_case}."
        )
    return found


def vocab_file_for(checkpoint: str, vocab_file: str, keys: Keys = FINETUNE_KEYS) -> str:
    """`vocab_file`, else the vocabulary a Hugging Face or keras-hub `checkpoint` comes with.

    Raises:
      ConfigError: neither.
    """
    source = _source(checkpoint)
    found = vocab_file or (source.vocab_file if source is not None else None)
    if not found:
        brings = f" and {keys.checkpoint}={checkpoint} brings none" if checkpoint else ""
        raise ConfigError(f"{keys.vocab} is not set{brings}: give the vocabulary the model was pretrained with.")
    return found


@dataclasses.dataclass(frozen=True)
class Casing:
    """Whether the tokenizer lower-cases (and strips accents), and where that came from."""

    lower_case: bool
    origin: str

    @property
    def line(self) -> str:
        """The one line a command prints: `lower_case: false, from DIR/tokenizer_config.json.`"""
        return f"lower_case: {_word(self.lower_case)}, {self.origin}."


def _default_origin(source: ImportedCheckpoint | None, checkpoint: str, keys: Keys) -> str:
    if source is None:
        cased = f"set {keys.lower_case}=false for a cased vocabulary"
        if not checkpoint:
            return f"the default ({cased})"
        return f"the default: {checkpoint} holds no tokenizer config ({cased})"
    name, field = TOKENIZER_CONFIGS[source.kind]
    if source.tokenizer_config is None:
        return f"the default: {source.path} has no {name}"
    return f"the default: {source.tokenizer_config} has no {field}"


def casing_for(checkpoint: str, lower_case: bool | None, keys: Keys = FINETUNE_KEYS) -> Casing:
    """`lower_case` if set (not None), else what the tokenizer config of a Hugging Face or keras-hub `checkpoint`
    says, else true.

    Raises:
      ConfigError: `lower_case` contradicts the checkpoint's tokenizer config.
    """
    source = _source(checkpoint)
    theirs = source.lower_case if source is not None else None
    if lower_case is None:
        if theirs is not None:
            return Casing(theirs, f"from {source.tokenizer_config}")
        return Casing(True, _default_origin(source, checkpoint, keys))
    if theirs is not None and lower_case != theirs:
        field = TOKENIZER_CONFIGS[source.kind][1]
        raise ConfigError(
            f"{keys.lower_case}={_word(lower_case)} contradicts {source.tokenizer_config} ({field}: "
            f"{_word(theirs)}), the tokenizer of {keys.checkpoint}={checkpoint}; leave {keys.lower_case} unset to "
            "take the checkpoint's casing."
        )
    return Casing(lower_case, f"set by {keys.lower_case}")
