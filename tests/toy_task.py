"""A second pretraining task, defined here only, that proves the engine's seam (`kbert.training.task`): a
bag-of-words masked LM (each masked token predicted from the mean embedding of the sequence's visible tokens) on
kbert's pretraining records, trained, resumed and evaluated by `kbert.training.engine` unchanged.

`python tests/toy_task.py CONFIG MODEL_DIR` runs it as a process of its own (the kill -9 test).
"""

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from kbert.data import RecordLayout, pretraining_dataset
from kbert.experiment import load_experiment
from kbert.runtime.checkpointing import load_init_checkpoint
from kbert.runtime.preemption import PreemptionWatcher
from kbert.runtime.strategy import make_strategy
from kbert.training.config import PretrainingConfig
from kbert.training.engine import PretrainingRun
from kbert.training.loop import evaluate
from kbert.training.stage import TrainingStage, with_layouts


class BagOfWords(keras.Model):
    def __init__(self, vocab_size: int, width: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(vocab_size, width, name="embedding")
        self.output_layer = keras.layers.Dense(vocab_size, name="logits")

    def call(self, batch, training=False):
        mask = ops.cast(batch["input_mask"], "float32")[..., None]
        pooled = ops.sum(self.embedding(batch["input_ids"]) * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)
        return {"logits": self.output_layer(pooled)}  # [B, V]: one guess for every masked position of a row


class BagOfWordsTask:
    """A `PretrainingTask`: masked tokens guessed from the sequence's bag of words."""

    loss_terms = ("loss_sum", "weight_sum", "correct_sum", "sequence_count")
    eval_labels = {"bag_accuracy": "bag_acc"}

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def build_model(self) -> keras.Model:
        model = BagOfWords(self.vocab_size)
        model({"input_ids": np.zeros((1, 2), np.int32), "input_mask": np.ones((1, 2), np.int32)})  # builds it
        return model

    def carry_over(self, model: keras.Model, previous: keras.Model) -> None:
        model.set_weights(previous.get_weights())

    def load(self, model: keras.Model, path: str, print_fn: Callable, scope: Callable) -> str:
        return load_init_checkpoint(model, path, print_fn)

    def dataset_fn(self, config: PretrainingConfig, is_training: bool, seed_offset: int = 0):
        d = config.data
        batch = config.train.global_batch_size if is_training else config.eval.global_batch_size

        def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
            files = d.train_files if is_training else d.eval_files
            return pretraining_dataset(
                files,
                d.seq_length,
                d.max_predictions,
                batch,
                context,
                is_training=is_training,
                seed=config.train.seed + seed_offset,
            )

        return make

    def trained_variables(self, model: keras.Model, layout: RecordLayout) -> list:
        return list(model.trainable_variables)

    def loss_counts(self, batch: Mapping) -> tf.Tensor:
        return tf.reshape(tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)), [1])

    def loss_scales(self, counts: Sequence[tf.Tensor]) -> list:
        return [tf.math.divide_no_nan(1.0, counts[0])]

    def terms(self, batch: Mapping, outputs: Mapping) -> dict:
        logits = ops.cast(outputs["logits"], "float32")
        ids, weights = batch["masked_lm_ids"], ops.cast(batch["masked_lm_weights"], "float32")
        log_probs = ops.log_softmax(logits, axis=-1)  # [B, V]
        picked = ops.take_along_axis(log_probs, ops.cast(ids, "int32"), axis=-1)  # [B, P]
        hits = ops.cast(ops.equal(ops.argmax(logits, axis=-1)[:, None], ops.cast(ids, "int64")), "float32")
        return {
            "loss_sum": -ops.sum(picked * weights),
            "weight_sum": ops.sum(weights),
            "correct_sum": ops.sum(hits * weights),
            "sequence_count": ops.cast(ops.shape(ids)[0], "float32"),
        }

    def loss(self, terms: Mapping, scales: Sequence) -> tf.Tensor:
        return terms["loss_sum"] * scales[0]

    def metrics(self, totals: Mapping) -> dict:
        weight = max(float(totals["weight_sum"]), 1e-9)
        return {"loss": totals["loss_sum"] / weight, "bag_accuracy": totals["correct_sum"] / weight}

    def progress_labels(self, layout: RecordLayout) -> dict:
        return self.eval_labels

    def flops_per_sequence(self, model: keras.Model, config: PretrainingConfig) -> float:
        return 6.0 * model.count_params()

    def objective(self, layout: RecordLayout) -> str:
        return "bag-of-words masked LM"

    def export(self, model: keras.Model, directory: str) -> str:
        path = os.path.join(directory, "bag_of_words.npz")
        os.makedirs(directory, exist_ok=True)
        np.savez(path, *model.get_weights())
        return path


def run(config_file: str, model_dir: str, print_fn=print) -> dict:
    """Trains the toy task on `config_file`'s records for its `train.total_steps` in `model_dir` (resuming), then
    evaluates its newest checkpoint on `data.eval_files`."""
    config = load_experiment([config_file])
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.train.seed)
    task = BagOfWordsTask(config.model.bert_config().vocab_size)
    stage = TrainingStage(
        number=1,
        label="training",
        config=config,
        start_step=0,
        end_step=config.train.total_steps,
        task=task,
        num_layers=1,
        seed=config.train.seed,
    )
    strategy = make_strategy("one_device")
    with PreemptionWatcher(strategy) as preemption:
        engine = PretrainingRun(with_layouts([stage], evaluates=True), model_dir, strategy, preemption, print_fn)
        summary = engine.train()
        model, evaluated, _ = engine.evaluated_model()
        summary["eval"] = evaluate(evaluated.config, strategy, evaluated.task, model)
    return summary


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2], print_fn=lambda *a, **k: None), default=float))
