"""The one way kbert's command-line tools start: absl flags, and every user error as one line on stderr.

A `KbertError` escaping `main` prints `PROGRAM: error: MESSAGE` (its first line names the file or flag and the
fix) and exits 1. TensorFlow's I/O errors (a missing or unreadable file, a full disk, a corrupt file) are
reported the same way, with TF's own first line, which names the file, and so is a record the input pipeline
refused for an out-of-range id (`kbert.data.id_ranges`). TensorFlow's errors reach the console; its oneDNN INT64
line, which reports none, is dropped (`kbert.runtime.console`). `--verbose` shows TensorFlow's logs as it prints
them and the full traceback instead.

Example:

```python
def main(argv): ...
def run() -> None:
    entry.run(main, "kbert-build-vocab")
```
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable

from absl import app, flags, logging

from kbert.errors import KbertError
from kbert.runtime import console

flags.DEFINE_bool("verbose", False, "Show TensorFlow's own logs, and the full traceback of an error.")

# TensorFlow's I/O error classes (by name: TF may not be imported yet) and what the user does about each.
_IO_FIXES = {
    "NotFoundError": "check that the path exists and is spelled right",
    "PermissionDeniedError": "check the permissions (or credentials, for gs://) of that path",
    "ResourceExhaustedError": "out of disk space or memory: free some (or lower the batch size) and rerun the "
    "same command, which resumes from the last checkpoint",
    "DataLossError": "the file is corrupt or cut short: restore or regenerate it",
}


def report(program: str, error: KbertError) -> None:
    """Exits 1 with `PROGRAM: error: MESSAGE` on stderr: no traceback, the message's first line says the fix."""
    sys.exit(f"{program}: error: {error}")


def _tensorflow_error(error: Exception) -> str | None:
    """One line for a TensorFlow I/O error or a record the input pipeline refused (`kbert.data.id_ranges`), or
    None for anything else."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(error, tf.errors.OpError):
        return None
    from kbert.data.id_ranges import id_error

    name, refused = type(error).__name__, id_error(error)
    if refused is not None:
        return str(refused)
    if name not in _IO_FIXES:
        return None
    first = (str(error.message).strip().splitlines() or [name])[0]
    return f"{name[: -len('Error')]}: {first[:300]} ({_IO_FIXES[name]})."


def run(main: Callable[[list[str]], None], program: str) -> None:
    """`absl.app.run(main)`, with kbert's errors, TensorFlow's I/O errors and refused records reported as one line."""

    def guarded(argv: list[str]) -> None:
        verbose = flags.FLAGS.verbose
        if not verbose:
            logging.set_verbosity(logging.WARNING)  # TF's per-save INFO lines would drown the progress lines
            warnings.filterwarnings("ignore", module="tensorflow")
            console.filter_stderr([program])
        try:
            main(argv)
        except KbertError as error:
            if verbose:
                raise
            report(program, error)
        except Exception as error:
            line = None if verbose else _tensorflow_error(error)
            if line is None:
                raise
            sys.exit(f"{program}: error: {line}")

    app.run(guarded)
