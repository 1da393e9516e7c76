"""A finished `kbert-finetune` run as a model again: the classifier with its best weights, its tokenization and
its labels, rebuilt from what the run's `model_dir` holds.

Invariant: `load_run` returns only a finished run (`summary.json`) whose vocabulary (or tokenizer.json) is found
and fits the model's word table; anything else is one line naming the folder or file and the fix. The model
computes in the run's precision policy, so it gives what the run's own predictions gave.

Example:

```python
run = load_run("runs/sst2")
run.model.predict_on_batch(run.encoder.encode(tf.constant(["a fine film"])))  # logits
run.label_names  # ('0', '1'); None for regression
```
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from kbert.config import load_saved_config
from kbert.errors import ConfigError, MissingFileError, VocabularyError
from kbert.finetuning import pretrained, run_dir
from kbert.finetuning.config import FinetuneConfig
from kbert.finetuning.encoding import TextEncoder
from kbert.finetuning.epochs import BestWeights
from kbert.finetuning.model import BertClassifier
from kbert.finetuning.tasks import TextColumns, text_columns
from kbert.finetuning.tokenizer_encoding import text_encoder
from kbert.modeling import BertConfig, BertEncoder


@dataclasses.dataclass
class FinetunedRun:
    model_dir: str
    config: FinetuneConfig
    model: BertClassifier
    encoder: TextEncoder
    label_names: tuple[str, ...] | None  # None: regression
    columns: TextColumns


def _bert_config(summary: dict, config: FinetuneConfig, vocab_size: int) -> BertConfig:
    if "bert_config" in summary:
        return BertConfig.from_dict(summary["bert_config"])
    # A run written before summaries held the BERT config: resolve it as the run did.
    init = config.train.init_checkpoint
    prefix = pretrained.resolve_checkpoint(init) if init else None
    return pretrained.bert_config_for(config.model, prefix).replace(vocab_size=vocab_size)


def _text_encoder(
    config: FinetuneConfig, vocab_file: str, tokenizer: str, flag: str, model_dir: str, bert: BertConfig
) -> TextEncoder:
    """The run's tokenization (its vocabulary, `vocab_file` in its place, or its tokenizer.json, `tokenizer` in
    its place), checked against the model's word table."""
    data = config.data
    if data.tokenizer:
        data = data.replace(tokenizer=tokenizer or data.tokenizer)
        source, key, kind = data.tokenizer, "--tokenizer", "tokenizer"
    else:
        data = data.replace(vocab_file=vocab_file or data.vocab_file)
        source, key, kind = data.vocab_file, "--vocab_file", "vocabulary"
    if not tf.io.gfile.exists(source):
        raise MissingFileError(
            f"{flag}={model_dir}: its {kind} {source} is not there (moved or deleted); pass {key} with the {kind} "
            "the run was fine-tuned with."
        )
    encoder = text_encoder(data)
    encoder.segment_ids = bert.type_vocab_size > 0
    fits = encoder.vocab_size <= bert.vocab_size if data.tokenizer else encoder.vocab_size == bert.vocab_size
    if not fits:
        raise VocabularyError(
            f"{key}={source} has {encoder.vocab_size} tokens but the model of {flag}={model_dir} has "
            f"{bert.vocab_size}; pass the {kind} the run was fine-tuned with."
        )
    return encoder


def load_run(model_dir: str, vocab_file: str = "", flag: str = "--checkpoint", tokenizer: str = "") -> FinetunedRun:
    """The run in `model_dir` with its best weights; `vocab_file` replaces the run's `data.vocab_file` (moved),
    `tokenizer` its `data.tokenizer`.

    Raises:
      ConfigError: `model_dir` is not a kbert-finetune run (a pretraining run, a checkpoint) or has not finished.
      MissingFileError, VocabularyError: the vocabulary or tokenizer is not there, or not the model's.
    """
    config_file = os.path.join(model_dir, run_dir.CONFIG_FILE)
    if not tf.io.gfile.exists(config_file):
        raise ConfigError(
            f"{flag}={model_dir} is not a kbert-finetune model_dir (no {run_dir.CONFIG_FILE}), and a "
            "classifier comes from one: fine-tune this checkpoint (kbert-finetune with "
            "train.init_checkpoint) and give that model_dir; kbert-export --format=tf_hub exports a "
            "pretrained encoder alone."
        )
    summary = run_dir.read_json(os.path.join(model_dir, run_dir.SUMMARY_FILE))
    if summary is None:
        raise ConfigError(
            f"{flag}={model_dir} holds a fine-tuning run that has not finished (no "
            f"{run_dir.SUMMARY_FILE}); rerun its kbert-finetune command, which resumes it."
        )
    config = load_saved_config(FinetuneConfig, config_file)  # also a run's of the flat optimizer layout
    best = os.path.join(model_dir, run_dir.BEST_DIR)
    vocab_size = pretrained.checkpoint_size(os.path.join(best, "weights")).vocab_size
    bert = _bert_config(summary, config, vocab_size)
    encoder = _text_encoder(config, vocab_file, tokenizer, flag, model_dir, bert)
    labels = tuple(summary["labels"]) or None
    model = BertClassifier(
        BertEncoder(bert, dtype=config.train.mixed_precision),
        1 if labels is None else len(labels),
        dropout=config.model.classifier_dropout,
        pooling=config.model.classifier_pooling or None,
    )
    BestWeights(model, best).restore()
    return FinetunedRun(model_dir, config, model, encoder, labels, text_columns(config.task))
