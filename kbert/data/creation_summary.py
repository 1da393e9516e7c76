"""The totals of a data-creation run: what was read, skipped and written, printed at its end.

Example:

```python
summary = Summary(objective="mlm")
summary.add(unit_summary)
print(summary.format())
```
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Summary:
    """Totals over all work units, printed at the end of a run."""

    units: int = 0
    lines: int = 0
    repaired_lines: int = 0
    replaced_chars: int = 0
    documents: int = 0
    dropped_documents: int = 0
    instances: int = 0
    tokens: int = 0
    unk_tokens: int = 0
    masked: int = 0
    random_next: int = 0
    capacity: int = 0  # instances * max_seq_length
    padded_rows: int = 0
    records: int = 0  # record formats: records scanned, bad ones among them, and the first few problems
    bad_records: int = 0
    problems: tuple[str, ...] = ()
    seconds: float = 0.0
    objective: str = "nsp"
    tokenizer: str = ""  # the file that holds the records' tokenizer (vocabulary or tokenizer.json), and its SHA-256
    tokenizer_sha256: str = ""

    def add(self, other: Summary) -> None:
        for field in dataclasses.fields(self):
            if field.type == "int":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        self.problems = (self.problems + other.problems)[:3]

    def counts(self) -> dict[str, int]:
        """The summed fields, by name (what Beam's counters carry)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.type == "int"}

    def format(self) -> str:
        instances = max(self.instances, 1)
        tokens = max(self.tokens, 1)
        fill = self.tokens / max(self.capacity, 1)
        if self.objective == "mlm":
            labels = "objective mlm: full rows of consecutive text, no next_sentence_labels"
            padding = (
                f"padding {self.capacity - self.tokens:,} positions ({100 * (1 - fill):.2g}%) in "
                f"{self.padded_rows:,} row(s), the output's last"
            )
        else:
            labels = f"next_sentence_labels=1: {self.random_next / instances:.1%}"
            padding = f"mean fill {fill:.1%} of max_seq_length"
        lines = [
            f"documents: {self.documents:,} ({self.dropped_documents:,} without tokens dropped) "
            f"from {self.lines:,} lines in {self.units:,} work units",
            f"instances: {self.instances:,} ({self.instances / max(self.seconds, 1e-9):,.0f}/s in "
            f"{self.seconds:,.1f} s); {labels}",
            f"tokens: {self.tokens:,}; [UNK] rate {self.unk_tokens / tokens:.3%}; {padding}",
            f"masked share: {self.masked / tokens:.2%} of tokens ({self.masked / instances:.1f} per instance)",
        ]
        if self.tokenizer:
            lines.append(f"tokenizer: {self.tokenizer} (sha256 {self.tokenizer_sha256})")
        if self.bad_records:
            lines.append(
                f"bad records: {self.bad_records:,} of {self.records:,} skipped, e.g. {'; '.join(self.problems)}"
            )
        if self.repaired_lines:
            lines.append(
                f"non-UTF-8 input: {self.repaired_lines:,} lines repaired, {self.replaced_chars:,} characters "
                "replaced by U+FFFD"
            )
        return "\n".join(lines)
