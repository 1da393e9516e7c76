"""What happens after each epoch of `model.fit`: evaluate, report, keep the best epoch, checkpoint.

Invariant: after epoch E returns, `model_dir/checkpoints` holds epoch E (model, optimizer, epoch) and
`model_dir/best` the weights of the epoch with the highest primary metric on `eval` (earliest on a tie), so a
killed run resumes at E + 1 and still ends with the best weights. A non-finite training loss stops the run with
`NonFiniteLossError` before anything of that epoch is saved.

Example:

```python
evaluator = EpochEvaluator(data, {"eval": EvalSet(eval_dataset, labels)}, BestWeights(model, "run/best"),
                           save_checkpoint, epochs=3, examples_per_epoch=len(data.train), writers=None)
model.fit(train_dataset, epochs=3, callbacks=[evaluator], verbose=0)
```
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.errors import NonFiniteLossError
from kbert.finetuning.examples import TaskData
from kbert.finetuning.metrics import compute_metrics
from kbert.finetuning.predictions import predicted_values
from kbert.finetuning.run_dir import BEST_RECORD, read_json, write_json
from kbert.runtime.checkpointing import variables_by_path


def scores(outputs: np.ndarray, labels: np.ndarray, data: TaskData) -> dict[str, float]:
    """The task's metrics of one eval set's outputs, all at once (float64)."""
    return compute_metrics(data.metrics, labels, predicted_values(outputs, data.label_names))


class BestWeights:
    """The best epoch's weights and record under `directory` (`weights` checkpoint, `best.json`)."""

    def __init__(self, model: keras.Model, directory: str):
        self.directory = directory
        self._checkpoint = tf.train.Checkpoint(model=variables_by_path(model.weights))
        self.record: dict[str, Any] = read_json(os.path.join(directory, BEST_RECORD)) or {}

    @property
    def score(self) -> float:
        return self.record.get("score", -np.inf)

    def offer(self, epoch: int, score: float, metrics: dict[str, Any]) -> bool:
        """Keeps the current weights if `score` beats the best so far; returns whether it did."""
        if score <= self.score:
            return False
        tf.io.gfile.makedirs(self.directory)
        self._checkpoint.write(os.path.join(self.directory, "weights"))
        self.record = {"epoch": epoch, "score": score, **metrics}
        write_json(os.path.join(self.directory, BEST_RECORD), self.record)
        return True

    def restore(self) -> None:
        self._checkpoint.read(os.path.join(self.directory, "weights")).assert_consumed()


@dataclasses.dataclass
class EvalSet:
    dataset: tf.data.Dataset
    labels: np.ndarray


class EpochEvaluator(keras.callbacks.Callback):
    """Evaluates every eval set after each epoch and keeps the best one (see the module docstring).

    `save_checkpoint(epoch)` writes the training checkpoint; `writers` are TensorBoard writers (`train`, `eval`)
    or None off the chief; `print_fn` prints the progress line.
    """

    def __init__(
        self,
        data: TaskData,
        evals: dict[str, EvalSet],
        best: BestWeights,
        save_checkpoint: Callable[[int], None],
        epochs: int,
        examples_per_epoch: int,
        writers: dict[str, tf.summary.SummaryWriter] | None,
        print_fn=print,
    ):
        super().__init__()
        self.data = data
        self.evals = evals
        self.best = best
        self.save_checkpoint = save_checkpoint
        self.epochs = epochs
        self.examples_per_epoch = examples_per_epoch
        self.writers = writers
        self.print_fn = print_fn
        self.history: list[dict[str, Any]] = []
        # The eval outputs of the best epoch this process trained (None after a resume with no epoch left).
        self.best_outputs: dict[str, np.ndarray] | None = None
        self._started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        number = epoch + 1
        if not math.isfinite(logs["loss"]):
            raise NonFiniteLossError(
                f"Epoch {number}: the training loss is {logs['loss']}; nothing of this epoch was saved. Lower "
                "schedule.peak_learning_rate or raise schedule.warmup_fraction, or use train.mixed_precision="
                "mixed_bfloat16 instead of mixed_float16.",
                bad_from_step=number,
            )  # checkpoints count epochs
        outputs = {split: self.model.predict(s.dataset, verbose=0) for split, s in self.evals.items()}
        results = {split: scores(outputs[split], s.labels, self.data) for split, s in self.evals.items()}
        learning_rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        record = {
            "epoch": number,
            "loss": float(logs["loss"]),
            "learning_rate": learning_rate,
            "sequences_per_second": self.examples_per_epoch / seconds,
            **results,
        }
        self.history.append(record)
        # Best first: a run killed between the two redoes this epoch rather than forgetting it was the best.
        improved = self.best.offer(number, results["eval"][self.data.metrics[0]], results)
        if improved:
            self.best_outputs = outputs
        self.save_checkpoint(number)
        self._write_summaries(number, record)
        self.print_fn(self._line(record, improved), flush=True)

    def _line(self, record: dict[str, Any], improved: bool) -> str:
        scores = " | ".join(
            f"{split} " + " ".join(f"{k} {v:.4f}" for k, v in record[split].items()) for split in self.evals
        )
        best = "best" if improved else f"best epoch {self.best.record.get('epoch')}"
        return (
            f"epoch {record['epoch']}/{self.epochs} | loss {record['loss']:.4f} | {scores} | {best} | "
            f"{record['sequences_per_second']:.1f} seq/s"
        )

    def _write_summaries(self, number: int, record: dict[str, Any]) -> None:
        if self.writers is None:
            return
        with self.writers["train"].as_default(step=number):
            for name in ("loss", "learning_rate", "sequences_per_second"):
                tf.summary.scalar(name, record[name])
        with self.writers["eval"].as_default(step=number):
            for split in self.evals:
                for name, value in record[split].items():
                    tf.summary.scalar(f"{split}/{name}" if split != "eval" else name, value)
        for writer in self.writers.values():
            writer.flush()
