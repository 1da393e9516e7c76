"""The data tools' input files: the comma-separated glob lists they take as flags, read line by line."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kbert.data import storage
from kbert.data.storage import io_errors
from kbert.errors import InputDataError, MissingFileError

# What kbert-create-pretraining-data writes beside its records (records_info.py): never an input, so a glob over a
# folder of records (`data/*`) matches the records alone.
RECORDS_INFO = "kbert_records.json"


def raw_lines(path: str, flag: str = "--input_file", chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The lines of `path` exactly as stored, each with its b"\\n" (the last may lack one), so their lengths add up
    to byte offsets. A GFile's own line iteration drops the b"\\r" of b"\\r\\n", which would shift every offset
    after it."""
    with io_errors(path, flag), storage.open(path, "rb") as f:
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
    with io_errors(path, flag), storage.open(path, "rb") as f:
        if any(line.strip() for line in f):
            return
    raise InputDataError(
        f"{flag}: {path} holds no text (it is empty or only blank lines); fix it or leave it out of {flag}."
    )


def expand_patterns(patterns: str, flag: str, folders: bool = False) -> list[str]:
    """Returns the sorted, de-duplicated files matched by a comma list of globs, in pattern order; with `folders`,
    the folders matched (datasets saved to disk are folders). A records-info file (`RECORDS_INFO`) is never matched.

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
        matches = sorted(m for m in storage.glob(pattern) if m.rsplit("/", 1)[-1] != RECORDS_INFO)
        if not matches:
            raise MissingFileError(f"{flag}: no file matches {pattern!r}; check the path or quote the glob.")
        wrong = [m for m in matches if storage.isdir(m) != folders]
        if wrong and folders:
            raise InputDataError(
                f"{flag}: {wrong[0]} is a file; give the folder a dataset was saved to (Dataset.save_to_disk)."
            )
        if wrong:
            raise InputDataError(
                f"{flag}: {wrong[0]} is a directory, not a file; give the files in it, e.g. "
                f"{flag}='{wrong[0].rstrip('/')}/*.txt'."
            )
        files.extend(m for m in matches if m not in files)
    if not files:
        raise MissingFileError(f"{flag} is empty; give one or more files or globs, comma-separated.")
    return files


def match_files(file_pattern: str | Sequence[str], flag: str = "file_pattern") -> list[str]:
    """Files matching a glob, a comma-separated list of globs, or a list of globs (sorted within each glob).

    Raises `InputDataError` naming `flag` and the pattern that matches nothing.
    """
    patterns = file_pattern if isinstance(file_pattern, str) else ",".join(file_pattern)
    try:
        return expand_patterns(patterns, flag)
    except FileNotFoundError as error:
        raise InputDataError(f"{error} Create the files with kbert-create-pretraining-data.") from None
