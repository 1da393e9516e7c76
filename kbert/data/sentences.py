"""A record's text as BERT's text format wants it: its lines, and those lines cut into sentences.

Sentences come from sentencex (Wikimedia's rule-based segmenter, ~300 languages): sentence pairs (next-sentence or
sentence-order prediction) need them; MLM-only rows do not, and take the lines as they are.

Example:

```python
split(lines("Dr. Smith came at 5 p.m. He left.\\nThe end."), "en")  # ['Dr. Smith came at 5 p.m.', 'He left.', ...]
```
"""

from __future__ import annotations

from collections.abc import Sequence

import sentencex


def lines(text: str) -> list[str]:
    """The stripped, non-blank lines of `text`."""
    return [line for line in (raw.strip() for raw in text.splitlines()) if line]


def split(text_lines: Sequence[str], language: str) -> list[str]:
    """Each line cut into its sentences, in order; a line that is one sentence comes back as it is."""
    return [
        sentence
        for line in text_lines
        for sentence in (s.strip() for s in sentencex.segment(language, line))
        if sentence
    ]
