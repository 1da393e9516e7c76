"""A downstream task built offline from a docstring corpus: which package does a docstring come from? (The demo's
downstream task, and tools/bench_mslt.py's with --downstream_sources.)

Each example is one docstring (its sentences joined) labelled with the top-level package of its source file
(`kbert.data.docstring_packages`); the package's own name is removed from the text, so the label is not one keyword
away. The classes are the `num_classes` packages with the most distinct docstrings, each cut to the same number of
examples, spread over the package (evenly spaced in corpus order); every `eval_every`-th example of a class is
evaluated on.

Invariant: the classes are balanced in both files, no text is in both files (nor twice in one), and the same
corpus and sources give the same bytes.

Example:

```python
task = build_package_task("data/docstrings.txt", "data/sources.txt", "data/task", TaskSettings())
task.labels, task.train_examples, task.eval_examples  # ['asyncio', 'email', ...], 644, 160
task.examples().train.text_a[:1]                      # the training texts, as kbert-finetune reads them
```
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

from kbert.data.text_corpus import read_documents
from kbert.finetuning.config import TaskConfig
from kbert.finetuning.examples import TaskData, load_task_data
from kbert.finetuning.tasks import resolve_task

HEADER = ("text", "label")


@dataclasses.dataclass
class TaskSettings:
    """How many packages compete, the most examples each keeps, and the eval stride."""

    num_classes: int = 4
    max_per_class: int = 500
    eval_every: int = 5


@dataclasses.dataclass
class TaskFiles:
    """The TSV files written (columns `text`, `label`) and what they hold."""

    train_file: str
    eval_file: str
    labels: list[str]
    train_examples: int
    eval_examples: int

    def finetune_task(self) -> dict:
        """kbert-finetune's `task` section for these files."""
        text, label = HEADER
        return {
            "name": "tsv",
            "train_file": self.train_file,
            "eval_file": self.eval_file,
            "text_a_column": text,
            "text_b_column": "",
            "label_column": label,
        }

    def examples(self) -> TaskData:
        """The files' examples as kbert-finetune reads them (class ids in the order of `labels`)."""
        config = TaskConfig()
        config.override(self.finetune_task())
        return load_task_data(resolve_task(config))


def _without_name(sentences: Sequence[str], package: str) -> str:
    """The docstring on one line, the package's name (also inside dotted names) taken out."""
    name = re.escape(package.strip("_"))
    joined = " ".join(sentences).replace("\t", " ")
    return " ".join(re.sub(rf"(?i)(?<![A-Za-z0-9]){name}(?![A-Za-z0-9])", " ", joined).split())


def _examples_by_package(corpus: str, sources: str) -> dict[str, list[str]]:
    """Distinct texts per package, in corpus order; a text met before (under any package) is dropped."""
    with open(sources, encoding="utf-8") as f:
        packages = f.read().split()
    documents = list(read_documents([corpus]))
    if len(documents) != len(packages):
        raise ValueError(
            f"{sources} names {len(packages)} packages for the {len(documents)} documents of {corpus}; "
            "rebuild both with the demo."
        )
    seen: set[str] = set()
    grouped: dict[str, list[str]] = {}
    for sentences, package in zip(documents, packages):
        example = _without_name(sentences, package)
        if example and example not in seen:
            seen.add(example)
            grouped.setdefault(package, []).append(example)
    return grouped


def _spread(items: list[str], count: int) -> list[str]:
    """`count` items evenly spaced over `items` (the first included), in order."""
    return [items[i * len(items) // count] for i in range(count)]


def build_package_task(corpus: str, sources: str, out_dir: str, settings: TaskSettings) -> TaskFiles:
    """Writes `out_dir/train.tsv` and `out_dir/eval.tsv` (see the module docstring).

    Raises ValueError when fewer than two packages have enough docstrings for both files (a corpus too small).
    """
    grouped = _examples_by_package(corpus, sources)
    need = 2 * settings.eval_every
    ranked = sorted((p for p in grouped if len(grouped[p]) >= need), key=lambda p: (-len(grouped[p]), p))
    labels = sorted(ranked[: settings.num_classes])
    if len(labels) < 2:
        raise ValueError(
            f"The corpus has {len(ranked)} package(s) with at least {need} distinct docstrings; the "
            "downstream task needs 2. Raise --corpus_bytes."
        )
    per_class = min(settings.max_per_class, min(len(grouped[p]) for p in labels))
    rows = {"train": [], "eval": []}
    for label in labels:
        for index, example in enumerate(_spread(grouped[label], per_class)):
            rows["eval" if index % settings.eval_every == settings.eval_every - 1 else "train"].append((example, label))
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, examples in rows.items():
        paths[split] = os.path.join(out_dir, f"{split}.tsv")
        with open(paths[split], "w", encoding="utf-8") as f:
            f.writelines("\t".join(row) + "\n" for row in [HEADER, *examples])
    return TaskFiles(paths["train"], paths["eval"], labels, len(rows["train"]), len(rows["eval"]))
