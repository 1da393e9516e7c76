"""Which pieces of a Hugging Face tokenizer.json start a word, read from the piece alone: dynamic whole-word
masking's word boundaries, for records that keep no word ids (kbert.data.dynamic_masking).

The rule is the tokenizer's own way of spelling a word boundary into its pieces, the first that applies of:

* a WordPiece model: a piece starts a word unless it opens with the model's `continuing_subword_prefix` (`##`);
* a ByteLevel pre-tokenizer (byte-level BPE: GPT-2, RoBERTa, ModernBERT): a piece starts a word when it opens with
  `Ġ`, the byte-level spelling of the space before a word;
* a Metaspace pre-tokenizer (SentencePiece style: Unigram or BPE) or a normalizer that writes `▁` for spaces: a
  piece starts a word when it opens with its replacement character, `▁`;
* a model with a `continuing_subword_prefix` (a BPE so trained): as WordPiece.

Added tokens (special or not) start a word, and so does an id that stands for no piece. A tokenizer whose pieces
spell no boundary (e.g. BPE after a Whitespace pre-tokenizer) is a `VocabularyError`.

The table is by piece, not by position, so a word whose first piece lacks the marker (the first word of a line
under a ByteLevel pre-tokenizer without `add_prefix_space`) continues the piece before it; the masker starts a
word after every special token, so such a word never joins [CLS] or [SEP].

Example:

```python
starts = word_starts(HfTokenizer("tokenizers/modernbert", flag="data.tokenizer"))  # bool per id
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from kbert.data.hf_tokenizer import HfTokenizer
from kbert.errors import VocabularyError

BYTE_LEVEL_SPACE = "\u0120"  # Ġ: the ByteLevel pre-tokenizer's spelling of the space byte
METASPACE = "\u2581"  # ▁: SentencePiece's spelling of a space


@dataclasses.dataclass(frozen=True)
class WordBoundary:
    """How pieces spell a word boundary: opening with `word_start` (a word's first piece carries it), or opening
    with `continuation` (every piece after a word's first carries it); exactly one is set."""

    word_start: str = ""
    continuation: str = ""

    def starts_word(self, piece: str) -> bool:
        return piece.startswith(self.word_start) if self.word_start else not piece.startswith(self.continuation)


def _parts(component: dict | None) -> Iterator[dict]:
    """A normalizer or pre-tokenizer of tokenizer.json and, for a Sequence, its members, depth first."""
    if not component:
        return
    yield component
    for member in component.get("pretokenizers") or component.get("normalizers") or ():
        yield from _parts(member)


def word_boundary(config: dict) -> WordBoundary | None:
    """The rule (see the module's docstring) of a tokenizer.json's `config`; None where its pieces spell none."""
    model = config.get("model") or {}
    if model.get("type") == "WordPiece":
        return WordBoundary(continuation=model.get("continuing_subword_prefix") or "##")
    for part in _parts(config.get("pre_tokenizer")):
        if part.get("type") == "ByteLevel":
            return WordBoundary(word_start=BYTE_LEVEL_SPACE)
        if part.get("type") == "Metaspace":
            return WordBoundary(word_start=part.get("replacement") or METASPACE)
    if model.get("continuing_subword_prefix"):
        return WordBoundary(continuation=model["continuing_subword_prefix"])
    for part in _parts(config.get("normalizer")):
        written = part.get("prepend") or part.get("content") or ""  # a Prepend's or a Replace's text
        if part.get("type") in ("Prepend", "Replace") and METASPACE in written:
            return WordBoundary(word_start=METASPACE)
    return None


def word_starts(tokenizer: HfTokenizer) -> np.ndarray:
    """A bool per id below `tokenizer.vocab_size`: True where the piece starts a word (module docstring)."""
    boundary = word_boundary(tokenizer.config)
    if boundary is None:
        raise VocabularyError(
            f"{tokenizer.flag}: the pieces of {tokenizer.file} mark no word boundary kbert reads (a WordPiece "
            f"model's ##, a ByteLevel pre-tokenizer's {BYTE_LEVEL_SPACE}, a Metaspace's {METASPACE}), which "
            "whole-word masking needs: turn whole-word masking off, or give a tokenizer with one of them."
        )
    added = tokenizer.added_tokens
    return np.array(
        [piece is None or i in added or boundary.starts_word(piece) for i, piece in enumerate(tokenizer.pieces())],
        bool,
    )
