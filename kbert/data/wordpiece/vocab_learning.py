"""Learning a WordPiece vocabulary from text: Hugging Face `tokenizers`' WordPiece trainer (default) or
tensorflow-text's BERT vocabulary learner (`learner="tensorflow_text"`, kept for comparison).

Both split text into words as BERT's basic tokenizer does (lower-casing and stripping accents when `lower_case`) and
write the same layout: the reserved tokens of one of vocab_file.py's layouts (``--reserved_layout``) in id order,
then the learned pieces, every character of the text among them alone and, where it can continue a word, as
``##c``, so no word of known characters tokenizes to ``[UNK]``.

The default learner reads the text twice. The first read collects its characters and a sample of its lines; the
second trains on all of it, to 1.2 times the longer pieces there is room for, and the pieces used most when the
sample's words are split with that vocabulary are kept: a piece the trainer needed only as a step towards longer
ones is dropped for one that splits words. The result is a function of the text alone, the same on every run.

Example:

```python
from kbert.data.wordpiece import vocab_learning
tokens, stats = vocab_learning.learn_vocabulary(["corpus.txt"], vocab_size=8000, lower_case=True)
vocab_learning.write_vocabulary(tokens, "vocab.txt")
```
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from kbert.data import outputs, storage, work_units
from kbert.data.storage import io_errors
from kbert.data.vocab_corpus import BATCH_LINES, CorpusReading, Progress, VocabStats, batches, learn_from
from kbert.data.wordpiece.vocab_file import reserved_tokens
from kbert.errors import ConfigError, InputDataError

LEARNERS = ("tokenizers", "tensorflow_text")
_JOINER = "##"
_OVERTRAIN = 1.2  # the trainer learns this many times the longer pieces there is room for; the most used are kept
_SAMPLE_CHARS = 16_000_000  # the sample whose words count the pieces' use holds at most this many characters
_MAX_WORD_CHARS = 100  # as BERT's WordPiece: a longer word is [UNK]
_SPLIT_CHARS = 1 << 16  # text split into words in one call, at most (its words take ~50x its size in memory)


def _no_words_error(corpus: CorpusReading) -> InputDataError:
    """The error for text in which the learner found no word at all."""
    files = corpus.files
    return InputDataError(
        f"--input_file: no words to learn from in {', '.join(files[:3])}{' ...' if len(files) > 3 else ''} "
        f"({corpus.lines:,} non-blank line(s), none with a letter, digit or punctuation mark); give text "
        "in BERT's format: one sentence per line."
    )


def learn_vocabulary(
    files: Sequence[str],
    vocab_size: int,
    lower_case: bool = True,
    layout: str = "bert",
    progress: Progress | None = None,
    learner: str = "tokenizers",
    input_format: work_units.InputFormat = work_units.TEXT,
) -> tuple[list[str], VocabStats]:
    """Learns a WordPiece vocabulary of `vocab_size` tokens, reserved tokens included, from text files.

    The text is split into words with BERT's basic tokenizer (same `lower_case` as the tokenizer that will use the
    vocabulary). `learner="tokenizers"` returns exactly `vocab_size` tokens unless the text holds fewer distinct
    pieces; `learner="tensorflow_text"` aims within a 5% slack below it and keeps only pieces seen 10 times or more.
    A smaller result is no error: `VocabStats.shortfall` says why. `progress(stage, lines, chars)` is called as the
    files are read. Files without text, or text without words, are an `InputDataError`; a `vocab_size` without
    room for learned pieces is a `ConfigError`.
    """
    reserved = reserved_tokens(layout)
    if learner not in LEARNERS:
        raise ConfigError(f"--learner={learner!r}: use one of {', '.join(LEARNERS)}.")
    if vocab_size <= len(reserved):
        raise ConfigError(
            f"--vocab_size={vocab_size} leaves no room for learned pieces after the {len(reserved)} reserved tokens "
            f"of the {layout!r} layout; raise it or use --reserved_layout=compact."
        )
    learn = _learn_with_tokenizers if learner == "tokenizers" else _learn_with_tensorflow_text
    (tokens, shortfall), corpus = learn_from(
        files, lambda corpus: learn(corpus, vocab_size, lower_case, reserved), progress, input_format
    )
    return tokens, corpus.stats(len(tokens), len(reserved), vocab_size, shortfall)


class _BertWords:
    """BERT's basic tokenizer as Hugging Face's normalizer and pre-tokenizer: text to words."""

    def __init__(self, lower_case: bool):
        self.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=lower_case, lowercase=lower_case
        )
        self.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    def words(self, text: str) -> list[str]:
        return [word for word, _ in self.pre_tokenizer.pre_tokenize_str(self.normalizer.normalize_str(text))]


def _learn_with_tokenizers(
    corpus: CorpusReading, vocab_size: int, lower_case: bool, reserved: list[str]
) -> tuple[list[str], str | None]:
    """Hugging Face's WordPiece trainer, its longer pieces pruned to the most used (see the module's docstring);
    exactly `vocab_size` tokens when the text allows."""
    bert = _BertWords(lower_case)
    characters, words = _scan(corpus.read("scanning"), bert)
    if not characters:
        raise _no_words_error(corpus)
    fixed = reserved + characters
    room = _room(vocab_size, len(reserved), len(characters))
    longer = _train(corpus, bert, fixed, len(fixed) + math.ceil(room * _OVERTRAIN))
    if len(longer) > room:
        longer = _most_used(longer, _uses(fixed + longer, words)[len(fixed) :], room)
    tokens = fixed + longer
    if len(tokens) == vocab_size:
        return tokens, None
    return tokens, (
        f"the text holds only {len(tokens) - len(reserved):,} distinct pieces; vocabulary has {len(tokens):,} "
        f"tokens where {vocab_size:,} were asked: give more text or a smaller --vocab_size"
    )


def _room(vocab_size: int, num_reserved: int, num_characters: int) -> int:
    """How many pieces longer than a character fit beside the reserved tokens and the character pieces; a
    `ConfigError` when not even the character pieces fit."""
    room = vocab_size - num_reserved - num_characters
    if room < 0:
        raise ConfigError(
            f"--vocab_size={vocab_size:,} leaves {vocab_size - num_reserved:,} tokens after the reserved ones, "
            f"fewer than the {num_characters:,} character pieces of the text (each character, and ##c for those "
            f"inside words); raise it to at least {num_reserved + num_characters:,}."
        )
    return room


def _scan(lines: Iterable[str], bert: _BertWords) -> tuple[list[str], collections.Counter[str]]:
    """The character pieces of the text (`_character_pieces`), and how often each word occurs in a sample of its
    lines (`_Sample`, `_word_counts`)."""
    characters: set[str] = set()
    sample = _Sample(_SAMPLE_CHARS)
    for line in lines:
        characters.update(line)
        sample.add(line)
    return _character_pieces(characters, bert), _word_counts(sample.lines, bert)


def _character_pieces(characters: set[str], bert: _BertWords) -> list[str]:
    """Every character that words of text made of `characters` can hold, in code point order, then ``##c`` for
    each c that can continue a word (punctuation and CJK characters cannot: BERT splits them off)."""
    # BERT's normalization maps each character on its own (control characters dropped, accents stripped,
    # lower-cased), so normalizing the text's distinct characters gives the distinct characters of its words.
    normalized = set(bert.normalizer.normalize_str("".join(sorted(characters))))
    alphabet = sorted(c for c in normalized if bert.words(c))  # white space holds no word
    return alphabet + [_JOINER + c for c in alphabet if len(bert.words("a" + c)) == 1]


class _Sample:
    """Every `stride`-th line of the text, the stride doubling whenever the lines kept pass `budget` characters: a
    sample spread evenly over the whole text, of at most `budget` characters however long the text is."""

    def __init__(self, budget: int):
        self.budget = budget
        self.lines: list[str] = []
        self.stride = 1
        self.chars = 0
        self.seen = 0

    def add(self, line: str) -> None:
        if self.seen % self.stride == 0:
            self.lines.append(line)
            self.chars += len(line)
            if self.chars > self.budget:
                self.lines = self.lines[::2]
                self.stride *= 2
                self.chars = sum(map(len, self.lines))
        self.seen += 1


def _word_counts(lines: Iterable[str], bert: _BertWords) -> collections.Counter[str]:
    """How often each word occurs in `lines`.

    Lines are cut at white space first, and the distinct chunks seen equally often are split into words together,
    joined by spaces (up to 64K characters a call): few calls, with the words of each chunk, as no word spans a
    space. Python's white space is BERT's but for U+001C..U+001F, which BERT drops: a count can differ, not the
    vocabulary's characters.
    """
    chunks: collections.Counter[str] = collections.Counter()
    for line in lines:
        chunks.update(line.split())
    by_count: dict[int, list[str]] = collections.defaultdict(list)
    for chunk, count in chunks.items():
        by_count[count].append(chunk)
    words: collections.Counter[str] = collections.Counter()
    for count, group in by_count.items():
        for batch in batches(group, _SPLIT_CHARS, size=len):
            for word in bert.words(" ".join(batch)):
                words[word] += count
    return words


def _train(corpus: CorpusReading, bert: _BertWords, fixed: list[str], size: int) -> list[str]:
    """The pieces Hugging Face's WordPiece trainer learns from the text after `fixed` (the reserved tokens and
    the character pieces), `size` tokens in all at most, in merge order."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer, tokenizer.pre_tokenizer = bert.normalizer, bert.pre_tokenizer
    # The character pieces are registered as special tokens so that their ids are fixed before training. Left to
    # the trainer, the ##c pieces get their ids in hash-map order, which is random per process, and those ids
    # break the ties between merges of equal count: the same text would learn other pieces, in another order, on
    # every run (huggingface/tokenizers#1794). Special tokens only take ids here: the tokenizer has no added
    # tokens while it trains, so the text is split into words exactly as without them, and a run given the very
    # ids the trainer picked learns the very same vocabulary. The trained tokenizer, which would match them inside
    # words, splits nothing afterwards (`_uses` has its own).
    trainer = trainers.WordPieceTrainer(
        vocab_size=size, special_tokens=fixed, continuing_subword_prefix=_JOINER, show_progress=False
    )
    tokenizer.train_from_iterator(batches(corpus.read("learning")), trainer)
    ids = tokenizer.get_vocab()
    return sorted(ids, key=ids.__getitem__)[len(fixed) :]


def _uses(pieces: list[str], words: collections.Counter[str]) -> list[int]:
    """How often each of `pieces` (a vocabulary, id = index) occurs when WordPiece splits the counted words, with
    a tokenizer of no added tokens (every piece is plain vocabulary, matched only as WordPiece matches)."""
    vocabulary = {piece: i for i, piece in enumerate(pieces)}
    tokenizer = Tokenizer(
        models.WordPiece(
            vocabulary, unk_token="[UNK]", continuing_subword_prefix=_JOINER, max_input_chars_per_word=_MAX_WORD_CHARS
        )
    )
    distinct = list(words)
    split = tokenizer.encode(distinct, is_pretokenized=True, add_special_tokens=False)
    uses = [0] * len(pieces)
    for piece, word in zip(split.ids, split.word_ids):
        uses[piece] += words[distinct[word]]
    return uses


def _most_used(pieces: list[str], uses: list[int], room: int) -> list[str]:
    """The `room` most used of `pieces` (the earlier merge first among equals), in merge order."""
    ranked = sorted(range(len(pieces)), key=lambda i: (-uses[i], i))
    return [pieces[i] for i in sorted(ranked[:room])]


def _learn_with_tensorflow_text(
    corpus: CorpusReading, vocab_size: int, lower_case: bool, reserved: list[str]
) -> tuple[list[str], str | None]:
    """tensorflow-text's `bert_vocab_from_dataset`: at most `vocab_size` tokens, aiming within 5% below it."""
    # Imported here: TensorFlow and tensorflow-text's ops take seconds and most of the memory, which the default
    # learner does without.
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as vocab_learner

    lines = functools.partial(corpus.read, "learning")
    dataset = tf.data.Dataset.from_generator(lines, output_signature=tf.TensorSpec([], tf.string))
    try:
        tokens = vocab_learner.bert_vocab_from_dataset(
            dataset.batch(BATCH_LINES),
            vocab_size=vocab_size,
            reserved_tokens=reserved,
            bert_tokenizer_params={"lower_case": lower_case},
        )
    except StopIteration:  # the learner's way of saying it counted no word at all
        raise _no_words_error(corpus) from None
    if len(tokens) >= vocab_size:
        return tokens, None
    return tokens, (
        f"tensorflow-text's learner returned {len(tokens):,} tokens where {vocab_size:,} were asked (it keeps "
        "pieces seen 10 times or more and stops within 5% below the size); give more text or use "
        "--learner=tokenizers"
    )


def write_vocabulary(tokens: Sequence[str], path: str) -> None:
    """Writes one token per line, staged (outputs.py) so a crash never leaves a partial vocabulary at `path`."""
    with outputs.staged(path) as temp, io_errors(temp, "--output_file"), storage.open(temp, "w") as f:
        f.write("".join(f"{token}\n" for token in tokens))
