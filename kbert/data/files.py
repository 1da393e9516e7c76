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
    tf.errors.FailedPreconditionError: (KbertError, "a directory stands where a file is needed, or a file where "
                                                    "a folder is; check the path"),
}


def io_error(error: tf.errors.OpError, path: str, flag: str) -> KbertError:
    """TensorFlow's I/O error met on `path` as a one-line `KbertError` naming `flag`, the file and the fix.

    An `OpError` without a known fix keeps TF's own message: on a file operation it is about the file, and a
    traceback would only bury that.
    """
    error_class, fix = _IO_FIXES.get(type(error), (KbertError, "see the cause"))
    return error_class(f"{flag}: {path}: {fix} ({type(error).__name__}: {error.message}).")


@contextlib.contextmanager
def io_errors(path: str, flag: str) -> Iterator[None]:
    """Reraises TensorFlow's I/O errors in the block as `io_error(error, path, flag)`."""
    try:
        yield
    except tf.errors.OpError as e:
        raise io_error(e, path, flag) from e


def raw_lines(path: str, flag: str = "--input_file", chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The lines of `path` exactly as stored, each with its b"\\n" (the last may lack one), so their lengths add up
    to byte offsets. A GFile's own line iteration drops the b"\\r" of b"\\r\\n", which would shift every offset
    after it."""
    with io_errors(path, flag), tf.io.gfile.GFile(path, "rb") as f:
        pending = b""
        while chunk := f.read(chunk_bytes):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            yield from (line + b"\n" for line in lines)
        if pending:
            yield pending


def require_text(path: str, flag: str = "--input_file") -> None:
    """Raises `InputDataError` naming `path` unless it holds a non-blank line (reads up to the first one).

    An empty input is a wrong name far more often than a part of the corpus, and it would make empty output.
    """
    with io_errors(path, flag), tf.io.gfile.GFile(path, "rb") as f:
        if any(line.strip() for line in f):
            return
    raise InputDataError(f"{flag}: {path} holds no text (it is empty or only blank lines); fix it or leave it out "
                         f"of {flag}.")


def expand_patterns(patterns: str, flag: str, folders: bool = False) -> list[str]:
    """Returns the sorted, de-duplicated files matched by a comma list of globs, in pattern order; with `folders`,
    the folders matched (datasets saved to disk are folders).

    Raises `MissingFileError` naming the flag and the pattern when a pattern matches nothing, and
    `InputDataError` when it matches a directory (with `folders`, a file), so a typo fails before any work starts.

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
        wrong = [m for m in matches if tf.io.gfile.isdir(m) != folders]
        if wrong and folders:
            raise InputDataError(f"{flag}: {wrong[0]} is a file; give the folder a dataset was saved to "
                                 "(Dataset.save_to_disk).")
        if wrong:
            raise InputDataError(f"{flag}: {wrong[0]} is a directory, not a file; give the files in it, e.g. "
                                 f"{flag}='{wrong[0].rstrip('/')}/*.txt'.")
        files.extend(m for m in matches if m not in files)
    if not files:
        raise MissingFileError(f"{flag} is empty; give one or more files or globs, comma-separated.")
    return files
