"""The TFRecord inspector's report: validate every record, then print counts, lengths, labels and examples.

Example:

```python
from kbert.data.vocab_file import read_vocabulary
stats = inspect_files("data/train-*.tfrecord", 128, 20, vocab=read_vocabulary("vocab.txt"))
stats.records, stats.nsp_share_random()
```
"""

from __future__ import annotations

from kbert.data import validation
from kbert.errors import ConfigError
from kbert.data.record_stats import RecordStats, decode


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


def inspect_files(
    patterns: str,
    seq_length: int | None = None,
    max_predictions: int | None = None,
    vocab: list[str] | None = None,
    vocab_size: int | None = None,
    max_records: int | None = None,
    num_examples: int = 3,
) -> RecordStats:
    """Checks every file (its first `max_records` records, or all) and prints the report; raises
    `validation.InputDataError` on the first bad file."""
    if max_records is not None and max_records < 1:
        raise ConfigError(f"--max_records={max_records}: give at least 1, or leave it out to read every record.")
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
