"""The flags the benchmarks in tools/ share, defined in one place: same name, same meaning in every benchmark.

Paths come from flags, never from the machine a benchmark was written on: `--corpus` has no default (give text in
BERT's format, e.g. the `data/train.txt` a demo run writes under `runs/demo-*/`), and a benchmark that needs
`--vocab_file` says so by requiring it.

Example (a benchmark's flag block):

```python
import bench_flags
bench_flags.define("seq_length", "max_predictions", "model", batch_size=16, required=("corpus",))
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from kbert.runtime import cpu_isa as _isa

# name -> (definer, default, help). The default is a benchmark's unless it passes its own to `define`.
_SHARED: dict[str, tuple[Callable[..., Any], Any, str]] = {
    "corpus": (
        flags.DEFINE_string,
        None,
        "Text in BERT's pretraining format: one sentence a line, a blank line "
        "between documents (e.g. a demo run's data/train.txt).",
    ),
    "vocab_file": (flags.DEFINE_string, None, "WordPiece vocabulary, one token per line."),
    "work_dir": (flags.DEFINE_string, None, "Folder for the benchmark's data, runs and logs."),
    "model": (flags.DEFINE_string, "bert_small", "Preset name or bert_config.json path."),
    "seq_length": (flags.DEFINE_integer, 128, "Sequence length."),
    "max_predictions": (flags.DEFINE_integer, 20, "Masked positions per sequence."),
    "batch_size": (flags.DEFINE_integer, 32, "Global sequences per step."),
    "steps": (flags.DEFINE_integer, 5, "Steps per timed round."),
    "rounds": (flags.DEFINE_integer, 3, "Alternating timed rounds per contestant."),
}


def define(*names: str, required: Sequence[str] = (), notes: dict[str, str] | None = None, **defaults: Any) -> None:
    """Defines the shared flags named in `names`, `required` and `defaults` (with those defaults).

    `required` flags must be given on the command line; `notes` adds what a flag means to this benchmark to its help.
    """
    notes = notes or {}
    for name in dict.fromkeys([*names, *required, *defaults]):
        definer, default, help_text = _SHARED[name]
        definer(name, defaults.get(name, default), " ".join(filter(None, [help_text, notes.get(name)])))
    flags.mark_flags_as_required(list(required))


def cpu_isa() -> str:
    """'cpu: <model>, <vector features> (ONEDNN_MAX_CPU_ISA=<cap>)': what a CPU benchmark's figures depend on, for
    its header (oneDNN's kernels differ between AVX2, AVX-512, AVX-512 BF16 and AMX)."""
    return f"cpu: {_isa.cpu_model()}, {_isa.isa_summary()}"
