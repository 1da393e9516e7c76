"""WordPiece tokenization for data creation: batched tensorflow-text tokenizing over a vocabulary that
`vocab_file.load_vocabulary` validated.

Example:

```python
tokenizer = WordpieceTokenizer("vocab.txt", lower_case=True)
ids, row_splits = tokenizer.tokenize(["Hello world.", "Second sentence."])
marked, row_splits = tokenizer.tokenize_marked(["Hello world."])  # `##` pieces as ~id, for whole-word masking
```
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_text as tft

from kbert.data.masking import SpecialIds, mark_continuations
from kbert.data.wordpiece.vocab_file import load_vocabulary

# Lines per tokenizer call: large enough to amortise the op dispatch, small enough to bound the ragged tensors.
_BATCH_LINES = 8192


class WordpieceTokenizer:
    """`FastBertTokenizer` over a validated vocabulary, returning NumPy ids for whole batches of lines."""

    def __init__(self, vocab_file: str, lower_case: bool = True):
        self.vocab_file = vocab_file
        self.vocab = load_vocabulary(vocab_file)
        self._tokenizer = tft.FastBertTokenizer(
            vocab=self.vocab,
            token_out_type=tf.int32,
            lower_case_nfd_strip_accents=lower_case,
            unknown_token="[UNK]",
        )
        self.special_ids = SpecialIds.from_vocabulary(self.vocab)
        self._continues = np.array([token.startswith("##") for token in self.vocab], dtype=bool)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of all lines, flat (int32), and the row splits (int64, len(lines) + 1) that cut them by line."""
        values, lengths = [], []
        for start in range(0, len(lines), _BATCH_LINES):
            ragged = self._tokenizer.tokenize(tf.constant(lines[start : start + _BATCH_LINES], tf.string))
            values.append(ragged.flat_values.numpy())
            lengths.append(ragged.row_lengths().numpy())
        if not values:
            return np.zeros([0], np.int32), np.zeros([1], np.int64)
        row_lengths = np.concatenate(lengths)
        return np.concatenate(values), np.concatenate([[0], np.cumsum(row_lengths)]).astype(np.int64)

    def tokenize_marked(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`tokenize`'s ids and row splits, each `##` piece marked as `~id` (masking.mark_continuations)."""
        ids, splits = self.tokenize(lines)
        return mark_continuations(ids, self._continues[ids]), splits
