"""Reading the columns of a TSV, CSV or JSONL file of examples, with the file named in every error.

Invariant: a returned table has every requested column and at least one row; a missing column, a header-only or
empty file, or an unreadable file raises `InputDataError`/`MissingFileError` naming the file, what was found and
the fix. TSV is read with quoting off (GLUE's QQP and MNLI rows hold stray quote characters); rows too short for
a requested column (QQP has a few) are skipped and counted. `stream_columns` yields the same rows one at a time,
with the file's checks, for readers of unbounded files (kbert-predict), which decide what a short row means.

Example:

```python
table = read_columns("glue/SST-2/dev.tsv", "tsv", ["sentence", "label"])
table.columns["sentence"][0], table.skipped_rows  # "it 's a charming and often affecting journey . ", 0
```
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Iterator, Sequence

import tensorflow as tf

from kbert.errors import InputDataError, MissingFileError

FORMATS = ("tsv", "csv", "jsonl")

# A column is a header name, or a position for files without a header (GLUE's CoLA train/dev).
Column = str | int


@dataclasses.dataclass
class Table:
    """`columns[c]` is column `c`'s values as strings, one per kept row; `line_numbers` are 1-based file lines."""

    path: str
    columns: dict[Column, list[str]]
    line_numbers: list[int]
    skipped_rows: int = 0

    def __len__(self) -> int:
        return len(self.line_numbers)


def _lines(path: str) -> Iterator[str]:
    if not tf.io.gfile.exists(path):
        raise MissingFileError(f"{path} does not exist; check task.data_dir / task.train_file / task.eval_file.")
    with tf.io.gfile.GFile(path, "rb") as f:
        for raw in f:
            # utf-8-sig semantics for the first line: the MRPC files start with a byte-order mark.
            yield raw.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")


def _delimited_rows(path: str, file_format: str) -> Iterator[tuple[int, list[str]]]:
    if file_format == "tsv":
        reader = csv.reader(_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(_lines(path))
    for number, row in enumerate(reader, start=1):
        if row:
            yield number, row


def _jsonl_rows(path: str) -> Iterator[tuple[int, dict]]:
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputDataError(f"{path}, line {number}: not JSON ({e}); each line must be one JSON object.") from None
        if not isinstance(row, dict):
            raise InputDataError(f"{path}, line {number}: expected a JSON object of fields, got {row!r:.60}.")
        yield number, row


def _missing_column_error(path: str, missing: Sequence[Column], found: Sequence[str]) -> InputDataError:
    return InputDataError(
        f"{path} has no column {', '.join(repr(c) for c in missing)}; its columns are "
        f"{', '.join(repr(c) for c in found) or '(none)'}. Set task.text_a_column / task.text_b_column / "
        "task.label_column to one of them."
    )


def empty_file_error(path: str) -> InputDataError:
    return InputDataError(
        f"{path} holds no examples (the file is empty or has a header only); point the task at a file with data rows."
    )


# A data row: its 1-based line number and its wanted values, or None where it lacks one of them.
Row = tuple[int, dict[Column, str] | None]


def _delimited_values(path: str, file_format: str, wanted: Sequence[Column], header: bool) -> Iterator[Row]:
    rows = _delimited_rows(path, file_format)
    names: list[str] = []
    if header:
        first = next(rows, None)
        if first is None:
            raise empty_file_error(path)
        names = first[1]
        missing = [c for c in wanted if c not in names]
        if missing:
            raise _missing_column_error(path, missing, names)
    index = {c: names.index(c) if header else int(c) for c in wanted}
    for number, row in rows:
        yield number, ({c: row[i] for c, i in index.items()} if len(row) > max(index.values()) else None)


def _jsonl_values(path: str, wanted: Sequence[Column]) -> Iterator[Row]:
    first = True
    for number, row in _jsonl_rows(path):
        missing = [c for c in wanted if c not in row]
        if missing and first:  # the first object names the schema; later gaps are rows that lack a value
            raise _missing_column_error(f"{path} (line {number})", missing, list(row))
        first = False
        yield number, None if missing else {c: str(row[c]) for c in wanted}


def stream_columns(path: str, file_format: str, wanted: Sequence[Column], header: bool = True) -> Iterator[Row]:
    """The `wanted` values of each data row of `path`, one row at a time (see `Row`); `header=False` takes
    positions.

    Raises:
      MissingFileError: `path` does not exist.
      InputDataError: a wanted column is missing from the header (or the first JSON object), a header-only file,
        or a line that is not a JSON object.
    """
    if file_format == "jsonl":
        return _jsonl_values(path, wanted)
    return _delimited_values(path, file_format, wanted, header)


def read_columns(path: str, file_format: str, wanted: Sequence[Column], header: bool = True) -> Table:
    """The `wanted` columns of `path` (`file_format` one of FORMATS; `header=False` takes positions); rows that
    lack one of them are skipped and counted.

    Raises:
      MissingFileError: `path` does not exist.
      InputDataError: a wanted column is missing (the columns found are listed), or the file has no data rows.
    """
    wanted = list(dict.fromkeys(wanted))
    table = Table(path, {c: [] for c in wanted}, [])
    for number, values in stream_columns(path, file_format, wanted, header):
        if values is None:
            table.skipped_rows += 1
            continue
        for column, value in values.items():
            table.columns[column].append(value)
        table.line_numbers.append(number)
    if not len(table):
        raise empty_file_error(path)
    return table
