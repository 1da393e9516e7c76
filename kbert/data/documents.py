"""Reading BERT's pretraining text format (one sentence per line, a blank line between documents) in work units.

A work unit is a byte range of one input file that starts at a document boundary and holds whole documents, about
`unit_bytes` long. Units depend only on the files and `unit_bytes`, never on the number of workers, which is what
makes the output of `create_pretraining_data` the same for any `--num_workers`.

Example:

```python
for unit in plan_work_units(["corpus.txt"], unit_bytes=1 << 20):
    docs, stats = read_documents(unit)
```
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import tensorflow as tf

from kbert.data.files import io_errors, require_text


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """Bytes [start, end) of `path`; `index` is the unit's place in the whole input (its RNG seed and output order)."""

    index: int
    path: str
    start: int
    end: int


@dataclasses.dataclass
class ReadStats:
    """Counts of what reading repaired or dropped, summed into the closing summary."""

    lines: int = 0
    repaired_lines: int = 0
    replaced_chars: int = 0
    documents: int = 0

    def add(self, other: "ReadStats") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def plan_work_units(files: Sequence[str], unit_bytes: int) -> Iterator[WorkUnit]:
    """Cuts every file into units of whole documents, each closed at the first blank line after `unit_bytes`.

    Streams the files once without decoding, so planning costs a read of the input and no memory. A file without
    text is an `InputDataError` naming it (`files.require_text`).
    """
    index = 0
    for path in files:
        require_text(path)
        start = offset = 0
        with io_errors(path, "--input_file"), tf.io.gfile.GFile(path, "rb") as f:
            for line in f:
                offset += len(line)
                if offset - start >= unit_bytes and not line.strip():
                    yield WorkUnit(index, path, start, offset)
                    index += 1
                    start = offset
        if offset > start:
            yield WorkUnit(index, path, start, offset)
            index += 1


def read_documents(unit: WorkUnit) -> tuple[list[list[str]], ReadStats]:
    """The unit's documents as lists of stripped, non-empty lines.

    Bytes that are not UTF-8 become U+FFFD and are counted (never a crash, never a silent change). Runs of blank
    lines separate documents like one blank line does.
    """
    stats = ReadStats()
    with io_errors(unit.path, "--input_file"), tf.io.gfile.GFile(unit.path, "rb") as f:
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
