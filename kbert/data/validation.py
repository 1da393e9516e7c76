"""Up-front checks of pretraining TFRecords, so bad files fail before training with the file named and the fix.

`tf.data` reports a corrupt record as a bare `DataLossError` without the file, a record of another
`max_seq_length` as a shape error deep inside the input pipeline, and an out-of-range token id without the file
(`kbert.data.id_ranges` checks every record as it is read). These checks read a few records of every file first
and say which file is wrong, and walk the record headers of every local uncompressed file to its end, so a file
cut short (an interrupted copy or write) fails before training, not hours in.

Example:

```python
paths = match_files("data/train.tfrecord-*")
layout = validate_files(paths, seq_length=128, max_predictions=20, vocab_size=30522)
layout.use_v2_feature_names, layout.compression
```
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
from collections.abc import Iterator, Sequence

import numpy as np
import tensorflow as tf

from kbert.data import id_ranges, input_files, schema
from kbert.errors import InputDataError

GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """What the first record of a file says about how the file was written."""

    use_v2_feature_names: bool
    masked: bool
    seq_length: int
    max_predictions: int | None  # per sequence: a packed file's rows have `schema.packed_predictions` slots
    compression: str = ""
    sequences_per_row: int | None = None  # K of a packed file; None: one sequence a row
    sentence_labels: bool = True  # False: MLM-only records

    def describe(self) -> str:
        """'packed (3 sequences a row)', 'MLM-only' or 'unpacked', for messages."""
        if self.sequences_per_row is not None:
            return f"packed ({self.sequences_per_row} sequences a row)"
        return "unpacked" if self.sentence_labels else "MLM-only"

    def spec(self) -> dict:
        """The `tf.io.parse_example` spec of the file's records."""
        return schema.feature_spec(
            self.seq_length,
            self.max_predictions or 1,
            self.use_v2_feature_names,
            self.masked,
            self.sequences_per_row,
            self.sentence_labels,
        )


def detect_compression(path: str) -> str:
    """'GZIP' when the file starts with the gzip magic bytes, else '' (plain TFRecord)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        head = f.read(2)
    return "GZIP" if head == GZIP_MAGIC else ""


def read_records(path: str, compression: str = "", limit: int | None = None) -> Iterator[bytes]:
    """Yields the serialized records of one file, checking each record's framing and CRC.

    A `tf.errors.DataLossError` (truncated or corrupt file) is re-raised as `InputDataError` naming the file.
    """
    dataset = tf.data.TFRecordDataset(path, compression_type=compression)
    if limit is not None:
        dataset = dataset.take(limit)
    index = 0
    try:
        for record in dataset.as_numpy_iterator():
            yield record
            index += 1
    except tf.errors.DataLossError as error:
        reason = error.message.split("}}")[-1].split("[Op:")[0].replace("'", "").strip()
        raise InputDataError(
            f"{path}: corrupt or truncated TFRecord after {index} good records ({reason}). The file was cut short "
            "or damaged (an interrupted copy or write, or a different compression than "
            f"'{compression or 'none'}'): re-copy or regenerate it, or drop it from the input pattern."
        ) from None


def check_framing(path: str) -> int:
    """Walks the record headers of a local, uncompressed TFRecord file to its last byte; returns the record count.

    Reads 8 bytes per record and skips the payloads (about a second per GB from the page cache), so it finds a file
    cut short anywhere, which reading the first records cannot. Damage inside a payload needs the full read (CRC).
    """
    size = os.path.getsize(path)
    count = offset = 0
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(8)
            (length,) = struct.unpack("<Q", header) if len(header) == 8 else (size,)
            end = offset + 16 + length  # length, its CRC, payload, the payload's CRC
            if end > size:
                raise InputDataError(
                    f"{path}: truncated TFRecord: record {count + 1} starts at byte {offset:,} and needs "
                    f"{end - offset:,} bytes, but the file ends at byte {size:,} ({count:,} whole records before "
                    "it). The file was cut short or damaged (an interrupted copy or write): re-copy or regenerate "
                    "it, or drop it from the input pattern."
                )
            offset, count = end, count + 1
    return count


def inspect_layout(path: str, record: bytes, compression: str = "") -> RecordLayout:
    """Feature names and lengths from one serialized `tf.train.Example`."""
    try:
        features = tf.train.Example.FromString(record).features.feature
    except Exception as error:  # protobuf raises DecodeError, which has no stable import path
        raise InputDataError(f"{path}: records are not tf.train.Example protos ({error}).") from None
    if "input_ids" in features:
        v2 = False
    elif "input_word_ids" in features:
        v2 = True
    else:
        raise InputDataError(
            f"{path}: records have neither 'input_ids' nor 'input_word_ids' (features: {sorted(features)}). "
            "This is not a BERT pretraining file; create it with kbert-create-pretraining-data."
        )
    masked = "masked_lm_positions" in features
    packed = "positions" in features
    per_row = len(features["next_sentence_positions"].int64_list.value) if packed else None
    labels = "next_sentence_labels" in features
    required = list(schema.feature_spec(1, 1, v2, masked, per_row, labels))
    missing = [name for name in required if name not in features]
    if missing:
        raise InputDataError(f"{path}: records lack the features {missing} (found {sorted(features)}).")
    seq_length = len(features[schema.file_name("input_ids", v2)].int64_list.value)
    max_predictions = len(features["masked_lm_positions"].int64_list.value) - ((per_row or 1) - 1) if masked else None
    return RecordLayout(v2, masked, seq_length, max_predictions, compression, per_row, labels)


def check_layout(
    path: str,
    layout: RecordLayout,
    seq_length: int,
    max_predictions: int,
    dynamic_masking: bool | None,
) -> None:
    """Raises `InputDataError` when a file was written with other settings than the pipeline asks for.

    `dynamic_masking=None` accepts masked and unmasked records alike (the inspector).
    """
    if layout.seq_length != seq_length:
        raise InputDataError(
            f"{path}: records were written with max_seq_length={layout.seq_length}, but the pipeline asks for "
            f"seq_length={seq_length}. Set the sequence length to {layout.seq_length}, or regenerate the file "
            f"with --max_seq_length={seq_length} (records are never truncated or padded silently)."
        )
    if dynamic_masking is True and layout.masked:
        raise InputDataError(
            f"{path}: records are already masked, but dynamic masking was asked for; masking them again would "
            "mask [MASK] tokens. Regenerate with kbert-create-pretraining-data --no_masking, or turn dynamic "
            "masking off."
        )
    if dynamic_masking is False and not layout.masked:
        raise InputDataError(
            f"{path}: records are unmasked (written with --no_masking) and carry no masked_lm_* features. "
            "Turn dynamic masking on (dynamic_masking=True), or regenerate the file without --no_masking."
        )
    if layout.masked and layout.max_predictions != max_predictions:
        raise InputDataError(
            f"{path}: records were written with max_predictions_per_seq={layout.max_predictions}, but the "
            f"pipeline asks for max_predictions={max_predictions}. Set it to {layout.max_predictions}, or "
            f"regenerate the file with --max_predictions_per_seq={max_predictions}."
        )


def parse_records(records: Sequence[bytes], layout: RecordLayout) -> dict[str, np.ndarray]:
    """Parses serialized records with the schema into NumPy arrays keyed by v1 names."""
    parsed = tf.io.parse_example(tf.constant(list(records)), layout.spec())
    return {
        name: parsed[schema.file_name(name, layout.use_v2_feature_names)].numpy()
        for name in schema.ALL_FEATURES
        if schema.file_name(name, layout.use_v2_feature_names) in parsed
    }


def check_batch_ids(path: str, arrays: dict[str, np.ndarray], vocab_size: int, first_record: int = 0) -> None:
    """`id_ranges.check_ids` on the token ids of a parsed batch."""
    for name in ("input_ids", "masked_lm_ids"):
        if name in arrays:
            id_ranges.check_ids(path, name, arrays[name], vocab_size, first_record)


def scan_file(
    path: str,
    seq_length: int | None,
    max_predictions: int | None,
    vocab_size: int | None = None,
    dynamic_masking: bool | None = False,
    num_records: int | None = 16,
    chunk_records: int = 1024,
) -> Iterator[tuple[RecordLayout, dict[str, np.ndarray]]]:
    """Checks one file chunk by chunk and yields (layout, parsed chunk); reads the first `num_records` (None: all).

    `seq_length` / `max_predictions` None accept what the file's first record has.
    """
    compression = detect_compression(path)
    records = read_records(path, compression, num_records)
    layout, seen = None, 0
    while chunk := list(itertools.islice(records, chunk_records)):
        if layout is None:
            layout = inspect_layout(path, chunk[0], compression)
            check_layout(
                path,
                layout,
                layout.seq_length if seq_length is None else seq_length,
                layout.max_predictions if max_predictions is None else max_predictions,
                dynamic_masking,
            )
        try:
            arrays = parse_records(chunk, layout)
        except tf.errors.InvalidArgumentError as error:
            raise InputDataError(
                f"{path}: records disagree with the file's first record ({error.message.splitlines()[0]}). "
                "The file mixes settings: regenerate it."
            ) from None
        if vocab_size is not None:
            check_batch_ids(path, arrays, vocab_size, seen)
        seen += len(chunk)
        yield layout, arrays
    if layout is None:
        raise InputDataError(f"{path}: the file holds no records. Remove it from the input pattern or regenerate it.")


def validate_file(
    path: str,
    seq_length: int | None,
    max_predictions: int | None,
    vocab_size: int | None = None,
    dynamic_masking: bool | None = False,
    num_records: int | None = 16,
) -> RecordLayout:
    """Checks the first `num_records` records of one file (all when None); returns the file's layout.

    A local uncompressed file also gets `check_framing` when only its first records are read.
    """
    # The loop reads every record; the last one's layout is the file's.
    for layout, _ in scan_file(path, seq_length, max_predictions, vocab_size, dynamic_masking, num_records):  # noqa: B007
        pass
    if num_records is not None and not layout.compression and "://" not in path:
        check_framing(path)
    return layout


def first_layout(file_pattern: str | Sequence[str], flag: str = "file_pattern") -> RecordLayout:
    """The layout of the first record of the first file `file_pattern` matches (packed, MLM-only, ...): what a
    caller needs to know before building the pipeline, which checks every file."""
    path = input_files.match_files(file_pattern, flag)[0]
    compression = detect_compression(path)
    record = next(read_records(path, compression, limit=1), None)
    if record is None:
        raise InputDataError(f"{path}: the file holds no records. Remove it from the input pattern or regenerate it.")
    return inspect_layout(path, record, compression)


def validate_files(
    paths: Sequence[str],
    seq_length: int,
    max_predictions: int,
    vocab_size: int | None = None,
    dynamic_masking: bool = False,
    num_records: int | None = 16,
) -> RecordLayout:
    """`validate_file` on every file; all files must share feature names and compression.

    Returns the common layout (feature names, compression) for the reader.
    """
    layouts = [validate_file(f, seq_length, max_predictions, vocab_size, dynamic_masking, num_records) for f in paths]
    first = layouts[0]
    for path, layout in zip(paths, layouts):
        if layout.use_v2_feature_names != first.use_v2_feature_names:
            raise InputDataError(
                f"{path}: uses {'v2' if layout.use_v2_feature_names else 'v1'} feature names but {paths[0]} does "
                "not; read the two sets of files separately or regenerate one set."
            )
        if (layout.sequences_per_row, layout.sentence_labels) != (first.sequences_per_row, first.sentence_labels):
            raise InputDataError(
                f"{path}: its records are {layout.describe()}, but those of {paths[0]} are {first.describe()}; "
                "one pattern must match files of one layout: read them in separate runs, or pack them all."
            )
        if layout.compression != first.compression:
            raise InputDataError(
                f"{path}: compression '{layout.compression or 'none'}' differs from "
                f"'{first.compression or 'none'}' of {paths[0]}; regenerate the files with one compression."
            )
    return first
