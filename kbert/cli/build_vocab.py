"""Learns a WordPiece vocabulary from text files.

    python tools/build_vocab.py --input_file='corpus/*.txt' --output_file=vocab.txt --vocab_size=30522
"""

from __future__ import annotations

import time

from absl import flags, logging

from kbert.cli import entry
from kbert.data import files, outputs, vocab, vocab_file

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Text files: comma-separated list of globs.")
flags.DEFINE_string("output_file", None, "Where to write the vocabulary, one token per line.")
flags.DEFINE_integer("vocab_size", 30522, "Largest vocabulary size, reserved tokens included.")
flags.DEFINE_bool("lower_case", True, "Lower-case and strip accents first (use the same for do_lower_case later).")
flags.DEFINE_enum(
    "reserved_layout", "bert", list(vocab_file.LAYOUTS),
    "bert: [PAD]=0, [unused0-98], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103 as bert-base-uncased; "
    "compact: [PAD] [UNK] [CLS] [SEP] [MASK] = 0..4.",
)
flags.mark_flags_as_required(["input_file", "output_file"])


def main(argv: list[str]) -> None:
    del argv
    inputs = files.expand_patterns(FLAGS.input_file, "--input_file")
    outputs.check_outputs([FLAGS.output_file], {"--input_file": inputs})
    logging.info("Learning a vocabulary of at most %d tokens from %d file(s).", FLAGS.vocab_size, len(inputs))
    start = time.time()

    def progress(lines: int, chars: int) -> None:
        elapsed = time.time() - start
        print(f"\rread {lines:,} lines, {chars / 1e6:,.1f}M characters, {elapsed:,.0f} s", end="", flush=True)

    tokens, stats = vocab.learn_vocabulary(
        inputs, FLAGS.vocab_size, lower_case=FLAGS.lower_case, layout=FLAGS.reserved_layout, progress=progress
    )
    vocab.write_vocabulary(tokens, FLAGS.output_file)
    print()
    print(
        f"vocabulary: {stats.vocab_size:,} tokens ({stats.num_reserved} reserved, "
        f"{stats.vocab_size - stats.num_reserved:,} learned; asked for at most {FLAGS.vocab_size:,}) "
        f"from {stats.lines:,} lines / {stats.chars / 1e6:,.1f}M characters in {time.time() - start:,.1f} s "
        f"-> {FLAGS.output_file}"
    )


def run() -> None:
    entry.run(main, "kbert-build-vocab")


if __name__ == "__main__":
    run()
