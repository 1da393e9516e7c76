"""Expanding the comma-separated glob lists that the data tools take as flags."""

from __future__ import annotations

import tensorflow as tf

from kbert.errors import MissingFileError


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
