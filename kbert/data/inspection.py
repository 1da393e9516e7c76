"""The TFRecord inspector's report: validate every record, then print counts, lengths, labels and examples.

Packed records (kbert-pack-pretraining-data) are recognised by their features: rows and the sequences in them are
counted apart, lengths and labels are those of the sequences, and an example row is printed sequence by sequence.

Example:

```python
from kbert.data.record_stats import VocabDecoder
from kbert.data.wordpiece.vocab_file import read_vocabulary
stats = inspect_files("data/train.tfrecord-*", 128, 20, decoder=VocabDecoder(read_vocabulary("vocab.txt")))
stats.records, stats.sequences, stats.nsp_share_random()
```
"""

from __future__ import annotations

from kbert.data import input_files, validation
from kbert.data.packing.sequences import row_sequences
from kbert.data.record_stats import RecordStats, TokenDecoder
from kbert.errors import ConfigError


def _format_sequence(sequence: dict, decoder: TokenDecoder) -> list[str]:
    """A sequence as its masked text, its masked-LM targets, and its sentence label."""
    lines = [f"input:  {decoder.text(sequence['input_ids'].tolist())}"]
    if "masked_lm_ids" in sequence:
        targets = [
            f"{int(p)}:{decoder.token(int(t))}"
            for p, t in zip(sequence["masked_lm_positions"], sequence["masked_lm_ids"])
        ]
        lines.append(f"masked: {' '.join(targets)}")
    label = sequence["next_sentence_label"]
    if label is not None:
        lines.append(f"next_sentence_label: {label} ({'random next' if label else 'actual next'})")
    return lines


def format_example(arrays: dict, row: int, decoder: TokenDecoder) -> str:
    """A row as its sequence's masked text, masked-LM targets (positions within the sequence) and sentence label;
    a packed row sequence by sequence."""
    sequences = row_sequences(arrays, row)
    if "next_sentence_positions" not in arrays:
        return "\n".join(f"  {line}" for line in _format_sequence(sequences[0], decoder))
    lines = []
    for index, sequence in enumerate(sequences):
        lines.append(f"  sequence {index + 1} of {len(sequences)}:")
        lines.extend(f"    {line}" for line in _format_sequence(sequence, decoder))
    return "\n".join(lines)


def _scan(
    paths: list[str],
    seq_length: int | None,
    max_predictions: int | None,
    vocab_size: int | None,
    max_records: int | None,
    num_examples: int,
) -> tuple[validation.RecordLayout, RecordStats, list[dict]]:
    """Checks every file, printing its counts; returns the first file's layout, the totals and example rows."""
    stats, first = None, None
    examples = []
    print(f"{'file':<60} {'records':>10} {'sequences':>10}")
    for path in paths:
        rows = sequences = 0
        for layout, arrays in validation.scan_file(
            path, seq_length, max_predictions, vocab_size, dynamic_masking=None, num_records=max_records
        ):
            if first is None:
                first = layout
                # Later files must match the first one when the flags leave the settings open.
                seq_length, max_predictions = layout.seq_length, layout.max_predictions
                stats = RecordStats(layout.seq_length)
            elif (layout.use_v2_feature_names, layout.masked, layout.describe()) != (
                first.use_v2_feature_names,
                first.masked,
                first.describe(),
            ):
                raise validation.InputDataError(
                    f"{path}: written with other options ({layout.describe()}, v2 names "
                    f"{layout.use_v2_feature_names}, masked {layout.masked}) than {paths[0]}; keep such files in "
                    "separate sets."
                )
            before = stats.sequences
            stats.update(arrays)
            rows, sequences = rows + len(arrays["input_ids"]), sequences + stats.sequences - before
            wanted = min(len(arrays["input_ids"]), num_examples - len(examples))
            examples.extend({k: v[i : i + 1] for k, v in arrays.items()} for i in range(wanted))
        print(f"{path:<60} {rows:>10,} {sequences:>10,}")
    print(f"{'total':<60} {stats.records:>10,} {stats.sequences:>10,}")
    return first, stats, examples


def _print_report(first: validation.RecordLayout, stats: RecordStats, vocab_size: int | None) -> None:
    packed = first.sequences_per_row is not None
    print(
        f"\nlayout: {first.describe() + ', ' if packed else ''}seq_length {first.seq_length}, "
        + (f"max_predictions {first.max_predictions}, masked" if first.masked else "unmasked (for dynamic masking)")
        + f", {'v2' if first.use_v2_feature_names else 'v1'} feature names, compression {first.compression or 'none'}"
    )
    if packed:
        print(f"sequences per row: mean {stats.sequences / max(1, stats.records):.3f}")
    checked = (
        f" < vocab_size {vocab_size}: ok" if vocab_size else " (not checked: no --vocab_size/--vocab_file/--tokenizer)"
    )
    print(f"max token id {stats.max_id}{checked}")
    print(f"\nsequence length histogram (mean row fill {stats.mean_fill():.1%}):")
    peak = max(count for _, _, count in stats.histogram()) or 1
    for low, high, count in stats.histogram():
        bar = "#" * round(40 * count / peak)
        print(f"  {low:>5}-{high:<5} {count:>10,} {100 * count / max(1, stats.sequences):5.1f}% {bar}")
    if first.sentence_labels:
        print(
            f"\nnext_sentence_labels: 0 actual next {stats.nsp_counts[0]:,} ({1 - stats.nsp_share_random():.1%}), "
            f"1 random next {stats.nsp_counts[1]:,} ({stats.nsp_share_random():.1%})"
        )
    if first.masked:
        print(
            f"masked share: {stats.predictions:,} predictions / {stats.real_tokens:,} real tokens = "
            f"{stats.masked_share():.1%} ({stats.predictions / max(1, stats.sequences):.1f} per sequence)"
        )


def inspect_files(
    patterns: str,
    seq_length: int | None = None,
    max_predictions: int | None = None,
    decoder: TokenDecoder | None = None,
    vocab_size: int | None = None,
    max_records: int | None = None,
    num_examples: int = 3,
) -> RecordStats:
    """Checks every file (its first `max_records` records, or all) and prints the report; raises
    `validation.InputDataError` on the first bad file. `max_predictions` is per sequence, packed or not; examples
    are printed with `decoder`."""
    if max_records is not None and max_records < 1:
        raise ConfigError(f"--max_records={max_records}: give at least 1, or leave it out to read every record.")
    paths = input_files.match_files(patterns, "--input_file")
    first, stats, examples = _scan(paths, seq_length, max_predictions, vocab_size, max_records, num_examples)
    _print_report(first, stats, vocab_size)
    if decoder is not None:
        for index, example in enumerate(examples):
            print(f"\nexample {index}:\n{format_example(example, 0, decoder)}")
    return stats
