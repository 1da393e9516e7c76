"""The checkpoint files of a run directory: which checkpoints are there, which a rerun can read, and setting
aside the ones training diverged from. Nothing here deletes a checkpoint; only the leftovers of saves that never
finished (`ckpt-N_temp*`) are removed.

Example:

```python
for prefix in listed("/tmp/run/checkpoints"):      # newest first, whatever the index file says
    problem = missing_files(prefix)                 # None, or what is missing
set_aside("/tmp/run/checkpoints", ["/tmp/run/checkpoints/ckpt-21"], "diverged_at_step_21")
```
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import tensorflow as tf

from kbert.checkpoint_index import write_checkpoint_index
from kbert.errors import first_line

_STEP = re.compile(r"ckpt-(\d+)$")
_SHARDS = re.compile(r"\.data-\d+-of-(\d+)$")


def step_of(prefix: str) -> int:
    """The step number of a `.../ckpt-N` prefix."""
    match = _STEP.search(prefix)
    return int(match.group(1)) if match else -1


def named(directory: str) -> set[str]:
    """The checkpoint prefixes that `directory`'s index file (`checkpoint`) names: a save is named there only once
    all its files are written, so a `ckpt-N` it does not name may be a save killed midway."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return set()
    return {os.path.join(directory, os.path.basename(p)) for p in state.all_model_checkpoint_paths}


def listed(directory: str) -> list[str]:
    """Every checkpoint prefix of `directory`, newest (highest step) first: those its index file names, gone
    or not, and every other `ckpt-N.index` there."""
    prefixes = named(directory)
    prefixes.update(p[: -len(".index")] for p in tf.io.gfile.glob(os.path.join(directory, "ckpt-*.index")))
    return sorted((p for p in prefixes if step_of(p) >= 0), key=step_of, reverse=True)


def missing_files(prefix: str) -> str | None:
    """What of checkpoint `prefix` is missing on disk (its index, or data shards), or None."""
    if not tf.io.gfile.exists(prefix + ".index"):
        return "its .index file is missing"
    shards = tf.io.gfile.glob(prefix + ".data-*")
    counts = {int(m.group(1)) for m in map(_SHARDS.search, shards) if m}
    if not shards or len(counts) != 1 or len(shards) != counts.pop():
        return "some of its .data files are missing"
    return None


def unreadable_index(prefix: str) -> str | None:
    """Why the .index file of checkpoint `prefix` cannot be read (a save killed while it wrote it leaves it cut
    short), or None."""
    try:
        reader(prefix)
    except tf.errors.OpError as e:
        return f"its .index file cannot be read ({first_line(e)})"
    return None


def remove_unfinished_saves(directory: str) -> list[str]:
    """Removes the `ckpt-N_temp*` folders that saves killed midway leave (never a usable checkpoint)."""
    leftovers = tf.io.gfile.glob(os.path.join(directory, "ckpt-*_temp*"))
    for path in leftovers:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    return leftovers


def set_aside(directory: str, prefixes: Sequence[str], folder: str) -> str:
    """Moves the files of `prefixes` into `directory/folder` (kept, never resumed from) and points the index
    file at the checkpoints left, if any. Returns the folder."""
    target = os.path.join(directory, folder)
    tf.io.gfile.makedirs(target)
    for prefix in prefixes:
        for path in tf.io.gfile.glob(prefix + ".*"):
            tf.io.gfile.rename(path, os.path.join(target, os.path.basename(path)), overwrite=True)
    left = sorted((p for p in listed(directory) if p not in prefixes and missing_files(p) is None), key=step_of)
    if left:
        write_checkpoint_index(directory, left)
    elif tf.io.gfile.exists(os.path.join(directory, "checkpoint")):
        tf.io.gfile.rename(os.path.join(directory, "checkpoint"), os.path.join(target, "checkpoint"), overwrite=True)
    return target


def reader(prefix: str) -> tf.train.CheckpointReader:
    """A reader of the checkpoint `prefix` names. `tf.train.load_checkpoint` and `list_variables` also take a
    folder, and ask `isdir` first: on `ram://` that is true of a prefix (its files' names extend it), so they look
    for an index file inside it and fail; this reader goes to the prefix itself, on every file system."""
    return tf.compat.v1.train.NewCheckpointReader(prefix)
