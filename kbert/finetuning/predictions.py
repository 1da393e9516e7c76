"""Model outputs to predictions: class ids or regression values, and files in GLUE's submission format.

Invariant: a written file is `index<TAB>prediction` with a header line, one row per example in file order, the
prediction being the label as the task's files spell it (`entailment`, `1`) or the regression value; that is
what the GLUE server takes, one file per task (`SST-2.tsv`, `MNLI-m.tsv`, ...). `HEADER`, `shown_predictions` and
`submission_lines` are its pieces, for a writer that streams (kbert-predict).

Example:

```python
write_submission("run/predictions/SST-2.tsv", ["0", "1"], np.array([[0.2, 1.3], [2.0, -1.0]]), ("0", "1"))
# index  prediction
# 0      1
# 1      0
```
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf


def predicted_values(outputs: np.ndarray, label_names: Sequence[str] | None) -> np.ndarray:
    """Class ids (argmax of the logits) for classification, the single output for regression; float64 values."""
    if label_names is None:
        return np.asarray(outputs, np.float64)[:, 0]
    return np.argmax(outputs, axis=-1)


def shown_predictions(outputs: np.ndarray, label_names: Sequence[str] | None) -> list[str]:
    """Each prediction as a file shows it: the label's name, or the regression value to 6 significant digits."""
    values = predicted_values(outputs, label_names)
    return [f"{v:.6g}" for v in values] if label_names is None else [label_names[int(v)] for v in values]


HEADER = "index\tprediction\n"


def submission_lines(index: Sequence[str], shown: Sequence[str]) -> str:
    """The rows of a submission file, one per example (the header aside)."""
    return "".join(f"{i}\t{p}\n" for i, p in zip(index, shown))


def write_submission(path: str, index: Sequence[str], outputs: np.ndarray, label_names: Sequence[str] | None) -> str:
    """Writes `path` (see the module docstring); returns it."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(HEADER)
        f.write(submission_lines(index, shown_predictions(outputs, label_names)))
    return path
