"""Reading a corpus in work units: BERT's text format (one sentence a line, a blank line between documents) and
the record formats of record_corpus.py (one document a record).

A work unit is a run of whole documents of one input file, about `unit_bytes` long: a byte range of a text file,
a range of records of a record file. Units depend only on the files and `unit_bytes`, never on the number of
workers, which is what makes the output of `create_pretraining_data` the same for any `--num_workers`. A record
counts the bytes it would take in the text format (its lines, each with a newline, and a blank line), so a corpus
gives the same units, and the same output, in every format.

Example:

```python
units, report = plan_work_units(["corpus.txt"], unit_bytes=1 << 20)
for unit in units:
    docs, stats = read_documents(unit)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from kbert.data import sentences, storage
from kbert.data.input_files import raw_lines, require_text
from kbert.data.record_corpus import RECORD_FORMATS, Record, RecordFormat
from kbert.data.storage import io_errors
from kbert.errors import ConfigError, InputDataError

FORMATS = ("text",) + RECORD_FORMATS
# Problems named in the summary; the rest are counted.
_SHOWN_PROBLEMS = 3


@dataclasses.dataclass(frozen=True)
class InputFormat:
    """What the input files are: BERT's text format or a record format, the column holding a record's text, and
    the language whose rules cut a record's lines into sentences (sentencex)."""

    name: str = "text"
    text_column: str = "text"
    language: str = "en"

    def __post_init__(self):
        if self.name not in FORMATS:
            raise ConfigError(f"--input_format={self.name}: use one of {', '.join(FORMATS)}.")

    @property
    def records(self) -> RecordFormat | None:
        return None if self.name == "text" else RecordFormat(self.name, self.text_column)


TEXT = InputFormat()


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """Bytes [start, end) of `path`; `index` is the unit's place in the whole input (its RNG seed and output order)."""

    index: int
    path: str
    start: int
    end: int
    input_format: InputFormat = TEXT


@dataclasses.dataclass
class ReadStats:
    """Counts of what reading repaired or dropped, summed into the closing summary."""

    lines: int = 0
    repaired_lines: int = 0
    replaced_chars: int = 0
    documents: int = 0

    def add(self, other: ReadStats) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclasses.dataclass
class ScanReport:
    """The records planning saw in record files, and the bad ones: counted, the first few named."""

    records: int = 0
    bad: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)

    def add(self, other: ScanReport) -> None:
        self.records += other.records
        self.bad += other.bad
        self.problems = (self.problems + other.problems)[:_SHOWN_PROBLEMS]

    def count(self, path: str, record: Record) -> None:
        """Counts one record of `path`, naming its problem while fewer than the shown few are named."""
        self.records += 1
        if record.text is None:
            self.bad += 1
            if len(self.problems) < _SHOWN_PROBLEMS:
                self.problems.append(f"{path} {record.problem}")

    def check(self, files: Sequence[str], input_format: InputFormat) -> None:
        """Raises `InputDataError` when no record has text: every record is bad, or there is none."""
        if input_format.records is None or self.records > self.bad:
            return
        if not self.records:
            raise InputDataError(
                f"--input_file: {', '.join(files[:3])} hold(s) no records; check the files and "
                f"--input_format={input_format.name}."
            )
        raise InputDataError(
            f"--input_file: all {self.records:,} records are bad, e.g. {self.problems[0]}; check "
            f"--input_format={input_format.name} and --text_column={input_format.text_column}."
        )


def plan_file(path: str, unit_bytes: int, input_format: InputFormat = TEXT) -> tuple[list[tuple[int, int]], ScanReport]:
    """Cuts one file into units of whole documents, each closed at the first document end after `unit_bytes`:
    the units' (start, end) positions, and what the scan saw of its records.

    Streams the file once, so planning costs a read of the input and no memory. A text file without text is an
    `InputDataError` naming it (`input_files.require_text`).
    """
    if input_format.records is not None:
        return _plan_records(path, unit_bytes, input_format.records)
    require_text(path)
    spans, start, offset = [], 0, 0
    for line in raw_lines(path):
        offset += len(line)
        if offset - start >= unit_bytes and not line.strip():
            spans.append((start, offset))
            start = offset
    if offset > start:
        spans.append((start, offset))
    return spans, ScanReport()


def _plan_records(path: str, unit_bytes: int, records: RecordFormat) -> tuple[list[tuple[int, int]], ScanReport]:
    spans, report = [], ScanReport()
    start = end = size = 0
    for record in records.scan(path):
        report.count(path, record)
        end = record.end
        if record.text is None:
            continue
        size += sum(len(line.encode("utf-8")) + 1 for line in sentences.lines(record.text)) + 1
        if size >= unit_bytes:
            spans.append((start, end))
            start, size = end, 0
    if end > start:
        spans.append((start, end))
    return spans, report


def number_units(
    plans: Sequence[tuple[str, Sequence[tuple[int, int]]]], input_format: InputFormat = TEXT
) -> list[WorkUnit]:
    """The units of files planned one by one ((path, spans) in input order), numbered across all of them."""
    spans = [(path, span) for path, file_spans in plans for span in file_spans]
    return [WorkUnit(index, path, start, end, input_format) for index, (path, (start, end)) in enumerate(spans)]


def plan_work_units(
    files: Sequence[str], unit_bytes: int, input_format: InputFormat = TEXT
) -> tuple[list[WorkUnit], ScanReport]:
    """Every file's units (`plan_file`), numbered in input order, and the scan's report, checked
    (`ScanReport.check`)."""
    plans, report = [], ScanReport()
    for path in files:
        spans, file_report = plan_file(path, unit_bytes, input_format)
        plans.append((path, spans))
        report.add(file_report)
    report.check(files, input_format)
    return number_units(plans, input_format), report


def read_documents(unit: WorkUnit, split_sentences: bool = False) -> tuple[list[list[str]], ReadStats]:
    """The unit's documents as lists of stripped, non-empty lines: in the text format its lines; in a record
    format each record's lines, cut into sentences if `split_sentences` (`sentences.split`).

    Bytes that are not UTF-8 become U+FFFD; in text files they are counted (never a crash, never a silent change).
    Runs of blank lines separate documents like one blank line does.
    """
    if unit.input_format.records is not None:
        return _read_records(unit, split_sentences)
    return _read_text(unit)


def _read_records(unit: WorkUnit, split_sentences: bool) -> tuple[list[list[str]], ReadStats]:
    stats, documents = ReadStats(), []
    for text in unit.input_format.records.read(unit.path, unit.start, unit.end):
        lines = sentences.lines(text)
        stats.lines += len(lines)
        documents.append(sentences.split(lines, unit.input_format.language) if split_sentences else lines)
    stats.documents = len(documents)
    return documents, stats


def _read_text(unit: WorkUnit) -> tuple[list[list[str]], ReadStats]:
    stats = ReadStats()
    with io_errors(unit.path, "--input_file"), storage.open(unit.path, "rb") as f:
        f.seek(unit.start)
        block = f.read(unit.end - unit.start)
    try:
        lines = block.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        lines = []
        for raw in block.split(b"\n"):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                text = raw.decode("utf-8", errors="replace")
                stats.repaired_lines += 1
                stats.replaced_chars += text.count("\ufffd")
                lines.append(text)
        if lines and not lines[-1]:
            lines.pop()
    stats.lines = len(lines)
    documents: list[list[str]] = [[]]
    for text in lines:
        text = text.strip()
        if text:
            documents[-1].append(text)
        elif documents[-1]:
            documents.append([])
    kept = [d for d in documents if d]
    stats.documents = len(kept)
    return kept, stats


def corpus_lines(
    files: Sequence[str], input_format: InputFormat = TEXT, report: ScanReport | None = None
) -> Iterator[str]:
    """Every stripped, non-blank line of the corpus, streamed: a text file's lines, a record's lines (what a
    vocabulary learns from). Bad records are skipped, and counted into `report` if given."""
    records = input_format.records
    for path in files:
        if records is None:
            require_text(path)
            yield from (
                line for line in (raw.decode("utf-8", errors="replace").strip() for raw in raw_lines(path)) if line
            )
            continue
        for record in records.scan(path):
            if report is not None:
                report.count(path, record)
            if record.text is not None:
                yield from sentences.lines(record.text)
