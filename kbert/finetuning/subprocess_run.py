"""kbert-finetune in a child process: its command line, one run with everything it prints in a log, and its score.

A run's score is the eval accuracy (in percent) of its best epoch, as kbert-finetune keeps it in
`MODEL_DIR/summary.json`.

Example:

```python
config_file = "runs/finetune/full.yaml"   # e.g. finetune_config(...) of kbert.finetuning.recipe, as YAML
score = run_finetune(config_file, "runs/finetune/full", "runs/finetune/full.log", "--strategy=one_device")
```
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import tensorflow as tf


def finetune_command(config_file: str, model_dir: str, *flags: str) -> list[str]:
    """kbert-finetune of `config_file` into `model_dir` with `flags`, run by this Python (so by this kbert)."""
    return [
        sys.executable,
        "-m",
        "kbert.run_finetuning",
        f"--config_file={config_file}",
        *flags,
        f"--model_dir={model_dir}",
    ]


def read_summary(model_dir: str) -> dict:
    """The `summary.json` kbert-finetune wrote into `model_dir` (on any TensorFlow file system)."""
    with tf.io.gfile.GFile(os.path.join(model_dir, "summary.json")) as f:
        return json.load(f)


def score(summary: dict) -> float:
    """The run's eval accuracy in percent (its best epoch's)."""
    return 100.0 * summary["eval"]["accuracy"]


def run_finetune(config_file: str, model_dir: str, log_file: str, *flags: str) -> float:
    """Runs kbert-finetune (`finetune_command`) in one process outside any cluster, its output in `log_file`;
    returns its score. Raises RuntimeError naming the log when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}  # one process, whatever the caller runs
    with open(log_file, "w") as log:  # local: the child writes to its descriptor
        code = subprocess.call(
            finetune_command(config_file, model_dir, *flags), stdout=log, stderr=subprocess.STDOUT, env=env
        )
    if code:
        raise RuntimeError(f"kbert-finetune failed (exit {code}); see {log_file}.")
    return score(read_summary(model_dir))
