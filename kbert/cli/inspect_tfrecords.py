"""Validates pretraining TFRecords against training settings and prints what they hold.

    python tools/inspect_tfrecords.py --input_file='data/train.tfrecord-*' --max_seq_length=128 \\
        --max_predictions_per_seq=20 --vocab_file=vocab.txt

Reads every record (or `--max_records` per file), checks framing/CRC, lengths and token ids, and prints per-file
counts, a histogram of real lengths, the NSP label balance, the masked share, and a few examples decoded back to
text (with `--vocab_file`). Exits with status 1 and an error naming the file when a check fails.
"""

from __future__ import annotations

from absl import flags

from kbert.cli import entry
from kbert.data.inspection import inspect_files
from kbert.data.wordpiece.vocab_file import read_vocabulary

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "TFRecord files: comma-separated list of globs.")
flags.DEFINE_integer("max_seq_length", None, "Expected sequence length (default: the first file's).")
flags.DEFINE_integer("max_predictions_per_seq", None, "Expected max predictions (default: the first file's).")
flags.DEFINE_string("vocab_file", None, "Vocabulary: checks ids against its size and decodes examples.")
flags.DEFINE_integer("vocab_size", None, "Check every id is below it (default: the vocab file's size).")
flags.DEFINE_integer("max_records", None, "Read at most this many records per file (default: all).")
flags.DEFINE_integer("num_examples", 3, "Examples to print decoded (needs --vocab_file).")
flags.mark_flags_as_required(["input_file"])


def main(argv: list[str]) -> None:
    del argv
    # Any vocabulary decodes: the special tokens are needed only to tokenize and to mask.
    vocab = read_vocabulary(FLAGS.vocab_file, required=()) if FLAGS.vocab_file else None
    vocab_size = FLAGS.vocab_size or (len(vocab) if vocab else None)
    inspect_files(
        FLAGS.input_file,
        FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq,
        vocab,
        vocab_size,
        FLAGS.max_records,
        FLAGS.num_examples,
    )
    print("\nall checks passed")


def run() -> None:
    entry.run(main, "kbert-inspect-tfrecords")


if __name__ == "__main__":
    run()
