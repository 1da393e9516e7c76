"""Which sequences share a packed row: the SPFHP plan (plan.py) filled with real sequences.

The plan says how many rows hold which lengths; each planned row takes the next sequence of each of its lengths
(per-length queues, in input order). A sequence whose masked-LM predictions would overflow the row's prediction
slots (records written with a high masked_lm_prob) is held back, and the held-back sequences are planned and
filled again, round after round. Each round places at least one sequence a row, the row's first, since one
sequence's predictions always fit, so at least 1/K of what is left: the rounds end after O(log N) of them.

Invariant: every sequence lands in exactly one row; no row holds more than `seq_length` tokens, more than
`max_sequences_per_pack` sequences or more than `prediction_slots` predictions; the rows depend only on the
arguments.

Example:

```python
rows = assign_rows(lengths, predictions, seq_length=512, max_sequences_per_pack=3, prediction_slots=78)
rows.members[rows.starts[0]:rows.starts[1]]  # the sequences of row 0, longest first
```
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kbert.data.packing.plan import plan_packs


@dataclasses.dataclass(frozen=True)
class Rows:
    """Rows of sequence indices, compressed: row r holds `members[starts[r]:starts[r + 1]]`."""

    members: np.ndarray  # int64 [sequences]
    starts: np.ndarray  # int64 [rows + 1]

    @property
    def count(self) -> int:
        return len(self.starts) - 1

    def sizes(self) -> np.ndarray:
        """Sequences per row, [rows]."""
        return np.diff(self.starts)

    def slice(self, start: int, stop: int) -> Rows:
        """Rows [start, stop)."""
        first = self.starts[start]
        return Rows(self.members[first : self.starts[stop]], self.starts[start : stop + 1] - first)

    def reordered(self, order: np.ndarray) -> Rows:
        """The rows in `order` (a permutation of the row indices), each row's sequences kept in their order."""
        sizes = self.sizes()[order]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        take = np.repeat(self.starts[order] - starts[:-1], sizes) + np.arange(starts[-1])
        return Rows(self.members[take], starts)


def _concatenate(parts: list[Rows]) -> Rows:
    members = [part.members for part in parts]
    sizes = [part.sizes() for part in parts]
    return Rows(
        np.concatenate(members or [np.zeros(0, np.int64)]),
        np.concatenate([[0], np.cumsum(np.concatenate(sizes or [np.zeros(0, np.int64)]))]),
    )


def _fill_round(
    indices: np.ndarray,
    lengths: np.ndarray,
    predictions: np.ndarray,
    seq_length: int,
    max_sequences_per_pack: int,
    prediction_slots: int,
) -> tuple[list[Rows], np.ndarray]:
    """One round: plans `indices` by length, fills the plan; returns its rows and the held-back indices."""
    histogram = np.bincount(lengths[indices], minlength=seq_length + 1)
    by_length = indices[np.argsort(lengths[indices], kind="stable")]  # within a length: input order
    queue_start = np.concatenate([[0], np.cumsum(histogram)])  # queue of length L: by_length[start[L]:...]
    taken = np.zeros(seq_length + 1, np.int64)
    rows, held_back = [], []
    for pack in plan_packs(histogram, seq_length, max_sequences_per_pack):
        columns = []
        for length in pack.lengths:
            first = queue_start[length] + taken[length]
            columns.append(by_length[first : first + pack.count])
            taken[length] += pack.count
        members = np.stack(columns, axis=1)  # [count, sequences of the pack], longest first
        fits = np.zeros(members.shape, bool)
        used = np.zeros(pack.count, np.int64)
        for column in range(members.shape[1]):  # first come, first placed: the row's first always fits
            wanted = predictions[members[:, column]]
            fits[:, column] = used + wanted <= prediction_slots
            used += np.where(fits[:, column], wanted, 0)
        rows.append(Rows(members[fits], np.concatenate([[0], np.cumsum(fits.sum(axis=1))])))
        held_back.append(members[~fits])
    return rows, np.concatenate(held_back or [np.zeros(0, np.int64)])


def assign_rows(
    lengths: np.ndarray, predictions: np.ndarray, seq_length: int, max_sequences_per_pack: int, prediction_slots: int
) -> Rows:
    """Rows for sequences of `lengths` tokens with `predictions` masked-LM predictions each (all 0 if unmasked).

    Rows come in plan order (the caller shuffles them); a row's sequences longest first.
    """
    lengths = np.asarray(lengths, np.int64)
    predictions = np.asarray(predictions, np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > seq_length):
        raise ValueError(f"sequence lengths must be in [1, {seq_length}]")
    if predictions.size and predictions.max() > prediction_slots:
        raise ValueError(f"a sequence has more than prediction_slots={prediction_slots} predictions")
    rows, left = [], np.arange(len(lengths))
    while left.size:
        placed, left = _fill_round(left, lengths, predictions, seq_length, max_sequences_per_pack, prediction_slots)
        rows.extend(placed)
    return _concatenate(rows)
