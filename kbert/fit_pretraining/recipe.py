"""`fit_pretraining`: BERT pretraining with `model.fit` under a `keras.distribution`, resumed from its newest
checkpoint with its data where it stopped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from kbert.data.id_ranges import id_error
from kbert.errors import ConfigError
from kbert.fit_pretraining.callback import FitCheckpoint, StateOnTheMesh
from kbert.fit_pretraining.checkpoints import newest_checkpoint, restore_checkpoint
from kbert.fit_pretraining.inputs import fit_dataset


def _micro_batch_size(global_batch_size: int, accumulation_steps: int) -> int:
    if global_batch_size < 1 or global_batch_size % accumulation_steps:
        raise ConfigError(
            f"global_batch_size={global_batch_size} must be a positive multiple of the optimizer's "
            f"gradient_accumulation_steps ({accumulation_steps})."
        )
    return global_batch_size // accumulation_steps


def _resumed_batches(model: keras.Model, checkpoint_dir: str, batch_size: int) -> int:
    """Batches the newest checkpoint had trained, loaded into `model`; 0 without one."""
    path = newest_checkpoint(checkpoint_dir)
    if path is None:
        return 0
    progress = restore_checkpoint(model, path)
    if progress.batch_size != batch_size:
        raise ConfigError(
            f"{path}: trained on batches of {progress.batch_size} examples, not {batch_size}: resume "
            "with its global_batch_size and gradient_accumulation_steps, or another checkpoint_dir."
        )
    return progress.batches


def _id_bounds(model: keras.Model, dataset_options: dict[str, Any]) -> dict[str, Any]:
    """The model config's table sizes, as the bounds every record's ids are checked against, where the caller gave
    none. `vocab_size` also sets dynamic masking's random replacements, so it is only taken for static masks."""
    config = getattr(model, "config", None)
    names = ["type_vocab_size", "max_position_embeddings"]
    if not dataset_options.get("dynamic_masking"):
        names.append("vocab_size")
    return {name: getattr(config, name) for name in names if hasattr(config, name)} | dataset_options


def fit_pretraining(
    build_model: Callable[[], keras.Model],
    file_pattern: str | Sequence[str],
    seq_length: int,
    max_predictions: int,
    global_batch_size: int,
    total_steps: int,
    checkpoint_dir: str,
    *,
    distribution: keras.distribution.Distribution | None = None,
    checkpoint_every: int = 1000,
    keep_checkpoints: int = 3,
    seed: int = 0,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    verbose: str | int = "auto",
    **dataset_options: Any,
) -> tuple[keras.Model, keras.callbacks.History]:
    """Pretrains the model `build_model` returns for `total_steps` optimizer steps, resuming from the newest
    checkpoint in `checkpoint_dir`. Every record's ids are checked against the model's tables as it is read (its
    `config`'s `vocab_size`, `type_vocab_size`, `max_position_embeddings`, where `dataset_options` set none): the
    first bad one stops the run with an `InputDataError` naming its file and index.

    Under `distribution` (default: `keras.distribution.DataParallel` over every device) the random seed is set,
    `build_model()` makes and compiles the model (its variables are laid out on the devices as they are made),
    the newest checkpoint is loaded into it, and `model.fit` trains on `kbert.fit_pretraining.fit_dataset` from the
    batch that checkpoint stopped at, writing a checkpoint every `checkpoint_every` steps and at the end
    (`FitCheckpoint`).
    A rerun of the same call thus continues the run; once it is complete, it returns at once.

    Under gradient accumulation (the optimizer's `gradient_accumulation_steps=k`) a step is k batches of
    `global_batch_size / k` examples, whose gradients' mean makes one optimizer step.

    Args:
      build_model: makes a compiled model, e.g. a `BertPretrainer` (`dtype="mixed_bfloat16"` for bfloat16
        compute) compiled with `kbert.optimizers.LAMB`.
      file_pattern, seq_length, max_predictions: the TFRecords, as `kbert.data.pretraining_dataset` takes them.
      global_batch_size: examples per optimizer step, over all devices.
      total_steps: optimizer steps of the whole run, resumed or not.
      checkpoint_dir: a local directory of this run's checkpoints (`kbert.fit_pretraining.checkpoints`).
      distribution: where it runs; its devices share each batch.
      checkpoint_every: optimizer steps between checkpoints.
      keep_checkpoints: how many of the newest checkpoints are kept.
      seed: the model's initialisation, dropout and the data order; a resumed run must be given the same.
      callbacks: more `model.fit` callbacks.
      verbose: `model.fit`'s progress output.
      **dataset_options: other `pretraining_dataset` keywords (`dynamic_masking`, `vocab_size`, ...).

    Returns:
      The trained model and the `History` of this call's `fit` (empty when there was nothing left to train).

    Example:

    ```python
    def build_model():
        model = BertPretrainer(BertConfig.load("bert_tiny"), dtype="mixed_bfloat16")
        model.compile(optimizer=LAMB(PolynomialWarmup(1e-3, 100, 1000), gradient_accumulation_steps=2))
        return model

    model, history = fit_pretraining(build_model, "data/train.tfrecord-*", 128, 20, global_batch_size=256,
                                     total_steps=1000, checkpoint_dir="runs/tiny")
    ```
    """
    distribution = distribution or keras.distribution.DataParallel()
    with distribution.scope():
        keras.utils.set_random_seed(seed)
        model = build_model()
        accumulation = model.optimizer.gradient_accumulation_steps or 1
        batch_size = _micro_batch_size(global_batch_size, accumulation)
        done = _resumed_batches(model, checkpoint_dir, batch_size)
        left = total_steps * accumulation - done
        if left <= 0:
            return model, keras.callbacks.History()
        options = _id_bounds(model, dataset_options)
        dataset = fit_dataset(
            file_pattern, seq_length, max_predictions, batch_size, seed=seed, skip_batches=done, **options
        )
        checkpoint = FitCheckpoint(
            checkpoint_dir, checkpoint_every * accumulation, batch_size, keep_checkpoints, initial_batches=done
        )
        try:
            history = model.fit(
                dataset,
                epochs=1,
                steps_per_epoch=left,
                callbacks=[StateOnTheMesh(), checkpoint, *callbacks],
                shuffle=False,  # the records are shuffled by `seed` already
                verbose=verbose,
            )
        except tf.errors.InvalidArgumentError as error:
            refused = id_error(error)  # a record with an out-of-range id: one line naming its file and index
            if refused is None:
                raise
            raise refused from None
    return model, history
