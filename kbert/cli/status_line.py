"""The data tools' console output: one status line on stderr, rewritten in place, and the closing line on stdout.

Invariant: the status line is ended however the work ends, so an error message or the summary starts a line of
its own.

Example:

```python
with status_line() as show:
    run(progress=lambda summary: show(f"chunks {summary.chunks:,}"))
print(wrote(outputs))
```
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence


def _show(line: str) -> None:
    print(f"\r{line}", end="", file=sys.stderr, flush=True)


@contextlib.contextmanager
def status_line() -> Iterator[Callable[[str], None]]:
    """Yields `show(line)`, which replaces the status line; ends the line on leaving, error or not."""
    try:
        yield _show
    finally:
        print(file=sys.stderr)


def wrote(paths: Sequence[str]) -> str:
    """'wrote 3 file(s): a, b, c' (the first three names, then ...)."""
    return f"wrote {len(paths)} file(s): {', '.join(paths[:3])}{' ...' if len(paths) > 3 else ''}"
