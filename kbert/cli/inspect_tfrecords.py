"""Validates pretraining TFRecords against training settings and prints what they hold.

    python tools/inspect_tfrecords.py --input_file='data/train.tfrecord-*' --max_seq_length=128 \\
        --max_predictions_per_seq=20 --vocab_file=vocab.txt
    kbert-inspect-tfrecords --input_file='data/train.tfrecord-*' --tokenizer=tokenizers/modernbert

Reads every record (or `--max_records` per file), checks framing/CRC, lengths and token ids, and prints per-file
counts, a histogram of real lengths, the NSP label balance, the masked share, and a few examples decoded back to
text (with `--vocab_file` or `--tokenizer`). Exits with status 1 and an error naming the file when a check fails.
"""

from __future__ import annotations

from absl import flags

from kbert.cli import entry
from kbert.data.hf_tokenizer import HfTokenizer
from kbert.data.inspection import inspect_files
from kbert.data.record_stats import VocabDecoder
from kbert.data.wordpiece.vocab_file import read_vocabulary
from kbert.errors import ConfigError

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "TFRecord files: comma-separated list of globs.")
flags.DEFINE_integer("max_seq_length", None, "Expected sequence length (default: the first file's).")
flags.DEFINE_integer("max_predictions_per_seq", None, "Expected max predictions (default: the first file's).")
flags.DEFINE_string("vocab_file", None, "Vocabulary: checks ids against its size and decodes examples.")
flags.DEFINE_string(
    "tokenizer", None, "Hugging Face tokenizer.json or its directory, in place of --vocab_file: the same checks."
)
flags.DEFINE_integer("vocab_size", None, "Check every id is below it (default: the vocab file's or tokenizer's size).")
flags.DEFINE_integer("max_records", None, "Read at most this many records per file (default: all).")
flags.DEFINE_integer("num_examples", 3, "Examples to print decoded (needs --vocab_file or --tokenizer).")
flags.mark_flags_as_required(["input_file"])


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.vocab_file and FLAGS.tokenizer:
        raise ConfigError("--vocab_file and --tokenizer both decode: give one of them.")
    # Any vocabulary or tokenizer decodes: the special tokens are needed only to tokenize and to mask.
    decoder, vocab_size = None, None
    if FLAGS.vocab_file:
        vocab = read_vocabulary(FLAGS.vocab_file, required=())
        decoder, vocab_size = VocabDecoder(vocab), len(vocab)
    elif FLAGS.tokenizer:
        tokenizer = HfTokenizer(FLAGS.tokenizer)
        decoder, vocab_size = tokenizer, tokenizer.vocab_size
    inspect_files(
        FLAGS.input_file,
        FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq,
        decoder,
        FLAGS.vocab_size or vocab_size,
        FLAGS.max_records,
        FLAGS.num_examples,
    )
    print("\nall checks passed")


def run() -> None:
    entry.run(main, "kbert-inspect-tfrecords")


if __name__ == "__main__":
    run()
