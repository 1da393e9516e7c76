"""Downstream scores of pretrained encoders: `kbert-finetune` on one classification task, once per seed, each run a
subprocess with its own YAML config; a run's score is its best epoch's eval accuracy x 100, read from summary.json.

Invariant: every encoder is fine-tuned with the same recipe and seeds; only `train.init_checkpoint` differs (and
the `model` section, which a random init must give and a pretrained run reads from its model_dir).

Example:

```python
task = {"name": "jsonl", "train_file": "task/train.jsonl", "eval_file": "task/eval.jsonl", **coherence_task.COLUMNS}
recipe = Recipe(task, "vocab.txt", seq_length=64, epochs=3, learning_rate=3e-4)
scores = finetune_seeds(recipe, "runs/full", {}, seeds=[1, 2, 3], directory="runs/finetune/full")
print(format_scores(scores))   # 71.2 ± 0.8
```
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from typing import Sequence

import yaml

from kbert.finetuning.recipe import Recipe, finetune_config


def finetune(config: dict, model_dir: str) -> float:
    """Runs kbert-finetune on `config` in a fresh `model_dir` (its log beside it); returns the eval accuracy x 100."""
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(model_dir) or ".", exist_ok=True)
    config_file, log_file = f"{model_dir}.yaml", f"{model_dir}.log"
    with open(config_file, "w") as f:
        yaml.safe_dump(config, f)
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}  # one process, whatever the bench runs
    with open(log_file, "w") as log:
        code = subprocess.call([sys.executable, "-m", "kbert.run_finetuning", f"--config_file={config_file}",
                                f"--model_dir={model_dir}", "--strategy=one_device"],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    if code:
        raise RuntimeError(f"kbert-finetune failed (exit {code}); see {log_file}.")
    with open(os.path.join(model_dir, "summary.json")) as f:
        return 100.0 * json.load(f)["eval"]["accuracy"]


def finetune_seeds(recipe: Recipe, init_checkpoint: str, model: dict, seeds: Sequence[int],
                   directory: str) -> list[float]:
    """One fine-tuning run per seed, in `directory/seed_S`; their scores in seed order."""
    return [finetune(finetune_config(recipe, init_checkpoint, model, seed), os.path.join(directory, f"seed_{seed}"))
            for seed in seeds]


def format_scores(scores: Sequence[float]) -> str:
    """Mean ± sample standard deviation over the seeds, in points."""
    spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return f"{statistics.fmean(scores):.1f} ± {spread:.1f}"
