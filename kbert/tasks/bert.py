"""BERT pretraining as the engine's task: `BertPretrainer`, masked LM and next-sentence prediction on kbert's
TFRecords (unpacked, packed or MLM-only), exported in Google's checkpoint format at a stage's end.

Example:

```python
task = BertPretrainingTask(config.model.bert_config())
stages = phase_stages(config, kbert.experiment.task_of)   # kbert.training.phases: one stage, or one per phase
```
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import keras
import tensorflow as tf

from kbert.data import RecordLayout, first_layout, pretraining_dataset
from kbert.errors import ConfigError
from kbert.modeling import BertConfig, BertPretrainer, export_google_checkpoint
from kbert.modeling.losses import LOSS_TERMS, MLM_EPSILON, pretraining_loss_terms, pretraining_metrics, sentence_count
from kbert.runtime.checkpointing import load_init_checkpoint
from kbert.runtime.flops import training_flops_per_sequence
from kbert.training.config import PretrainingConfig

EXPORT = os.path.join("export", "bert_model.ckpt")


def copy_by_path(model: keras.Model, previous: keras.Model) -> None:
    """Every weight of `model` from `previous` (the same architecture; trainable flags may differ)."""
    source = {w.path: w for w in previous.weights}
    for weight in model.weights:
        weight.assign(source[weight.path])


def dataset_fn(
    config: PretrainingConfig,
    is_training: bool,
    vocab_size: int | None,
    seed_offset: int = 0,
    *,
    type_vocab_size: int | None = None,
    max_position_embeddings: int | None = None,
):
    """`input_context -> tf.data.Dataset` of micro-batches (train) or eval batches; shuffled with
    `train.seed + seed_offset`; every record's ids checked against the three bounds (`data.check_vocab_size`).
    Eval records are read as they were written: at their own seq_length, and, where they are masked, on their own
    masks and max_predictions even under dynamic masking. So a phase at seq 64 is scored on the seq-128 held-out
    records of the phase after it, and a run masking 30% on the same held-out masks as one masking 15%."""
    d = config.data
    files = d.train_files if is_training else d.eval_files
    if not files:
        raise ConfigError(
            f"data.{'train' if is_training else 'eval'}_files is empty: set it in the config file "
            f"or with --params_override=data.{'train' if is_training else 'eval'}_files=PATTERN."
        )
    if d.dynamic_masking and not (d.vocab_file or d.tokenizer):
        raise ConfigError(
            "data.dynamic_masking needs data.vocab_file or data.tokenizer: the [CLS]/[SEP]/[MASK] ids and the word "
            "boundaries come from the tokenizer the records were written with. Set "
            "--params_override=data.vocab_file=PATH (a WordPiece vocabulary) or data.tokenizer=PATH (a "
            "tokenizer.json or its directory)."
        )
    batch = (
        config.train.global_batch_size // config.train.gradient_accumulation_steps
        if is_training
        else config.eval.global_batch_size
    )
    seq_length, dynamic, predictions = d.seq_length, d.dynamic_masking, d.max_predictions
    if not is_training:
        layout = first_layout(files, "data.eval_files")
        seq_length = layout.seq_length
        if layout.masked:
            dynamic, predictions = False, layout.max_predictions

    def make(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pretraining_dataset(
            files,
            seq_length,
            predictions,
            batch,
            input_context,
            is_training=is_training,
            dynamic_masking=dynamic,
            vocab_size=vocab_size if d.check_vocab_size or d.dynamic_masking else None,
            type_vocab_size=type_vocab_size if d.check_vocab_size else None,
            max_position_embeddings=max_position_embeddings if d.check_vocab_size else None,
            vocab_file=d.vocab_file or None,
            tokenizer=d.tokenizer or None,
            whole_word_masking=d.whole_word_masking,
            masked_lm_prob=d.masked_lm_prob,
            seed=config.train.seed + seed_offset,
        )

    return make


class BertPretrainingTask:
    """BERT's masked LM and next-sentence objective on a `BertPretrainer` of `bert` (a `PretrainingTask`)."""

    loss_terms = LOSS_TERMS

    def __init__(self, bert: BertConfig):
        self.bert = bert

    @property
    def eval_labels(self) -> dict[str, str]:
        """The masked LM's loss and accuracy, and the next-sentence ones where the model has a sentence head."""
        labels = {"masked_lm_loss": "mlm_loss", "masked_lm_accuracy": "mlm_acc"}
        if self.bert.sentence_head:
            labels.update(next_sentence_loss="nsp_loss", next_sentence_accuracy="nsp_acc")
        return labels

    def build_model(self) -> BertPretrainer:
        return BertPretrainer(self.bert)

    def carry_over(self, model: keras.Model, previous: keras.Model) -> None:
        copy_by_path(model, previous)

    def load(self, model: keras.Model, path: str, print_fn: Callable[..., None], scope: Callable[[], object]) -> str:
        return load_init_checkpoint(model, path, print_fn)

    def dataset_fn(self, config: PretrainingConfig, is_training: bool, seed_offset: int = 0):
        return dataset_fn(
            config,
            is_training,
            self.bert.vocab_size,
            seed_offset,
            type_vocab_size=self.bert.type_vocab_size,
            max_position_embeddings=self.bert.max_position_embeddings,
        )

    def trained_variables(self, model: BertPretrainer, layout: RecordLayout) -> list[keras.Variable]:
        """The model's trainable variables, less the sentence head's on MLM-only records: it does not run on them,
        so it has no gradient (and must not decay)."""
        if layout.sentence_labels:
            return list(model.trainable_variables)
        head = {id(v) for v in model.sentence_head_variables()}
        return [v for v in model.trainable_variables if id(v) not in head]

    def loss_counts(self, batch: Mapping) -> tf.Tensor:
        """The masked positions' weight W and the sentence labels N (the rows, a packed batch's sequences)."""
        return tf.stack([tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)), sentence_count(batch)])

    def loss_scales(self, counts: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        global_weight, global_sentences = counts
        return [1.0 / (global_weight + MLM_EPSILON), tf.math.divide_no_nan(1.0, global_sentences)]

    def terms(self, batch: Mapping, outputs: Mapping) -> dict[str, tf.Tensor]:
        return pretraining_loss_terms(batch, outputs)

    def loss(self, terms: Mapping[str, tf.Tensor], scales: Sequence[tf.Tensor]) -> tf.Tensor:
        """`mlm_loss_sum / (W + 1e-5) + nsp_loss_sum / N` over the global batch, W and N all-reduced."""
        return terms["mlm_loss_sum"] * scales[0] + terms["nsp_loss_sum"] * scales[1]

    def metrics(self, totals: Mapping[str, float]) -> dict[str, float]:
        return pretraining_metrics(totals)

    def progress_labels(self, layout: RecordLayout) -> dict[str, str]:
        """mlm_acc, and nsp_acc where the records have sentence labels (on MLM-only ones no sentence head runs)."""
        shown = {"masked_lm_accuracy": "mlm_acc"}
        return {**shown, "next_sentence_accuracy": "nsp_acc"} if layout.sentence_labels else shown

    def flops_per_sequence(self, model: BertPretrainer, config: PretrainingConfig) -> float:
        return training_flops_per_sequence(
            model.config,
            config.data.seq_length,
            config.data.max_predictions,
            forward_only_layers=model.encoder.stop_gradient_below,
        )

    def objective(self, layout: RecordLayout) -> str:
        return "masked LM + sentence head" if layout.sentence_labels else "masked LM only"

    def export(self, model: BertPretrainer, directory: str) -> str | None:
        """Google's format, which holds BERT's layout only: a model beyond it (`BertConfig.layout_changes`, such as
        pre-LayerNorm blocks) is not exported, and its checkpoints are what fine-tuning starts from."""
        if model.config.layout_changes():
            return None
        return export_google_checkpoint(model, os.path.join(directory, EXPORT))
