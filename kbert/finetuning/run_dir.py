"""What a fine-tuning `model_dir` holds, and whether a rerun on it may resume.

Layout:

    finetune_config.json   the config of the run, written when it starts
    lease.json             while a run trains: one run at a time (kbert.runtime.lease)
    checkpoints/ckpt-E     model, optimizer and epoch after epoch E (the newest is kept): a rerun resumes here
    best/weights, best.json  the weights and eval metrics of the best epoch so far
    train/, eval/          TensorBoard scalars per epoch
    predictions/*.tsv      the best epoch's predictions, GLUE submission format
    summary.json           written last: the run is finished

Invariant: a rerun resumes only a run of the same config (the number of epochs aside, which changes the
schedule: it too must match), and never touches a finished one; both refusals are one line naming the fix.

Example:

```python
check_resumable("runs/sst2", config.as_dict())   # raises ConfigError, or writes finetune_config.json
```
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from kbert.config import upgrade_values
from kbert.errors import ConfigError
from kbert.finetuning.config import FinetuneConfig

CONFIG_FILE = "finetune_config.json"
SUMMARY_FILE = "summary.json"
BEST_DIR = "best"
BEST_RECORD = "best.json"


def _flatten(values: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return flat


def write_json(path: str, values: dict) -> str:
    """Writes `path` atomically (a reader never sees half a file); returns it."""
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True, default=float) + "\n")
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
    return path


def read_json(path: str) -> dict | None:
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def check_resumable(model_dir: str, config: dict, write: bool = True) -> None:
    """Refuses a finished run or one of another config; otherwise records `config` (a fresh or resumable run;
    `write` False on the workers that are not the chief).

    Raises:
      ConfigError: `model_dir` holds a finished run, or a run of another config (the differing keys named).
    """
    if tf.io.gfile.exists(os.path.join(model_dir, SUMMARY_FILE)):
        raise ConfigError(
            f"--model_dir={model_dir} holds a finished fine-tuning run (summary.json); give a new "
            "--model_dir, or delete that one to train again."
        )
    written = read_json(os.path.join(model_dir, CONFIG_FILE))
    if written is not None:
        written = upgrade_values(FinetuneConfig, written)  # a run of an older layout (flat optimizer keys) resumes
        old, new = _flatten(written), _flatten(json.loads(json.dumps(config, default=float)))
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed:
            shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:5])
            raise ConfigError(
                f"--model_dir={model_dir} holds a partial run of another config ({shown}); resume "
                "it with the same config, or give a new --model_dir."
            )
    tf.io.gfile.makedirs(model_dir)
    if write:
        write_json(os.path.join(model_dir, CONFIG_FILE), config)
