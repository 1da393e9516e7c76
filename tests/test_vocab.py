"""WordPiece vocabulary learning: reserved-token layouts, learned pieces, the CLI and its errors."""

import pathlib
import subprocess
import sys

import pytest
import tensorflow_text as tft

from kbert.data import files, vocab

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORDS = "the quick brown fox jumps over the lazy dog while running and jumping quickly".split()


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(8)).capitalize() + "." for i in range(300)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bert_layout_puts_special_tokens_at_bert_base_ids(corpus):
    tokens, stats = vocab.learn_vocabulary([str(corpus)], vocab_size=300, lower_case=True, layout="bert")
    ids = {t: i for i, t in enumerate(tokens)}
    assert (ids["[PAD]"], ids["[UNK]"], ids["[CLS]"], ids["[SEP]"], ids["[MASK]"]) == (0, 100, 101, 102, 103)
    assert tokens[1:100] == [f"[unused{i}]" for i in range(99)]
    assert len(tokens) == stats.vocab_size <= 300
    assert stats.num_reserved == 104 and stats.lines == 300
    assert {"quick", "fox", "the"} <= set(tokens[104:])


def test_compact_layout_and_learned_vocab_tokenizes_corpus_without_unk(corpus, tmp_path):
    tokens, _ = vocab.learn_vocabulary([str(corpus)], vocab_size=120, lower_case=True, layout="compact")
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(set(tokens)) == len(tokens)
    assert not any(t.lower() != t for t in tokens[5:])  # lower-cased learning
    path = tmp_path / "vocab.txt"
    vocab.write_vocabulary(tokens, str(path))
    assert path.read_text().splitlines() == tokens
    tokenizer = tft.FastBertTokenizer(tokens, lower_case_nfd_strip_accents=True, unknown_token="[UNK]")
    ids = tokenizer.tokenize(corpus.read_text().splitlines()).flat_values.numpy()
    assert ids.size > 0 and (ids != 1).all()


def test_vocab_size_too_small_for_layout_is_an_error(corpus):
    with pytest.raises(ValueError, match="reserved_layout=compact"):
        vocab.learn_vocabulary([str(corpus)], vocab_size=100, layout="bert")


def test_expand_patterns_errors_name_flag_and_pattern(tmp_path, corpus):
    assert files.expand_patterns(f"{corpus},{tmp_path}/*.txt", "--input_file") == [str(corpus)]
    with pytest.raises(FileNotFoundError, match=r"--input_file.*nothing-\*\.txt"):
        files.expand_patterns(f"{corpus},{tmp_path}/nothing-*.txt", "--input_file")


def test_cli_writes_vocab_and_summary(corpus, tmp_path):
    out = tmp_path / "v.txt"
    result = subprocess.run(
        [sys.executable, "tools/build_vocab.py", f"--input_file={corpus}", f"--output_file={out}",
         "--vocab_size=150", "--reserved_layout=compact"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    assert "vocabulary:" in result.stdout and str(out) in result.stdout
    assert out.read_text().splitlines()[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    missing = subprocess.run(
        [sys.executable, "tools/build_vocab.py", f"--input_file={tmp_path}/none*.txt", f"--output_file={out}"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert missing.returncode != 0 and "--input_file" in missing.stderr and "none*.txt" in missing.stderr
