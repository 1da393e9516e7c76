"""Validates pretraining TFRecords against training settings and prints what they hold.

    python tools/inspect_tfrecords.py --input_file='data/train-*.tfrecord' --max_seq_length=128 \\
        --max_predictions_per_seq=20 --vocab_file=vocab.txt

Reads every record (or `--max_records` per file), checks framing/CRC, lengths and token ids, and prints per-file
counts, a histogram of real lengths, the NSP label balance, the masked share, and a few examples decoded back to
text (with `--vocab_file`). Exits with status 1 and an error naming the file when a check fails.
"""

from __future__ import annotations

import sys

from absl import app, flags

from kbert.data import validation
from kbert.data.dynamic_masking import read_vocab
from kbert.data.record_stats import RecordStats, decode

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "TFRecord files: comma-separated list of globs.")
flags.DEFINE_integer("max_seq_length", None, "Expected sequence length (default: the first file's).")
flags.DEFINE_integer("max_predictions_per_seq", None, "Expected max predictions (default: the first file's).")
flags.DEFINE_string("vocab_file", None, "Vocabulary: checks ids against its size and decodes examples.")
flags.DEFINE_integer("vocab_size", None, "Check every id is below it (default: the vocab file's size).")
flags.DEFINE_integer("max_records", None, "Read at most this many records per file (default: all).")
flags.DEFINE_integer("num_examples", 3, "Examples to print decoded (needs --vocab_file).")
flags.mark_flags_as_required(["input_file"])


def format_example(arrays: dict, row: int, vocab: list[str]) -> str:
    """An example as its masked text, the masked-LM targets, and the sentence label."""
    ids = arrays["input_ids"][row]
    lines = [f"  input:  {decode(ids, vocab)}"]
    if "masked_lm_weights" in arrays:
        count = int(arrays["masked_lm_weights"][row].sum())
        targets = [
            f"{int(p)}:{vocab[int(t)] if 0 <= int(t) < len(vocab) else t}"
            for p, t in zip(arrays["masked_lm_positions"][row, :count], arrays["masked_lm_ids"][row, :count])
        ]
        lines.append(f"  masked: {' '.join(targets)}")
    label = int(arrays["next_sentence_labels"][row, 0])
    lines.append(f"  next_sentence_label: {label} ({'random next' if label else 'actual next'})")
    return "\n".join(lines)


def inspect(
    patterns: str,
    seq_length: int | None,
    max_predictions: int | None,
    vocab: list[str] | None,
    vocab_size: int | None,
    max_records: int | None,
    num_examples: int,
) -> RecordStats:
    """Checks every file and prints the report; raises `validation.InputDataError` on the first bad file."""
    paths = validation.match_files(patterns, "--input_file")
    stats, first = None, None
    examples = []
    print(f"{'file':<60} {'records':>10}")
    for path in paths:
        count = 0
        for layout, arrays in validation.scan_file(
            path, seq_length, max_predictions, vocab_size, dynamic_masking=None, num_records=max_records
        ):
            if first is None:
                first = layout
                # Later files must match the first one when the flags leave the settings open.
                seq_length, max_predictions = layout.seq_length, layout.max_predictions
                stats = RecordStats(layout.seq_length)
            elif (layout.use_v2_feature_names, layout.masked) != (first.use_v2_feature_names, first.masked):
                raise validation.InputDataError(
                    f"{path}: written with other options (v2 names {layout.use_v2_feature_names}, masked "
                    f"{layout.masked}) than {paths[0]}; keep such files in separate sets."
                )
            stats.update(arrays)
            count += len(arrays["input_ids"])
            wanted = min(len(arrays["input_ids"]), num_examples - len(examples))
            examples.extend({k: v[i : i + 1] for k, v in arrays.items()} for i in range(wanted))
        print(f"{path:<60} {count:>10,}")
    print(f"{'total':<60} {stats.records:>10,}")
    print(
        f"\nlayout: seq_length {first.seq_length}, "
        + (f"max_predictions {first.max_predictions}, masked" if first.masked else "unmasked (for dynamic masking)")
        + f", {'v2' if first.use_v2_feature_names else 'v1'} feature names, compression {first.compression or 'none'}"
    )
    checked = f" < vocab_size {vocab_size}: ok" if vocab_size else " (not checked: no --vocab_size/--vocab_file)"
    print(f"max token id {stats.max_id}{checked}")
    print(f"\nreal length histogram (mean fill {stats.mean_fill():.1%}):")
    peak = max(count for _, _, count in stats.histogram()) or 1
    for low, high, count in stats.histogram():
        bar = "#" * round(40 * count / peak)
        print(f"  {low:>5}-{high:<5} {count:>10,} {100 * count / max(1, stats.records):5.1f}% {bar}")
    print(
        f"\nnext_sentence_labels: 0 actual next {stats.nsp_counts[0]:,} ({1 - stats.nsp_share_random():.1%}), "
        f"1 random next {stats.nsp_counts[1]:,} ({stats.nsp_share_random():.1%})"
    )
    if first.masked:
        print(
            f"masked share: {stats.predictions:,} predictions / {stats.real_tokens:,} real tokens = "
            f"{stats.masked_share():.1%} ({stats.predictions / max(1, stats.records):.1f} per sequence)"
        )
    if vocab:
        for index, example in enumerate(examples):
            print(f"\nexample {index}:\n{format_example(example, 0, vocab)}")
    return stats


def main(argv: list[str]) -> None:
    del argv
    vocab = read_vocab(FLAGS.vocab_file) if FLAGS.vocab_file else None
    vocab_size = FLAGS.vocab_size or (len(vocab) if vocab else None)
    try:
        inspect(
            FLAGS.input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, vocab, vocab_size,
            FLAGS.max_records, FLAGS.num_examples,
        )
    except validation.InputDataError as error:
        print(f"\nERROR: {error}", file=sys.stderr)
        sys.exit(1)
    print("\nall checks passed")


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
