"""The checkpoints of a `model.fit` pretraining run: the model and its optimizer in a `.keras` file, and how far
the run got.

A checkpoint is a folder `ckpt-BATCHES` (the batches trained) of a local directory, holding `model.keras`
(`model.save`: the weights and the optimizer's variables, its iterations and gradient accumulators included) and
`progress.json`: the batches trained, their size, and the model's dropout RNG states (Keras's `SeedGenerator`
states), which `.keras` files leave out. It is written under another name and renamed when complete, so a run
killed while writing leaves the checkpoints before it intact; the newest `keep` are kept.

Example:

```python
write_checkpoint(model, "runs/tiny/checkpoints", Progress(batches=1000, batch_size=32), keep=3)
path = newest_checkpoint("runs/tiny/checkpoints")   # 'runs/tiny/checkpoints/ckpt-1000', or None
progress = restore_checkpoint(model, path)           # Progress(batches=1000, batch_size=32)
```
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil

import keras
import numpy as np

from kbert.errors import CheckpointMismatchError, CorruptCheckpointError

MODEL_FILE = "model.keras"
PROGRESS_FILE = "progress.json"
_NAME = re.compile(r"ckpt-(\d+)")


@dataclasses.dataclass(frozen=True)
class Progress:
    """How far a run got: `batches` trained, of `batch_size` examples each."""

    batches: int
    batch_size: int


def _unsaved_variables(model: keras.Model) -> list:
    """The model's variables that `.keras` files leave out (`variables` but not `weights`): its `SeedGenerator`
    states, in the model's own order."""
    saved = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in saved]


def list_checkpoints(directory: str) -> list[str]:
    """The complete checkpoints in `directory`, oldest first."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(directory) if (m := _NAME.fullmatch(name))]
    return [os.path.join(directory, name) for _, name in sorted(found)]


def newest_checkpoint(directory: str) -> str | None:
    """The checkpoint with the most batches in `directory`; None if it has none."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def write_checkpoint(model: keras.Model, directory: str, progress: Progress, keep: int) -> str:
    """Writes `model` (compiled: its optimizer too) as checkpoint `ckpt-{progress.batches}`, then deletes all but
    the newest `keep`; returns the checkpoint's path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"ckpt-{progress.batches}")
    partial = os.path.join(directory, f".ckpt-{progress.batches}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # a write that was killed
    os.makedirs(partial)
    model.save(os.path.join(partial, MODEL_FILE))
    seeds = [keras.ops.convert_to_numpy(v).tolist() for v in _unsaved_variables(model)]
    with open(os.path.join(partial, PROGRESS_FILE), "w") as f:
        json.dump({**dataclasses.asdict(progress), "seed_generator_states": seeds}, f)
    shutil.rmtree(path, ignore_errors=True)  # the same step written again by a rerun
    os.replace(partial, path)
    for old in list_checkpoints(directory)[:-keep]:
        shutil.rmtree(old)
    return path


def restore_checkpoint(model: keras.Model, path: str) -> Progress:
    """Loads checkpoint `path` into `model`, whose optimizer is built first if it is not yet; returns its progress.

    Raises:
      CorruptCheckpointError: `path` lacks its progress file.
      CheckpointMismatchError: the checkpoint is of a model with another number of dropout RNGs.
    """
    try:
        with open(os.path.join(path, PROGRESS_FILE)) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(
            f"{path}: {PROGRESS_FILE} cannot be read ({e}); delete the folder to resume from the checkpoint before it."
        ) from None
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    seeds = _unsaved_variables(model)
    if len(seeds) != len(saved["seed_generator_states"]):
        raise CheckpointMismatchError(
            f"{path}: {len(saved['seed_generator_states'])} dropout RNG states, but the "
            f"model has {len(seeds)}: resume with the model that wrote it."
        )
    model.load_weights(os.path.join(path, MODEL_FILE))
    for variable, state in zip(seeds, saved["seed_generator_states"]):
        variable.assign(np.asarray(state, dtype=variable.dtype))
    return Progress(saved["batches"], saved["batch_size"])
