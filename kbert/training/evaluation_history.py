"""Time to target read from an evaluation history: the `evaluations` of a kbert-pretrain summary.json (step,
samples, seconds and the held-out metrics of each scheduled evaluation), or any list of records like them.

Invariant: the time to a target is the earliest evaluation of the history whose metric is at or above the target
(samples, seconds and step are that evaluation's), or None when none reached it; a run that was given the same
target (`eval.target_mlm_accuracy`) reads back the `time_to_target` it recorded itself, which is that evaluation.

Example:

>>> history = [{"step": 10, "samples": 320, "seconds": 4.0, "masked_lm_accuracy": 0.08},
...            {"step": 20, "samples": 640, "seconds": 7.5, "masked_lm_accuracy": 0.12},
...            {"step": 30, "samples": 960, "seconds": 11.0, "masked_lm_accuracy": 0.11}]
>>> first_reaching(history, 0.1)
{'target': 0.1, 'step': 20, 'samples': 640, 'seconds': 7.5, 'masked_lm_accuracy': 0.12}
>>> first_reaching(history, 0.2) is None, final_accuracy(history)
(True, 0.11)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

METRIC = "masked_lm_accuracy"


def first_reaching(evaluations: Sequence[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The first evaluation whose held-out masked-LM accuracy is at least `target`, as summary.json's
    `time_to_target` records one (`target`, `step`, `samples`, `seconds`, the accuracy); None if none reached it."""
    for evaluation in evaluations:
        if evaluation[METRIC] >= target:
            return {
                "target": target,
                "step": evaluation["step"],
                "samples": evaluation["samples"],
                "seconds": evaluation["seconds"],
                METRIC: evaluation[METRIC],
            }
    return None


def final_accuracy(evaluations: Sequence[dict[str, Any]]) -> float:
    """The held-out masked-LM accuracy at the history's last evaluation (NaN for an empty history: the run
    evaluated nothing)."""
    return float(evaluations[-1][METRIC]) if evaluations else float("nan")


def time_to_target(summary: dict[str, Any], target: float) -> dict[str, Any] | None:
    """Where a run's held-out masked-LM accuracy first reached `target`: the run's own record when it ran with this
    target, else read from its evaluations (a target set after the run, e.g. a peer's final accuracy)."""
    if summary.get("target_mlm_accuracy") == target:
        return summary.get("time_to_target")
    return first_reaching(summary.get("evaluations", []), target)


def read_summary(model_dir: str) -> dict[str, Any]:
    """A finished run's `model_dir/summary.json` (on any TensorFlow file system: local, gs://, ...)."""
    with tf.io.gfile.GFile(os.path.join(model_dir, "summary.json")) as f:
        return json.load(f)
