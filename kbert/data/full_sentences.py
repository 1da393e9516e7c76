"""The MLM-only objective's rows (RoBERTa's FULL-SENTENCES): the corpus as one token stream, cut into full rows.

The stream holds every document followed by a [SEP]. A row is [CLS], the next `max_seq_length - 2` tokens of the
stream and a closing [SEP]: one segment (segment_ids 0), no sentence label. Invariants:

- Every row is full (input_mask all 1) except the last row of the whole output, which the end of the input cuts
  short; that row closes with its last document's [SEP].
- Inside a row, a [SEP] stands between two documents. A document's [SEP] that would open a row is dropped: the
  row before already closes with [SEP] where the document ends. (A document that ends one token before a row's
  end leaves `[SEP] [SEP]` there: its own, then the row's.) A sentence longer than a row runs on into the next.
- Rows are cut in stream order, so their tokens, [CLS] and [SEP] aside, are the stream's documents.

Work units (create_pretraining_data.py) each cut their own stream into full rows and hand the parent their
leftover: fewer than a row's tokens, none a leading [SEP]. The parent's `Carry` joins the leftovers of
consecutive units in unit order into rows as they fill, and its rest is the last row.

Example:

```python
rows, leftover = cut_rows(document_stream(documents, sep_id), max_seq_length - 2, sep_id)
features = row_features(rows, config, special_ids, rng)
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kbert.data.instances import Document, InstanceConfig
from kbert.data.masking import SpecialIds, with_masks


class Rows(NamedTuple):
    """What follows [CLS] in each row, [SEP]s included: int [N, max_seq_length - 1], real up to `lengths` [N]."""

    bodies: np.ndarray
    lengths: np.ndarray


def document_stream(documents: Sequence[Document], sep_id: int) -> np.ndarray:
    """The documents' tokens in order, each document followed by [SEP] (int32)."""
    sep = np.array([sep_id], np.int32)
    return np.concatenate([np.zeros([0], np.int32)] + [piece for doc in documents for piece in (*doc, sep)])


def cut_rows(stream: np.ndarray, width: int, sep_id: int) -> tuple[Rows, np.ndarray]:
    """The full rows of `stream`, `width` stream tokens each and the closing [SEP], and the leftover: the fewer
    than `width` tokens after them. A [SEP] that would open a row (or the leftover) is skipped."""
    starts, start = [], 0
    # Each row's start depends on whether the token after the row before is a [SEP]: one step per row.
    while True:
        if start < len(stream) and stream[start] == sep_id:
            start += 1
        if start + width > len(stream):
            break
        starts.append(start)
        start += width
    windows = stream[np.array(starts, np.int64)[:, None] + np.arange(width)]
    closing = np.full([len(starts), 1], sep_id, stream.dtype)
    return Rows(np.concatenate([windows, closing], axis=1), np.full(len(starts), width + 1)), stream[start:]


class Carry:
    """The leftovers of consecutive work units, joined in unit order into full rows as they fill.

    It holds fewer than `width` tokens between calls, so the parent's memory stays bounded.
    """

    def __init__(self, width: int, sep_id: int):
        self.width = width
        self.sep_id = sep_id
        self._tokens = np.zeros([0], np.int32)

    def add(self, leftover: np.ndarray) -> Rows:
        """The rows (at most one) that `leftover`, the next unit's, completes."""
        rows, self._tokens = cut_rows(np.concatenate([self._tokens, leftover]), self.width, self.sep_id)
        return rows

    def last_row(self) -> Rows:
        """What is left at the end of the input, as the output's last row (none if nothing is left). It ends with
        its last document's [SEP], which closes the row."""
        bodies = np.zeros([1 if len(self._tokens) else 0, self.width + 1], np.int32)
        bodies[:, : len(self._tokens)] = self._tokens
        return Rows(bodies, np.full(len(bodies), len(self._tokens)))


def row_features(
    rows: Rows, config: InstanceConfig, ids: SpecialIds, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """`[CLS] body` rows, padded: schema.py's MLM-only features (v1 names; no `next_sentence_labels`).

    int64 `input_ids`, `input_mask`, `segment_ids` (all 0) [N, max_seq_length] and `original_ids`; unless
    `config.no_masking`, also the masked-LM features (masking.with_masks).
    """
    lengths = rows.lengths + 1
    input_mask = (np.arange(config.max_seq_length)[None, :] < lengths[:, None]).astype(np.int64)
    tokens = np.full(input_mask.shape, ids.cls_id, np.int64)
    tokens[:, 1:] = rows.bodies
    tokens *= input_mask
    features = {"input_ids": tokens, "input_mask": input_mask, "segment_ids": np.zeros_like(tokens)}
    return with_masks(features, lengths, config, ids, rng)
