"""The text a vocabulary is learned from, for every learner of kbert-build-vocab (WordPiece's in
wordpiece/vocab_learning.py, byte-level BPE's in bpe_learning.py): the lines of the input files in any input format,
read as often as a learner needs, with progress, and what learning saw (`VocabStats`).

Example:

```python
def learn(corpus: CorpusReading) -> list[str]:
    return sorted(set("".join(corpus.read("learning"))))

characters, corpus = learn_from(["corpus.txt"], learn)
stats = corpus.stats(vocab_size=len(characters), num_reserved=0, vocab_size_asked=100)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from kbert.data import work_units
from kbert.data.input_files import require_text
from kbert.errors import InputDataError

# progress(stage, lines, chars), called as a learner reads: stage "learning", after "scanning" for WordPiece's default.
Progress = Callable[[str, int, int], None]
BATCH_LINES = 1024  # lines handed to a learner at a time
_PROGRESS_EVERY = 100_000  # lines
Learned = TypeVar("Learned")


@dataclasses.dataclass
class VocabStats:
    """What a learner saw and produced.

    `num_reserved`: the reserved (special) tokens among `vocab_size`. `shortfall`: one line saying why `vocab_size`
    is below `vocab_size_asked` and what to do; None when the vocabulary has the asked size. `records`: the records
    read (record formats), the bad ones counted and named.
    """

    lines: int
    chars: int
    vocab_size: int
    num_reserved: int
    vocab_size_asked: int
    shortfall: str | None = None
    records: work_units.ScanReport = dataclasses.field(default_factory=work_units.ScanReport)


class CorpusReading:
    """The lines of the input files, read as often as a learner needs. The first read counts the lines, the
    characters and the records; every read calls `progress(stage, lines, chars)` every 100,000 lines and at its
    end."""

    def __init__(self, files: Sequence[str], progress: Progress | None, input_format: work_units.InputFormat):
        self.files = files
        self.progress = progress
        self.input_format = input_format
        self.report = work_units.ScanReport()
        self.lines = 0
        self.chars = 0
        self.reads = 0

    def read(self, stage: str) -> Iterator[str]:
        """Every stripped, non-blank line of the corpus, in file order (`work_units.corpus_lines`)."""
        first = self.reads == 0
        self.reads += 1
        lines = chars = 0
        for text in work_units.corpus_lines(self.files, self.input_format, self.report if first else None):
            lines += 1
            chars += len(text)
            if self.progress is not None and lines % _PROGRESS_EVERY == 0:
                self.progress(stage, lines, chars)
            yield text
        if first:
            self.lines, self.chars = lines, chars
        if self.progress is not None:
            self.progress(stage, lines, chars)

    def stats(
        self, vocab_size: int, num_reserved: int, vocab_size_asked: int, shortfall: str | None = None
    ) -> VocabStats:
        """What was read, with what the learner made of it."""
        return VocabStats(self.lines, self.chars, vocab_size, num_reserved, vocab_size_asked, shortfall, self.report)


def learn_from(
    files: Sequence[str],
    learn: Callable[[CorpusReading], Learned],
    progress: Progress | None = None,
    input_format: work_units.InputFormat = work_units.TEXT,
) -> tuple[Learned, CorpusReading]:
    """`learn(corpus)` on the corpus of `files`, and the corpus as read.

    Text files that cannot be read, or hold no text, are an `InputDataError` before anything is learned; record
    files of which no record has text are one naming the records' problem, whether `learn` found nothing to learn
    from (an `InputDataError` it raises) or learned from nothing.
    """
    if input_format.records is None:
        for path in files:
            require_text(path)  # read errors and empty files named here, before any learning
    corpus = CorpusReading(files, progress, input_format)
    try:
        learned = learn(corpus)
    except InputDataError:
        corpus.report.check(files, input_format)  # no good record: that, not what the learner missed, is the error
        raise
    corpus.report.check(files, input_format)
    return learned, corpus


def batches(
    items: Iterable[str], limit: int = BATCH_LINES, size: Callable[[str], int] = lambda _: 1
) -> Iterator[list[str]]:
    """`items` in lists of `limit` sizes each (one item counts `size(item)`; the last list may hold less)."""
    batch: list[str] = []
    total = 0
    for item in items:
        batch.append(item)
        total += size(item)
        if total >= limit:
            yield batch
            batch, total = [], 0
    if batch:
        yield batch
