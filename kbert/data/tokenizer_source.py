"""Which tokenizer a data-creation run uses: a WordPiece vocabulary (--vocab_file, --do_lower_case) or a Hugging
Face tokenizer.json (--tokenizer). A small picklable value: the parent checks it before any record is written, and
every worker, local or Beam, loads it.

Example:

```python
source = TokenizerSource(tokenizer="tokenizers/modernbert")
checked = source.check()  # the parent's: special ids and SHA-256, no TensorFlow op
tokenizer = source.load()  # a worker's: tokenizer.tokenize_marked(lines)
```
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from kbert.data import storage
from kbert.data.hf_tokenizer import HfTokenizer, tokenizer_file
from kbert.data.masking import SpecialIds
from kbert.data.wordpiece.vocab_file import load_vocabulary
from kbert.errors import ConfigError


class TextTokenizer(Protocol):
    """What a worker tokenizes with (WordpieceTokenizer, HfTokenizer)."""

    special_ids: SpecialIds

    def tokenize_marked(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of all lines, flat, pieces that continue a word as `~id`; the row splits that cut them by line."""


@dataclasses.dataclass(frozen=True)
class CheckedTokenizer:
    """What the parent knows of the run's tokenizer: its special ids, and the file and SHA-256 that name it."""

    special_ids: SpecialIds
    file: str
    sha256: str


@dataclasses.dataclass(frozen=True)
class TokenizerSource:
    """A WordPiece `vocab_file` (with `do_lower_case`) or a tokenizer.json `tokenizer` (the file or its directory;
    its own normalizer decides casing): exactly one of the two."""

    vocab_file: str | None = None
    tokenizer: str | None = None
    do_lower_case: bool = True

    def __post_init__(self):
        if bool(self.vocab_file) == bool(self.tokenizer):
            raise ConfigError(
                "give --vocab_file (a WordPiece vocabulary) or --tokenizer (a Hugging Face tokenizer.json or its "
                f"directory){', not both' if self.vocab_file else ''}."
            )

    @property
    def flag(self) -> str:
        return "--vocab_file" if self.vocab_file else "--tokenizer"

    @property
    def file(self) -> str:
        """The file that holds the tokenizer."""
        return self.vocab_file or tokenizer_file(self.tokenizer)

    def check(self) -> CheckedTokenizer:
        """Reads and checks the tokenizer (its special tokens among it), without a TensorFlow op: the parent may
        fork its workers after."""
        if self.tokenizer:
            tokenizer = HfTokenizer(self.tokenizer)
            return CheckedTokenizer(tokenizer.special_ids, tokenizer.file, tokenizer.sha256)
        special_ids = SpecialIds.from_vocabulary(load_vocabulary(self.vocab_file))
        return CheckedTokenizer(special_ids, self.vocab_file, storage.sha256(self.vocab_file, self.flag))

    def load(self) -> TextTokenizer:
        if self.tokenizer:
            return HfTokenizer(self.tokenizer)
        from kbert.data.wordpiece.tokenizer import WordpieceTokenizer  # TensorFlow: only the WordPiece path needs it

        return WordpieceTokenizer(self.vocab_file, lower_case=self.do_lower_case)

    @property
    def worker_modules(self) -> list[str]:
        """The modules a worker imports to load this tokenizer beyond the data tool's own: a forkserver imports
        them once, before it forks the workers (TensorFlow's import takes seconds)."""
        return [] if self.tokenizer else ["kbert.data.wordpiece.tokenizer"]
