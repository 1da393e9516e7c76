"""`TokenizerEncoder`: a Hugging Face tokenizer.json (BPE, as ModernBERT's, or any the `tokenizers` library reads)
tokenizing outside the TensorFlow graph, then the packing every fine-tuning tokenizer shares (`TextEncoder`).

Invariant: each segment is encoded by the `tokenizers` library alone (`HfTokenizer.encode`: no special tokens added,
special tokens in the text encoded as text), then cut and laid out as `[CLS] a [SEP] b [SEP]` with the tokenizer's
own cls and sep tokens: for a pair that fits, the ids are the tokenizer's own `encode(a, b)` under a
`[CLS] $A [SEP] $B [SEP]` post-processor (ModernBERT's); a longer pair loses pieces longest-first, as BERT's
WordPiece path (`kbert.finetuning.encoding`). The tokenizer runs in a `tf.py_function`, so the encoder works in
tf.data and eagerly, and no SavedModel can hold it.

Example:

```python
encoder = TokenizerEncoder("ModernBERT-base", seq_length=128)  # a directory holding tokenizer.json, or the file
encoder.segment_ids = False  # a model without a token-type table
encoder.encode(tf.constant(["a text"]), tf.constant(["its pair"]))  # {"input_ids", ...}, each [1, 128]
```
"""

from __future__ import annotations

import itertools

import numpy as np
import tensorflow as tf

from kbert.data.hf_tokenizer import HfTokenizer
from kbert.finetuning.config import FinetuneDataConfig
from kbert.finetuning.encoding import PairEncoder, TextEncoder


class TokenizerEncoder(TextEncoder):
    """A tokenizer.json's pieces, packed with its cls, sep and pad tokens (`HfTokenizer` finds them)."""

    def __init__(self, path: str, seq_length: int):
        self.tokenizer = HfTokenizer(path, flag="data.tokenizer")
        self.seq_length = seq_length
        self._special_ids = {f"{role}_id": self.tokenizer.role_ids[role] for role in ("cls", "sep", "pad")}

    @property
    def vocab_size(self) -> int:
        """One more than the largest id the tokenizer gives (a model's word table may be larger)."""
        return self.tokenizer.vocab_size

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special_ids)

    def _ids(self, texts: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
        rows = self.tokenizer.encode([text.decode("utf-8") for text in texts.numpy().reshape(-1)])
        lengths = np.array([len(row) for row in rows], np.int64)
        return np.fromiter(itertools.chain.from_iterable(rows), np.int64, count=int(lengths.sum())), lengths

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Batched strings -> the tokenizer's ids `[batch, (pieces)]`, int64."""
        values, lengths = tf.py_function(self._ids, [texts], (tf.int64, tf.int64))
        values.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(values, lengths)


def text_encoder(data: FinetuneDataConfig) -> TextEncoder:
    """The tokenizer `data` names: its `tokenizer` (a tokenizer.json) if set, else WordPiece over its `vocab_file`
    with its `lower_case`."""
    if data.tokenizer:
        return TokenizerEncoder(data.tokenizer, data.seq_length)
    return PairEncoder(data.vocab_file, data.seq_length, data.lower_case)
