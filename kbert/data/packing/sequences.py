"""Sequences in and out of packed rows (the layout of `kbert.data.schema`), with NumPy over whole batches.

`Sequences` holds the real tokens of unpacked records, ragged (no padding), and their predictions and labels;
`packed_features` lays rows of them out as packed features; `row_sequences` reads any row (packed or not) back
as its sequences, for the inspector and the tests.

Invariant: `row_sequences` of a packed row gives back exactly the sequences `packed_features` put there: tokens,
segment ids, masked positions relative to the sequence, masked ids and weights, and the label.

Example:

```python
sequences = Sequences.from_arrays(validation.parse_records(records, layout))
features = packed_features(sequences, rows, seq_length=512, sequences_per_row=3, max_predictions=76)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from kbert.data import schema
from kbert.data.packing.rows import Rows

_PREDICTIONS = schema.PREDICTION_INT_FEATURES + schema.PREDICTION_FLOAT_FEATURES


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])


def _ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ranges [starts[i], starts[i] + counts[i]) laid end to end: each element's index, its range, and its
    place in its range."""
    owner = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(int(counts.sum())) - np.repeat(_starts(counts)[:-1], counts)
    return starts[owner] + within, owner, within


@dataclasses.dataclass(frozen=True)
class Sequences:
    """Unpacked sequences without padding: sequence i has tokens [token_starts[i], token_starts[i + 1]) and
    predictions [prediction_starts[i], prediction_starts[i + 1]) (positions relative to the sequence)."""

    tokens: np.ndarray  # int32: input ids (masked ones are [MASK] or a replacement)
    segments: np.ndarray  # int8
    token_starts: np.ndarray  # int64 [N + 1]
    labels: np.ndarray  # int64 [N]: next_sentence_labels
    predictions: dict[str, np.ndarray]  # masked_lm_* of the real predictions (weight > 0); empty when unmasked
    prediction_starts: np.ndarray  # int64 [N + 1]

    def __len__(self) -> int:
        return len(self.labels)

    def lengths(self) -> np.ndarray:
        return np.diff(self.token_starts)

    def prediction_counts(self) -> np.ndarray:
        return np.diff(self.prediction_starts)

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Sequences:
        """From parsed unpacked records (v1 names, [N, ...]); a record's real tokens are those of input_mask 1."""
        real = arrays["input_mask"] > 0
        predictions, counts = {}, np.zeros(len(real), np.int64)
        if "masked_lm_weights" in arrays:
            kept = arrays["masked_lm_weights"] > 0
            predictions = {name: arrays[name][kept] for name in _PREDICTIONS}
            counts = kept.sum(axis=1)
        return cls(
            arrays["input_ids"][real].astype(np.int32),
            arrays["segment_ids"][real].astype(np.int8),
            _starts(real.sum(axis=1)),
            arrays["next_sentence_labels"][:, 0].astype(np.int64),
            predictions,
            _starts(counts),
        )

    @classmethod
    def concatenate(cls, parts: Sequence[Sequences]) -> Sequences:
        def joined(name: str) -> np.ndarray:
            return np.concatenate([getattr(part, name) for part in parts])

        return cls(
            joined("tokens"),
            joined("segments"),
            _starts(np.concatenate([p.lengths() for p in parts])),
            joined("labels"),
            {name: np.concatenate([p.predictions[name] for p in parts]) for name in parts[0].predictions},
            _starts(np.concatenate([p.prediction_counts() for p in parts])),
        )


def _placement(counts: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For rows of members with `counts` each (rows as `starts` into the members): each member's row, its place in
    the row, and the sum of the counts of the members before it in its row."""
    sizes = np.diff(starts)
    row = np.repeat(np.arange(len(sizes)), sizes)
    slot = np.arange(len(counts)) - starts[row]
    before = np.cumsum(counts) - counts
    return row, slot, before - before[starts[row]]


def _scatter(rows: int, width: int, target: np.ndarray, values, dtype=np.int64) -> np.ndarray:
    """A zero [rows, width] array with `values` at the flat indices `target`."""
    flat = np.zeros(rows * width, dtype)
    flat[target] = values
    return flat.reshape(rows, width)


def packed_features(
    sequences: Sequences, rows: Rows, seq_length: int, sequences_per_row: int, max_predictions: int | None
) -> dict[str, np.ndarray]:
    """Packed features ([rows, ...], v1 names) of `rows` of `sequences`.

    `max_predictions` is the unpacked records' P (the rows get `schema.packed_predictions(P, K)` slots); None for
    unmasked sequences, which get no masked_lm_* features.
    """
    members, count = rows.members, rows.count
    lengths = sequences.lengths()[members]
    row, slot, offset = _placement(lengths, rows.starts)
    source, owner, within = _ranges(sequences.token_starts[members], lengths)
    target = row[owner] * seq_length + offset[owner] + within
    features = {
        "input_ids": _scatter(count, seq_length, target, sequences.tokens[source]),
        "segment_ids": _scatter(count, seq_length, target, sequences.segments[source]),
        "input_mask": _scatter(count, seq_length, target, slot[owner] + 1),
        "positions": _scatter(count, seq_length, target, within),
    }
    sentence = row * sequences_per_row + slot
    features["next_sentence_positions"] = _scatter(count, sequences_per_row, sentence, offset)
    features["next_sentence_labels"] = _scatter(count, sequences_per_row, sentence, sequences.labels[members])
    features["next_sentence_weights"] = _scatter(count, sequences_per_row, sentence, 1.0, np.float32)
    if max_predictions is not None:
        slots = schema.packed_predictions(max_predictions, sequences_per_row)
        counts = sequences.prediction_counts()[members]
        source, owner, within = _ranges(sequences.prediction_starts[members], counts)
        target = row[owner] * slots + _placement(counts, rows.starts)[2][owner] + within
        shift = {"masked_lm_positions": offset[owner]}  # positions move with the sequence's place in the row
        for name in _PREDICTIONS:
            dtype = np.float32 if name in schema.FLOAT_FEATURES else np.int64
            features[name] = _scatter(
                count, slots, target, sequences.predictions[name][source] + shift.get(name, 0), dtype
            )
    return features


def row_sequences(arrays: Mapping[str, np.ndarray], row: int) -> list[dict]:
    """The sequences of row `row` of parsed records (v1 names), packed or not, each as its real `input_ids` and
    `segment_ids`, its `next_sentence_label` (None for MLM-only records) and, when masked, its real predictions
    (`masked_lm_positions` relative to the sequence, `masked_lm_ids`, `masked_lm_weights`)."""
    mask = arrays["input_mask"][row]
    packed = "next_sentence_positions" in arrays
    labels = arrays.get("next_sentence_labels")
    slots = np.flatnonzero(arrays["next_sentence_weights"][row] > 0) if packed else [0]
    sequences = []
    for slot in slots:
        tokens = np.flatnonzero(mask == slot + 1) if packed else np.flatnonzero(mask > 0)
        begin, end = int(tokens[0]), int(tokens[-1]) + 1
        sequence = {
            "input_ids": arrays["input_ids"][row, begin:end],
            "segment_ids": arrays["segment_ids"][row, begin:end],
            "next_sentence_label": None if labels is None else int(labels[row, slot]),
        }
        if "masked_lm_weights" in arrays:
            positions = arrays["masked_lm_positions"][row]
            kept = (arrays["masked_lm_weights"][row] > 0) & (positions >= begin) & (positions < end)
            sequence.update({name: arrays[name][row][kept] for name in _PREDICTIONS})
            sequence["masked_lm_positions"] = sequence["masked_lm_positions"] - begin
        sequences.append(sequence)
    return sequences


def sequence_lengths(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The real length of every sequence of a parsed batch (v1 names), packed or not, row by row: [sequences]."""
    mask = arrays["input_mask"]
    if "next_sentence_positions" not in arrays:
        return mask.sum(axis=1)
    indices = np.arange(1, arrays["next_sentence_positions"].shape[1] + 1)
    lengths = (mask[:, :, None] == indices).sum(axis=1)  # [rows, K]
    return lengths[arrays["next_sentence_weights"] > 0]


def sentence_labels(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The next-sentence label of every sequence of a parsed batch, packed or not: [sequences]; empty for MLM-only
    records."""
    if "next_sentence_labels" not in arrays:
        return np.zeros(0, np.int64)
    labels = arrays["next_sentence_labels"]
    return labels[arrays["next_sentence_weights"] > 0] if "next_sentence_weights" in arrays else labels[:, 0]
