"""Writing the data tools' outputs so that a failed or killed run never costs a file that was there before.

Two rules. Checks that can fail run before anything is written (`check_outputs`). And a file is written at its
staging path, `PARENT/.DIR.kbert-incomplete/NAME` for the output `PARENT/DIR/NAME`, and moved into place only when
it is complete (`staged`). The staging folder is outside DIR, so no glob over the outputs (`DIR/*`: kbert's
glob matches dotfiles and folders) ever matches a partial file, and beside it, so on the same file system. A
killed run's staged file is removed by the next run that writes the same output.

Example:

```python
check_outputs(["out/vocab.txt"], {"--input_file": inputs})
with staged("out/vocab.txt", "--output_file") as temp:
    write(temp)               # out/vocab.txt is replaced only if this returns
```
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterator, Mapping, Sequence

from kbert.data import storage
from kbert.data.storage import io_errors
from kbert.errors import ConfigError

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


def _remove_folder_if_empty(folder: str) -> None:
    # Only local folders exist apart from their files; os.rmdir leaves a folder another run is writing into.
    if not storage.is_url(folder):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


@contextlib.contextmanager
def staged(path: str, flag: str = "--output_file") -> Iterator[str]:
    """Yields the staging path to write `path` at; moves it to `path` if the block returns, removes it if it raises.

    The output's folder is created if absent; a staged file left by a killed run is removed first. I/O errors
    become `KbertError`s naming `flag`. Where DIR is a mount point, the staged file is on another file system and
    is copied into place.
    """
    temp = staging_path(path, flag)
    folder = posixpath.dirname(temp)
    with io_errors(path, flag):
        storage.makedirs(output_folder(path))
    with io_errors(temp, flag):
        storage.makedirs(folder)
        _remove(temp)
    try:
        yield temp
        with io_errors(path, flag):
            storage.move(temp, path)
    finally:  # after a move there is nothing left to remove
        with contextlib.suppress(*storage.error_types()):
            _remove(temp)
        _remove_folder_if_empty(folder)
