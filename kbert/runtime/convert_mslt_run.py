"""Converting a run directory of kbert's per-stage MSLT layout (`stage_N/checkpoints/`, before the engine) to
the one layout of every run now: each stage's checkpoints in `checkpoints/`, named by global step.

Stage boundaries were global steps then too, so no two stages share a checkpoint name and moving the files is the
whole conversion; each folder's index is written anew, naming every checkpoint oldest first. The stages' exports
and summaries (`stage_N/export/`, `stage_N/summary.json`) stay where they are, where the engine reads them.

Example:

```python
if has_old_layout("/runs/mslt"):
    convert_stage_checkpoints("/runs/mslt")   # then the same kbert-pretrain command resumes it
```
"""

from __future__ import annotations

import os
import re

import tensorflow as tf

from kbert.checkpoint_index import write_checkpoint_index
from kbert.errors import ConfigError
from kbert.runtime import checkpoint_files

OLD_PLAN = "mslt_plan.json"
_STAGE = re.compile(r"stage_(\d+)$")


def has_old_layout(model_dir: str) -> bool:
    """Whether `model_dir` holds an MSLT run whose checkpoints are still per stage."""
    return tf.io.gfile.exists(os.path.join(model_dir, OLD_PLAN)) and not tf.io.gfile.exists(
        os.path.join(model_dir, "checkpoints", "checkpoint")
    )


def _stage_folders(model_dir: str) -> list[str]:
    folders = [p.rstrip("/") for p in tf.io.gfile.glob(os.path.join(model_dir, "stage_*"))]
    return sorted((p for p in folders if _STAGE.search(p)), key=lambda p: int(_STAGE.search(p).group(1)))


def convert_stage_checkpoints(model_dir: str) -> list[str]:
    """Moves every `stage_N/checkpoints/` file (input positions included) to the same name under
    `model_dir/checkpoints/` and indexes them; returns the training checkpoints now there, oldest first.

    Raises:
      ConfigError: `model_dir` is not in the old layout (nothing is moved).
    """
    if not has_old_layout(model_dir):
        raise ConfigError(
            f"{model_dir}: no MSLT run in the per-stage layout here (it has no {OLD_PLAN}, or its "
            "checkpoints/ is indexed already); nothing to convert."
        )
    target = os.path.join(model_dir, "checkpoints")
    indexed = {target}
    for stage in _stage_folders(model_dir):
        source = os.path.join(stage, "checkpoints")
        if not tf.io.gfile.isdir(source):
            continue
        for folder, _, names in tf.io.gfile.walk(source):
            into = os.path.join(target, folder[len(source) :].lstrip("/"))
            tf.io.gfile.makedirs(into)
            indexed.add(into.rstrip("/"))
            for name in names:
                if name != "checkpoint":  # the stage's index: written anew for all stages
                    tf.io.gfile.rename(os.path.join(folder, name), os.path.join(into, name), overwrite=False)
        tf.io.gfile.rmtree(source)
    for folder in indexed:
        prefixes = sorted(checkpoint_files.listed(folder), key=checkpoint_files.step_of)
        if prefixes:
            write_checkpoint_index(folder, prefixes)
    return sorted(checkpoint_files.listed(target), key=checkpoint_files.step_of)
