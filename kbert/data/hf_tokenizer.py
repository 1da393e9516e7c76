"""A Hugging Face tokenizer.json for data creation (--tokenizer) and dynamic masking (data.tokenizer): the file or a
directory holding it, its special tokens, its SHA-256, batched encoding that marks the pieces continuing a word,
decoding for the inspector, and its pieces and configuration (word_boundaries.py reads them).

Special tokens are read, never assumed. Each plays a role (`ROLES`: cls, sep, mask, pad, unk); for each role, the
first found of: the token the directory's tokenizer_config.json, then its special_tokens_map.json names
(`cls_token` or `bos_token`, `sep_token` or `eos_token`, `mask_token`, `pad_token`, `unk_token`); the first of the
role's conventional spellings, BERT's or RoBERTa's, among the tokenizer's added tokens. Pretraining records need
cls, sep, mask and pad (`REQUIRED_ROLES`); unk is optional (byte-level BPE has none).

Text is encoded without the tokenizer's post-processor (kbert lays out [CLS] and [SEP] itself) and with special
tokens in the text encoded as text, so no special id comes from text. The pieces of one word share an entry of
`Encoding.word_ids`: each piece after a word's first continues it (whole-word masking).

`tokenize_marked` encodes each distinct string once and keeps its pieces (`tokenizers` spends about 5 us a word
however often it has seen it). For a tokenizer whose encoding of a line is the encodings of its space-separated
chunks laid end to end (`_splits_at_spaces`: byte-level BPE without a normalizer, as GPT-2's and RoBERTa's
tokenizer.json and kbert-build-vocab --learner=bpe's are), the strings are those chunks, so the distinct strings
are a corpus's words; for any other, the lines. The ids are `encode_batch`'s on each line either way (tested on
adversarial text). The kept pieces lie end to end in one int32 array, each string a row of it: a call looks its
strings' rows up in one dictionary pass and gathers their pieces with NumPy.

Example:

```python
tokenizer = HfTokenizer("tokenizers/modernbert")  # a directory holding tokenizer.json, or the file itself
ids, row_splits = tokenizer.tokenize_marked(["Hello world.", "Second sentence."])
tokenizer.special_ids.mask_id, tokenizer.sha256
```
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
from collections.abc import Sequence

import numpy as np
import tokenizers

from kbert.data import storage
from kbert.data.masking import SpecialIds, mark_continuations
from kbert.data.storage import io_errors
from kbert.errors import VocabularyError

TOKENIZER_FILE = "tokenizer.json"
# Files of a tokenizer's directory that name its special tokens, the first one to name a key winning.
CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")
# Role -> its keys in CONFIG_FILES (the first is the one a written config uses) and its conventional spellings,
# BERT's and RoBERTa's, each in order of preference. kbert-build-vocab --learner=bpe gives tokens roles by these.
ROLES = {
    "cls": (("cls_token", "bos_token"), ("[CLS]", "<s>")),
    "sep": (("sep_token", "eos_token"), ("[SEP]", "</s>")),
    "mask": (("mask_token",), ("[MASK]", "<mask>")),
    "pad": (("pad_token",), ("[PAD]", "<pad>")),
    "unk": (("unk_token",), ("[UNK]", "<unk>")),
}
REQUIRED_ROLES = ("cls", "sep", "mask", "pad")
# Strings per encode_batch call: bounds the encodings held at once.
_BATCH_LINES = 8192
# How `_chunks` marks a line's first chunk and a whole line; a later chunk is bare (it holds no whitespace).
_FIRST, _LINE = "\n", "\r"
# A chunk of a line whose only whitespace is spaces: its spaces and the characters up to the next space.
_SPACED_CHUNK = re.compile(" *[^ ]+")
# Whitespace other than a space (Python's, as str.split's: both go by Py_UNICODE_ISSPACE).
_OTHER_WHITESPACE = re.compile(r"[^\S ]")
# Later chunks per made-up line that `HfTokenizer._keep` encodes.
_CHUNKS_PER_LINE = 128
# Pieces that `HfTokenizer.tokenize_marked` keeps for the strings it has encoded before it forgets them all: bounds
# a worker's memory (about 35 MB, the strings and their int32 ids) and holds the words of many work units: the
# 148,602 distinct strings of 17.8 MB of Python docstrings hold 544,091 pieces.
_KEPT_PIECES = 1 << 20


def tokenizer_file(path: str) -> str:
    """The tokenizer.json that `path` names: `path` itself, or the one in the directory `path`."""
    return os.path.join(path, TOKENIZER_FILE) if storage.isdir(path) else path


class HfTokenizer:
    """A tokenizer.json loaded with the `tokenizers` library; `special_tokens` (role -> token) and `special_ids`
    are found on first use, so the inspector decodes with any tokenizer. Errors name `flag`, the flag or config
    key that gave `path`."""

    def __init__(self, path: str, flag: str = "--tokenizer"):
        self.path = path
        self.flag = flag
        self.file = tokenizer_file(path)
        with io_errors(self.file, flag), storage.open(self.file, "rb") as f:
            raw = f.read()
        self.sha256 = hashlib.sha256(raw).hexdigest()
        try:
            self._tokenizer = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as e:  # tokenizers raises a bare Exception for any file it cannot read
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise VocabularyError(
                f"{flag}: {self.file} is not a tokenizer.json the tokenizers library reads ({reason}); give a "
                "Hugging Face tokenizer.json or the directory holding one."
            ) from e
        self._tokenizer.encode_special_tokens = True
        self.vocab_size = max(self._tokenizer.get_vocab(with_added_tokens=True).values()) + 1
        self._forget()

    @functools.cached_property
    def special_tokens(self) -> dict[str, str]:
        """Role (`ROLES`) -> the token that plays it; a `VocabularyError` naming the missing ones of
        `REQUIRED_ROLES` and the file."""
        configured = _configured_tokens(self.path, self.flag) if storage.isdir(self.path) else {}
        added = {token.content for token in self._tokenizer.get_added_tokens_decoder().values()}
        found, missing = {}, []
        for role, (keys, spellings) in ROLES.items():
            key = next((k for k in keys if k in configured), None)
            if key is not None:
                token, source = configured[key]
                if self._tokenizer.token_to_id(token) is None:
                    raise VocabularyError(
                        f"{self.flag}: {source} names {key} {token!r}, which {self.file} does not hold; fix the one "
                        "that is wrong."
                    )
                found[role] = token
            elif any(s in added for s in spellings):
                found[role] = next(s for s in spellings if s in added)
            elif role in REQUIRED_ROLES:
                missing.append(f"a {role} token ({' or '.join(spellings)})")
        if missing:
            where = f" nor in {' or '.join(CONFIG_FILES)}" if storage.isdir(self.path) else ""
            raise VocabularyError(
                f"{self.flag}: {self.file} lacks {', '.join(missing)} among its added tokens{where}; pretraining "
                f"records need {', '.join(REQUIRED_ROLES)} tokens: add them to the tokenizer, or give one made for "
                "masked-language modelling."
            )
        return found

    @functools.cached_property
    def role_ids(self) -> dict[str, int]:
        """Role (`ROLES`) -> the id of the token that plays it."""
        return {role: self._tokenizer.token_to_id(token) for role, token in self.special_tokens.items()}

    @functools.cached_property
    def special_ids(self) -> SpecialIds:
        ids = self.role_ids
        return SpecialIds(
            cls_id=ids["cls"], sep_id=ids["sep"], mask_id=ids["mask"], vocab_size=self.vocab_size, unk_id=ids.get("unk")
        )

    @functools.cached_property
    def special_token_ids(self) -> tuple[int, ...]:
        """Ascending ids of the tokens that only kbert's layout places, never text (special tokens in text are
        encoded as text): [CLS], [SEP], [MASK], [PAD] and every added token the tokenizer flags special, less
        [UNK], which stands for text."""
        roles = {self._tokenizer.token_to_id(self.special_tokens[role]) for role in REQUIRED_ROLES}
        flagged = {i for i, special in self.added_tokens.items() if special} - {self.special_ids.unk_id}
        return tuple(sorted(roles | flagged))

    @functools.cached_property
    def added_tokens(self) -> dict[int, bool]:
        """Id of every added token -> whether the tokenizer flags it special."""
        return {i: token.special for i, token in self._tokenizer.get_added_tokens_decoder().items()}

    @functools.cached_property
    def config(self) -> dict:
        """The tokenizer.json as a dict: its `model`, `normalizer`, `pre_tokenizer`, ..."""
        return json.loads(self._tokenizer.to_str())

    def pieces(self) -> list[str | None]:
        """The piece of every id below `vocab_size`, added tokens included; None for an id that stands for none."""
        pieces: list[str | None] = [None] * self.vocab_size
        for piece, i in self._tokenizer.get_vocab(with_added_tokens=True).items():
            pieces[i] = piece
        return pieces

    @functools.cached_property
    def splits_at_spaces(self) -> bool:
        """Whether `tokenize_marked` encodes a line's space-separated chunks apart (`_splits_at_spaces`)."""
        return _splits_at_spaces(self.config)

    def tokenize_marked(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of all lines, flat (int32), each piece that continues a word as `~id`
        (masking.mark_continuations), and the row splits (int64, len(lines) + 1) that cut them by line."""
        if len(self._pieces) > _KEPT_PIECES:
            self._forget()
        if self.splits_at_spaces:
            keys, counts = _chunks(lines)
        else:
            keys, counts = [_LINE + line for line in lines], [1] * len(lines)
        rows = np.fromiter(map(self._rows.get, keys, itertools.repeat(-1)), np.int64, len(keys))
        missing = np.flatnonzero(rows < 0).tolist()
        if missing:
            self._keep(list(dict.fromkeys(keys[i] for i in missing)))
            rows[missing] = [self._rows[keys[i]] for i in missing]
        lengths = self._lengths[rows]
        ends = np.cumsum(lengths)
        # Each key's pieces, gathered from where they are kept: position p of the output, in the key ending at e,
        # is the kept piece start + p - (e - length).
        shift = np.repeat(self._starts[rows] - ends + lengths, lengths)
        ids = self._pieces[np.arange(len(shift)) + shift]
        return ids, np.concatenate([[0], ends])[np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])]

    def _forget(self) -> None:
        """Forgets every key `tokenize_marked` has kept."""
        self._rows: dict[str, int] = {}  # a key (`_chunks`) -> its row of _starts and _lengths
        self._starts = np.zeros([0], np.int64)  # where each row's marked ids begin in _pieces
        self._lengths = np.zeros([0], np.int64)
        self._pieces = np.zeros([0], np.int32)  # the kept keys' marked ids, end to end

    def _keep(self, new: list[str]) -> None:
        """Encodes the keys (`_chunks`) in `new`, none kept yet, and keeps their marked ids. Chunks are encoded as
        made-up lines (tokenizers' cost per line is many words'): each a first chunk, or none, then later ones,
        which `_splits_at_spaces` encodes as each chunk alone; a chunk's pieces are those whose offsets start in
        it. A whole line is encoded alone."""
        firsts = [key for key in new if key[:1] == _FIRST]
        later = [key for key in new if key[:1] not in (_FIRST, _LINE)]
        count = max(len(firsts), -(-len(later) // _CHUNKS_PER_LINE))
        groups = [firsts[i : i + 1] + later[i::count] for i in range(count)] + [[k] for k in new if k[:1] == _LINE]
        order = list(itertools.chain.from_iterable(groups))
        texts = [key[1:] if key[:1] in (_FIRST, _LINE) else " " + key for key in order]
        lines = ["".join(texts[i - len(g) : i]) for g, i in zip(groups, itertools.accumulate(map(len, groups)))]
        ids: list[int] = []
        words: list[int | None] = []
        offsets: list[tuple[int, int]] = []
        lengths: list[int] = []
        for start in range(0, len(lines), _BATCH_LINES):
            for encoding in self._tokenizer.encode_batch(lines[start : start + _BATCH_LINES], add_special_tokens=False):
                ids += encoding.ids
                words += encoding.word_ids
                offsets += encoding.offsets
                lengths.append(len(encoding))
        # Positions in the made-up lines laid end to end; a piece is the last key's that starts at or before it.
        line_starts = np.cumsum([0] + [len(line) for line in lines[:-1]])
        key_starts = np.cumsum([0] + [len(text) for text in texts[:-1]])
        position = np.repeat(line_starts, lengths) + np.array(offsets, np.int64).reshape(-1, 2)[:, 0]
        key = np.searchsorted(key_starts, position, "right") - 1
        word = np.array(words, np.float64)  # None (an added token) as NaN, equal to nothing
        continues = np.zeros(len(word), bool)
        continues[1:] = (word[1:] == word[:-1]) & (key[1:] == key[:-1])
        marked = mark_continuations(np.array(ids, np.int64), continues).astype(np.int32)
        # The pieces come in `order`'s order, so each key's are a run: its count of them, from where the run starts.
        key_lengths = np.bincount(key, minlength=len(order))
        self._rows.update(zip(order, range(len(self._rows), len(self._rows) + len(order))))
        self._starts = np.concatenate([self._starts, len(self._pieces) + np.cumsum(key_lengths) - key_lengths])
        self._lengths = np.concatenate([self._lengths, key_lengths])
        self._pieces = np.concatenate([self._pieces, marked])

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Token ids of each line, as `tokenize_marked` encodes them (no special tokens added), unmarked."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(lines), add_special_tokens=False)]

    def text(self, ids: Sequence[int]) -> str:
        """`ids` decoded to text, special tokens kept."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def token(self, token_id: int) -> str:
        """The piece `token_id` stands for, as the tokenizer spells it."""
        return self._tokenizer.id_to_token(int(token_id)) or f"<id {token_id}>"


def _splits_at_spaces(config: dict) -> bool:
    """Whether a tokenizer.json (as a dict) encodes a line whose only whitespace is spaces, none last, as the
    encodings of its chunks (each a run of spaces, none first, then the characters up to the next space) laid end
    to end (`_chunks`). True when nothing joins text across the start of a chunk: no normalizer (it sees the whole
    line); the ByteLevel pre-tokenizer, whose regular expression ends each of its words at a space (its whitespace
    is Python's: tests/test_tokenizer_records.py) and begins the next there, looking ahead only; no BPE dropout,
    truncation or padding; and no added token that tokenizers matches in text (one not special: special ones are
    text here) reaching from one chunk into the next (`_within_a_chunk`)."""
    pre_tokenizer, model = config.get("pre_tokenizer") or {}, config.get("model") or {}
    return (
        config.get("normalizer") is None
        and pre_tokenizer.get("type") == "ByteLevel"
        and pre_tokenizer.get("use_regex", True)
        and not model.get("dropout")
        and config.get("truncation") is None
        and config.get("padding") is None
        and all(token["special"] or _within_a_chunk(token) for token in config.get("added_tokens", []))
    )


def _within_a_chunk(token: dict) -> bool:
    """Whether an added token (a tokenizer.json's dict) matched in a line of `_splits_at_spaces` lies within one
    of its chunks (spaces, then other characters): its spaces all come first and it strips no whitespace on its
    right after other characters; or it holds whitespace other than spaces, so never matches such a line."""
    content = token["content"]
    word = content.lstrip(" ")
    never_in_line = any(c.isspace() and c != " " for c in content)
    return never_in_line or (" " not in word and not (word and token.get("rstrip")))


def _chunks(lines: Sequence[str]) -> tuple[list[str], list[int]]:
    """The keys `tokenize_marked` encodes the lines by, and how many each line gives. A line whose only whitespace
    is spaces gives its chunks (`_splits_at_spaces`): the first marked `_FIRST`, each later one less its first
    space (encoded after a space, so a line's chunks of single spaces are its `str.split(" ")`); any other line
    gives itself, marked `_LINE`."""
    keys: list[str] = []
    counts: list[int] = []
    other_whitespace = _OTHER_WHITESPACE.search(" ".join(lines)) is not None  # in any line: looked for line by line
    for line in lines:
        chunks = line.split(" ")
        # A space first, last or after another (an empty chunk; an empty line); whitespace other than spaces.
        if "" in chunks or (other_whitespace and _OTHER_WHITESPACE.search(line)):
            if line.endswith(" ") or line.split() != [chunk for chunk in chunks if chunk]:  # or other whitespace
                keys.append(_LINE + line)
                counts.append(1)
                continue
            chunks = _SPACED_CHUNK.findall(line)
            chunks[1:] = [chunk[1:] for chunk in chunks[1:]]
        if chunks:
            chunks[0] = _FIRST + chunks[0]
        keys += chunks
        counts.append(len(chunks))
    return keys, counts


def _configured_tokens(directory: str, flag: str) -> dict[str, tuple[str, str]]:
    """The special tokens `CONFIG_FILES` in `directory` name: key (cls_token, ...) -> (token, the file naming it)."""
    keys = [key for role_keys, _ in ROLES.values() for key in role_keys]
    named: dict[str, tuple[str, str]] = {}
    for name in CONFIG_FILES:
        path = os.path.join(directory, name)
        if not storage.exists(path):
            continue
        with io_errors(path, flag), storage.open(path, "rb") as f:
            raw = f.read()
        try:
            config = json.loads(raw)
        except ValueError as e:
            raise VocabularyError(f"{flag}: {path} is not JSON ({e}); fix or remove it.") from e
        for key in keys:
            value = config.get(key) if isinstance(config, dict) else None
            token = value.get("content") if isinstance(value, dict) else value  # a string, or an AddedToken's dict
            if isinstance(token, str) and token:
                named.setdefault(key, (token, path))
    return named
