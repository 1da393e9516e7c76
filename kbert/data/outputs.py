"""Writing the data tools' outputs so that a failed or killed run never costs a file that was there before.

Two rules. Checks that can fail run before anything is written (`check_outputs`). And a file is written at its
staging path, `PARENT/.DIR.kbert-incomplete/NAME` for the output `PARENT/DIR/NAME`, and moved into place only when
it is complete (`staged`). The staging folder is outside DIR, so no glob over the outputs (`DIR/*`: kbert's
glob matches dotfiles and folders) ever matches a partial file, and beside it, so on the same file system. A
killed run's staged file is emptied by the next run that writes the same output. A run holds a lock on each local
staged file while it writes it (`flock`, which the system releases however the process ends), so a second run
writing the same output refuses at its start instead of writing into the first one's file; on object stores
(gs://), which have no locks, two runs writing one output at once are not detected.

Example:

```python
check_outputs(["out/vocab.txt"], {"--input_file": inputs})
with staged("out/vocab.txt", "--output_file") as temp:
    write(temp)               # out/vocab.txt is replaced only if this returns
```
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
from collections.abc import Iterator, Mapping, Sequence

from kbert.data import storage
from kbert.data.storage import io_errors
from kbert.errors import ConfigError, OutputInUseError

STAGING_SUFFIX = ".kbert-incomplete"


def _same_file_key(path: str) -> str:
    """One spelling per file: local paths resolved (links, `..`, relative), URLs as given."""
    return path if storage.is_url(path) else os.path.realpath(path)


def check_outputs(outputs: Sequence[str], reads: Mapping[str, Sequence[str]], flag: str = "--output_file") -> None:
    """Refuses an output named twice, an output that is a directory, and an output that is also a file the run
    reads (`reads`: flag -> files), each with a `ConfigError` naming the file; runs before anything is written."""
    seen: set[str] = set()
    for path in outputs:
        if _same_file_key(path) in seen:
            raise ConfigError(f"{flag}: {path} is named twice; give every output file its own name.")
        if storage.isdir(path):
            raise ConfigError(f"{flag}: {path} is a directory; give a file name, e.g. {path.rstrip('/')}/out.")
        seen.add(_same_file_key(path))
    for read_flag, paths in reads.items():
        for path in paths:
            if _same_file_key(path) in seen:
                raise ConfigError(
                    f"{flag}: {path} is also {read_flag}; writing it would destroy the input. Choose "
                    "another output name."
                )


def shard_paths(output_file: str, num_output_shards: int) -> list[str]:
    """The files of an `--output_file` flag: its comma list, or its one name expanded to `num_output_shards` names
    NAME-00000-of-0000N."""
    paths = [p.strip() for p in output_file.split(",") if p.strip()]
    if num_output_shards < 1:
        raise ConfigError(f"--num_output_shards={num_output_shards} must be at least 1.")
    if num_output_shards == 1:
        return paths
    if len(paths) != 1:
        raise ConfigError("--num_output_shards needs a single --output_file name, not a comma list.")
    return [f"{paths[0]}-{i:05d}-of-{num_output_shards:05d}" for i in range(num_output_shards)]


def _split(path: str) -> tuple[str, str, str]:
    """(scheme://, folder, name) of a path; local paths made absolute."""
    scheme, sep, rest = path.rpartition("://")
    if not sep:
        return "", *os.path.split(os.path.abspath(path))
    return f"{scheme}://", *posixpath.split(rest)


def output_folder(path: str) -> str:
    """DIR of `PARENT/DIR/NAME` (absolute, for a local path)."""
    scheme, folder, _ = _split(path)
    return f"{scheme}{folder}"


def staging_path(path: str, flag: str = "--output_file") -> str:
    """Where `path` is written while incomplete: `PARENT/.DIR.kbert-incomplete/NAME`."""
    scheme, folder, name = _split(path)
    parent, base = posixpath.split(folder.rstrip("/"))
    if not base or not parent:  # "/" or "gs://bucket": no folder beside the output's to stage in
        raise ConfigError(
            f"{flag}: {path} is at the root of {scheme}{folder}; put outputs in a folder (kbert "
            "stages incomplete files beside it)."
        )
    return f"{scheme}{posixpath.join(parent, f'.{base}{STAGING_SUFFIX}', name)}"


def _remove(path: str) -> None:
    if storage.exists(path):
        storage.remove(path)


def _claim(temp: str, path: str, flag: str) -> int | None:
    """Makes the staged file `temp` of `path` this run's. A local one is opened (created if absent), locked, and
    emptied of a killed run's bytes: the returned descriptor holds the lock until it is closed or the process ends.
    An `OutputInUseError` if another run holds it. A URL's leftover is removed; None."""
    if storage.is_url(temp):
        _remove(temp)
        return None
    while True:
        fd = os.open(temp, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputInUseError(
                f"{flag}: {path} is being written by another run (it holds {temp}); wait for that run to end, or "
                "write elsewhere."
            ) from None
        except OSError:  # a file system without locks (some network mounts): staged unlocked, as on object stores
            pass
        if _is_file_at(fd, temp):
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)  # locked once its run had moved it into place or removed it: stage a new file


def _is_file_at(fd: int, path: str) -> bool:
    """Whether the open file `fd` is the one at `path`."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (opened.st_dev, opened.st_ino) == (here.st_dev, here.st_ino)


def _release(temp: str, fd: int | None) -> None:
    """Removes the staged file `temp` unless it was moved into place or another run has staged a new one there
    (after this run's move), then unlocks it (`_claim`)."""
    if fd is None:
        _remove(temp)
        return
    try:
        if _is_file_at(fd, temp):
            os.remove(temp)
    finally:
        os.close(fd)


def _remove_folder_if_empty(folder: str) -> None:
    # Only local folders exist apart from their files; os.rmdir leaves a folder another run is writing into.
    if not storage.is_url(folder):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


@contextlib.contextmanager
def staged(path: str, flag: str = "--output_file") -> Iterator[str]:
    """Yields the staging path to write `path` at; moves it to `path` if the block returns, removes it if it raises.

    The output's folder is created if absent; a staged file left by a killed run is emptied first, and one that a
    live run is writing is an `OutputInUseError` (local files: see the module's docstring). I/O errors become
    `KbertError`s naming `flag`. Where DIR is a mount point, the staged file is on another file system and is copied
    into place.
    """
    temp = staging_path(path, flag)
    folder = posixpath.dirname(temp)
    with io_errors(path, flag):
        storage.makedirs(output_folder(path))
    with io_errors(temp, flag):
        storage.makedirs(folder)
        lock = _claim(temp, path, flag)
    try:
        yield temp
        with io_errors(path, flag):
            storage.move(temp, path)
    finally:  # after a move there is nothing left to remove
        with contextlib.suppress(*storage.error_types()):
            _release(temp, lock)
        _remove_folder_if_empty(folder)
