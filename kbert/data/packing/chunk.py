"""One chunk of unpacked pretraining records to packed records: parse, assign rows, shuffle them, encode.

A chunk is a run of consecutive input records (`--chunk_records` of them, the last one shorter), packed on its
own: its length histogram is planned with SPFHP and filled with its sequences (rows.py), its rows are shuffled
with a stream seeded from (seed, chunk index), laid out (sequences.py) and serialized a batch at a time.

Invariant: a chunk's output depends only on its records, the settings, the seed and its index, never on which
process packs it or when; every sequence of the chunk lands in exactly one of its rows.

Example:

```python
records, summary = pack_chunk(chunk, PackSettings(layout, sequences_per_row=3, random_seed=12345))
```
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from kbert.data import schema, validation
from kbert.data.packing.rows import assign_rows
from kbert.data.packing.sequences import Sequences, packed_features
from kbert.data.tfrecord_writer import encode_examples
from kbert.errors import InputDataError

# Records parsed, and rows laid out and encoded, per NumPy batch: bounds the [batch, seq_length] temporaries.
_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class Chunk:
    """The `index`-th chunk of the input: its records, as (file, index of the first record in it, records)."""

    index: int
    pieces: tuple[tuple[str, int, tuple[bytes, ...]], ...]


@dataclasses.dataclass(frozen=True)
class PackSettings:
    layout: validation.RecordLayout  # of the unpacked input
    sequences_per_row: int
    random_seed: int


@dataclasses.dataclass
class PackSummary:
    """Totals over the chunks, printed at the end of a run."""

    seq_length: int
    sequences_per_row: int
    chunks: int = 0
    sequences: int = 0
    tokens: int = 0  # real tokens
    rows_by_size: list[int] = dataclasses.field(default_factory=list)  # [k - 1]: rows holding k sequences
    seconds: float = 0.0

    def __post_init__(self):
        self.rows_by_size = self.rows_by_size or [0] * self.sequences_per_row

    @property
    def rows(self) -> int:
        return sum(self.rows_by_size)

    def add(self, other: PackSummary) -> None:
        self.chunks += other.chunks
        self.sequences += other.sequences
        self.tokens += other.tokens
        self.rows_by_size = [a + b for a, b in zip(self.rows_by_size, other.rows_by_size)]

    def padding(self, rows: int) -> float:
        """The share of padding among the tokens of `rows` rows holding this summary's tokens."""
        return 1 - self.tokens / max(1, rows * self.seq_length)

    def format(self) -> str:
        sizes = ", ".join(f"{k + 1}: {count:,}" for k, count in enumerate(self.rows_by_size))
        rate = self.sequences / max(self.seconds, 1e-9)
        return "\n".join(
            [
                f"input: {self.sequences:,} sequences in {self.chunks:,} chunk(s), padding "
                f"{self.padding(self.sequences):.2%} of {self.sequences * self.seq_length:,} tokens",
                f"output: {self.rows:,} rows of up to {self.sequences_per_row} sequences, padding "
                f"{self.padding(self.rows):.2%} of {self.rows * self.seq_length:,} tokens",
                f"sequences per row: mean {self.sequences / max(1, self.rows):.3f} (rows holding {sizes})",
                f"time: {self.seconds:,.1f} s ({rate:,.0f} sequences/s)",
            ]
        )


def _sequences(chunk: Chunk, layout: validation.RecordLayout) -> Sequences:
    parts = []
    for path, first, records in chunk.pieces:
        for start in range(0, len(records), _BATCH):
            batch = records[start : start + _BATCH]
            try:
                arrays = validation.parse_records(batch, layout)
            except tf.errors.InvalidArgumentError as error:
                last = first + start + len(batch) - 1
                reason = error.message.split("}}")[-1].split("[Op:")[0].strip()  # TF's text without its op names
                raise InputDataError(
                    f"--input_file: {path}: a record of records {first + start:,} to {last:,} disagrees with the "
                    f"layout of the first input file's first record ({reason}); pack files of one layout at a time, "
                    "or regenerate them."
                ) from None
            parts.append(Sequences.from_arrays(arrays))
    return Sequences.concatenate(parts)


def pack_chunk(chunk: Chunk, settings: PackSettings) -> tuple[list[bytes], PackSummary]:
    """The chunk's packed records, serialized, and its summary."""
    layout, per_row = settings.layout, settings.sequences_per_row
    sequences = _sequences(chunk, layout)
    slots = schema.packed_predictions(layout.max_predictions or 1, per_row)
    rows = assign_rows(sequences.lengths(), sequences.prediction_counts(), layout.seq_length, per_row, slots)
    rng = np.random.default_rng([settings.random_seed, chunk.index])
    rows = rows.reordered(rng.permutation(rows.count))  # plan order groups rows by their lengths
    records = []
    for start in range(0, rows.count, _BATCH):
        features = packed_features(
            sequences,
            rows.slice(start, min(start + _BATCH, rows.count)),
            layout.seq_length,
            per_row,
            layout.max_predictions if layout.masked else None,
        )
        records.extend(encode_examples(features, layout.use_v2_feature_names))
    summary = PackSummary(
        layout.seq_length,
        per_row,
        chunks=1,
        sequences=len(sequences),
        tokens=len(sequences.tokens),
        rows_by_size=np.bincount(rows.sizes(), minlength=per_row + 1)[1:].tolist(),
    )
    return records, summary
