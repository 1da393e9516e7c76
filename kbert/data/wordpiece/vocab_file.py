"""A WordPiece vocabulary file (one token per line, id = line number): its special tokens, its reader, and the
stricter load of a vocabulary to tokenize with (no TensorFlow: the data tool's parent checks it).

Two layouts for the reserved tokens that open a vocabulary kbert learns:

* ``"bert"`` (default): the ids of bert-base-uncased, ``[PAD]=0``, ``[unused0]..[unused98]=1..99``, ``[UNK]=100``,
  ``[CLS]=101``, ``[SEP]=102``, ``[MASK]=103``; learned pieces start at 104. Code and configs written for Google's
  vocabularies (which hard-code ``[PAD]=0`` and sometimes 101/102/103) keep working, and the ``[unusedN]`` slots
  can later hold domain tokens without changing any id.
* ``"compact"``: ``[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4`` and nothing else reserved, for small vocabularies
  where 99 unused rows would be a large share of the embedding table.

Example:

```python
tokens = read_vocabulary("vocab.txt")                                   # all of SPECIAL_TOKENS required
tokens = read_vocabulary("vocab.txt", required=MASKING_TOKENS)          # what dynamic masking needs
tokens = load_vocabulary("vocab.txt")                                   # one to tokenize with
```
"""

from __future__ import annotations

from collections.abc import Sequence

from kbert.data import storage
from kbert.data.storage import io_errors
from kbert.errors import VocabularyError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The tokens dynamic masking never selects, [MASK] among them; it needs no [UNK].
MASKING_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
NUM_BERT_UNUSED = 99
LAYOUTS = ("bert", "compact")


def reserved_tokens(layout: str = "bert") -> list[str]:
    """The reserved tokens, in id order, that open a vocabulary of the given layout."""
    if layout == "bert":
        pad, *rest = SPECIAL_TOKENS
        return [pad] + [f"[unused{i}]" for i in range(NUM_BERT_UNUSED)] + rest
    if layout == "compact":
        return list(SPECIAL_TOKENS)
    raise ValueError(f"Unknown reserved-token layout {layout!r}; use one of {LAYOUTS}.")


# Special token -> id in bert-base-uncased's vocabulary (the "bert" layout): [PAD] 0, [UNK] 100, ... [MASK] 103.
BERT_SPECIAL_IDS = {token: i for i, token in enumerate(reserved_tokens("bert")) if token in SPECIAL_TOKENS}


def read_vocabulary(path: str, required: Sequence[str] = SPECIAL_TOKENS, flag: str = "--vocab_file") -> list[str]:
    """The tokens of a vocabulary file, id = line number.

    Invariant of what it returns: UTF-8, no blank token, no token twice, every token of `required` present. Any
    other file is a `VocabularyError` (a missing one a `MissingFileError`) whose message names `flag`, the file
    and, for a bad line, its number.
    """
    with io_errors(path, flag):
        with storage.open(path, "rb") as f:
            raw = f.read()
    try:
        tokens = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise VocabularyError(f"{flag}: {path} is not UTF-8 ({e}).") from e
    if tokens[-1] == "":
        tokens.pop()  # the newline that ends the last line
    tokens = [t.removesuffix("\r") for t in tokens]
    _check_lines(tokens, path, flag)
    missing = [t for t in required if t not in tokens]
    if missing:
        raise VocabularyError(
            f"{flag}: {path} lacks the special token(s) {', '.join(missing)}; it needs {', '.join(required)}. "
            "Build one with kbert-build-vocab or add them to the file."
        )
    return tokens


def _check_lines(tokens: list[str], path: str, flag: str) -> None:
    """Raises on the first blank line (a blank token would tokenize nothing) and on repeated tokens."""
    for number, token in enumerate(tokens, start=1):
        if not token.strip():
            raise VocabularyError(
                f"{flag}: {path} line {number} is blank; a vocabulary has one token on every line. Remove the line "
                "(ids after it move down by one) or put a placeholder token such as [unused0] there."
            )
    seen: set[str] = set()
    repeated = sorted({t for t in tokens if t in seen or seen.add(t)})
    if repeated:
        raise VocabularyError(f"{flag}: {path} repeats token(s) {repeated[:10]}; each line must be unique.")


def load_vocabulary(path: str) -> list[str]:
    """The tokens of a vocabulary that tokenization can use: `read_vocabulary`'s checks, all of BERT's special
    tokens, and at least one token that is not reserved (tensorflow-text cannot build its trie without one)."""
    tokens = read_vocabulary(path)
    reserved = set(reserved_tokens("bert"))
    if all(t in reserved for t in tokens):
        raise VocabularyError(
            f"--vocab_file: {path} holds only reserved tokens ({', '.join(SPECIAL_TOKENS)}, [unusedN]) and no word "
            "pieces to tokenize with; learn one from your text with kbert-build-vocab."
        )
    return tokens
