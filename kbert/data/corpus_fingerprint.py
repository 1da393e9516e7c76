"""A corpus's fingerprint: its document count and the SHA-256 of its bytes, with the Python that built it.

Two corpora with the same fingerprint are the same bytes, so the demo's results name the data they came from;
the standard-library docstring corpus has the same fingerprint on every machine with the same CPython release.

Example:

```python
fingerprint("data/docstrings.txt")  # CorpusFingerprint(documents=5012, sha256='9c0e...', python='3.11.7')
```
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform

from kbert.data.text_corpus import read_documents


@dataclasses.dataclass(frozen=True)
class CorpusFingerprint:
    """Documents (runs of lines between blank lines), the SHA-256 of the file, and the interpreter's version."""

    documents: int
    sha256: str
    python: str


def fingerprint(path: str) -> CorpusFingerprint:
    """The fingerprint of the corpus file `path` (BERT's text format)."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return CorpusFingerprint(sum(1 for _ in read_documents([path])), digest, platform.python_version())
