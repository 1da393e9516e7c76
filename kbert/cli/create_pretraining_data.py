"""Creates BERT pretraining TFRecords from text, with google-research/bert's flags and algorithm, on local worker
processes or on Apache Beam.

    python tools/create_pretraining_data.py --input_file='corpus/*.txt' --output_file=out/train.tfrecord \
        --num_output_shards=8 --vocab_file=vocab.txt --do_lower_case --num_workers=4 [--objective=mlm]
    kbert-create-pretraining-data --input_format=jsonl --input_file='corpus/*.jsonl' --objective=mlm \
        --output_file=out/train.tfrecord --num_output_shards=8 --vocab_file=vocab.txt --runner=DirectRunner
    kbert-create-pretraining-data --input_file='corpus/*.txt' --output_file=out/train.tfrecord \
        --tokenizer=tokenizers/modernbert --objective=mlm --do_whole_word_mask --num_workers=4
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from absl import flags

from kbert.cli import beam_flags, entry, input_flags
from kbert.cli.status_line import status_line, wrote
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.creation_summary import Summary
from kbert.data.instances import OBJECTIVES, InstanceConfig
from kbert.data.masking import BERT_MASKED_LM_PROB
from kbert.data.outputs import shard_paths
from kbert.errors import ConfigError

FLAGS = flags.FLAGS
input_flags.define_input_flags(sentences=True)
flags.DEFINE_string(
    "output_file",
    None,
    "Output TFRecord files, comma-separated; or one name that --num_output_shards expands to NAME-00000-of-0000N.",
)
flags.DEFINE_integer("num_output_shards", 1, "Shards to write when --output_file is a single name.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary, one token per line (or give --tokenizer).")
flags.DEFINE_string(
    "tokenizer",
    None,
    "Hugging Face tokenizer.json, or a directory holding one (and its tokenizer_config.json), in place of "
    "--vocab_file; its special tokens are read from it.",
)
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased vocabularies; --vocab_file only).")
flags.DEFINE_bool(
    "do_whole_word_mask",
    False,
    "Mask all the pieces of a word together (WordPiece's ## pieces; a tokenizer.json's word ids).",
)
flags.DEFINE_enum(
    "objective",
    "nsp",
    list(OBJECTIVES),
    "nsp: google-research/bert's sentence pairs with "
    "next_sentence_labels (--sentence_order for ALBERT's). mlm: MLM-only rows (RoBERTa's "
    "FULL-SENTENCES) filled with consecutive text across documents, a [SEP] between documents, no "
    "sentence label; only the output's last row is padded.",
)
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of every instance.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Most masked positions per instance.")
flags.DEFINE_integer("random_seed", 12345, "Seed; the output is a function of it, not of --num_workers.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the data, each with different masks.")
flags.DEFINE_float("masked_lm_prob", BERT_MASKED_LM_PROB, "Share of tokens to mask.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter-than-maximum instance (--objective=nsp).")
flags.DEFINE_integer("num_workers", 1, "Worker processes.")
flags.DEFINE_float(
    "work_unit_mb",
    1.0,
    "Size of a work unit (whole documents): the pool of random-next documents "
    "and the memory per worker scale with it. Changing it changes the output.",
)
flags.DEFINE_bool(
    "sentence_order",
    False,
    "ALBERT's sentence-order prediction instead of next-sentence prediction: "
    "B is always the next segment, swapped with A half the time (label 1 = swapped).",
)
flags.DEFINE_bool("use_v2_feature_names", False, "Name features input_word_ids / input_type_ids (Model Garden v2).")
flags.DEFINE_bool("gzip", False, "GZIP-compress the output files.")
flags.DEFINE_bool("no_masking", False, "Write unmasked sequences (no masked_lm_* features) for dynamic masking.")
beam_flags.define_beam_flags()
flags.mark_flags_as_required(["output_file"])


def _progress(show: Callable[[str], None], summary: Summary, total_units: int) -> None:
    rate = summary.instances / max(summary.seconds, 1e-9)
    show(
        f"work units {summary.units:,}/{total_units:,} | documents {summary.documents:,} | "
        f"instances {summary.instances:,} | {rate:,.0f} instances/s | {summary.seconds:,.0f} s"
    )


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.objective == "mlm" and FLAGS["short_seq_prob"].present:
        raise ConfigError(
            "--short_seq_prob shortens sentence pairs; --objective=mlm fills every row: drop "
            "--short_seq_prob, or use --objective=nsp."
        )
    if FLAGS.tokenizer and FLAGS["do_lower_case"].present:
        raise ConfigError(
            "--do_lower_case applies to --vocab_file; a --tokenizer's own normalizer decides casing: drop "
            "--do_lower_case."
        )
    if not FLAGS.work_unit_mb > 0:
        raise ConfigError(f"--work_unit_mb={FLAGS.work_unit_mb} must be positive, e.g. 1 for 1 MiB work units.")
    inputs, input_format = input_flags.input_files_and_format()
    outputs = shard_paths(FLAGS.output_file, FLAGS.num_output_shards)
    config = InstanceConfig(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        dupe_factor=FLAGS.dupe_factor,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        sentence_order=FLAGS.sentence_order,
        no_masking=FLAGS.no_masking,
        objective=FLAGS.objective,
    )
    settings = dict(
        random_seed=FLAGS.random_seed,
        use_v2_feature_names=FLAGS.use_v2_feature_names,
        gzip=FLAGS.gzip,
        unit_bytes=int(FLAGS.work_unit_mb * (1 << 20)),
        input_format=input_format,
        tokenizer=FLAGS.tokenizer,
    )
    if FLAGS.runner:
        args = beam_flags.pipeline_args()
        from kbert.data.beam_pretraining_data import run_beam

        summary = run_beam(
            inputs,
            FLAGS.output_file,
            FLAGS.num_output_shards,
            FLAGS.vocab_file,
            FLAGS.do_lower_case,
            config,
            pipeline_args=args,
            **settings,
        )
    else:
        beam_flags.check_local()
        with status_line() as show:
            summary = create_pretraining_data(
                inputs,
                outputs,
                FLAGS.vocab_file,
                FLAGS.do_lower_case,
                config,
                num_workers=FLAGS.num_workers,
                progress=functools.partial(_progress, show),
                # This process has run no TensorFlow op, so workers can fork from it and skip importing TensorFlow
                # again.
                start_method="fork",
                **settings,
            )
    print(summary.format())
    print(wrote(outputs))


def run() -> None:
    entry.run(main, "kbert-create-pretraining-data")


if __name__ == "__main__":
    run()
