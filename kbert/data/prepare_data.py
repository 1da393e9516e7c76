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
from typing import Callable, Optional, Sequence

from kbert.data import docstring_corpus, files, text_documents, vocab
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.document_sources import DocumentSources
from kbert.data.instances import InstanceConfig


@dataclasses.dataclass
class DataSettings:
    """`text` empty means the docstring corpus of this Python (`source_roots`, default the stdlib and
    site-packages, capped at `corpus_bytes`). Every `heldout_every`-th document is held out."""

    text: Sequence[str] = ()
    corpus_bytes: int = 2_000_000
    source_roots: Optional[Sequence[str]] = None
    heldout_every: int = 20
    vocab_size: int = 8000
    seq_length: int = 64
    max_predictions: int = 10
    dupe_factor: int = 2
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


def prepare_data(settings: DataSettings, data_dir: str, print_fn: Callable[..., None] = print,
                 step_format: str = "[{}/6]") -> PreparedData:
    """Writes the text, vocabulary and TFRecords into `data_dir` (printing steps 1-4).

    Raises ValueError / FileNotFoundError when the text is missing or too small, naming the flag.
    """
    os.makedirs(data_dir, exist_ok=True)
    source, sources_file = _source_text(settings, data_dir, print_fn, step_format.format(1))
    print_fn(f"{step_format.format(2)} train/held-out split of {source}")
    train_txt, heldout_txt = os.path.join(data_dir, "train.txt"), os.path.join(data_dir, "heldout.txt")
    split = text_documents.write_split(text_documents.read_documents([source], resplit=bool(settings.text)), train_txt,
                                       heldout_txt, settings.heldout_every)
    print_fn(f"      {split.train_documents:,} train documents ({split.train_sentences:,} sentences), "
             f"{split.heldout_documents:,} held-out ({split.heldout_sentences:,} sentences)")

    vocab_file = os.path.join(data_dir, "vocab.txt")
    print_fn(f"{step_format.format(3)} learning a WordPiece vocabulary of at most {settings.vocab_size:,} tokens")
    tokens, _ = vocab.learn_vocabulary([train_txt], settings.vocab_size, lower_case=True, layout="compact")
    vocab.write_vocabulary(tokens, vocab_file)
    print_fn(f"      {len(tokens):,} tokens -> {vocab_file}")

    print_fn(f"{step_format.format(4)} writing TFRecords")
    instances = {}
    for name, source_txt, dupe_factor in (("train", train_txt, settings.dupe_factor), ("heldout", heldout_txt, 1)):
        output = os.path.join(data_dir, f"{name}.tfrecord")
        summary = create_pretraining_data(
            [source_txt], [output], vocab_file, True,
            InstanceConfig(max_seq_length=settings.seq_length, max_predictions_per_seq=settings.max_predictions,
                           dupe_factor=dupe_factor),
            random_seed=settings.seed, num_workers=settings.num_workers)
        print_fn(f"      {name}: {summary.instances:,} instances -> {output}")
        instances[name] = summary.instances
    if instances["heldout"] == 0:
        raise ValueError("The held-out text gave no instances; give more text.")
    return PreparedData(os.path.join(data_dir, "train.tfrecord"), os.path.join(data_dir, "heldout.tfrecord"),
                        vocab_file, len(tokens), instances["train"], instances["heldout"], source, sources_file)


def _source_text(settings: DataSettings, data_dir: str, print_fn, step: str) -> tuple[str, str]:
    """The file the documents come from (the user's files joined, or a freshly built docstring corpus) and, for
    the corpus, the file naming each document's package."""
    if settings.text:
        inputs = files.expand_patterns(",".join(settings.text), "--text")
        print_fn(f"{step} using your text: {', '.join(inputs)}")
        combined = os.path.join(data_dir, "text.txt")
        with open(combined, "w", encoding="utf-8") as out:
            for path in inputs:
                with open(path, encoding="utf-8", errors="replace") as f:
                    out.write(f.read().rstrip("\n") + "\n\n")
        return combined, ""
    corpus = os.path.join(data_dir, "docstrings.txt")
    print_fn(f"{step} building the docstring corpus (at most {settings.corpus_bytes:,} bytes) from the installed "
             "Python packages")
    roots = settings.source_roots or docstring_corpus.default_roots()
    sources = DocumentSources(roots)
    stats = docstring_corpus.build_docstring_corpus(corpus, roots, max_bytes=settings.corpus_bytes, progress=sources)
    sources_file = os.path.join(data_dir, "sources.txt")
    with open(sources_file, "w", encoding="utf-8") as f:
        f.writelines(package + "\n" for package in sources.packages(stats.documents))
    print_fn(f"      {stats.documents:,} documents, {stats.sentences:,} sentences, {stats.bytes:,} bytes from "
             f"{stats.files:,} files -> {corpus}")
    return corpus, sources_file
