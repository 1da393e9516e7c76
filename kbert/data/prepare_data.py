"""Small pretraining data in one folder: text (a docstring corpus or the user's files) -> train/held-out split ->
vocabulary -> TFRecords. The demo's data, and tools/batch_scaling_study.py's.

Invariant: no held-out document is in the training text, nor in the text the vocabulary is learned from.

Example:

```python
prepared = prepare_data(DataSettings(), "/tmp/demo/data")
prepared.train_files, prepared.vocab_size
```
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Callable, Sequence, Set

from kbert.data import docstring_corpus, input_files, text_corpus
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.docstring_packages import DocumentSources
from kbert.data.instances import InstanceConfig
from kbert.data.wordpiece import vocab_learning


@dataclasses.dataclass
class DataSettings:
    """`text` empty means a docstring corpus capped at `corpus_bytes`: of `source_roots`, or by default of this
    Python's standard library alone (`docstring_corpus.stdlib_root`, `stdlib_modules`), never site-packages, so
    the same CPython release gives the same corpus whatever is installed. Every `heldout_every`-th document is
    held out. `objective` is the records' layout (`InstanceConfig.objective`): "nsp" sentence pairs, or "mlm" rows
    of consecutive text, full but the last."""

    text: Sequence[str] = ()
    corpus_bytes: int = 2_000_000
    source_roots: Sequence[str] | None = None
    heldout_every: int = 20
    vocab_size: int = 8000
    seq_length: int = 64
    max_predictions: int = 10
    dupe_factor: int = 2
    objective: str = "nsp"
    seed: int = 12345
    num_workers: int = 2


@dataclasses.dataclass
class PreparedData:
    """The files `prepare_data` wrote and what training needs to know about them."""

    train_files: str
    eval_files: str
    vocab_file: str
    vocab_size: int
    train_instances: int
    heldout_instances: int
    text_file: str  # the text the documents come from: the docstring corpus, or the user's files joined
    # The package of each corpus document, one a line ("" for the user's text, whose source is theirs).
    sources_file: str


def prepare_data(
    settings: DataSettings, data_dir: str, print_fn: Callable[..., None] = print, step_format: str = "[{}/6]"
) -> PreparedData:
    """Writes the text, vocabulary and TFRecords into `data_dir` (printing steps 1-4).

    Raises ValueError / FileNotFoundError when the text is missing or too small, naming the flag.
    """
    os.makedirs(data_dir, exist_ok=True)
    source, sources_file = _source_text(settings, data_dir, print_fn, step_format.format(1))
    print_fn(f"{step_format.format(2)} train/held-out split of {source}")
    train_txt, heldout_txt = os.path.join(data_dir, "train.txt"), os.path.join(data_dir, "heldout.txt")
    split = text_corpus.write_split(
        text_corpus.read_documents([source], resplit=bool(settings.text)),
        train_txt,
        heldout_txt,
        settings.heldout_every,
    )
    print_fn(
        f"      {split.train_documents:,} train documents ({split.train_sentences:,} sentences), "
        f"{split.heldout_documents:,} held-out ({split.heldout_sentences:,} sentences)"
    )

    vocab_file = os.path.join(data_dir, "vocab.txt")
    print_fn(f"{step_format.format(3)} learning a WordPiece vocabulary of at most {settings.vocab_size:,} tokens")
    tokens, _ = vocab_learning.learn_vocabulary([train_txt], settings.vocab_size, lower_case=True, layout="compact")
    vocab_learning.write_vocabulary(tokens, vocab_file)
    print_fn(f"      {len(tokens):,} tokens -> {vocab_file}")

    print_fn(f"{step_format.format(4)} writing TFRecords")
    instances = {}
    for name, source_txt, dupe_factor in (("train", train_txt, settings.dupe_factor), ("heldout", heldout_txt, 1)):
        output = os.path.join(data_dir, f"{name}.tfrecord")
        summary = create_pretraining_data(
            [source_txt],
            [output],
            vocab_file,
            True,
            InstanceConfig(
                max_seq_length=settings.seq_length,
                max_predictions_per_seq=settings.max_predictions,
                dupe_factor=dupe_factor,
                objective=settings.objective,
            ),
            random_seed=settings.seed,
            num_workers=settings.num_workers,
        )
        print_fn(f"      {name}: {summary.instances:,} instances -> {output}")
        instances[name] = summary.instances
    if instances["heldout"] == 0:
        raise ValueError("The held-out text gave no instances; give more text.")
    return PreparedData(
        os.path.join(data_dir, "train.tfrecord"),
        os.path.join(data_dir, "heldout.tfrecord"),
        vocab_file,
        len(tokens),
        instances["train"],
        instances["heldout"],
        source,
        sources_file,
    )


def _source_text(settings: DataSettings, data_dir: str, print_fn, step: str) -> tuple[str, str]:
    """The file the documents come from (the user's files joined, or a freshly built docstring corpus) and, for
    the corpus, the file naming each document's package."""
    if settings.text:
        inputs = input_files.expand_patterns(",".join(settings.text), "--text")
        print_fn(f"{step} using your text: {', '.join(inputs)}")
        combined = os.path.join(data_dir, "text.txt")
        with open(combined, "w", encoding="utf-8") as out:
            for path in inputs:
                with open(path, encoding="utf-8", errors="replace") as f:
                    out.write(f.read().rstrip("\n") + "\n\n")
        return combined, ""
    corpus, sources_file = os.path.join(data_dir, "docstrings.txt"), os.path.join(data_dir, "sources.txt")
    roots, _ = corpus_roots(settings)
    where = (
        ", ".join(roots)
        if settings.source_roots
        else f"the standard library of Python {platform.python_version()} ({roots[0]})"
    )
    print_fn(f"{step} building the docstring corpus (at most {settings.corpus_bytes:,} bytes) from {where}")
    stats = write_docstring_corpus(settings, corpus, sources_file)
    print_fn(
        f"      {stats.documents:,} documents, {stats.sentences:,} sentences, {stats.bytes:,} bytes from "
        f"{stats.files:,} files -> {corpus}"
    )
    return corpus, sources_file


def corpus_roots(settings: DataSettings) -> tuple[list[str], Set[str] | None]:
    """The directories the docstring corpus reads and the top-level modules it reads there: every module of
    `source_roots`, or by default the standard library's own modules (`docstring_corpus.stdlib_modules`), whatever
    site-packages or `sys.path` hold."""
    if settings.source_roots:
        return list(settings.source_roots), None
    return [docstring_corpus.stdlib_root()], docstring_corpus.stdlib_modules()


def write_docstring_corpus(settings: DataSettings, corpus_file: str, sources_file: str) -> docstring_corpus.CorpusStats:
    """Writes the docstring corpus of `corpus_roots(settings)`, capped at `corpus_bytes`, and beside it the package
    of each of its documents, one a line."""
    roots, modules = corpus_roots(settings)
    sources = DocumentSources(roots, modules)
    stats = docstring_corpus.build_docstring_corpus(
        corpus_file, roots, max_bytes=settings.corpus_bytes, progress=sources, modules=modules
    )
    with open(sources_file, "w", encoding="utf-8") as f:
        f.writelines(package + "\n" for package in sources.packages(stats.documents))
    return stats
