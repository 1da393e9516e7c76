"""Which package each document of the docstring corpus comes from: the labels of the package task
(`kbert.finetuning.package_task`).

The corpus builder writes documents only; this records, beside it, the top-level package (or module) of the file
each document came from, by following the builder's walk: `build_docstring_corpus` calls `progress` once per file
of `iter_source_files(roots, modules)`, in that order, after writing the file's documents (the file cut by the
size cap gets no call).

Example:

```python
sources = DocumentSources(roots)
stats = build_docstring_corpus("corpus.txt", roots, progress=sources)
sources.packages(stats.documents)  # ['asyncio', 'asyncio', ..., 'email', ...], one per document
```
"""

from __future__ import annotations

import os
from collections.abc import Sequence, Set

from kbert.data.docstring_corpus import CorpusStats, iter_source_files


def package_of(path: str, roots: Sequence[str]) -> str:
    """The first path component of `path` under the deepest root that holds it, without `.py`
    (`.../site-packages/PIL/Image.py` -> `PIL`, `.../python3.11/argparse.py` -> `argparse`)."""
    for root in sorted(roots, key=len, reverse=True):  # the stdlib root may hold site-packages: deepest first
        relative = os.path.relpath(path, root)
        if not relative.startswith(os.pardir):
            return relative.split(os.sep)[0].removesuffix(".py")
    raise ValueError(f"{path} is under none of the corpus roots {list(roots)}.")


class DocumentSources:
    """A `progress` callback for `build_docstring_corpus(roots=..., modules=...)` that remembers where each file's
    documents end.

    Invariant: `packages(n)` has exactly one package per document written, in corpus order.
    """

    def __init__(self, roots: Sequence[str], modules: Set[str] | None = None):
        self._roots = list(roots)
        # The same walk as the builder's (given the same `modules`), one step per call.
        self._files = iter_source_files(self._roots, modules)
        self._ends: list[tuple[int, str]] = []

    def __call__(self, stats: CorpusStats) -> None:
        self._ends.append((stats.documents, package_of(next(self._files), self._roots)))

    def packages(self, documents: int) -> list[str]:
        """One package per document, for a corpus of `documents` documents."""
        labels: list[str] = []
        for end, package in self._ends:
            labels += [package] * (end - len(labels))
        if len(labels) < documents:  # the documents of the file the size cap cut, which had no progress call
            labels += [package_of(next(self._files), self._roots)] * (documents - len(labels))
        return labels
