"""kbert's user-facing errors: one family, caught by every command-line entry point (`kbert.cli.entry.run`).

Invariant: the first line of a message names the file, flag or config key at fault and says how to fix it; a
listing (e.g. checkpoint variables) may follow on later lines. Anything else that escapes is a bug in kbert and
keeps its traceback.

This module imports nothing from kbert, so every layer (data, modeling, optimizers, training, mslt) can raise
these without importing the layers above it.
"""

from __future__ import annotations


def first_line(error: BaseException, limit: int | None = 200) -> str:
    """What `error` says, to quote inside a one-line message: its first line (at most `limit` characters; all of it
    for None), or its type's name when it says nothing."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:limit]


class KbertError(Exception):
    """Base of every error a user can fix by changing a flag, a config key, a file or a directory."""


class ConfigError(KbertError, ValueError):
    """A bad experiment config; the message names the key and where it came from (file or flag)."""


class PlanError(ConfigError):
    """A bad `mslt` section, or a model_dir of another plan; names the stage and the field and says the fix."""


class StrategyError(KbertError, RuntimeError):
    """The requested devices are not there; the message says which flag to change."""


class InputDataError(KbertError, ValueError):
    """Input files that cannot feed training: missing, corrupt, or not what the config says; names the file."""


class VocabularyError(KbertError, ValueError):
    """A vocabulary file lacks what tokenization needs, or does not fit the data or the model."""


class CheckpointMismatchError(KbertError, ValueError):
    """A checkpoint does not fit the model or optimizer; the first line names the file, the counts and the fix,
    a listing of missing, unexpected and wrong-shape variables may follow."""


class MissingFileError(KbertError, FileNotFoundError):
    """A file, directory or checkpoint named by a flag or config key is not there; names it and what to give."""


class NonFiniteLossError(KbertError, RuntimeError):
    """Training produced NaN/Inf; raised before any checkpoint of the bad weights is written.

    `bad_from_step`: the first step whose weights are not known good (they gave a non-finite loss, or were
    non-finite themselves); a checkpoint of that step or a later one must not be resumed from.
    """

    def __init__(self, message: str, bad_from_step: int):
        super().__init__(message)
        self.bad_from_step = bad_from_step


class CorruptCheckpointError(KbertError, RuntimeError):
    """A run directory holds checkpoints but none can be read (files missing or cut short); names them."""


class ModelDirInUseError(KbertError, RuntimeError):
    """Another live run holds the model_dir's lease; names that run (host, pid, start) and the fix."""


class OutputInUseError(KbertError, RuntimeError):
    """Another live run is writing a data tool's output file (it holds the file's staged copy); names the file."""
