"""Held-out evaluation on a fixed sample schedule during training, and the time to a target accuracy (MLPerf's
measure: wall time until held-out masked-LM accuracy reaches the target, evaluated every `interval` samples).

Invariant: an evaluation runs at the first loop end at which the sequences trained so far (a packed row counts
its sequences) reach the next multiple of `interval`, and once more at the run's end if that is between two and
the run trained since the schedule started; the run stops at the first one that reaches the target, and what it
records (samples, seconds, step) is where that evaluation was.

Example:

>>> mlperf_interval(global_batch_size=768)
150000
>>> schedule = EvalSchedule(interval=100, target=0.72, evaluate=lambda: evaluator(config, strategy, task, model)())
>>> schedule.due(99), schedule.due(130)
(False, True)

`schedule(step, samples, seconds)` then evaluates, prints and says whether the target is reached.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from kbert.training.reporting import eval_line

# MLPerf BERT's target: masked-LM accuracy on its 10,000 held-out samples.
MLPERF_TARGET = 0.720


def mlperf_interval(global_batch_size: int) -> int:
    """MLPerf BERT's evaluation interval in samples: floor(0.05 x (230.23 x batch + 3,000,000)) rounded down to a
    multiple of 25,000."""
    samples = 0.05 * (230.23 * global_batch_size + 3_000_000)
    return int(math.floor(samples / 25_000) * 25_000)


def mlperf_line(key: str, value: Any, samples: int) -> str:
    """A results line in the style of MLPerf's logger (`:::MLLOG {...}`)."""
    record = {
        "namespace": "",
        "time_ms": int(time.time() * 1000),
        "event_type": "POINT_IN_TIME",
        "key": key,
        "value": value,
        "metadata": {"samples_count": samples},
    }
    return ":::MLLOG " + json.dumps(record)


class EvalSchedule:
    """Evaluates every `interval` samples; with a `target`, says when held-out MLM accuracy reached it.

    `evaluate` is called with no arguments and returns the metrics of `kbert.training.loop.evaluator` for the
    run's model as it is then (the engine's follows the run from stage to stage, so the schedule carries on).
    """

    def __init__(
        self,
        interval: int,
        target: float | None,
        evaluate: Callable[[], dict[str, float]],
        print_fn=print,
        mlperf: bool = False,
        samples_done: int = 0,
        labels: Mapping[str, str] | None = None,
    ):
        self.interval, self.target, self.evaluate, self.labels = interval, target, evaluate, labels
        self.print_fn, self.mlperf = print_fn, mlperf
        self.history: list[dict[str, float]] = []
        self.reached: dict[str, float] | None = None
        self.started = time.perf_counter()  # seconds to target count from here, the schedule's start
        self._samples_done = samples_done
        self._next = (samples_done // interval + 1) * interval

    def due(self, samples: int) -> bool:
        return samples >= self._next

    def seconds(self) -> float:
        """Seconds since the schedule started: an evaluation's time."""
        return time.perf_counter() - self.started

    def __call__(self, step: int, samples: int, seconds: float) -> bool:
        """Evaluates (the caller checked `due`), records and prints it; returns whether the target is reached."""
        metrics = self.evaluate()
        accuracy = metrics["masked_lm_accuracy"]
        self.history.append({"step": step, "samples": samples, "seconds": seconds, **metrics})
        self._next = (samples // self.interval + 1) * self.interval
        self.print_fn(f"{eval_line(metrics, self.labels)} | after {samples:,} samples, {seconds:.1f} s", flush=True)
        if self.mlperf:
            self.print_fn(mlperf_line("eval_accuracy", accuracy, samples), flush=True)
        if self.target is not None and accuracy >= self.target and self.reached is None:
            self.reached = {
                "target": self.target,
                "step": step,
                "samples": samples,
                "seconds": seconds,
                "masked_lm_accuracy": accuracy,
            }
            self.print_fn(
                f"Reached the target masked-LM accuracy {self.target} after {samples:,} samples, "
                f"{seconds:.1f} s (step {step}).",
                flush=True,
            )
            if self.mlperf:
                self.print_fn(mlperf_line("run_stop", "success", samples), flush=True)
        return self.reached is not None

    def finish(self, step: int, samples: int) -> None:
        """Evaluates the trained model once more at the run's end (`step`, `samples`) where the last evaluation came
        before it (its steps end between two intervals) and the target is not reached, so the history ends with
        the run's final accuracy. MLPerf's protocol evaluates on its interval only. Nothing trained since the
        schedule started (a finished run started again, no steps to train) is not evaluated: its seconds would
        time a model trained before them."""
        evaluated_up_to = self.history[-1]["samples"] if self.history else self._samples_done
        if self.mlperf or self.reached is not None or samples <= evaluated_up_to:
            return
        self(step, samples, self.seconds())

    def summary(self) -> dict[str, Any]:
        """What summary.json records: every evaluation, and where the target was reached (None: not reached)."""
        return {
            "interval_samples": self.interval,
            "target_mlm_accuracy": self.target,
            "evaluations": self.history,
            "time_to_target": self.reached,
        }
