"""The GLUE table: fine-tune one checkpoint on every GLUE task found in a directory, with several seeds, and score
it the way the GLUE benchmark and the BERT paper report it.

Invariant: a task's score is the unweighted mean of its official metrics (MRPC F1 and accuracy, QQP accuracy and
F1, STS-B Pearson and Spearman, MNLI matched and mismatched accuracy, CoLA Matthews correlation; accuracy for the
rest), times 100, averaged over the seeds; the average is over the tasks found, WNLI left out as in Devlin et al.
(2019). Each run is an ordinary fine-tuning run in `model_dir/<task>/seed_<seed>`, so a killed table resumes.

Example:

```python
summary = run_glue(config, "runs/glue", make_strategy("auto"), seeds=(1, 2, 3))  # config.task.data_dir: GLUE root
print(glue_table(summary["scores"]))
```
"""

from __future__ import annotations

import copy
import os
import statistics
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from kbert.errors import MissingFileError
from kbert.finetuning import run_dir
from kbert.finetuning.config import FinetuneConfig
from kbert.finetuning.runner import run_finetuning
from kbert.finetuning.tasks import GLUE_TASKS

# `task.name` that runs the whole table (kbert-finetune) instead of one task.
GLUE_TABLE = "glue"
# Where a task's official metrics differ from what kbert reports (CoLA also reports accuracy).
_OFFICIAL = {"cola": ("matthews_corr",)}
_LEFT_OUT_OF_AVERAGE = ("wnli",)


def tasks_in(data_dir: str) -> list[str]:
    """The GLUE tasks whose `train.tsv` is under `data_dir` (GLUE's root), in GLUE's order."""
    return [
        name
        for name, glue in GLUE_TASKS.items()
        if tf.io.gfile.exists(os.path.join(data_dir, glue.directory, "train.tsv"))
    ]


def task_score(name: str, summary: dict[str, Any]) -> float:
    """100 x the mean of the task's official metrics over its eval sets (see the module invariant)."""
    splits = [split for split in ("eval", "eval_mismatched") if split in summary]
    names = _OFFICIAL.get(name) or tuple(summary["eval"])
    return 100.0 * statistics.fmean(summary[split][metric] for split in splits for metric in names)


def glue_average(scores: dict[str, list[float]]) -> float | None:
    """The mean over tasks (WNLI left out) of each task's mean over seeds; None without such a task."""
    averaged = [statistics.fmean(v) for name, v in scores.items() if name not in _LEFT_OUT_OF_AVERAGE]
    return statistics.fmean(averaged) if averaged else None


def glue_table(scores: dict[str, list[float]]) -> str:
    """Task scores (mean over seeds, ± their standard deviation with several) and the average, one line each."""
    lines = []
    for name, values in scores.items():
        spread = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
        lines.append(
            f"{name:6s} {statistics.fmean(values):5.1f}{spread}  ({len(values)} seed{'s' * (len(values) > 1)})"
        )
    average = glue_average(scores)
    if average is not None:
        lines.append(f"{'GLUE':6s} {average:5.1f}  (average over the tasks, WNLI left out)")
    return "\n".join(lines)


def run_glue(
    config: FinetuneConfig, model_dir: str, strategy: tf.distribute.Strategy, seeds: Sequence[int], print_fn=print
) -> dict[str, Any]:
    """Fine-tunes `config` on every GLUE task under `config.task.data_dir` once per seed; writes and returns
    `model_dir/glue.json` (`scores`: task -> per-seed scores, `average`).

    Raises:
      MissingFileError: no GLUE task under `config.task.data_dir`.
    """
    names = tasks_in(config.task.data_dir)
    if not names:
        raise MissingFileError(
            f"task.data_dir={config.task.data_dir!r}: no GLUE task there (e.g. SST-2/train.tsv); "
            "give GLUE's root directory, as its download script writes it."
        )
    scores: dict[str, list[float]] = {}
    for name in names:
        for seed in seeds:
            task_config = copy.deepcopy(config)
            task_config.override({"task": {"name": name}, "train": {"seed": seed}})
            print_fn(f"== {name}, seed {seed}", flush=True)
            run = os.path.join(model_dir, name, f"seed_{seed}")
            finished = run_dir.read_json(os.path.join(run, run_dir.SUMMARY_FILE))
            summary = finished or run_finetuning(task_config, run, strategy, print_fn)
            scores.setdefault(name, []).append(task_score(name, summary))
    table = glue_table(scores)
    print_fn(table, flush=True)
    result = {"scores": scores, "average": glue_average(scores), "table": table}
    tf.io.gfile.makedirs(model_dir)
    run_dir.write_json(os.path.join(model_dir, "glue.json"), result)
    return result
