"""Learns a vocabulary from a corpus (text files, or the records of JSONL, CSV, Parquet or saved datasets): a
WordPiece vocab.txt with Hugging Face `tokenizers`' WordPiece trainer by default or tensorflow-text's learner
(--learner=tensorflow_text), or a byte-level BPE tokenizer.json with --learner=bpe.

    python tools/build_vocab.py --input_file='corpus/*.txt' --output_file=vocab.txt --vocab_size=30522
    python tools/build_vocab.py --input_file='corpus/*.txt' --output_file=bpe/tokenizer.json --vocab_size=50368 \
        --learner=bpe
"""

from __future__ import annotations

import posixpath
import time

from absl import flags, logging

from kbert.cli import entry, input_flags
from kbert.data import bpe_learning, outputs
from kbert.data.wordpiece import vocab_file, vocab_learning
from kbert.errors import ConfigError

FLAGS = flags.FLAGS
input_flags.define_input_flags()
flags.DEFINE_string(
    "output_file",
    None,
    "Where to write the vocabulary: WordPiece's one token per line (vocab.txt); --learner=bpe's DIR/tokenizer.json, "
    "with DIR/tokenizer_config.json (the special tokens' roles) beside it.",
)
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size, reserved (special) tokens included.")
flags.DEFINE_bool(
    "lower_case",
    None,
    "Lower-case first. Default: true for the WordPiece learners, which also strip accents (use the same for "
    "do_lower_case later); false for --learner=bpe, which with it normalizes to NFC and lower-cases.",
)
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
    [*vocab_learning.LEARNERS, bpe_learning.LEARNER],
    "tokenizers: Hugging Face's WordPiece trainer, the asked size whenever the text holds enough pieces; "
    "tensorflow_text: tensorflow-text's bert_vocab_from_dataset (slower, aims within 5% below the size); "
    "bpe: Hugging Face's byte-level BPE trainer, a tokenizer.json as RoBERTa's and ModernBERT's.",
)
flags.DEFINE_list(
    "special_tokens",
    list(vocab_file.SPECIAL_TOKENS),
    "--learner=bpe's special tokens, ids 0, 1, ... in this order. Their roles go by name: [CLS] or <s> (cls), "
    "[SEP] or </s> (sep), [MASK] or <mask>, [PAD] or <pad>, and optionally [UNK] or <unk>; other names are special "
    "tokens without a role.",
)
flags.mark_flags_as_required(["output_file"])


def _check_learner_flags(bpe: bool) -> None:
    """Refuses the flags of the other kind of learner."""
    if bpe and FLAGS["reserved_layout"].present:
        raise ConfigError(
            "--reserved_layout lays out a WordPiece vocabulary; with --learner=bpe name the special tokens with "
            "--special_tokens."
        )
    if not bpe and FLAGS["special_tokens"].present:
        raise ConfigError(
            f"--special_tokens are --learner=bpe's; --learner={FLAGS.learner} reserves the tokens of --reserved_layout."
        )
    if not bpe and posixpath.basename(FLAGS.output_file) == bpe_learning.TOKENIZER_FILE:
        raise ConfigError(
            f"--output_file={FLAGS.output_file}: --learner={FLAGS.learner} writes a WordPiece vocabulary, one token "
            "a line; name it vocab.txt, or pass --learner=bpe for a tokenizer.json."
        )


def main(argv: list[str]) -> None:
    del argv
    bpe = FLAGS.learner == bpe_learning.LEARNER
    _check_learner_flags(bpe)
    inputs, input_format = input_flags.input_files_and_format()
    written = bpe_learning.output_files(FLAGS.output_file) if bpe else [FLAGS.output_file]
    outputs.check_outputs(written, {"--input_file": inputs})
    lower_case = not bpe if FLAGS.lower_case is None else FLAGS.lower_case
    logging.info(
        "Learning a vocabulary of %d tokens from %d file(s) with %s.", FLAGS.vocab_size, len(inputs), FLAGS.learner
    )
    start = time.time()

    def progress(stage: str, lines: int, chars: int) -> None:
        elapsed = time.time() - start
        print(f"\r{stage}: read {lines:,} lines, {chars / 1e6:,.1f}M characters, {elapsed:,.0f} s", end="", flush=True)

    if bpe:
        tokenizer, stats = bpe_learning.learn_bpe(
            inputs, FLAGS.vocab_size, FLAGS.special_tokens, lower_case, progress, input_format
        )
        bpe_learning.write_tokenizer(tokenizer, FLAGS.output_file)
    else:
        tokens, stats = vocab_learning.learn_vocabulary(
            inputs,
            FLAGS.vocab_size,
            lower_case=lower_case,
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
        f"-> {' and '.join(written)}"
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
