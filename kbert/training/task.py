"""The seam between the engine and what it trains: a task builds the model, says how a stage's model starts, and
supplies the input, the loss and the metrics. The engine, the loop and the trainer call nothing else of a model.

A task is one model and its objective, for one stage: BERT's masked LM and next-sentence prediction
(`kbert.tasks.bert.BertPretrainingTask`) for a plain run or a phase; the same at an MSLT stage's depth, grown from
the stage before (`kbert.mslt.stages`). A stage's model starts in one of three ways, and the task says how for each:

- fresh: `build_model()` alone;
- carried over: `carry_over(model, previous)`, from the model of the stage before, trained in this process;
- from a checkpoint: `load(model, path, ...)`, the stage before's last checkpoint or `train.init_checkpoint`.

A stage that grows its model (MSLT) does it in `carry_over` and `load`: the growth belongs to the task.

The loss is a sum of terms over a replica's micro-batch (`terms`), normalised by counts that the inputs give
before the forward pass (`loss_counts`), all-reduced over the replicas, so one device and N replicas with the same
global batch compute the same gradient: `loss(terms, loss_scales(global counts))`. Metrics come from the terms
summed over batches and replicas (`metrics`); one term, "sequence_count", counts the sequences (the sample count
and the throughput).

Example (a task of one's own, as `tests/toy_task.py` defines and trains through the engine):

```python
stage = TrainingStage(number=1, label="training", config=config, start_step=0, end_step=100, task=MyTask(),
                      num_layers=2)
PretrainingRun(with_layouts([stage]), "/tmp/run", strategy, preemption).train()
```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import keras
import tensorflow as tf

from kbert.data import RecordLayout
from kbert.training.config import PretrainingConfig


class PretrainingTask(Protocol):
    """What the engine needs of a model and its objective."""

    # The per-micro-batch sums that `terms` returns, in a fixed order; "sequence_count" among them.
    loss_terms: tuple[str, ...]
    # The metrics an evaluation's line shows after the loss, by their short labels (metric -> label). An evaluation
    # schedule (`eval.interval_samples`) needs "masked_lm_accuracy" among the metrics: its target is one.
    eval_labels: Mapping[str, str]

    def build_model(self) -> keras.Model:
        """The stage's model with its built weights (the engine calls it in the strategy's scope)."""

    def carry_over(self, model: keras.Model, previous: keras.Model) -> None:
        """Sets `model` from `previous`, the model of the stage before, trained in this process."""

    def load(self, model: keras.Model, path: str, print_fn: Callable[..., None], scope: Callable[[], object]) -> str:
        """Sets `model` from checkpoint `path` (whole, or grown from the model that saved it, built in
        `scope()`); returns the kind of checkpoint, for the line that says so."""

    def dataset_fn(
        self, config: PretrainingConfig, is_training: bool, seed_offset: int = 0
    ) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
        """`input_context -> tf.data.Dataset` of training micro-batches of `config`, shuffled with `train.seed +
        seed_offset`, or of its held-out batches."""

    def trained_variables(self, model: keras.Model, layout: RecordLayout) -> list[keras.Variable]:
        """The variables that train on records of `layout`."""

    def loss_counts(self, batch: Mapping) -> tf.Tensor:
        """A vector of the counts that normalise the loss, from a replica's micro-batch before the forward pass."""

    def loss_scales(self, counts: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        """What each loss term is multiplied by, from the counts summed over the replicas."""

    def terms(self, batch: Mapping, outputs: Mapping) -> dict[str, tf.Tensor]:
        """The sums of `loss_terms` over a micro-batch and the model's outputs on it."""

    def loss(self, terms: Mapping[str, tf.Tensor], scales: Sequence[tf.Tensor]) -> tf.Tensor:
        """The replica's share of the global-batch loss."""

    def metrics(self, totals: Mapping[str, float]) -> dict[str, float]:
        """Metrics (the `loss` among them) from `terms` summed over batches and replicas."""

    def progress_labels(self, layout: RecordLayout) -> Mapping[str, str]:
        """The metrics a training progress line shows after the loss, on records of `layout`."""

    def flops_per_sequence(self, model: keras.Model, config: PretrainingConfig) -> float:
        """Matmul FLOPs of a training step's forward and backward pass, per sequence (for MFU)."""

    def objective(self, layout: RecordLayout) -> str:
        """What trains on records of `layout`, for the summary ("masked LM + sentence head")."""

    def export(self, model: keras.Model, directory: str) -> str | None:
        """Writes the model of a finished stage under `directory`; returns the path written, or None where no
        export format holds the model (the run's checkpoints do)."""
