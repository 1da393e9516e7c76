"""BERT's text format (one sentence a line, a blank line between documents): reading documents from text files,
and writing them split into train and held-out text.

Invariant: `read_documents` (without `resplit`) reads back, document for document, what `write_split` wrote of
documents of stripped one-line sentences.

Example:

```python
documents = read_documents(["my_notes.txt"], resplit=True)
stats = write_split(documents, "train.txt", "heldout.txt", heldout_every=20)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

from kbert.data.docstring_corpus import split_sentences


@dataclasses.dataclass
class SplitStats:
    """Documents and sentences written to each side of the split."""

    train_documents: int = 0
    heldout_documents: int = 0
    train_sentences: int = 0
    heldout_sentences: int = 0


def read_documents(paths: Sequence[str], resplit: bool = False) -> Iterator[list[str]]:
    """Yields the documents of text files, a document being a run of lines between blank lines.

    With `resplit`, each document's lines are joined and cut into sentences by the corpus builder's splitter
    (for prose with wrapped lines); without it, each line is a sentence already (BERT's pretraining format).
    Undecodable bytes are replaced, never fatal.
    """
    for path in paths:
        lines: list[str] = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for raw in f:
                line = raw.strip()
                if line:
                    lines.append(line)
                elif lines:
                    yield _sentences(lines, resplit)
                    lines = []
        if lines:
            yield _sentences(lines, resplit)


def _sentences(lines: list[str], resplit: bool) -> list[str]:
    return split_sentences(" ".join(lines)) if resplit else lines


def write_split(
    documents: Iterable[list[str]], train_path: str, heldout_path: str, heldout_every: int = 20
) -> SplitStats:
    """Writes every `heldout_every`-th document to `heldout_path` and the others to `train_path`.

    Taking documents at a stride (rather than the tail) spreads the held-out set over the whole corpus, whose
    order follows the package tree. Raises ValueError if there are fewer than `heldout_every` documents, which
    leaves the held-out side empty.
    """
    stats = SplitStats()
    with open(train_path, "w", encoding="utf-8") as train, open(heldout_path, "w", encoding="utf-8") as heldout:
        for index, document in enumerate(d for d in documents if d):
            is_heldout = index % heldout_every == heldout_every - 1
            (heldout if is_heldout else train).write("\n".join(document) + "\n\n")
            if is_heldout:
                stats.heldout_documents += 1
                stats.heldout_sentences += len(document)
            else:
                stats.train_documents += 1
                stats.train_sentences += len(document)
    total = stats.train_documents + stats.heldout_documents
    if stats.heldout_documents == 0:
        raise ValueError(
            f"The text has {total} document(s); the demo needs at least {heldout_every} "
            "(documents are separated by blank lines). Give more text or separate its paragraphs by blank lines."
        )
    return stats
