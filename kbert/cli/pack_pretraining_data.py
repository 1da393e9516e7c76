"""Packs unpacked BERT pretraining TFRecords (kbert's, Model Garden's, google-research/bert's) into packed ones.

    python tools/pack_pretraining_data.py --input_file='data/train.tfrecord-*' --output_file=packed/train.tfrecord \
        --num_output_shards=8 --max_sequences_per_pack=3 --num_workers=4

Rows hold up to --max_sequences_per_pack whole sequences, chosen by shortest-pack-first histogram packing (SPFHP)
within each chunk of --chunk_records records; the layout is described in kbert/data/schema.py and
docs/data_creation.md ("Packing").
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from absl import flags

from kbert.cli import beam_flags, entry
from kbert.cli.status_line import status_line, wrote
from kbert.data import input_files
from kbert.data.outputs import shard_paths
from kbert.data.packing.chunk import PackSummary
from kbert.data.packing.pack_pretraining_data import pack_pretraining_data

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "input_file",
    None,
    "Unpacked pretraining TFRecords: comma-separated list of globs (masked or "
    "--no_masking, v1 or v2 names, plain or GZIP; all of one layout).",
)
flags.DEFINE_string(
    "output_file",
    None,
    "Output TFRecord files, comma-separated; or one name that --num_output_shards expands to NAME-00000-of-0000N.",
)
flags.DEFINE_integer("num_output_shards", 1, "Shards to write when --output_file is a single name.")
flags.DEFINE_integer("max_sequences_per_pack", 3, "Most sequences a row (K); the masked-LM slots grow by K - 1.")
flags.DEFINE_integer(
    "chunk_records",
    100_000,
    "Records packed together (memory per worker scales with it); changing it changes the output.",
)
flags.DEFINE_integer("num_workers", 1, "Worker processes; the output is the same for any number.")
flags.DEFINE_integer("random_seed", 12345, "Seed of the row order within each chunk.")
flags.DEFINE_bool("gzip", None, "GZIP-compress the output (--nogzip: plain); default: as the first input file.")
beam_flags.define_beam_flags()
flags.mark_flags_as_required(["input_file", "output_file"])


def _progress(show: Callable[[str], None], summary: PackSummary) -> None:
    show(
        f"chunks {summary.chunks:,} | sequences {summary.sequences:,} | rows {summary.rows:,} | "
        f"{summary.seconds:,.0f} s"
    )


def main(argv: list[str]) -> None:
    del argv
    inputs = input_files.expand_patterns(FLAGS.input_file, "--input_file")
    outputs = shard_paths(FLAGS.output_file, FLAGS.num_output_shards)
    if FLAGS.runner:
        args = beam_flags.pipeline_args()
        from kbert.data.beam_pretraining_data import run_beam_packing

        print(
            run_beam_packing(
                inputs,
                FLAGS.output_file,
                FLAGS.num_output_shards,
                FLAGS.max_sequences_per_pack,
                FLAGS.random_seed,
                FLAGS.gzip,
                FLAGS.chunk_records,
                args,
            ).format()
        )
        print(wrote(outputs))
        return
    beam_flags.check_local()
    with status_line() as show:
        summary = pack_pretraining_data(
            inputs,
            outputs,
            FLAGS.max_sequences_per_pack,
            FLAGS.random_seed,
            FLAGS.num_workers,
            FLAGS.gzip,
            FLAGS.chunk_records,
            functools.partial(_progress, show),
        )
    print(summary.format())
    print(wrote(outputs))


def run() -> None:
    entry.run(main, "kbert-pack-pretraining-data")


if __name__ == "__main__":
    run()
