"""A task's examples in memory: texts, and labels as class ids (classification) or float targets (regression).

Invariant: every returned eval label is one training knows (a classification task's label set is GLUE's or the
training file's), and every regression target is a finite number; anything else is an `InputDataError` naming the
file, the line and the fix, raised before any model is built.

Example:

```python
data = load_task_data(resolve_task(config.task))
data.label_names, len(data.train), data.evals["eval"].labels[:3]  # ('0', '1'), 67349, [1, 0, 1]
```
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from kbert.errors import InputDataError
from kbert.finetuning.files import Table, read_columns
from kbert.finetuning.tasks import BINARY_METRICS, Task


@dataclasses.dataclass
class Examples:
    """One file's examples; `labels` is None for a test file, whose `index` column is kept for the submission."""

    path: str
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray | None = None
    index: list[str] | None = None
    skipped_rows: int = 0

    def __len__(self) -> int:
        return len(self.text_a)


@dataclasses.dataclass
class TaskData:
    task: Task
    label_names: tuple[str, ...] | None
    train: Examples
    evals: dict[str, Examples]
    tests: dict[str, Examples]

    @property
    def num_outputs(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def metrics(self) -> tuple[str, ...]:
        """The task's metrics; a two-class file task adds F1 and Matthews correlation of its second label."""
        if self.task.labels is None and self.label_names is not None and len(self.label_names) == 2:
            return BINARY_METRICS
        return self.task.metrics


def _label_set(table: Table, column) -> tuple[str, ...]:
    """The training file's labels: numeric order when all are integers, else alphabetical."""
    values = set(v.strip() for v in table.columns[column])
    if len(values) < 2:
        raise InputDataError(
            f"{table.path}: column {column!r} holds one label only ({', '.join(values)}); a "
            "classifier needs examples of at least two, or set task.type=regression."
        )
    if all(v.lstrip("-").isdigit() for v in values):
        return tuple(sorted(values, key=int))
    return tuple(sorted(values))


def _class_ids(table: Table, task: Task, label_names: tuple[str, ...], train_file: str) -> np.ndarray:
    ids = {name: i for i, name in enumerate(label_names)}
    labels = np.empty(len(table), np.int32)
    for i, (value, line) in enumerate(zip(table.columns[task.label], table.line_numbers)):
        value = value.strip()
        if value not in ids:
            known_from = "GLUE's labels" if task.labels else f"the labels of {train_file}"
            raise InputDataError(
                f"{table.path}, line {line}: label {value!r} in column {task.label!r} is not among {known_from} "
                f"({', '.join(label_names)}); fix the file, or add examples of it to the training file."
            )
        labels[i] = ids[value]
    return labels


def _targets(table: Table, task: Task) -> np.ndarray:
    targets = np.empty(len(table), np.float32)
    for i, (value, line) in enumerate(zip(table.columns[task.label], table.line_numbers)):
        try:
            targets[i] = number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise InputDataError(
                f"{table.path}, line {line}: regression target {value!r} in column {task.label!r} is not a finite "
                "number; fix the file, or set task.type=classification if the labels are classes."
            )
    return targets


def _read(path: str, task: Task, text_a, text_b, extra) -> tuple[Table, Examples]:
    table = read_columns(
        path, task.file_format, [c for c in (text_a, text_b, extra) if c is not None], header=task.header
    )
    examples = Examples(
        path,
        table.columns[text_a],
        table.columns[text_b] if text_b is not None else None,
        skipped_rows=table.skipped_rows,
    )
    return table, examples


def _labels(table: Table, task: Task, label_names: tuple[str, ...] | None) -> np.ndarray:
    return _targets(table, task) if label_names is None else _class_ids(table, task, label_names, task.train_file)


def _labelled(path: str, task: Task, label_names: tuple[str, ...] | None) -> Examples:
    table, examples = _read(path, task, task.text_a, task.text_b, task.label)
    examples.labels = _labels(table, task, label_names)
    return examples


def _test(path: str, task: Task, index, text_a, text_b) -> Examples:
    # GLUE's test files always have a header, also where train/dev have none (CoLA).
    test_task = dataclasses.replace(task, header=True)
    table, examples = _read(path, test_task, text_a, text_b, index)
    examples.index = table.columns[index]
    return examples


def load_task_data(task: Task) -> TaskData:
    """Reads the training, eval and (GLUE) test files of `task` and checks their labels.

    Raises:
      InputDataError: a missing column, an empty file, an eval label training never saw, a non-numeric target.
      MissingFileError: a file that is not there.
    """
    table, train = _read(task.train_file, task, task.text_a, task.text_b, task.label)
    label_names = task.labels
    if task.type == "classification" and label_names is None:
        label_names = _label_set(table, task.label)
    train.labels = _labels(table, task, label_names)
    evals = {split: _labelled(path, task, label_names) for split, path in task.eval_files.items()}
    tests = {name: _test(path, task, index, a, b) for name, (path, index, a, b) in task.test_files.items()}
    return TaskData(task, label_names, train, evals, tests)
