"""What dynamic masking reads of a Hugging Face tokenizer.json (data.tokenizer): the ids it never masks and which
pieces start a word, for WordPiece, byte-level BPE and SentencePiece-style tokenizers built here; and the config's
refusal of data.vocab_file and data.tokenizer together."""

import numpy as np
import pytest
from tokenizer_fixtures import MODERNBERT, ROBERTA, write_tokenizer
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from kbert.data.dynamic_masking import DynamicMasker
from kbert.data.hf_tokenizer import HfTokenizer
from kbert.data.word_boundaries import word_starts
from kbert.errors import ConfigError, VocabularyError
from kbert.training.config import DataConfig

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _save(tokenizer: Tokenizer, tmp_path) -> HfTokenizer:
    tokenizer.add_special_tokens(SPECIALS)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return HfTokenizer(str(path), flag="data.tokenizer")


def test_a_wordpiece_piece_starts_a_word_unless_it_carries_the_models_prefix(tmp_path):
    for prefix in ("##", "@@"):
        vocab = {token: i for i, token in enumerate(SPECIALS + ["hel", f"{prefix}lo", "lo", f"{prefix}s"])}
        model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix=prefix)
        tokenizer = _save(Tokenizer(model), tmp_path)
        np.testing.assert_array_equal(word_starts(tokenizer), [True] * 5 + [True, False, True, False])


def test_a_byte_level_piece_starts_a_word_when_it_carries_the_space_marker(tmp_path):
    for tokens in (MODERNBERT, ROBERTA):
        path = write_tokenizer(tmp_path / tokens[0].strip("[<>]"), tokens, extra_special=("<|endoftext|>",))
        theirs = Tokenizer.from_file(str(path))
        starts = word_starts(HfTokenizer(str(path)))
        pieces = [theirs.id_to_token(i) for i in range(theirs.get_vocab_size())]
        special = [p in tokens + ("<|endoftext|>",) for p in pieces]
        np.testing.assert_array_equal(starts, [s or p.startswith("\u0120") for p, s in zip(pieces, special)])
        assert (~starts).sum() > 50 and starts.sum() > 20  # pieces of both kinds


def test_a_sentencepiece_style_piece_starts_a_word_when_it_carries_the_metaspace(tmp_path):
    pieces = ["\u2581hel", "lo", "\u2581lo", "s"]
    unigram = Tokenizer(models.Unigram([(p, -1.0) for p in SPECIALS + pieces], unk_id=1))
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    # Llama's way: no pre-tokenizer, a normalizer that writes the spaces as the metaspace.
    bpe = Tokenizer(models.BPE({p: i for i, p in enumerate(SPECIALS + pieces)}, [], unk_token="[UNK]"))
    bpe.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    for tokenizer in (unigram, bpe):
        np.testing.assert_array_equal(word_starts(_save(tokenizer, tmp_path)), [True] * 5 + [True, False, True, False])


def test_a_tokenizer_without_word_boundaries_is_refused_for_whole_word_masking_only(tmp_path):
    tokenizer = Tokenizer(models.BPE({p: i for i, p in enumerate(SPECIALS + ["hel", "lo"])}, [], unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = _save(tokenizer, tmp_path).file
    with pytest.raises(VocabularyError) as error:
        DynamicMasker.from_tokenizer(path, max_predictions=5, whole_word=True)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"data.tokenizer: the pieces of {path} mark no word boundary")
    assert DynamicMasker.from_tokenizer(path, max_predictions=5).vocab_size == 7


def test_never_masked_are_the_layouts_tokens_and_every_special_added_token_but_unk(tmp_path):
    path = write_tokenizer(tmp_path / "tok", MODERNBERT, extra_special=("<|endoftext|>",))
    theirs = Tokenizer.from_file(str(path))
    theirs.add_tokens([AddedToken("kamito", special=False)])  # an added token text encodes to: maskable
    theirs.save(str(path))
    tokenizer = HfTokenizer(str(path))
    expected = sorted(theirs.token_to_id(t) for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "<|endoftext|>"))
    assert list(tokenizer.special_token_ids) == expected
    assert word_starts(tokenizer)[theirs.token_to_id("kamito")]  # added tokens start a word


def test_vocab_file_and_tokenizer_together_is_one_line_naming_both():
    with pytest.raises(ConfigError) as error:
        DataConfig(vocab_file="vocab.txt", tokenizer="tokenizers/bpe").validate("data.")
    message = str(error.value)
    assert "\n" not in message and "data.vocab_file=vocab.txt" in message and "data.tokenizer=tokenizers/bpe" in message
