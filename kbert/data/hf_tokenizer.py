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
import json
import os
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
# Lines per encode_batch call: bounds the encodings held at once.
_BATCH_LINES = 8192


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

    def tokenize_marked(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of all lines, flat (int32), each piece that continues a word as `~id`
        (masking.mark_continuations), and the row splits (int64, len(lines) + 1) that cut them by line."""
        ids: list[int] = []
        words: list[int] = []
        lengths: list[int] = []
        for start in range(0, len(lines), _BATCH_LINES):
            batch = list(lines[start : start + _BATCH_LINES])
            for encoding in self._tokenizer.encode_batch(batch, add_special_tokens=False):
                ids.extend(encoding.ids)
                words.extend(-1 if w is None else w for w in encoding.word_ids)
                lengths.append(len(encoding.ids))
        word = np.array(words, np.int64)
        splits = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        continues = np.zeros(len(word), bool)
        continues[1:] = (word[1:] == word[:-1]) & (word[1:] >= 0)
        line_starts = splits[:-1]
        continues[line_starts[line_starts < len(word)]] = False  # word ids restart with every line
        return mark_continuations(np.array(ids, np.int32), continues), splits

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Token ids of each line, as `tokenize_marked` encodes them (no special tokens added), unmarked."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(lines), add_special_tokens=False)]

    def text(self, ids: Sequence[int]) -> str:
        """`ids` decoded to text, special tokens kept."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def token(self, token_id: int) -> str:
        """The piece `token_id` stands for, as the tokenizer spells it."""
        return self._tokenizer.id_to_token(int(token_id)) or f"<id {token_id}>"


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
