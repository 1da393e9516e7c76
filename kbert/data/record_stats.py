"""Summary statistics of pretraining records, for the TFRecord inspector: rows and the sequences in them (one a
row, or up to K in packed records).

Example:

```python
stats = RecordStats(seq_length=128)
for layout, arrays in validation.scan_file(path, 128, 20, num_records=None):
    stats.update(arrays)
stats.records, stats.sequences, stats.nsp_share_random(), stats.masked_share()
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from kbert.data.packing.sequences import sentence_labels, sequence_lengths


class RecordStats:
    """Accumulates row and sequence counts, the histogram of sequence lengths, NSP balance and the masked share."""

    def __init__(self, seq_length: int):
        self.seq_length = seq_length
        self.records = 0
        self.sequences = 0
        self.length_counts = np.zeros(seq_length + 1, np.int64)
        self.nsp_counts = np.zeros(2, np.int64)
        self.real_tokens = 0
        self.predictions = 0
        self.max_id = -1

    def update(self, arrays: dict[str, np.ndarray]) -> None:
        """Adds a parsed chunk (v1 names, [records, ...] arrays)."""
        lengths = sequence_lengths(arrays)
        self.records += len(arrays["input_mask"])
        self.sequences += len(lengths)
        self.length_counts += np.bincount(lengths, minlength=self.seq_length + 1)
        self.nsp_counts += np.bincount(np.clip(sentence_labels(arrays), 0, 1), minlength=2)
        self.real_tokens += int(lengths.sum())
        if "masked_lm_weights" in arrays:
            self.predictions += int(arrays["masked_lm_weights"].sum())
        ids = [arrays["input_ids"]] + ([arrays["masked_lm_ids"]] if "masked_lm_ids" in arrays else [])
        self.max_id = max(self.max_id, *(int(a.max()) for a in ids))

    def nsp_share_random(self) -> float:
        """Share of label 1 (random next sentence) among the labelled sequences."""
        return float(self.nsp_counts[1] / max(1, self.nsp_counts.sum()))

    def masked_share(self) -> float:
        """Masked-LM predictions per real token ([CLS]/[SEP] included in the denominator)."""
        return self.predictions / max(1, self.real_tokens)

    def mean_fill(self) -> float:
        """Mean share of a row holding real tokens."""
        return self.real_tokens / max(1, self.records * self.seq_length)

    def histogram(self, num_buckets: int = 8) -> list[tuple[int, int, int]]:
        """(low, high, count) buckets of sequence lengths, inclusive bounds."""
        edges = np.linspace(0, self.seq_length + 1, num_buckets + 1).astype(int)
        return [
            (int(low), int(high) - 1, int(self.length_counts[low:high].sum()))
            for low, high in zip(edges[:-1], edges[1:])
            if high > low
        ]


def decode(ids: Sequence[int], vocab: Sequence[str]) -> str:
    """WordPiece ids back to text: [PAD] dropped, `##` pieces glued to the piece before."""
    tokens = [vocab[i] if 0 <= i < len(vocab) else f"<id {i}>" for i in ids]
    return " ".join(t for t in tokens if t != "[PAD]").replace(" ##", "")


class TokenDecoder(Protocol):
    """What the inspector prints examples with: a WordPiece vocabulary (`VocabDecoder`) or a tokenizer.json
    (hf_tokenizer.HfTokenizer)."""

    def text(self, ids: Sequence[int]) -> str:
        """A sequence's ids as text."""

    def token(self, token_id: int) -> str:
        """One id as its piece."""


class VocabDecoder:
    """A WordPiece vocabulary's `TokenDecoder`."""

    def __init__(self, vocab: Sequence[str]):
        self.vocab = vocab

    def text(self, ids: Sequence[int]) -> str:
        return decode(ids, self.vocab)

    def token(self, token_id: int) -> str:
        return self.vocab[token_id] if 0 <= token_id < len(self.vocab) else str(token_id)
