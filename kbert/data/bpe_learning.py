"""Learning a byte-level BPE tokenizer from text, as RoBERTa's and ModernBERT's, and writing it as a Hugging Face
`tokenizer.json` (kbert-build-vocab --learner=bpe).

The tokenizer, built and trained with Hugging Face `tokenizers`:

* normalizer: none, the text as it is (BPE tokenizers are cased); with `lower_case`, NFC then lower-casing (no
  accent stripping: accented letters are bytes like any other);
* pre-tokenizer: ByteLevel with `add_prefix_space=false`, as RoBERTa's and ModernBERT's: GPT-2's pattern cuts
  the text into words that keep their leading space (shown as ``Ġ``), so a text's first word is split as a word
  after a space is not, and the 256 byte values are mapped to 256 printable characters;
* model: BPE, trained by `BpeTrainer` (every pair seen, however rarely, can merge). Ids: the special tokens in the
  order given (0, 1, ...), then the 256 byte pieces, then each merge's token in the order learned. Every text
  encodes without an unknown token;
* post-processor: ``CLS $A SEP`` and ``CLS $A SEP $B SEP`` (B's type id 1), BERT's template, with the tokens of
  the cls and sep roles (ModernBERT's template, and RoBERTa's but for its doubled ``</s></s>`` between A and B);
* decoder: ByteLevel, so `decode(encode(text).ids)` gives the text back (lower-cased with `lower_case`).

Special tokens play roles by their names (`ROLE_NAMES`): BERT's ``[CLS] [SEP] [MASK] [PAD] [UNK]`` or RoBERTa's
``<s> </s> <mask> <pad> <unk>``; cls, sep, mask and pad are required, unk is optional (byte-level BPE never needs
it), and any other name is a special token without a role. The mask token matches with the spaces before it
(`lstrip`, as RoBERTa's and ModernBERT's ``<mask>``/``[MASK]``), so ``"a [MASK]."`` puts no space token before it.
`write_tokenizer` writes the roles into a `tokenizer_config.json` beside the `tokenizer.json`, under the keys
transformers reads (``cls_token``, ``sep_token``, ``mask_token``, ``pad_token``, ``unk_token``).

The same text gives the same bytes on every run, and in every input format: the trainer's word counts do not
depend on the order of the lines or on its threads, it takes the most frequent pair first and the pair of smaller
ids among equals, and every id it compares is fixed before training (the special tokens', then the 256 bytes' in
the code point order of the characters that stand for them, then the merges' in merge order).

Example:

```python
from kbert.data import bpe_learning
tokenizer, stats = bpe_learning.learn_bpe(["corpus.txt"], vocab_size=8000)
bpe_learning.write_tokenizer(tokenizer, "bpe/tokenizer.json")      # and bpe/tokenizer_config.json
```
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from kbert.data import outputs, storage, work_units
from kbert.data.hf_tokenizer import REQUIRED_ROLES, ROLES
from kbert.data.storage import io_errors
from kbert.data.vocab_corpus import CorpusReading, Progress, VocabStats, batches, learn_from
from kbert.data.wordpiece.vocab_file import SPECIAL_TOKENS
from kbert.errors import ConfigError

LEARNER = "bpe"  # its name among kbert-build-vocab's --learner values
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
NUM_BYTES = 256  # byte pieces, in every byte-level BPE vocabulary
# Special token -> the role it plays: the spellings data creation reads roles by (BERT's names and RoBERTa's).
ROLE_NAMES = {spelling: role for role, (_, spellings) in ROLES.items() for spelling in spellings}
_EXAMPLE = f"--special_tokens={','.join(SPECIAL_TOKENS)}"


def special_token_roles(special_tokens: Sequence[str]) -> dict[str, str]:
    """Role -> the token that plays it (`ROLE_NAMES`), for every role a token of `special_tokens` plays.

    A blank or repeated token, two tokens of one role, or no token for a role of `REQUIRED_ROLES` is a
    `ConfigError` naming --special_tokens.
    """
    named = f"--special_tokens={','.join(special_tokens)}"
    roles: dict[str, str] = {}
    for i, token in enumerate(special_tokens):
        if not token.strip():
            raise ConfigError(f"{named}: token {i + 1} is blank; give each special token a name, e.g. {_EXAMPLE}.")
        if token in special_tokens[:i]:
            raise ConfigError(f"{named} names {token} twice; name each special token once.")
        role = ROLE_NAMES.get(token)
        if role in roles:
            raise ConfigError(f"{named}: {roles[role]} and {token} both play {role}; keep one of them.")
        if role is not None:
            roles[role] = token
    for role in REQUIRED_ROLES:
        if role not in roles:
            names = " or ".join(name for name, its in ROLE_NAMES.items() if its == role)
            raise ConfigError(f"{named}: no token plays {role} ({names}); add one, e.g. {_EXAMPLE}.")
    return roles


def learn_bpe(
    files: Sequence[str],
    vocab_size: int,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
    lower_case: bool = False,
    progress: Progress | None = None,
    input_format: work_units.InputFormat = work_units.TEXT,
) -> tuple[Tokenizer, VocabStats]:
    """Learns a byte-level BPE tokenizer of `vocab_size` tokens (`special_tokens`, the 256 bytes and the merges),
    described in the module's docstring, from the text of `files`.

    Exactly `vocab_size` tokens unless the text holds fewer merges: `VocabStats.shortfall` then says so.
    `progress("learning", lines, chars)` is called as the files are read. Bad special tokens
    (`special_token_roles`) or a `vocab_size` without room for one merge are a `ConfigError`, files without text an
    `InputDataError`, both before anything is read.
    """
    roles = special_token_roles(special_tokens)
    smallest = len(special_tokens) + NUM_BYTES + 1
    if vocab_size < smallest:
        raise ConfigError(
            f"--vocab_size={vocab_size} leaves no room for merges after the {len(special_tokens)} special tokens and "
            f"the {NUM_BYTES} byte pieces; raise it to at least {smallest} (tens of thousands is usual)."
        )
    tokenizer, corpus = learn_from(
        files, lambda corpus: _train(corpus, vocab_size, special_tokens, roles, lower_case), progress, input_format
    )
    size = tokenizer.get_vocab_size()
    shortfall = None
    if size < vocab_size:
        shortfall = (
            f"the text holds only {size - len(special_tokens) - NUM_BYTES:,} merges; tokenizer has {size:,} tokens "
            f"where {vocab_size:,} were asked: give more text or a smaller --vocab_size"
        )
    return tokenizer, corpus.stats(size, len(special_tokens), vocab_size, shortfall)


def _train(
    corpus: CorpusReading, vocab_size: int, special_tokens: Sequence[str], roles: dict[str, str], lower_case: bool
) -> Tokenizer:
    """The tokenizer of the module's docstring, trained on the corpus' lines."""
    tokenizer = Tokenizer(models.BPE())
    if lower_case:
        tokenizer.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(token, special=True, lstrip=token == roles["mask"]) for token in special_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(batches(corpus.read("learning")), trainer)
    cls, sep = roles["cls"], roles["sep"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
    )
    return tokenizer


def output_files(path: str) -> list[str]:
    """What `write_tokenizer(tokenizer, path)` writes: `path` itself, which must be named tokenizer.json (the name
    transformers and kbert's tools look for in a folder), and tokenizer_config.json beside it; a `ConfigError`
    naming --output_file for another name."""
    folder, name = posixpath.split(path)
    if name != TOKENIZER_FILE:
        suggested = posixpath.join(folder if name.endswith(".json") else path, TOKENIZER_FILE)
        raise ConfigError(
            f"--output_file={path}: --learner={LEARNER} writes {TOKENIZER_FILE} and its {CONFIG_FILE} into one "
            f"folder; name the file {TOKENIZER_FILE}, e.g. --output_file={suggested}."
        )
    return [path, posixpath.join(folder, CONFIG_FILE)]


def write_tokenizer(tokenizer: Tokenizer, path: str) -> None:
    """Writes `tokenizer` at `path` (named tokenizer.json: `output_files`) and, beside it, tokenizer_config.json
    with its special tokens' roles; both staged (outputs.py), so a failure replaces neither file."""
    tokens = tokenizer.get_added_tokens_decoder()
    roles = special_token_roles([tokens[i].content for i in sorted(tokens) if tokens[i].special])
    keys = {role: keys[0] for role, (keys, _) in ROLES.items()}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **{keys[role]: roles[role] for role in sorted(roles)}}
    tokenizer_path, config_path = output_files(path)
    with outputs.staged(tokenizer_path) as tokenizer_temp, outputs.staged(config_path) as config_temp:
        _write(tokenizer_temp, tokenizer.to_str(pretty=True) + "\n")
        _write(config_temp, json.dumps(config, indent=2) + "\n")


def _write(path: str, text: str) -> None:
    with io_errors(path, "--output_file"), storage.open(path, "w") as f:
        f.write(text)
