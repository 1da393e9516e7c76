"""Corpora of one document a record: JSON Lines, CSV, Parquet and Hugging Face datasets saved to disk.

Each format is read two ways: `scan(path)` streams the whole file once and yields every record's text (or why it
has none) with the position where the next record starts, and `read(path, start, end)` yields the texts of the
records between two such positions. A position is a byte offset in JSON Lines and CSV, a row in Parquet and
datasets. Memory stays flat: files are streamed (Parquet and datasets a batch of rows at a time).

A record without text (bad JSON, no such column, a null or a number, only blanks) is a `Record` with a `problem`
that names its line or row; the caller counts it and goes on. What no record can survive (a Parquet file or
dataset without the column, a column that is not text, a CSV header without it) is an `InputDataError` at once.

Example:

```python
fmt = RecordFormat("jsonl", text_column="text")
for record in fmt.scan("corpus.jsonl"):
    print(record.end, record.text, record.problem)
texts = list(fmt.read("corpus.jsonl", 0, 4096))
```
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from kbert.data import storage
from kbert.data.input_files import raw_lines
from kbert.data.storage import io_errors
from kbert.errors import ConfigError, InputDataError

RECORD_FORMATS = ("jsonl", "csv", "parquet", "hf_dataset")
_BATCH_ROWS = 1024
# Documents are long: a CSV field may hold a whole book (the csv module's default cap is 128 KiB).
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclasses.dataclass(frozen=True)
class Record:
    """One record: its text, or the problem that left it without one; `end` is where the next record starts."""

    end: int
    text: str | None = None
    problem: str | None = None


def _text_of(value: Any, column: str, where: str) -> Record | str:
    """`value` if it is text, else the problem (as a Record with end 0, filled in by the caller)."""
    if isinstance(value, str):
        return value if value.strip() else Record(0, problem=f"{where}: {column!r} is blank")
    kind = "null" if value is None else type(value).__name__
    return Record(0, problem=f"{where}: {column!r} is {kind}, not text")


def _record(end: int, value: Any, column: str, where: str) -> Record:
    text = _text_of(value, column, where)
    return dataclasses.replace(text, end=end) if isinstance(text, Record) else Record(end, text)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _missing_column(path: str, column: str, columns: list[str]) -> InputDataError:
    shown = ", ".join(repr(c) for c in columns[:8]) + (", ..." if len(columns) > 8 else "")
    return InputDataError(
        f"--text_column: {path} has no column {column!r} (its columns: {shown}); pass --text_column=NAME."
    )


@dataclasses.dataclass(frozen=True)
class RecordFormat:
    """How to find the documents of a record file: its format and the column (or JSON field) holding the text."""

    name: str
    text_column: str = "text"

    def __post_init__(self):
        if self.name not in RECORD_FORMATS:
            raise ConfigError(f"--input_format={self.name}: a record format is one of {', '.join(RECORD_FORMATS)}.")

    def scan(self, path: str) -> Iterator[Record]:
        """Every record of `path`, in order."""
        with io_errors(path, "--input_file"):
            yield from getattr(self, f"_scan_{self.name}")(path)

    def read(self, path: str, start: int, end: int) -> Iterator[str]:
        """The texts of the records from position `start` to `end` (positions `scan` gave); bad records skipped."""
        with io_errors(path, "--input_file"):
            for record in getattr(self, f"_read_{self.name}")(path, start, end):
                if record.text is not None:
                    yield record.text

    # JSON Lines: one object a line; blank lines are no record.

    def _jsonl_record(self, raw: bytes, end: int, line: int) -> Record | None:
        if not raw.strip():
            return None
        where = f"line {line}"
        try:
            value = json.loads(_decode(raw))
        except json.JSONDecodeError as e:
            return Record(end, problem=f"{where}: bad JSON ({e.msg})")
        if not isinstance(value, dict):
            return Record(end, problem=f"{where}: a JSON {type(value).__name__}, not an object")
        if self.text_column not in value:
            return Record(end, problem=f"{where}: no {self.text_column!r} field")
        return _record(end, value[self.text_column], self.text_column, where)

    def _scan_jsonl(self, path: str) -> Iterator[Record]:
        offset = 0
        for line, raw in enumerate(raw_lines(path), 1):
            offset += len(raw)
            record = self._jsonl_record(raw, offset, line)
            if record is not None:
                yield record

    def _read_jsonl(self, path: str, start: int, end: int) -> Iterator[Record]:
        with storage.open(path, "rb") as f:
            f.seek(start)
            block = f.read(end - start)
        for raw in block.split(b"\n"):
            record = self._jsonl_record(raw, 0, 0)
            if record is not None:
                yield record

    # CSV: a header row naming the columns, then one row a record (quoted fields may span lines).

    def _csv_column(self, path: str, header: list[str] | None) -> int:
        if not header or self.text_column not in header:
            raise _missing_column(path, self.text_column, header or [])
        return header.index(self.text_column)

    def _csv_row(self, row: list[str], column: int, end: int, line: int) -> Record | None:
        if not row:
            return None
        if column >= len(row):
            return Record(end, problem=f"line {line}: {len(row)} field(s), no {self.text_column!r}")
        return _record(end, row[column], self.text_column, f"line {line}")

    def _scan_csv(self, path: str) -> Iterator[Record]:
        consumed = [0]

        def lines() -> Iterator[str]:
            for raw in raw_lines(path):
                consumed[0] += len(raw)
                yield _decode(raw)

        reader = csv.reader(lines())
        column = self._csv_column(path, next(reader, None))
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                yield Record(consumed[0], problem=f"line {reader.line_num}: bad CSV ({e})")
                continue
            record = self._csv_row(row, column, consumed[0], reader.line_num)
            if record is not None:
                yield record

    def _read_csv(self, path: str, start: int, end: int) -> Iterator[Record]:
        column = self._csv_column(path, next(csv.reader(_decode(raw) for raw in raw_lines(path)), None))
        with storage.open(path, "rb") as f:
            f.seek(start)
            block = _decode(f.read(end - start))
        reader = csv.reader(io.StringIO(block, newline=""))
        if start == 0:
            next(reader, None)  # the header
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error:
                continue
            record = self._csv_row(row, column, 0, 0)
            if record is not None:
                yield record

    # Parquet and datasets: a text column, read a batch of rows at a time.

    def _parquet(self, path: str):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError("--input_format=parquet needs pyarrow: pip install 'kbert[parquet]'.") from None
        import pyarrow as pa
        import pyarrow.fs

        # pyarrow's own file systems (local, gs://, s3://, hdfs://): a GFile is not the file object it needs.
        file_system, location = pyarrow.fs.FileSystem.from_uri(path if storage.is_url(path) else os.path.abspath(path))
        parquet = pq.ParquetFile(file_system.open_input_file(location))
        schema = parquet.schema_arrow
        if self.text_column not in schema.names:
            raise _missing_column(path, self.text_column, schema.names)
        kind = schema.field(self.text_column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise InputDataError(
                f"--text_column: {path}: column {self.text_column!r} holds {kind}, not text; "
                "pass --text_column=NAME of a string column."
            )
        return parquet

    def _rows(self, batches, first_row: int) -> Iterator[Record]:
        row = first_row
        for batch in batches:
            for value in batch.column(0).to_pylist():
                row += 1
                yield _record(row, value, self.text_column, f"row {row - 1}")

    def _scan_parquet(self, path: str) -> Iterator[Record]:
        batches = self._parquet(path).iter_batches(batch_size=_BATCH_ROWS, columns=[self.text_column])
        yield from self._rows(batches, 0)

    def _read_parquet(self, path: str, start: int, end: int) -> Iterator[Record]:
        parquet = self._parquet(path)
        first = 0
        for group in range(parquet.num_row_groups):
            rows = parquet.metadata.row_group(group).num_rows
            if first < end and first + rows > start:
                table = parquet.read_row_group(group, columns=[self.text_column])
                lo, hi = max(start - first, 0), min(end - first, rows)
                yield from self._rows([table.slice(lo, hi - lo)], first + lo)
            first += rows

    def _scan_hf_dataset(self, path: str) -> Iterator[Record]:
        dataset = _dataset(path, self.text_column)
        yield from self._rows((batch for batch in dataset.with_format("arrow").iter(batch_size=_BATCH_ROWS)), 0)

    def _read_hf_dataset(self, path: str, start: int, end: int) -> Iterator[Record]:
        dataset = _dataset(path, self.text_column)
        yield from self._rows([dataset.with_format("arrow")[start:end]], start)


@functools.lru_cache(maxsize=4)
def _dataset(path: str, column: str):
    """The text column of a dataset saved with `save_to_disk` (memory-mapped; one open per process)."""
    try:
        import datasets
    except ImportError:
        raise ConfigError("--input_format=hf_dataset needs the datasets package: pip install 'kbert[hf]'.") from None
    try:
        dataset = datasets.load_from_disk(path)
    except FileNotFoundError as e:
        raise InputDataError(f"--input_file: {path} is not a dataset saved with save_to_disk ({e}).") from None
    if isinstance(dataset, datasets.DatasetDict):
        splits = ", ".join(dataset)
        raise InputDataError(
            f"--input_file: {path} holds the splits {splits}; give one split's folder, e.g. "
            f"{path.rstrip('/')}/{next(iter(dataset))}."
        )
    if column not in dataset.column_names:
        raise _missing_column(path, column, dataset.column_names)
    feature = dataset.features[column]
    if getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise InputDataError(
            f"--text_column: {path}: column {column!r} holds {feature}, not text; pass "
            "--text_column=NAME of a string column."
        )
    return dataset.select_columns([column])
