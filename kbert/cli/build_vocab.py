"""Learns a WordPiece vocabulary from a corpus (text files, or the records of JSONL, CSV, Parquet or saved datasets):
Hugging Face `tokenizers`' WordPiece trainer by default, tensorflow-text's learner with --learner=tensorflow_text.

    python tools/build_vocab.py --input_file='corpus/*.txt' --output_file=vocab.txt --vocab_size=30522
"""

from __future__ import annotations

import time

from absl import flags, logging

from kbert.cli import entry, input_flags
from kbert.data import outputs
from kbert.data.wordpiece import vocab_file, vocab_learning

FLAGS = flags.FLAGS
input_flags.define_input_flags()
flags.DEFINE_string("output_file", None, "Where to write the vocabulary, one token per line.")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size, reserved tokens included.")
flags.DEFINE_bool("lower_case", True, "Lower-case and strip accents first (use the same for do_lower_case later).")
flags.DEFINE_enum(
    "reserved_layout",
    "bert",
    list(vocab_file.LAYOUTS),
    "bert: [PAD]=0, [unused0-98], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103 as bert-base-uncased; "
    "compact: [PAD] [UNK] [CLS] [SEP] [MASK] = 0..4.",
)
flags.DEFINE_enum(
    "learner",
    "tokenizers",
    list(vocab_learning.LEARNERS),
    "tokenizers: Hugging Face's WordPiece trainer, the asked size whenever the text holds enough pieces; "
    "tensorflow_text: tensorflow-text's bert_vocab_from_dataset (slower, aims within 5% below the size).",
)
flags.mark_flags_as_required(["output_file"])


def main(argv: list[str]) -> None:
    del argv
    inputs, input_format = input_flags.input_files_and_format()
    outputs.check_outputs([FLAGS.output_file], {"--input_file": inputs})
    logging.info(
        "Learning a vocabulary of %d tokens from %d file(s) with %s.", FLAGS.vocab_size, len(inputs), FLAGS.learner
    )
    start = time.time()

    def progress(stage: str, lines: int, chars: int) -> None:
        elapsed = time.time() - start
        print(f"\r{stage}: read {lines:,} lines, {chars / 1e6:,.1f}M characters, {elapsed:,.0f} s", end="", flush=True)

    tokens, stats = vocab_learning.learn_vocabulary(
        inputs,
        FLAGS.vocab_size,
        lower_case=FLAGS.lower_case,
        layout=FLAGS.reserved_layout,
        progress=progress,
        learner=FLAGS.learner,
        input_format=input_format,
    )
    vocab_learning.write_vocabulary(tokens, FLAGS.output_file)
    print()
    print(
        f"vocabulary: {stats.vocab_size:,} tokens ({stats.num_reserved} reserved, "
        f"{stats.vocab_size - stats.num_reserved:,} learned; asked for {stats.vocab_size_asked:,}) "
        f"from {stats.lines:,} lines / {stats.chars / 1e6:,.1f}M characters in {time.time() - start:,.1f} s "
        f"-> {FLAGS.output_file}"
    )
    if stats.shortfall:
        print(stats.shortfall)
    if stats.records.bad:
        print(
            f"bad records: {stats.records.bad:,} of {stats.records.records:,} skipped, e.g. "
            f"{'; '.join(stats.records.problems)}"
        )


def run() -> None:
    entry.run(main, "kbert-build-vocab")


if __name__ == "__main__":
    run()
