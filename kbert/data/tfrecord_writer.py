"""Serializing batches of pretraining features as `tf.train.Example` records, and sharded, crash-safe writing of
TFRecord files without TensorFlow.

`encode_examples` writes the protobuf wire format with NumPy, a whole batch at a time: per-record
`tf.train.Example` construction cost more than all of instance creation. Its bytes equal those of
`example_proto`, the protobuf-built record (`SerializeToString(deterministic=True)`, keys sorted), which the tests
check, so any TFRecord reader parses them. `example_proto` is also the builder for tools and tests that write a
few records.

`RecordFile` frames records as TensorFlow's `TFRecordWriter` does, and compresses as its GZIP option does (zlib's
gzip wrapper, memory level 9): its bytes equal TensorFlow's (tested). A data tool that tokenizes with a
tokenizer.json then needs no TensorFlow, whose import takes seconds in each process; a gs:// path still goes
through `tf.io.gfile` (storage.py).

Example:

```python
with ShardedWriter(["out-0.tfrecord", "out-1.tfrecord"], gzip=False) as writer:
    for record in encode_examples(features):
        writer.write(record)
```
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence

import google_crc32c
import numpy as np

from kbert.data import outputs, schema, storage
from kbert.data.storage import io_error, io_errors
from kbert.errors import InputDataError


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _packed_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint bytes of a non-negative int64 [N, L] array, flat, and the byte offsets of the N rows."""
    values = values.astype(np.uint64)
    widest = int(values.max(initial=0)).bit_length() // 7 + 1
    if widest == 1:  # ids below 128, masks, labels: one byte each
        return values.astype(np.uint8).ravel(), np.arange(len(values) + 1) * values.shape[1]
    nbytes = np.ones(values.shape, np.int64)
    for k in range(1, widest):
        nbytes += values >= (np.uint64(1) << np.uint64(7 * k))
    flat_values, flat_nbytes = values.ravel(), nbytes.ravel()
    starts = np.cumsum(flat_nbytes) - flat_nbytes
    out = np.empty(int(flat_nbytes.sum()), np.uint8)
    for k in range(widest):
        has = flat_nbytes > k
        byte = (flat_values[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (flat_nbytes[has] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[has] + k] = (byte | more).astype(np.uint8)
    row_offsets = np.concatenate([[0], np.cumsum(nbytes.sum(axis=1))])
    return out, row_offsets


def encode_examples(features: Mapping[str, np.ndarray], use_v2_feature_names: bool = False) -> list[bytes]:
    """One serialized `tf.train.Example` per row of the schema.py features in `features` ([N, width] arrays).

    Features not in the schema (e.g. `original_ids`) are ignored; int features must be non-negative.
    """
    names = [n for n in schema.ALL_FEATURES if n in features]
    encoded = []  # (file name, per-row payload bytes)
    for name in names:
        values = np.asarray(features[name])
        if name in schema.FLOAT_FEATURES:
            raw = values.astype("<f4")
            payload, offsets = raw.view(np.uint8).ravel(), np.arange(len(raw) + 1) * raw.shape[1] * 4
            kind = 0x12  # Feature.float_list
        else:
            if values.size and values.min() < 0:
                raise ValueError(f"{name} has negative values; pretraining features are non-negative ids.")
            payload, offsets = _packed_varints(values)
            kind = 0x1A  # Feature.int64_list
        data = payload.tobytes()
        encoded.append((schema.file_name(name, use_v2_feature_names).encode(), kind, data, offsets.tolist()))
    encoded.sort(key=lambda item: item[0])  # deterministic serialization orders map keys
    columns = []
    for key, kind, data, offsets in encoded:
        headers: dict[int, bytes] = {}  # payload length -> everything before the payload; few distinct lengths
        pieces = []
        for row in range(len(offsets) - 1):
            start, end = offsets[row], offsets[row + 1]
            header = headers.get(end - start)
            if header is None:
                header = headers[end - start] = _entry_header(key, kind, end - start)
            pieces.append(header + data[start:end])
        columns.append(pieces)
    return [_length_delimited(1, b"".join(entries)) for entries in zip(*columns)]


def example_proto(features: Mapping[str, Iterable[float]], use_v2_feature_names: bool = False) -> bytes:
    """One record, built with protobuf: the features of schema.FLOAT_FEATURES as float lists, every
    other name (names outside the schema too, for records that are not BERT's) as an int64 list."""
    import tensorflow as tf  # only here: data creation writes records with encode_examples

    example = tf.train.Example()
    for name, values in features.items():
        feature = example.features.feature[schema.file_name(name, use_v2_feature_names)]
        values = np.asarray(values).ravel().tolist()
        if name in schema.FLOAT_FEATURES:
            feature.float_list.value.extend(values)
        else:
            feature.int64_list.value.extend(values)
    return example.SerializeToString(deterministic=True)


def _length_delimited(field: int, body: bytes) -> bytes:
    return bytes([field << 3 | 2]) + _varint(len(body)) + body


def _entry_header(key: bytes, kind: int, payload_length: int) -> bytes:
    """Bytes of one `Features.feature` map entry up to its packed payload of `payload_length` bytes."""
    value_list_length = 1 + len(_varint(payload_length)) + payload_length  # Int64List/FloatList.value, packed
    feature_length = 1 + len(_varint(value_list_length)) + value_list_length  # Feature.{int64,float}_list
    entry = _length_delimited(1, key) + b"\x12" + _varint(feature_length)
    entry += bytes([kind]) + _varint(value_list_length) + b"\x0a" + _varint(payload_length)
    return b"\x0a" + _varint(len(entry) + payload_length) + entry


def _masked_crc(data: bytes) -> bytes:
    """The CRC-32C of `data` masked as TFRecord framing masks it, 4 bytes little-endian."""
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


class RecordFile:
    """One TFRecord file, written as TensorFlow's `TFRecordWriter` writes it: each record as its length (8 bytes
    little-endian), the length's masked CRC-32C, the record and its masked CRC-32C; with `gzip`, all of it
    compressed as `TFRecordOptions(compression_type="GZIP")` compresses it."""

    def __init__(self, path: str, gzip: bool = False):
        self._file = storage.open(path, "wb")
        self._deflate = (
            zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 9) if gzip else None
        )

    def write(self, record: bytes) -> None:
        length = struct.pack("<Q", len(record))
        framed = b"".join((length, _masked_crc(length), record, _masked_crc(record)))
        self._file.write(self._deflate.compress(framed) if self._deflate else framed)

    def close(self) -> None:
        if self._deflate:
            self._file.write(self._deflate.flush())
        self._file.close()


class ShardedWriter:
    """Writes records round-robin over `paths`, as Google's script does, each file staged (outputs.py).

    The files are moved into place together when the writer closes without an error and every file holds a
    record; otherwise none of `paths` is touched and the staged files are removed. I/O errors
    (a full disk, a denied permission) become `KbertError`s naming the file. `more_records` says how the user gets
    more records when there are fewer than files. `beside` (path -> text) are small files staged with the records
    and moved into place after them, only when they are (records_info.py).
    """

    def __init__(
        self,
        paths: Sequence[str],
        gzip: bool = False,
        more_records: str = "give more text or a larger --dupe_factor",
        beside: Mapping[str, str] | None = None,
    ):
        self.paths = list(paths)
        self.more_records = more_records
        self._staging = contextlib.ExitStack()
        beside_staging = self._staging.enter_context(contextlib.ExitStack())  # entered first: moved last
        self._temps = [self._staging.enter_context(outputs.staged(path)) for path in self.paths]
        self._writers = []
        try:
            for temp in self._temps:
                with io_errors(temp, "--output_file"):
                    self._writers.append(RecordFile(temp, gzip))
            for path, text in (beside or {}).items():
                temp = beside_staging.enter_context(outputs.staged(path))
                with io_errors(temp, "--output_file"), storage.open(temp, "w") as f:
                    f.write(text)
        except BaseException as error:
            self.__exit__(type(error), error, error.__traceback__)
        self._next = 0
        self.count = 0

    def write(self, record: bytes) -> None:
        try:
            self._writers[self._next].write(record)
        except storage.error_types() as error:  # not `with io_errors(...)`: this runs for every record
            raise io_error(error, self._temps[self._next], "--output_file") from error
        self._next = (self._next + 1) % len(self._writers)
        self.count += 1

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with self._staging:  # moves every staged file into place, or on an error removes them all
            for writer, temp in zip(self._writers, self._temps):
                with io_errors(temp, "--output_file"):
                    writer.close()
            if exc is not None:
                raise exc
            self._check_every_file_has_records()

    def _check_every_file_has_records(self) -> None:
        if self.count == 0:
            raise InputDataError(
                "--input_file: the input gave no instance (no document has a token of the vocabulary); nothing "
                "was written. Check the input's format: one sentence per line, a blank line between documents."
            )
        if self.count < len(self.paths):
            raise InputDataError(
                f"--output_file/--num_output_shards: {self.count} record(s) for {len(self.paths)} output files would "
                f"leave {len(self.paths) - self.count} empty; nothing was written. Write at most {self.count} files, "
                f"or {self.more_records}."
            )
