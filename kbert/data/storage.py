"""The data tools' file operations, on local disks and on TensorFlow's file systems, and their errors as one line.

A path with a scheme (``gs://bucket/corpus.txt``, ``ram://x``) goes through `tf.io.gfile`, TensorFlow imported on
first use; any other path through Python's `os` and built-in `open`. So a tool that reads and writes local files
only (kbert-build-vocab) never imports TensorFlow, which takes seconds and about 750 MB.

`io_errors` turns the errors either kind of path raises (`OSError`, TensorFlow's `OpError`) into one-line
`KbertError`s that name the flag, the file and the fix.

Example:

```python
with io_errors(path, "--input_file"), storage.open(path, "rb") as f:
    head = f.read(100)
```
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import glob as local_glob
import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from typing import IO

from kbert.errors import InputDataError, KbertError, MissingFileError

_MISSING = (MissingFileError, "it does not exist (or its folder does not); check the path")
_DENIED = (KbertError, "permission denied; fix the permissions or choose another path")
_FULL = (KbertError, "out of space (disk full or quota); free space or write elsewhere")
_CORRUPT = (InputDataError, "the file is corrupt or truncated; recreate or replace it")
_WRONG_KIND = (KbertError, "a directory stands where a file is needed, or a file where a folder is; check the path")
_UNKNOWN = (KbertError, "see the cause")
# TensorFlow's I/O errors, by class name (TensorFlow may not be imported), and local ones, by class and errno:
# kbert's error and what the user can do, for the errors a user can fix.
_TF_FIXES = {
    "NotFoundError": _MISSING,
    "PermissionDeniedError": _DENIED,
    "ResourceExhaustedError": _FULL,
    "DataLossError": _CORRUPT,
    "FailedPreconditionError": _WRONG_KIND,
}
# (FileExistsError: `makedirs` of a folder where a file is.)
_OS_FIXES = {
    FileNotFoundError: _MISSING,
    PermissionError: _DENIED,
    IsADirectoryError: _WRONG_KIND,
    NotADirectoryError: _WRONG_KIND,
    FileExistsError: _WRONG_KIND,
}
_ERRNO_FIXES = {errno.ENOSPC: _FULL, errno.EDQUOT: _FULL}


def is_url(path: str) -> bool:
    """Whether `path` names a file of a TensorFlow file system (it has a scheme: gs://, s3://, ram://)."""
    return "://" in path


def _tf():
    import tensorflow as tf  # only for URLs: see the module's docstring

    return tf


def open(path: str, mode: str = "rb") -> IO:
    """`path` opened in `mode` ("rb", "wb", "r", "w"); text modes are UTF-8 and keep line ends as stored."""
    if is_url(path):
        return _tf().io.gfile.GFile(path, mode)
    if "b" in mode:
        return builtins.open(path, mode)
    return builtins.open(path, mode, encoding="utf-8", newline="")


def glob(pattern: str) -> list[str]:
    """The paths matching `pattern`, dotfiles included (as TensorFlow's glob), in no particular order."""
    if is_url(pattern):
        return _tf().io.gfile.glob(pattern)
    return local_glob.glob(pattern, include_hidden=True)


def isdir(path: str) -> bool:
    return _tf().io.gfile.isdir(path) if is_url(path) else os.path.isdir(path)


def exists(path: str) -> bool:
    return _tf().io.gfile.exists(path) if is_url(path) else os.path.exists(path)


def makedirs(path: str) -> None:
    """Creates the folder `path` and its parents; no error when it exists."""
    if is_url(path):
        _tf().io.gfile.makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    if is_url(path):
        _tf().io.gfile.remove(path)
    else:
        os.remove(path)


def move(source: str, target: str) -> None:
    """Renames the file `source` over `target`; where they are on different file systems, copies, then removes
    `source`."""
    if is_url(target):
        tf = _tf()
        try:
            tf.io.gfile.rename(source, target, overwrite=True)
        except tf.errors.OpError:
            tf.io.gfile.copy(source, target, overwrite=True)
            tf.io.gfile.remove(source)
        return
    try:
        os.replace(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        shutil.copyfile(source, target)
        os.remove(source)


def sha256(path: str, flag: str) -> str:
    """The SHA-256 of the file `path`, as hex; I/O errors name `flag`."""
    digest = hashlib.sha256()
    with io_errors(path, flag), open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def error_types() -> tuple[type[BaseException], ...]:
    """The exceptions an operation on a file can raise: `OSError`, and TensorFlow's `OpError` once it is imported
    (no URL has been touched before that)."""
    tf = sys.modules.get("tensorflow")
    return (OSError,) if tf is None else (OSError, tf.errors.OpError)


def io_error(error: BaseException, path: str, flag: str) -> KbertError:
    """An I/O error met on `path` (`OSError` or TensorFlow's `OpError`) as a one-line `KbertError` naming `flag`,
    the file and the fix.

    An error without a known fix keeps its own message: on a file operation it is about the file, and a traceback
    would only bury that.
    """
    if isinstance(error, OSError):
        fix = _ERRNO_FIXES.get(error.errno) or next(
            (fix for kind, fix in _OS_FIXES.items() if isinstance(error, kind)), _UNKNOWN
        )
        detail = error.strerror or str(error)
    else:
        fix, detail = _TF_FIXES.get(type(error).__name__, _UNKNOWN), error.message
    error_class, what_to_do = fix
    return error_class(f"{flag}: {path}: {what_to_do} ({type(error).__name__}: {detail}).")


@contextlib.contextmanager
def io_errors(path: str, flag: str) -> Iterator[None]:
    """Reraises the I/O errors of the block as `io_error(error, path, flag)`; kbert's own errors pass through."""
    try:
        yield
    except KbertError:
        raise
    except error_types() as e:
        raise io_error(e, path, flag) from e
