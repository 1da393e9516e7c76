"""What a training run tells its user: console progress, TensorBoard summaries and `summary.json`.

Example:

```python
reporter = ProgressReporter(total_steps=1000, writer=tf.summary.create_file_writer("/tmp/run/train"),
                            summary_interval=100, optimizer=optimizer)
reporter(step=100, metrics=trainer.train(tf.constant(100)))
# step 100/1000 | loss 9.8123 | mlm_acc 0.0210 | nsp_acc 0.5312 | lr 1.00e-04 | 812.4 seq/s | MFU 41.3% | ETA 0:09:13
```
"""

from __future__ import annotations

import datetime
import json
import math
import os
import time
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from kbert.errors import NonFiniteLossError
from kbert.optimizers import write_trust_ratio_summaries

LOSS_METRICS = ("loss", "masked_lm_loss", "next_sentence_loss")
SCALARS = LOSS_METRICS + (
    "masked_lm_accuracy",
    "next_sentence_accuracy",
    "learning_rate",
    "gradient_norm",
    "sequences_per_second",
)


def check_finite(step: int, steps_run: int, metrics: dict[str, float], first_bad_step: int) -> None:
    """Raises NonFiniteLossError naming the metric and the step if the losses of the loop of `steps_run` steps
    that ended at `step` were not finite; `first_bad_step` is the trainer's mark (-1: not known which step)."""
    bad = [name for name in LOSS_METRICS if not math.isfinite(metrics.get(name, 0.0))]
    if not bad and not metrics.get("nonfinite_micro_steps", 0.0):
        return
    where = f"step {first_bad_step + 1}" if first_bad_step >= 0 else f"a step of the loop ending at step {step}"
    names = ", ".join(f"{name}={metrics.get(name)}" for name in bad) or "a replica's loss was NaN/Inf"
    raise NonFiniteLossError(
        f"Non-finite loss at {where} ({names}). Training stopped without saving it. Lower "
        "schedule.peak_learning_rate, raise schedule.warmup_steps, or use train.mixed_precision=mixed_bfloat16 "
        "instead of mixed_float16.",
        bad_from_step=first_bad_step if first_bad_step >= 0 else step - steps_run,
    )


def check_finite_weights(step: int, finite: bool) -> None:
    """Raises NonFiniteLossError if the weights after step `step` are not all finite (a checkpoint must not
    hold them)."""
    if not finite:
        raise NonFiniteLossError(
            f"Non-finite weights after step {step} (the update of that step overflowed). Training stopped without "
            "saving them. Lower schedule.peak_learning_rate or raise schedule.warmup_steps.",
            bad_from_step=step,
        )


class ProgressReporter:
    """Prints one console line per loop and writes TensorBoard scalars/histograms every `summary_interval`."""

    def __init__(
        self,
        total_steps: int,
        writer: tf.summary.SummaryWriter | None,
        summary_interval: int,
        optimizer=None,
        print_fn=print,
        flops_per_row: float = 0.0,
        peak_flops: float = 0.0,
        labels: Mapping[str, str] | None = None,
    ):
        self.total_steps = total_steps
        self.labels = dict(labels or {})  # the metrics a line shows after the loss, by their short labels
        # MFU, as nanoGPT prints it: the model's matmul FLOPs per second over the devices' peak (0: not shown).
        self.flops_per_row, self.peak_flops = flops_per_row, peak_flops
        self.writer = writer
        self.summary_interval = summary_interval
        self.optimizer = optimizer
        self.print_fn = print_fn
        self.history: list[dict[str, Any]] = []
        self._start = time.perf_counter()
        self._start_step: int | None = None

    def __call__(self, step: int, metrics: dict[str, float], steps_run: int) -> None:
        if self._start_step is None:
            self._start_step = step - steps_run
        if self.flops_per_row and self.peak_flops and "rows_per_second" in metrics:
            metrics = {**metrics, "mfu": metrics["rows_per_second"] * self.flops_per_row / self.peak_flops}
        self.history.append({"step": step, **metrics})
        self.print_fn(self.progress_line(step, metrics), flush=True)
        if self.writer is not None and (step % self.summary_interval == 0 or step == self.total_steps):
            self._write(step, metrics)

    def progress_line(self, step: int, metrics: dict[str, float]) -> str:
        done = step - self._start_step
        elapsed = time.perf_counter() - self._start
        eta = elapsed / done * (self.total_steps - step) if done > 0 else 0.0
        return (
            f"step {step}/{self.total_steps} | loss {metrics['loss']:.4f} | "
            + "".join(f"{label} {metrics[name]:.4f} | " for name, label in self.labels.items())
            + f"lr {metrics['learning_rate']:.2e} | {metrics['sequences_per_second']:.1f} seq/s | "
            + (f"MFU {100 * metrics['mfu']:.1f}% | " if "mfu" in metrics else "")
            + f"ETA {datetime.timedelta(seconds=round(eta))}"
        )

    def _write(self, step: int, metrics: dict[str, float]) -> None:
        with self.writer.as_default(step=step):
            for name in SCALARS:
                if name in metrics:
                    tf.summary.scalar(name, metrics[name])
        if self.optimizer is not None:
            write_trust_ratio_summaries(self.optimizer, step, self.writer)
        self.writer.flush()

    def mean_throughput(self) -> float:
        """Sequences/s averaged over all loops but the first (which includes tracing)."""
        values = [h["sequences_per_second"] for h in self.history[1:]] or [
            h["sequences_per_second"] for h in self.history
        ]
        return sum(values) / len(values) if values else 0.0


def eval_line(metrics: dict[str, float], labels: Mapping[str, str] | None = None) -> str:
    """The console line of an evaluation: the loss, the metrics `labels` names (metric -> short label; all of
    them by their own names when None) and the sequences."""
    if labels is None:
        labels = {name: name for name in metrics if name not in ("loss", "sequences")}
    shown = "".join(f"{label} {metrics[name]:.4f} | " for name, label in labels.items())
    return f"eval | loss {metrics['loss']:.4f} | {shown}{int(metrics['sequences'])} sequences"


def write_summary_json(model_dir: str, summary: dict[str, Any], name: str = "summary.json") -> str:
    """Writes `model_dir/<name>` (atomically, so a reader never sees half a file), making `model_dir` if absent."""
    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, name)
    tmp = path + ".tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(summary, indent=2, sort_keys=True, default=float) + "\n")
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return path
