"""Downstream scores of pretrained encoders: kbert-finetune on one task once per seed, each run a child process
with its own YAML config, and the scores' mean ± standard deviation.

Invariant: every encoder is fine-tuned with the same recipe and seeds; only `train.init_checkpoint` (and the
`model` section, which a random init must give) differs.

Example:

```python
task = {"name": "jsonl", "train_file": "task/train.jsonl", "eval_file": "task/eval.jsonl", **coherence_task.COLUMNS}
recipe = Recipe(task, "vocab.txt", seq_length=64, epochs=3, learning_rate=3e-4)
scores = finetune_seeds(recipe, "runs/full", None, seeds=[1, 2, 3], directory="runs/finetune/full")
print(format_scores(scores))   # 71.2 ± 0.8
```
"""

from __future__ import annotations

import os
import shutil
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from kbert.finetuning.recipe import Recipe, finetune_config
from kbert.finetuning.subprocess_run import run_finetune


def finetune(config: dict, model_dir: str) -> float:
    """Runs kbert-finetune on `config` on one device in a fresh `model_dir` (config and log beside it); returns its
    score (`kbert.finetuning.subprocess_run.score`)."""
    # Local only: the log beside `model_dir` is the child's stdout, a file on this host, so the folder is local.
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(model_dir) or ".", exist_ok=True)
    config_file = f"{model_dir}.yaml"
    with open(config_file, "w") as f:
        yaml.safe_dump(config, f)
    return run_finetune(config_file, model_dir, f"{model_dir}.log", "--strategy=one_device")


def finetune_seeds(
    recipe: Recipe, init_checkpoint: str, model: Mapping[str, Any] | None, seeds: Sequence[int], directory: str
) -> list[float]:
    """One fine-tuning run per seed, in `directory/seed_S`; their scores in seed order."""
    return [
        finetune(finetune_config(recipe, init_checkpoint, model, seed), os.path.join(directory, f"seed_{seed}"))
        for seed in seeds
    ]


def mean_and_spread(scores: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (0 with one score)."""
    return statistics.fmean(scores), statistics.stdev(scores) if len(scores) > 1 else 0.0


def format_scores(scores: Sequence[float]) -> str:
    """Mean ± sample standard deviation over the seeds, in points."""
    return "{:.1f} ± {:.1f}".format(*mean_and_spread(scores))
