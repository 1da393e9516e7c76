"""The data tools' files: the comma-separated glob lists they take as flags, and TF's I/O errors on them."""

from __future__ import annotations

import contextlib
from typing import Iterator

import tensorflow as tf

from kbert.errors import InputDataError, KbertError, MissingFileError

# TF's I/O errors -> (kbert's error, what the user can do), for the errors a user can fix.
_IO_FIXES: dict[type, tuple[type, str]] = {
    tf.errors.NotFoundError: (MissingFileError, "it does not exist (or its folder does not); check the path"),
    tf.errors.PermissionDeniedError: (KbertError, "permission denied; fix the permissions or choose another path"),
    tf.errors.ResourceExhaustedError: (KbertError, "out of space (disk full or quota); free space or write "
                                                   "elsewhere"),
    tf.errors.DataLossError: (InputDataError, "the file is corrupt or truncated; recreate or replace it"),
    tf.errors.FailedPreconditionError: (KbertError, "it cannot be used as a file (a directory?); give a file"),
}


@contextlib.contextmanager
def io_errors(path: str, flag: str) -> Iterator[None]:
    """Reraises TensorFlow's I/O errors met on `path` as one-line `KbertError`s naming `flag`, the file and the fix.

    Any other `tf.errors.OpError` becomes a `KbertError` with TF's own message: on a file operation it is about
    the file, and a traceback would only bury that.
    """
    try:
        yield
    except tf.errors.OpError as e:
        error_class, fix = _IO_FIXES.get(type(e), (KbertError, "see the cause"))
        raise error_class(f"{flag}: {path}: {fix} ({type(e).__name__}: {e.message}).") from e


def expand_patterns(patterns: str, flag: str) -> list[str]:
    """Returns the sorted, de-duplicated files matched by a comma list of globs, in pattern order.

    Raises `FileNotFoundError` naming the flag and the pattern when a pattern matches nothing, so a typo fails
    before any work starts.

    Example:

    ```python
    expand_patterns("data/wiki-*.txt,data/books.txt", flag="--input_file")
    ```
    """
    files: list[str] = []
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches:
            raise MissingFileError(f"{flag}: no file matches {pattern!r}; check the path or quote the glob.")
        files.extend(m for m in matches if m not in files)
    if not files:
        raise MissingFileError(f"{flag} is empty; give one or more files or globs, comma-separated.")
    return files
