"""WordPiece tokenization for data creation: vocabulary loading and validation, batched tensorflow-text tokenizing.

Example:

```python
tokenizer = WordpieceTokenizer("vocab.txt", lower_case=True)
ids, row_splits = tokenizer.tokenize(["Hello world.", "Second sentence."])
```
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_text as tft

from kbert.data.vocab import SPECIAL_TOKENS
from kbert.errors import MissingFileError, VocabularyError

# Lines per tokenizer call: large enough to amortise the op dispatch, small enough to bound the ragged tensors.
_BATCH_LINES = 8192


def load_vocabulary(path: str) -> list[str]:
    """Reads a one-token-per-line vocabulary and checks that BERT's special tokens are in it, once each."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            tokens = [line.decode("utf-8").rstrip("\r\n") for line in f]
    except tf.errors.NotFoundError as e:
        raise MissingFileError(f"--vocab_file: {path} does not exist.") from e
    except UnicodeDecodeError as e:
        raise VocabularyError(f"--vocab_file: {path} is not UTF-8 ({e}).") from e
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise VocabularyError(
            f"--vocab_file: {path} lacks the special token(s) {', '.join(missing)}; every BERT vocabulary needs "
            f"{', '.join(SPECIAL_TOKENS)}. Build one with tools/build_vocab.py or add them to the file."
        )
    seen: set[str] = set()
    duplicates = sorted({t for t in tokens if t in seen or seen.add(t)})
    if duplicates:
        raise VocabularyError(f"--vocab_file: {path} repeats token(s) {duplicates[:10]}; each line must be unique.")
    return tokens


class WordpieceTokenizer:
    """`FastBertTokenizer` over a validated vocabulary, returning NumPy ids for whole batches of lines.

    `is_continuation[id]` is True for `##` pieces, which whole-word masking joins to the piece before them.
    """

    def __init__(self, vocab_file: str, lower_case: bool = True):
        self.vocab_file = vocab_file
        self.vocab = load_vocabulary(vocab_file)
        ids = {t: i for i, t in enumerate(self.vocab)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (ids[t] for t in SPECIAL_TOKENS)
        self.is_continuation = np.array([t.startswith("##") for t in self.vocab], dtype=bool)
        self._tokenizer = tft.FastBertTokenizer(
            vocab=self.vocab,
            token_out_type=tf.int32,
            lower_case_nfd_strip_accents=lower_case,
            unknown_token="[UNK]",
        )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of all lines, flat (int32), and the row splits (int64, len(lines) + 1) that cut them by line."""
        values, lengths = [], []
        for start in range(0, len(lines), _BATCH_LINES):
            ragged = self._tokenizer.tokenize(tf.constant(lines[start:start + _BATCH_LINES], tf.string))
            values.append(ragged.flat_values.numpy())
            lengths.append(ragged.row_lengths().numpy())
        if not values:
            return np.zeros([0], np.int32), np.zeros([1], np.int64)
        row_lengths = np.concatenate(lengths)
        return np.concatenate(values), np.concatenate([[0], np.cumsum(row_lengths)]).astype(np.int64)
