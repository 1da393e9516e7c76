"""`run_finetuning`: from a config to a fine-tuned model, its best eval scores and its predictions.

Invariant: every check that can fail on the user's input (config, files, labels, vocabulary and its lower-casing
or tokenizer.json, checkpoint, model_dir) runs before the model is built; the tokenization taken
(`kbert.finetuning.vocabulary`) and a model without a pooler's `model.classifier_pooling` are what the run's config
records, and the run prints what tokenizes and where the lower-casing came from. Training is plain `model.fit`
under the strategy on length-bucketed batches (`kbert.finetuning.batches`), an epoch being
`len(train) // global_batch_size` steps, one epoch per checkpoint, and what is kept (weights, `summary.json`,
predictions) is the best epoch on `eval`.

Example:

```python
config = load_finetune_config(["configs/finetune/glue_sst2.yaml"], "task.data_dir=glue_data")
summary = run_finetuning(config, "runs/sst2", make_strategy("auto"))
summary["eval"]["accuracy"]
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from typing import Any

import keras
import tensorflow as tf

from kbert.errors import ConfigError
from kbert.finetuning import pretrained, run_dir
from kbert.finetuning.batches import eval_batches, training_batches
from kbert.finetuning.config import FinetuneConfig
from kbert.finetuning.encoding import TextEncoder
from kbert.finetuning.epochs import BestWeights, EpochEvaluator, EvalSet
from kbert.finetuning.examples import TaskData, load_task_data
from kbert.finetuning.model import BertClassifier
from kbert.finetuning.predictions import write_submission
from kbert.finetuning.tasks import resolve_task
from kbert.finetuning.tokenizer_encoding import TokenizerEncoder, text_encoder
from kbert.finetuning.vocabulary import Casing, casing_for, tokenizer_for, vocab_file_for
from kbert.modeling import BertConfig, BertEncoder
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.runtime.checkpointing import TrainingCheckpoints
from kbert.runtime.lease import Lease
from kbert.runtime.optimizer_factory import make_optimizer, make_schedule


@dataclasses.dataclass
class Prepared:
    """Everything checked and read before a model exists; `config` with the tokenization the run takes
    (`data.vocab_file` and `data.lower_case`, or `data.tokenizer`) and, for a model without a pooler,
    `model.classifier_pooling` set (`casing` says where the lower-casing came from; None with a tokenizer.json)."""

    config: FinetuneConfig
    casing: Casing | None
    data: TaskData
    encoder: TextEncoder
    bert: BertConfig
    init_checkpoint: str | None
    steps_per_epoch: int

    @property
    def tokenization(self) -> str:
        """The line the run prints: where the lower-casing came from, or the tokenizer.json."""
        if self.casing is None:
            return f"tokenizer: {self.config.data.tokenizer} (a tokenizer.json: its own normalizer decides casing)."
        return self.casing.line


def _tokenization(config: FinetuneConfig, init: str) -> tuple[FinetuneConfig, Casing | None]:
    """`config` with the tokenization it takes set (`kbert.finetuning.vocabulary`), and the casing taken (None with
    a tokenizer.json)."""
    d = config.data
    tokenizer = tokenizer_for(init, d.tokenizer, d.vocab_file, d.lower_case)
    if tokenizer:
        return config.replace(data={"tokenizer": tokenizer}), None
    vocab_file = vocab_file_for(init, d.vocab_file)
    casing = casing_for(init, d.lower_case)
    return config.replace(data={"vocab_file": vocab_file, "lower_case": casing.lower_case}), casing


def _pooling(config: FinetuneConfig, bert: BertConfig, prefix: str | None) -> str:
    """`model.classifier_pooling` for a model without a pooler: as set, else the ModernBERT checkpoint's, else cls.

    Raises:
      ConfigError: it is set for a model with a pooler.
    """
    pooling = config.model.classifier_pooling
    if bert.sentence_head:
        if pooling:
            raise ConfigError(
                f"model.classifier_pooling={pooling}: this model classifies from its pooler's [CLS] output "
                "(sentence_head: true); unset model.classifier_pooling."
            )
        return ""
    source = imported_checkpoint(prefix) if prefix else None
    return pooling or (source.classifier_pooling if source is not None else None) or "cls"


def prepare(config: FinetuneConfig) -> Prepared:
    """Reads and checks the task's files, the tokenization (a vocabulary and its lower-casing, or a tokenizer.json),
    the init checkpoint and the classifier's pooling (see the module invariant).

    Raises:
      KbertError: ConfigError, InputDataError, MissingFileError, VocabularyError or CheckpointMismatchError.
    """
    init = config.train.init_checkpoint
    config, casing = _tokenization(config, init)
    data = load_task_data(resolve_task(config.task))
    encoder = text_encoder(config.data)
    prefix = pretrained.resolve_checkpoint(init) if init else None
    bert = pretrained.bert_config_for(config.model, prefix)
    encoder.segment_ids = bert.type_vocab_size > 0
    by_tokenizer = isinstance(encoder, TokenizerEncoder)
    if prefix:
        source = config.data.tokenizer if by_tokenizer else config.data.vocab_file
        pretrained.check_checkpoint_fits(prefix, bert, encoder.vocab_size, source, tokenizer=by_tokenizer)
    # The word table follows the vocabulary file (a checkpoint was just checked to have the same size), or the
    # checkpoint's, which a tokenizer.json's ids fit.
    if not (prefix and by_tokenizer):
        bert = bert.replace(vocab_size=encoder.vocab_size)
    config = config.replace(model={"classifier_pooling": _pooling(config, bert, prefix)})
    if config.data.seq_length > bert.max_position_embeddings:
        raise ConfigError(
            f"data.seq_length={config.data.seq_length} exceeds the model's max_position_embeddings="
            f"{bert.max_position_embeddings}."
        )
    steps_per_epoch = len(data.train) // config.train.global_batch_size
    if not steps_per_epoch:
        raise ConfigError(
            f"train.global_batch_size={config.train.global_batch_size} is larger than "
            f"{data.task.train_file}'s {len(data.train)} examples; lower it."
        )
    return Prepared(config, casing, data, encoder, bert, prefix, steps_per_epoch)


def learning_rate(config: FinetuneConfig, total_steps: int) -> keras.optimizers.schedules.LearningRateSchedule:
    """`schedule` over `total_steps` optimizer steps; warmup `warmup_steps`, or `warmup_fraction` of the steps."""
    s = config.schedule
    return make_schedule(s, total_steps, warmup_steps=s.warmup_steps or round(s.warmup_fraction * total_steps))


def _report_input(prepared: Prepared, print_fn) -> dict[str, Any]:
    """Prints and returns the examples per file, the rows skipped and how many examples were truncated."""
    files = {"train": prepared.data.train, **prepared.data.evals}
    counts = {}
    for split, examples in files.items():
        truncated = prepared.encoder.count_truncated(examples)
        counts[split] = {"examples": len(examples), "truncated": truncated, "skipped_rows": examples.skipped_rows}
        skipped = f", {examples.skipped_rows} malformed rows skipped" if examples.skipped_rows else ""
        print_fn(
            f"{split}: {len(examples)} examples from {examples.path}, {truncated} truncated to "
            f"seq_length={prepared.encoder.seq_length}{skipped}.",
            flush=True,
        )
    return counts


def _compile(config: FinetuneConfig, model: BertClassifier, total_steps: int, regression: bool) -> None:
    optimizer = make_optimizer(
        config.optimizer,
        learning_rate(config, total_steps),
        mixed_precision=config.train.mixed_precision,
        variables=model.trainable_variables,
    )
    loss = (
        keras.losses.MeanSquaredError() if regression else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.compile(
        optimizer=optimizer,
        loss=loss,
        jit_compile=config.train.jit_compile,
        steps_per_execution=config.train.steps_per_execution,
    )
    optimizer.build(model.trainable_variables)  # slots exist before a checkpoint is restored into them


def _write_predictions(
    model: keras.Model,
    prepared: Prepared,
    evals: dict[str, EvalSet],
    eval_outputs: dict[str, Any] | None,
    model_dir: str,
    batch_size: int,
) -> list[str]:
    """The best epoch's eval predictions (`<split>.tsv`; its `eval_outputs` when this process has them) and, for
    GLUE, its test-set submission files; `model` holds the best epoch's weights."""
    directory = os.path.join(model_dir, "predictions")
    data, written = prepared.data, []
    for split, eval_set in evals.items():
        outputs = eval_outputs[split] if eval_outputs else model.predict(eval_set.dataset, verbose=0)
        index = [str(i) for i in range(len(eval_set.labels))]
        written.append(write_submission(os.path.join(directory, f"{split}.tsv"), index, outputs, data.label_names))
    for name, examples in data.tests.items():
        outputs = model.predict(eval_batches(prepared.encoder, examples, batch_size, with_labels=False), verbose=0)
        written.append(
            write_submission(os.path.join(directory, f"{name}.tsv"), examples.index, outputs, data.label_names)
        )
    return written


def _build(config: FinetuneConfig, prepared: Prepared, strategy: tf.distribute.Strategy):
    """The classifier, compiled, its optimizer's slots built, and the epoch counter, in a fresh Keras session."""
    t = config.train
    # A fresh Keras session: layer and optimizer names (hence checkpoint keys) do not depend on what ran before.
    keras.backend.clear_session()
    keras.utils.set_random_seed(t.seed)
    keras.mixed_precision.set_global_policy(t.mixed_precision)
    data = prepared.data
    with strategy.scope():
        model = BertClassifier(
            BertEncoder(prepared.bert),
            data.num_outputs,
            dropout=config.model.classifier_dropout,
            pooling=config.model.classifier_pooling or None,
        )
        _compile(config, model, t.epochs * prepared.steps_per_epoch, regression=data.label_names is None)
        epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    return model, epoch


def _start_weights(
    checkpoints: TrainingCheckpoints, model: BertClassifier, epoch: tf.Variable, prepared: Prepared, print_fn
) -> str | None:
    """Resumes the run's newest epoch, else loads the init checkpoint's encoder; returns the resumed path."""
    restored = checkpoints.restore_latest()
    if restored:
        print_fn(f"Resumed from {restored} after epoch {int(epoch.numpy())}.", flush=True)
    elif prepared.init_checkpoint:
        init = prepared.init_checkpoint
        kind = pretrained.load_encoder(model.encoder, init, print_fn)
        print_fn(f"Initialised the encoder from {kind} checkpoint {init}.", flush=True)
        if model.pooling is not None:
            head = [model.head_dense, model.head_norm]
            loaded = pretrained.load_masked_lm_transform(head, model.encoder.config, init)
            start = "its masked-LM head's transform" if loaded else "fresh weights (it has no masked-LM head)"
            print_fn(f"The classifier head (dense, activation, LayerNorm) starts from {start}.", flush=True)
    return restored


def _fit(
    config: FinetuneConfig, prepared: Prepared, model_dir: str, strategy: tf.distribute.Strategy, print_fn
) -> dict[str, Any]:
    t, data = config.train, prepared.data
    chief = strategy.extended.should_checkpoint
    model, epoch = _build(config, prepared, strategy)
    checkpoints = TrainingCheckpoints(
        model, model.optimizer, epoch, None, model_dir, strategy, max_to_keep=1, interval=1
    )
    restored = _start_weights(checkpoints, model, epoch, prepared, print_fn)
    evals = {
        split: EvalSet(eval_batches(prepared.encoder, examples, t.eval_batch_size), examples.labels)
        for split, examples in data.evals.items()
    }
    # A worker that is not the chief keeps its copy of the best weights in a local temp folder, thrown away.
    best = BestWeights(model, os.path.join(model_dir, run_dir.BEST_DIR) if chief else tempfile.mkdtemp())
    writers = (
        {name: tf.summary.create_file_writer(os.path.join(model_dir, name)) for name in ("train", "eval")}
        if chief
        else None
    )

    def save_checkpoint(number: int) -> None:
        epoch.assign(number)
        checkpoints.save(number, final=True)

    evaluator = EpochEvaluator(
        data, evals, best, save_checkpoint, t.epochs, prepared.steps_per_epoch * t.global_batch_size, writers, print_fn
    )
    started = time.time()
    train_dataset = training_batches(prepared.encoder, data.train, t.global_batch_size, seed=t.seed)
    try:
        # The batches are endless (each pass reshuffled, seeded), so fit is told where an epoch ends.
        model.fit(
            train_dataset,
            epochs=t.epochs,
            steps_per_epoch=prepared.steps_per_epoch,
            initial_epoch=int(epoch.numpy()),
            callbacks=[evaluator],
            shuffle=False,
            verbose=0,
        )
    finally:
        checkpoints.close()
    best.restore()
    summary = {split: best.record[split] for split in evals}
    # The labels and the BERT config make the run's model rebuildable without its init checkpoint (kbert-export).
    summary.update(
        {
            "best_epoch": best.record["epoch"],
            "epochs": evaluator.history,
            "task": data.task.name,
            "labels": list(data.label_names or []),
            "bert_config": prepared.bert.to_dict(),
            "init_checkpoint": t.init_checkpoint,
            "resumed_from": restored,
            "strategy": type(strategy).__name__,
            "replicas": strategy.num_replicas_in_sync,
            "wall_seconds": time.time() - started,
        }
    )
    if chief:
        summary["predictions"] = _write_predictions(
            model, prepared, evals, evaluator.best_outputs, model_dir, t.eval_batch_size
        )
    return summary


def run_finetuning(
    config: FinetuneConfig, model_dir: str, strategy: tf.distribute.Strategy, print_fn=print
) -> dict[str, Any]:
    """Fine-tunes (resuming a partial run in `model_dir`), keeps the best epoch, writes predictions and
    `model_dir/summary.json` (chief); returns the summary.

    Raises:
      KbertError: bad input (see `prepare`), a finished run or one of another config in `model_dir`, or a live
        run holding it (ModelDirInUseError).
    """
    if config.train.steps_per_execution > 1 and isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        raise ConfigError(
            f"train.steps_per_execution={config.train.steps_per_execution} breaks Keras 3's model.fit "
            "under mirrored strategies (keras#19246); set it to 1."
        )
    prepared = prepare(config)
    config = prepared.config
    chief = strategy.extended.should_checkpoint
    print_fn = print_fn if chief else (lambda *a, **k: None)
    run_dir.check_resumable(model_dir, config.as_dict(), write=chief)
    with Lease.take(model_dir, print_fn) if chief else contextlib.nullcontext():
        print_fn(prepared.tokenization, flush=True)
        counts = _report_input(prepared, print_fn)
        summary = _fit(config, prepared, model_dir, strategy, print_fn)
        summary.update({"input": counts, "config": config.as_dict()})
        if chief:
            run_dir.write_json(os.path.join(model_dir, run_dir.SUMMARY_FILE), summary)
    return summary
