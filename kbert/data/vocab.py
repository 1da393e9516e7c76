"""Learning a WordPiece vocabulary from text with tensorflow-text's BERT vocabulary learner.

The reserved tokens that open the vocabulary follow one of vocab_file.py's layouts (``--reserved_layout``).

Example:

```python
from kbert.data import vocab
tokens, stats = vocab.learn_vocabulary(["corpus.txt"], vocab_size=8000, lower_case=True)
vocab.write_vocabulary(tokens, "vocab.txt")
```
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as vocab_learner

from kbert.data import outputs
from kbert.data.files import io_errors, require_text
from kbert.data.vocab_file import reserved_tokens
from kbert.errors import ConfigError, InputDataError


@dataclasses.dataclass
class VocabStats:
    """What `learn_vocabulary` saw and produced."""

    lines: int
    chars: int
    vocab_size: int
    num_reserved: int


def learn_vocabulary(
    files: Sequence[str],
    vocab_size: int,
    lower_case: bool = True,
    layout: str = "bert",
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], VocabStats]:
    """Learns a WordPiece vocabulary of at most `vocab_size` tokens from text files.

    The text is split into words with BERT's basic tokenizer (same `lower_case` as the tokenizer that will use the
    vocabulary), then `bert_vocab_from_dataset` picks the pieces. The learner aims at `vocab_size` within a 5%
    slack, so the result may be slightly smaller. `progress(lines, chars)` is called as the files are read. Files
    without text, or text without words, are an `InputDataError`.
    """
    reserved = reserved_tokens(layout)
    if vocab_size <= len(reserved):
        raise ConfigError(
            f"--vocab_size={vocab_size} leaves no room for learned pieces after the {len(reserved)} reserved tokens "
            f"of the {layout!r} layout; raise it or use --reserved_layout=compact."
        )
    counter = {"lines": 0, "chars": 0}

    def lines() -> Iterable[str]:
        for text in _read_lines(files):
            counter["lines"] += 1
            counter["chars"] += len(text)
            if progress is not None and counter["lines"] % 100_000 == 0:
                progress(counter["lines"], counter["chars"])
            yield text

    for path in files:
        require_text(path)  # read errors and empty files named here: inside tf.data they would be a traceback
    dataset = tf.data.Dataset.from_generator(lines, output_signature=tf.TensorSpec([], tf.string)).batch(1024)
    try:
        tokens = vocab_learner.bert_vocab_from_dataset(
            dataset,
            vocab_size=vocab_size,
            reserved_tokens=reserved,
            bert_tokenizer_params={"lower_case": lower_case},
        )
    except StopIteration:  # the learner's way of saying it counted no word at all
        raise InputDataError(
            f"--input_file: no words to learn from in {', '.join(files[:3])}{' ...' if len(files) > 3 else ''} "
            f"({counter['lines']:,} non-blank line(s), none with a letter, digit or punctuation mark); give text "
            "in BERT's format: one sentence per line."
        ) from None
    if progress is not None:
        progress(counter["lines"], counter["chars"])
    return tokens, VocabStats(counter["lines"], counter["chars"], len(tokens), len(reserved))


def _read_lines(files: Sequence[str]) -> Iterable[str]:
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as f:
            for raw in f:
                text = raw.decode("utf-8", errors="replace").strip()
                if text:
                    yield text


def write_vocabulary(tokens: Sequence[str], path: str) -> None:
    """Writes one token per line, staged (outputs.py) so a crash never leaves a partial vocabulary at `path`."""
    with outputs.staged(path) as temp, io_errors(temp, "--output_file"), tf.io.gfile.GFile(temp, "w") as f:
        f.write("".join(f"{token}\n" for token in tokens))
