"""Whether a checkpoint fits a model: one comparison, and one error, for every kind of checkpoint kbert reads.

A checkpoint fits when every variable the model expects is stored with the model's shape and nothing else is
stored: a deeper checkpoint (unexpected layers) is refused as firmly as a shallower one (missing layers).

Example:

```python
error = mismatch("ckpt-20", expected={"model/bert/layer_0/kernel": (32, 32)}, stored=shapes_in_the_file,
                 model="the model (2 layers, hidden 32, vocab 64)", fix="resume with the config that wrote it")
if error:
    raise error   # first line: the file, the counts and the fix; the listing follows
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kbert.errors import CheckpointMismatchError

# Enough of each list to see the pattern (a layer too many, another hidden size); the counts say the rest.
MAX_LISTED = 12


def _listing(title: str, items: list[str]) -> str:
    shown = "\n".join(f"    {item}" for item in items[:MAX_LISTED])
    more = f"\n    ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"  {title} ({len(items)}):\n{shown}{more}"


def describe_model(config) -> str:
    """'the model (2 layers, hidden 32, vocab 64)': what `mismatch` names as the model a checkpoint must fit."""
    return f"the model ({config.num_hidden_layers} layers, hidden {config.hidden_size}, vocab {config.vocab_size})"


def mismatch(
    path: str, expected: Mapping[str, Sequence[int]], stored: Mapping[str, Sequence[int]], model: str, fix: str
) -> CheckpointMismatchError | None:
    """The error naming every missing, unexpected and wrong-shape variable of `stored` against `expected`
    (name -> shape), or None when they agree."""
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    wrong_shape = sorted(
        f"{name}: checkpoint {list(stored[name])} vs model {list(expected[name])}"
        for name in expected
        if name in stored and tuple(stored[name]) != tuple(expected[name])
    )
    problems = [
        (short, title, items)
        for short, title, items in (
            ("missing", "missing from the checkpoint", missing),
            ("unexpected", "unexpected in the checkpoint", unexpected),
            ("wrong-shape", "wrong shape", wrong_shape),
        )
        if items
    ]
    if not problems:
        return None
    counts = ", ".join(f"{len(items)} {short}" for short, _, items in problems)
    listing = "\n".join(_listing(title, items) for _, title, items in problems)
    return CheckpointMismatchError(f"{path} does not fit {model} ({counts} variables): {fix}\n{listing}")
