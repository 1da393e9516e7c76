"""The fine-tuning tasks: GLUE's nine by name, read from GLUE's own layout, and any TSV/CSV/JSONL file.

Invariant: a `Task` names concrete files and columns; its first metric is the one that picks the best epoch.
GLUE tasks keep GLUE's label order (the order of google-research/bert's processors), so class ids and submission
labels agree with every other BERT codebase.

Example:

```python
task = resolve_task(TaskConfig(name="mnli", data_dir="glue_data"))
task.eval_files  # {'eval': 'glue_data/MNLI/dev_matched.tsv', 'eval_mismatched': 'glue_data/MNLI/dev_mismatched.tsv'}
```
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from kbert.errors import ConfigError, MissingFileError
from kbert.finetuning.files import FORMATS, Column

TASK_TYPES = ("classification", "regression")
CLASSIFICATION_METRICS = ("accuracy",)
BINARY_METRICS = ("accuracy", "f1", "matthews_corr")
REGRESSION_METRICS = ("pearson", "spearman")


@dataclasses.dataclass(frozen=True)
class Task:
    """What to read and how to score it. `labels` None: classification labels come from the training file."""

    name: str
    type: str
    file_format: str
    header: bool
    text_a: Column
    text_b: Column | None
    label: Column
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    train_file: str
    eval_files: dict[str, str]
    # Test files without labels: {submission file name: (path, index column, text_a, text_b)}.
    test_files: dict[str, tuple[str, Column, Column, Column | None]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Glue:
    directory: str
    text_a: Column
    text_b: str | None
    label: Column
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    evals: tuple[tuple[str, str], ...] = (("eval", "dev.tsv"),)
    # (submission file, test file, index column); test files always have a header.
    tests: tuple[tuple[str, str, str], ...] = ()
    header: bool = True
    test_text_a: str | None = None


_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")

GLUE_TASKS = {
    "cola": _Glue(
        "CoLA",
        3,
        None,
        1,
        _BINARY,
        ("matthews_corr", "accuracy"),
        tests=(("CoLA", "test.tsv", "index"),),
        header=False,
        test_text_a="sentence",
    ),
    "sst2": _Glue("SST-2", "sentence", None, "label", _BINARY, ("accuracy",), tests=(("SST-2", "test.tsv", "index"),)),
    "mrpc": _Glue(
        "MRPC", "#1 String", "#2 String", "Quality", _BINARY, ("f1", "accuracy"), tests=(("MRPC", "test.tsv", "index"),)
    ),
    "qqp": _Glue(
        "QQP", "question1", "question2", "is_duplicate", _BINARY, ("accuracy", "f1"), tests=(("QQP", "test.tsv", "id"),)
    ),
    "stsb": _Glue(
        "STS-B", "sentence1", "sentence2", "score", None, REGRESSION_METRICS, tests=(("STS-B", "test.tsv", "index"),)
    ),
    "mnli": _Glue(
        "MNLI",
        "sentence1",
        "sentence2",
        "gold_label",
        ("contradiction", "entailment", "neutral"),
        ("accuracy",),
        evals=(("eval", "dev_matched.tsv"), ("eval_mismatched", "dev_mismatched.tsv")),
        tests=(("MNLI-m", "test_matched.tsv", "index"), ("MNLI-mm", "test_mismatched.tsv", "index")),
    ),
    "qnli": _Glue("QNLI", "question", "sentence", "label", _NLI, ("accuracy",), tests=(("QNLI", "test.tsv", "index"),)),
    "rte": _Glue("RTE", "sentence1", "sentence2", "label", _NLI, ("accuracy",), tests=(("RTE", "test.tsv", "index"),)),
    "wnli": _Glue(
        "WNLI", "sentence1", "sentence2", "label", _BINARY, ("accuracy",), tests=(("WNLI", "test.tsv", "index"),)
    ),
}


def _glue_directory(data_dir: str, glue: _Glue, name: str) -> str:
    """`data_dir` may be GLUE's root (holding SST-2/, MNLI/, ...) or the task's own directory."""
    for directory in (os.path.join(data_dir, glue.directory), data_dir):
        if tf.io.gfile.exists(os.path.join(directory, "train.tsv")):
            return directory
    raise MissingFileError(
        f"task.data_dir={data_dir!r}: no {glue.directory}/train.tsv there nor train.tsv; for task.name={name} "
        f"give GLUE's root directory (the one holding {glue.directory}/) or {glue.directory}/ itself."
    )


def _glue_task(name: str, data_dir: str) -> Task:
    glue = GLUE_TASKS[name]
    if not data_dir:
        raise ConfigError(f"task.name={name} needs task.data_dir: GLUE's root directory or its {glue.directory}/.")
    directory = _glue_directory(data_dir, glue, name)
    tests = {}
    for submission, file_name, index in glue.tests:
        path = os.path.join(directory, file_name)
        if tf.io.gfile.exists(path):
            tests[submission] = (path, index, glue.test_text_a or glue.text_a, glue.text_b)
    return Task(
        name=name,
        type="regression" if glue.labels is None else "classification",
        file_format="tsv",
        header=glue.header,
        text_a=glue.text_a,
        text_b=glue.text_b,
        label=glue.label,
        labels=glue.labels,
        metrics=glue.metrics,
        train_file=os.path.join(directory, "train.tsv"),
        eval_files={split: os.path.join(directory, f) for split, f in glue.evals},
        test_files=tests,
    )


def _file_task(config) -> Task:
    for key in ("train_file", "eval_file", "text_a_column", "label_column"):
        if not getattr(config, key):
            raise ConfigError(f"task.name={config.name} needs task.{key}; see docs/finetuning.md.")
    if config.type not in TASK_TYPES:
        raise ConfigError(f"task.type={config.type!r}: choose one of {', '.join(TASK_TYPES)}.")
    metrics = REGRESSION_METRICS if config.type == "regression" else CLASSIFICATION_METRICS
    return Task(
        name=config.name,
        type=config.type,
        file_format=config.name,
        header=True,
        text_a=config.text_a_column,
        text_b=config.text_b_column or None,
        label=config.label_column,
        labels=None,
        metrics=metrics,
        train_file=config.train_file,
        eval_files={"eval": config.eval_file},
    )


@dataclasses.dataclass(frozen=True)
class TextColumns:
    """Where a task's texts are in its files: what a prediction file must have too."""

    file_format: str
    header: bool
    text_a: Column
    text_b: Column | None


def text_columns(config) -> TextColumns:
    """The text columns a `task` config section names, without reading any file (GLUE's are fixed by name)."""
    if config.name in GLUE_TASKS:
        glue = GLUE_TASKS[config.name]
        return TextColumns("tsv", glue.header, glue.text_a, glue.text_b)
    return TextColumns(config.name, True, config.text_a_column, config.text_b_column or None)


def resolve_task(config) -> Task:
    """The `Task` a `task` config section names (a GLUE name with `data_dir`, or tsv|csv|jsonl with files).

    Raises:
      ConfigError: an unknown name or a missing key. MissingFileError: no GLUE files under `data_dir`.
    """
    if config.name in GLUE_TASKS:
        return _glue_task(config.name, config.data_dir)
    if config.name in FORMATS:
        return _file_task(config)
    raise ConfigError(
        f"task.name={config.name!r}: choose a GLUE task ({', '.join(GLUE_TASKS)}), glue (all of them, "
        f"kbert-finetune only), or a file format ({', '.join(FORMATS)}) with task.train_file and "
        "task.eval_file."
    )
