"""The tf.data input pipeline for BERT pretraining: TFRecords in, the model's batch dict out.

Example:

```python
strategy = tf.distribute.MirroredStrategy()
dataset = strategy.distribute_datasets_from_function(
    lambda ctx: pretraining_dataset("data/train.tfrecord-*", 128, 20, global_batch_size=256, input_context=ctx,
                                    vocab_size=30522))
batch = next(iter(dataset))  # per replica: input_ids [128, 128] int32, ..., next_sentence_labels [128, 1]
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tensorflow as tf

from kbert.data import id_ranges, input_files, schema, validation
from kbert.data.dynamic_masking import DynamicMasker
from kbert.data.hf_tokenizer import HfTokenizer
from kbert.data.masking import BERT_MASKED_LM_PROB
from kbert.data.wordpiece.vocab_file import MASKING_TOKENS, read_vocabulary
from kbert.errors import ConfigError

# Batches each accelerator replica holds in its own memory: the next one is copied in while the current one trains.
DEVICE_PREFETCH_BATCHES = 2


def _masker(
    max_predictions: int,
    vocab_size: int | None,
    vocab_file: str | None,
    tokenizer: str | None,
    whole_word: bool,
    selection_rate: float,
) -> DynamicMasker:
    """The dynamic masker: from the vocabulary file or the tokenizer.json (special ids, word boundaries) if given,
    else from `vocab_size`."""
    if vocab_file:
        return DynamicMasker.from_vocab_file(
            vocab_file, max_predictions, whole_word=whole_word, selection_rate=selection_rate
        )
    if tokenizer:
        return DynamicMasker.from_tokenizer(
            tokenizer, max_predictions, whole_word=whole_word, selection_rate=selection_rate
        )
    if whole_word:
        raise ConfigError(
            "whole_word_masking needs vocab_file or tokenizer, to know which pieces continue a word (## or Ġ)."
        )
    if vocab_size is None:
        raise ConfigError("dynamic_masking needs vocab_size, vocab_file or tokenizer (random replacement ids).")
    return DynamicMasker(vocab_size, max_predictions, selection_rate=selection_rate)


def _vocabulary_size(vocab_file: str | None, tokenizer: str | None) -> int | None:
    """The size of the records' vocabulary file or tokenizer.json, where one is named."""
    if vocab_file:
        return len(read_vocabulary(vocab_file, required=MASKING_TOKENS, flag="vocab_file"))
    return HfTokenizer(tokenizer, flag="tokenizer").vocab_size if tokenizer else None


def _records(
    files: list[str],
    layout: validation.RecordLayout,
    bounds: dict[str, int],
    is_training: bool,
    seed: int | None,
    cycle_length: int,
    shuffle_buffer: int,
) -> tf.data.Dataset:
    """Serialized records of `files`, each file's checked against the id `bounds` as it is read (before files are
    interleaved, so a bad record's error names its file): shuffled and repeated forever when training, one pass in
    order otherwise."""

    # tf.data converts a function with autograph unless told not to. None that this module hands it (read, parse,
    # the masker's map) has Python control flow on tensors: converting them, with everything they call, would be most
    # of tracing a pipeline (0.75 of 0.9 CPU-s) for the same graph.
    @tf.autograph.experimental.do_not_convert
    def read(path: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path, compression_type=layout.compression)
        if not bounds:
            return records
        return id_ranges.checked_records(path, records, layout.spec(), layout.use_v2_feature_names, bounds)

    dataset = tf.data.Dataset.from_tensor_slices(files)
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.interleave(
        read,
        cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not is_training or seed is not None,
    )
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return dataset


def distribute_options(strategy: tf.distribute.Strategy) -> tf.distribute.InputOptions:
    """How `strategy.distribute_datasets_from_function` hands batches to the replicas.

    On GPUs and TPUs each replica keeps `DEVICE_PREFETCH_BATCHES` batches prefetched into its memory, so the
    host-to-device copy overlaps the step; on CPUs, whose memory is the host's, there is nothing to copy and the
    batches stay where tf.data made them.
    """
    devices = strategy.extended.worker_devices
    accelerated = all(tf.DeviceSpec.from_string(d).device_type in ("GPU", "TPU") for d in devices)
    return tf.distribute.InputOptions(
        experimental_fetch_to_device=accelerated,
        experimental_per_replica_buffer_size=DEVICE_PREFETCH_BATCHES if accelerated else 1,
    )


def _pipeline_files(file_pattern: str | Sequence[str], input_context: tf.distribute.InputContext | None) -> list[str]:
    """This input pipeline's share of the files: every file is read by exactly one pipeline."""
    files = input_files.match_files(file_pattern)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    if len(files) < num_pipelines:
        raise validation.InputDataError(
            f"{len(files)} file(s) match {file_pattern!r}, fewer than the {num_pipelines} input pipelines that "
            "each need their own files: write more shards (kbert-create-pretraining-data --num_output_shards)."
        )
    return files[input_context.input_pipeline_id :: num_pipelines] if input_context else files


def _checked_layout(
    files: list[str],
    seq_length: int,
    max_predictions: int,
    vocab_size: int | None,
    dynamic_masking: bool,
    validate_records: int | None,
    use_v2_feature_names: bool | None,
    compression: str | None,
) -> validation.RecordLayout:
    """The files' layout (packed or not, feature names, compression), their first records checked
    (`validate_records` 0: not read, taken as unpacked); an asked-for naming that the files do not have is an
    error, an asked-for compression wins."""
    if validate_records == 0:
        return validation.RecordLayout(
            bool(use_v2_feature_names), not dynamic_masking, seq_length, max_predictions, compression or ""
        )
    layout = validation.validate_files(
        files, seq_length, max_predictions, vocab_size, dynamic_masking, validate_records
    )
    if use_v2_feature_names is not None and use_v2_feature_names != layout.use_v2_feature_names:
        raise validation.InputDataError(
            f"{files[0]}: use_v2_feature_names={use_v2_feature_names} was asked for, but the file has "
            f"{'v2' if layout.use_v2_feature_names else 'v1'} names; leave it unset to detect it."
        )
    return dataclasses.replace(layout, compression=layout.compression if compression is None else compression)


def pretraining_dataset(
    file_pattern: str | Sequence[str],
    seq_length: int,
    max_predictions: int,
    global_batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    *,
    is_training: bool = True,
    dynamic_masking: bool = False,
    vocab_size: int | None = None,
    type_vocab_size: int | None = None,
    max_position_embeddings: int | None = None,
    vocab_file: str | None = None,
    tokenizer: str | None = None,
    whole_word_masking: bool = False,
    masked_lm_prob: float = BERT_MASKED_LM_PROB,
    use_v2_feature_names: bool | None = None,
    compression: str | None = None,
    shuffle_buffer: int = 10_000,
    cycle_length: int = 8,
    seed: int | None = None,
    validate_records: int | None = 16,
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """Batches of pretraining examples, keyed by Google's v1 names (see docs/architecture.md).

    Files are sharded by file across input pipelines (`input_context`), so every file is read by exactly one
    pipeline; each pipeline batches `input_context.get_per_replica_batch_size(global_batch_size)` examples.
    Training batches drop the remainder, so their shapes are static; an evaluation keeps the last, partial batch,
    so every record is evaluated.

    Args:
      file_pattern: a glob, comma-separated globs, or a list of globs.
      seq_length, max_predictions: what the records must have been written with (checked, never truncated).
      global_batch_size: batch size summed over replicas.
      input_context: from `strategy.distribute_datasets_from_function`; None for one pipeline and one replica.
      is_training: shuffle files and records and repeat forever; else one pass in file order.
      dynamic_masking: read unmasked records (`--no_masking`) and mask them anew on every pass.
      vocab_size: every record's `input_ids` and `masked_lm_ids` must be below it, checked as the record is read
        (`kbert.data.id_ranges`: the first bad record stops the pipeline with its file and index); required for
        dynamic masking unless `vocab_file` or `tokenizer` is given.
      type_vocab_size, max_position_embeddings: the same check for `segment_ids` and packed rows' `positions`.
      vocab_file: the WordPiece vocabulary, for dynamic masking's special-token ids and whole-word grouping.
      tokenizer: in place of `vocab_file`, a Hugging Face tokenizer.json (or its directory): the same, its word
        boundaries by `kbert.data.word_boundaries`.
      whole_word_masking: with dynamic masking, mask all pieces of a word together (needs `vocab_file` or
        `tokenizer`).
      masked_lm_prob: share of tokens (words with whole-word masking) dynamic masking selects.
      use_v2_feature_names: None detects from the files; True/False asserts it.
      compression: None detects ('GZIP' or plain) from the files; '' or 'GZIP' forces it.
      shuffle_buffer: records in the shuffle buffer when training.
      cycle_length: files read at once.
      seed: seeds file and record shuffling, and dynamic masks (None: masks from seed 0).
      validate_records: records per file checked up front (None: all; 0: skip the checks).
      skip_batches: batches left out at the start, never parsed: with the same files, batch size and `seed`, the
        records that follow, and their dynamic masks, are those a run that had taken `skip_batches` batches would
        take next, so a resumed run continues the data where it stopped.

    Returns:
      A `tf.data.Dataset` of dicts: `input_ids`, `input_mask`, `segment_ids`, `masked_lm_positions`,
      `masked_lm_ids`, `next_sentence_labels` [B, 1] (int32) and `masked_lm_weights` (float32). Packed records
      (found by their features) add `positions` [B, S], `next_sentence_positions` [B, K] and
      `next_sentence_weights` [B, K], with `next_sentence_labels` [B, K] and P + K - 1 prediction slots; MLM-only
      records have no `next_sentence_labels` (`kbert.data.schema`).
    """
    files = _pipeline_files(file_pattern, input_context)
    batch_size = input_context.get_per_replica_batch_size(global_batch_size) if input_context else global_batch_size

    if vocab_file and tokenizer:
        raise ConfigError(
            "vocab_file and tokenizer both name the records' tokenizer: give one (tokenizer for a tokenizer.json)."
        )
    if dynamic_masking and vocab_size is None:
        vocab_size = _vocabulary_size(vocab_file, tokenizer)
    layout = _checked_layout(
        files,
        seq_length,
        max_predictions,
        vocab_size,
        dynamic_masking,
        validate_records,
        use_v2_feature_names,
        compression,
    )
    v2, spec = layout.use_v2_feature_names, layout.spec()
    # A packed row's sequences share its prediction slots; masking never crosses a sequence: each one starts
    # with [CLS] and ends with [SEP], which are never masked nor continue a word.
    slots = (
        schema.packed_predictions(max_predictions, layout.sequences_per_row)
        if layout.sequences_per_row
        else max_predictions
    )
    masker = (
        _masker(slots, vocab_size, vocab_file, tokenizer, whole_word_masking, masked_lm_prob)
        if dynamic_masking
        else None
    )

    @tf.autograph.experimental.do_not_convert
    def parse(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(serialized, spec)
        batch = {}
        for name in schema.ALL_FEATURES:
            key = schema.file_name(name, v2)
            if key in parsed:
                value = parsed[key]
                batch[name] = tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
        return batch

    bounds = id_ranges.id_bounds(spec, v2, vocab_size, type_vocab_size, max_position_embeddings)
    dataset = _records(files, layout, bounds, is_training, seed, cycle_length, shuffle_buffer)
    # Batch before parsing: vectorised parse_example is several times faster than per-record parsing, and skipped
    # batches are never parsed.
    dataset = dataset.batch(batch_size, drop_remainder=is_training).skip(skip_batches)
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if masker is not None:
        # Each batch's masks are drawn from (seed, input pipeline, its index in the stream): reproducible, new on
        # every pass, and saved with the iterator (the counter is part of its state).
        pipeline = input_context.input_pipeline_id if input_context else 0
        stream = tf.data.Dataset.counter(start=skip_batches)
        dataset = tf.data.Dataset.zip((dataset, stream)).map(
            tf.autograph.experimental.do_not_convert(
                lambda batch, index: masker(
                    batch,
                    tf.random.experimental.stateless_fold_in(tf.constant([seed or 0, pipeline], tf.int64), index),
                )
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    options = tf.data.Options()
    # Files are sharded here by hand; auto-sharding again would drop data.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)
