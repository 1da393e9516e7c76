"""Unpacked pretraining TFRecords to packed ones: input checks, chunks over worker processes, ordered writing.

The parent reads the input files in order and cuts their records into chunks of `chunk_records`; the chunks are
packed in worker processes (chunk.py) and the parent writes their rows in chunk order, round-robin over the
output files, as kbert-create-pretraining-data does. So the bytes written depend on the input, the settings and
the seed, never on `num_workers`; memory is bounded by the chunks in flight (two per worker), never by the input.

Every input file's first record is checked before any output is opened: packed, MLM-only or mixed layouts are
refused with a one-line `InputDataError` naming the file. Outputs are staged (ShardedWriter), so a run that fails
later leaves every file as it was.

Example:

```python
summary = pack_pretraining_data(["train.tfrecord-*"], ["packed.tfrecord"], sequences_per_row=3, num_workers=4)
print(summary.format())
```
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from kbert.data import outputs, validation
from kbert.data.ordered_pool import ordered_map
from kbert.data.packing.chunk import Chunk, PackSettings, PackSummary, pack_chunk
from kbert.data.tfrecord_writer import ShardedWriter
from kbert.errors import ConfigError, InputDataError

_READ_BATCH = 4096


def _describe(layout: validation.RecordLayout) -> str:
    """'unpacked, v1 names, masked (20 predictions), seq_length 128', for messages."""
    masking = f"masked ({layout.max_predictions} predictions)" if layout.masked else "unmasked"
    names = "v2" if layout.use_v2_feature_names else "v1"
    return f"{layout.describe()}, {names} names, {masking}, seq_length {layout.seq_length}"


def check_inputs(paths: Sequence[str]) -> validation.RecordLayout:
    """The layout of the first record of `paths[0]`, after checking that every file's first record has it (up to
    compression) and that it is unpacked with sentence labels; raises a one-line `InputDataError` otherwise."""
    first = None
    for path in paths:
        compression = validation.detect_compression(path)
        record = next(validation.read_records(path, compression, limit=1), None)
        if record is None:
            raise InputDataError(f"--input_file: {path} holds no records; leave it out or regenerate it.")
        layout = validation.inspect_layout(path, record, compression)
        if layout.sequences_per_row is not None:
            raise InputDataError(
                f"--input_file: {path} is already packed ({layout.sequences_per_row} sequences a "
                "row); give the unpacked records it was made from."
            )
        if not layout.sentence_labels:
            raise InputDataError(
                f"--input_file: {path} holds MLM-only records, whose rows are full already: "
                "there is nothing to pack; train on them as they are."
            )
        first = first or layout
        if _describe(layout) != _describe(first):
            raise InputDataError(
                f"--input_file: {path} holds {_describe(layout)} records, but {paths[0]} holds "
                f"{_describe(first)}; pack files of one layout at a time."
            )
    return first


def _record_batches(path: str) -> Iterator[np.ndarray]:
    """The file's serialized records, a batch at a time: eight times faster than one at a time, and the parent's
    reading is what the workers wait for. A corrupt or cut file raises `validation.read_records`' error, which
    names the file and counts its good records."""
    compression = validation.detect_compression(path)
    try:
        yield from tf.data.TFRecordDataset(path, compression).batch(_READ_BATCH).as_numpy_iterator()
    except tf.errors.DataLossError:
        for _ in validation.read_records(path, compression):
            pass
        raise


def read_chunks(paths: Sequence[str], chunk_records: int) -> Iterator[Chunk]:
    """The input's records, in file order, cut into chunks of `chunk_records` (the last one shorter); lazily."""
    pieces, size, index = [], 0, 0
    for path in paths:
        first = 0
        for batch in _record_batches(path):
            while len(batch):
                piece, batch = batch[: chunk_records - size], batch[chunk_records - size :]
                pieces.append((path, first, tuple(piece)))
                first, size = first + len(piece), size + len(piece)
                if size == chunk_records:
                    yield Chunk(index, tuple(pieces))
                    pieces, size, index = [], 0, index + 1
    if pieces:
        yield Chunk(index, tuple(pieces))


def checked_packing(
    input_files: Sequence[str], output_files: Sequence[str], sequences_per_row: int, chunk_records: int
) -> validation.RecordLayout:
    """The input's layout, after the checks that run before any output is touched: settings, output names, and
    every input file's first record (`check_inputs`)."""
    if sequences_per_row < 1:
        raise ConfigError(f"--max_sequences_per_pack={sequences_per_row} must be at least 1 (3 is usual).")
    if chunk_records < 1:
        raise ConfigError(
            f"--chunk_records={chunk_records} must be at least 1 (100000 packs within 0.1% of the whole input)."
        )
    outputs.check_outputs(output_files, {"--input_file": input_files})
    return check_inputs(input_files)


def pack_pretraining_data(
    input_files: Sequence[str],
    output_files: Sequence[str],
    sequences_per_row: int = 3,
    random_seed: int = 12345,
    num_workers: int = 1,
    gzip: bool | None = None,
    chunk_records: int = 100_000,
    progress: Callable[[PackSummary], None] | None = None,
) -> PackSummary:
    """Packs the records of `input_files` (paths, not globs) into `output_files`; returns the totals.

    `gzip` None writes the first input file's compression. Settings, names and every input file's first record
    are checked before any output is touched (`checked_packing`). `progress(summary_so_far)` is called after each
    chunk.
    """
    if num_workers < 1:
        raise ConfigError(f"--num_workers={num_workers} must be at least 1.")
    layout = checked_packing(input_files, output_files, sequences_per_row, chunk_records)
    start = time.time()
    summary = PackSummary(layout.seq_length, sequences_per_row)
    settings = PackSettings(layout, sequences_per_row, random_seed)
    packed = ordered_map(
        functools.partial(pack_chunk, settings=settings),
        read_chunks(input_files, chunk_records),
        num_workers,
        preload=[__name__],
    )
    compress = layout.compression == "GZIP" if gzip is None else gzip
    with ShardedWriter(output_files, compress, more_records="pack more input records") as writer:
        for records, chunk_summary in packed:
            for record in records:
                writer.write(record)
            summary.add(chunk_summary)
            summary.seconds = time.time() - start
            if progress is not None:
                progress(summary)
    summary.seconds = time.time() - start
    return summary
