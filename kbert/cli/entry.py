"""The one way kbert's command-line tools start: absl flags, and kbert's errors as one line on stderr.

Example:

```python
def main(argv): ...
def run() -> None:
    entry.run(main, "kbert-build-vocab")   # a KbertError exits 1 with "kbert-build-vocab: error: MESSAGE"
```
"""

from __future__ import annotations

import sys
from typing import Callable

from absl import app

from kbert.errors import KbertError


def report(program: str, error: KbertError) -> None:
    """Exits 1 with `PROGRAM: error: MESSAGE` on stderr: no traceback, the message's first line says the fix."""
    sys.exit(f"{program}: error: {error}")


def run(main: Callable[[list[str]], None], program: str) -> None:
    """`absl.app.run(main)`, with every `KbertError` that escapes `main` reported by `report`."""

    def guarded(argv: list[str]) -> None:
        try:
            main(argv)
        except KbertError as error:
            report(program, error)

    app.run(guarded)
