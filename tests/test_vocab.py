"""WordPiece vocabulary learning: reserved-token layouts, learned pieces, the CLI and its errors."""

import pathlib
import random
import subprocess
import sys

import pytest
import tensorflow_text as tft

from kbert.data import input_files
from kbert.data.wordpiece import vocab_learning
from kbert.data.wordpiece.tokenizer import WordpieceTokenizer
from kbert.data.wordpiece.vocab_file import reserved_tokens
from kbert.errors import ConfigError, InputDataError

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORDS = "the quick brown fox jumps over the lazy dog while running and jumping quickly".split()


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(8)).capitalize() + "." for i in range(300)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def rich_corpus(tmp_path):
    """Thousands of distinct made-up words, each seen several times: more pieces than the tests ask for."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    path = tmp_path / "rich.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) + "." for _ in range(1500)) + "\n")
    return path


@pytest.fixture
def tied_corpus(tmp_path):
    """Every word exactly three times: merges of equal count everywhere, which Hugging Face's trainer alone breaks
    differently on every run (huggingface/tokenizers#1794)."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzéüßçøåñ"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(600)]
    words += ["中文", "x²", "naïve", "Café", "→", "a_b", "e=mc²"]
    lines = []
    for _ in range(3):
        rng.shuffle(words)
        lines += [" ".join(words[i : i + 10]) + "." for i in range(0, len(words), 10)]
    path = tmp_path / "tied.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run_cli(*args):
    return subprocess.run([sys.executable, "tools/build_vocab.py", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("layout", ["bert", "compact"])
def test_default_learner_gives_the_asked_size_with_the_reserved_layout_on_top(rich_corpus, layout):
    tokens, stats = vocab_learning.learn_vocabulary([str(rich_corpus)], vocab_size=500, layout=layout)
    reserved = reserved_tokens(layout)
    assert len(tokens) == stats.vocab_size == stats.vocab_size_asked == 500 and stats.shortfall is None
    assert tokens[: len(reserved)] == reserved and stats.num_reserved == len(reserved)
    assert len(set(tokens)) == len(tokens)
    assert not set(tokens[len(reserved) :]) & set(reserved)
    assert {"a", "p", "##a", "##p", "."} <= set(tokens)


def test_every_character_that_continues_words_is_also_a_suffix_piece(tmp_path):
    path = tmp_path / "corpus.txt"  # "q" and "z" start words only; "." and "," are split off by BERT
    path.write_text("\n".join(["qa ab ba, zb."] * 50) + "\n")
    tokens, _ = vocab_learning.learn_vocabulary([str(path)], vocab_size=60, layout="compact")
    assert {"##q", "##z"} <= set(tokens) and not {"##.", "##,"} & set(tokens)
    out = tmp_path / "vocab.txt"
    vocab_learning.write_vocabulary(tokens, str(out))
    tokenizer = WordpieceTokenizer(str(out), lower_case=True)
    ids, _ = tokenizer.tokenize(["aq bz za."])  # words never seen, made of seen characters
    assert tokenizer.vocab.index("[UNK]") not in ids.tolist()


def test_vocabulary_round_trips_through_kberts_tokenizer(rich_corpus, tmp_path):
    tokens, _ = vocab_learning.learn_vocabulary([str(rich_corpus)], vocab_size=400)
    out = tmp_path / "vocab.txt"
    vocab_learning.write_vocabulary(tokens, str(out))
    tokenizer = WordpieceTokenizer(str(out), lower_case=True)  # read_vocabulary's checks, as create_pretraining_data
    assert tokenizer.vocab == tokens
    ids, splits = tokenizer.tokenize(rich_corpus.read_text().splitlines())
    assert splits[-1] == ids.size > 0 and tokenizer.vocab.index("[UNK]") not in ids.tolist()


@pytest.mark.spawns
def test_learning_the_same_text_in_two_processes_writes_the_same_file(tied_corpus, tmp_path):
    written = []
    for run in range(2):  # two processes: the trainer's hash maps are seeded per process
        out = tmp_path / f"vocab-{run}.txt"
        result = _run_cli(
            f"--input_file={tied_corpus}", f"--output_file={out}", "--vocab_size=700", "--reserved_layout=compact"
        )
        assert result.returncode == 0, result.stderr
        written.append(out.read_bytes())
    assert written[0] == written[1] and len(written[0].splitlines()) == 700


def test_pieces_only_on_the_way_to_longer_ones_give_way_to_used_ones(tmp_path):
    path = tmp_path / "corpus.txt"  # merges xy, xyz, xyzw: only the whole word splits any word of the text
    path.write_text("\n".join(["xyzw xyzw xyzw"] * 20) + "\n")
    tokens, _ = vocab_learning.learn_vocabulary([str(path)], vocab_size=15, layout="compact")  # room for 2 of the 3
    assert tokens[5:] == ["w", "x", "y", "z", "##w", "##x", "##y", "##z", "xy", "xyzw"]


def test_lower_case_false_keeps_case(tmp_path):
    path = tmp_path / "cased.txt"
    path.write_text("\n".join(["The Quick brown Fox. The lazy DOG."] * 40) + "\n")
    cased, _ = vocab_learning.learn_vocabulary([str(path)], vocab_size=200, lower_case=False, layout="compact")
    lowered, _ = vocab_learning.learn_vocabulary([str(path)], vocab_size=200, lower_case=True, layout="compact")
    assert {"The", "Quick", "Fox", "DOG", "T", "##O"} <= set(cased)
    assert {"the", "quick", "fox", "dog"} <= set(lowered) and not any(t != t.lower() for t in lowered[5:])


def test_text_with_too_few_pieces_gives_a_smaller_vocabulary_and_says_so(corpus):
    seen = []
    tokens, stats = vocab_learning.learn_vocabulary(
        [str(corpus)],
        vocab_size=30522,
        layout="compact",
        progress=lambda stage, lines, chars: seen.append((stage, lines, chars)),
    )
    assert len(tokens) == stats.vocab_size < 30522
    assert stats.shortfall == (
        f"the text holds only {len(tokens) - 5:,} distinct pieces; vocabulary has {len(tokens):,} tokens where "
        "30,522 were asked: give more text or a smaller --vocab_size"
    )
    assert seen[0][0] == "scanning" and seen[-1] == ("learning", stats.lines, stats.chars)
    assert (stats.lines, stats.chars) == (300, len(corpus.read_text()) - 300)


def test_errors_name_the_flag(corpus, tmp_path):
    with pytest.raises(ConfigError, match="--vocab_size=110 .* raise it to at least"):
        vocab_learning.learn_vocabulary([str(corpus)], vocab_size=110)  # 6 tokens left for the corpus' ~50 characters
    with pytest.raises(ConfigError, match="--learner='sentencepiece'"):
        vocab_learning.learn_vocabulary([str(corpus)], vocab_size=300, learner="sentencepiece")
    controls = tmp_path / "controls.txt"
    controls.write_bytes(b"\x01\x02\n\x03\n")
    with pytest.raises(InputDataError, match="--input_file: no words"):
        vocab_learning.learn_vocabulary([str(controls)], vocab_size=300)


def test_bert_layout_puts_special_tokens_at_bert_base_ids(corpus):
    tokens, stats = vocab_learning.learn_vocabulary([str(corpus)], vocab_size=300, lower_case=True, layout="bert")
    ids = {t: i for i, t in enumerate(tokens)}
    assert (ids["[PAD]"], ids["[UNK]"], ids["[CLS]"], ids["[SEP]"], ids["[MASK]"]) == (0, 100, 101, 102, 103)
    assert tokens[1:100] == [f"[unused{i}]" for i in range(99)]
    assert len(tokens) == stats.vocab_size <= 300
    assert stats.num_reserved == 104 and stats.lines == 300
    assert {"quick", "fox", "the"} <= set(tokens[104:])


def test_compact_layout_and_learned_vocab_tokenizes_corpus_without_unk(corpus, tmp_path):
    tokens, _ = vocab_learning.learn_vocabulary([str(corpus)], vocab_size=120, lower_case=True, layout="compact")
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(set(tokens)) == len(tokens)
    assert not any(t.lower() != t for t in tokens[5:])  # lower-cased learning
    path = tmp_path / "vocab.txt"
    vocab_learning.write_vocabulary(tokens, str(path))
    assert path.read_text().splitlines() == tokens
    tokenizer = tft.FastBertTokenizer(tokens, lower_case_nfd_strip_accents=True, unknown_token="[UNK]")
    ids = tokenizer.tokenize(corpus.read_text().splitlines()).flat_values.numpy()
    assert ids.size > 0 and (ids != 1).all()


def test_vocab_size_too_small_for_layout_is_an_error(corpus):
    with pytest.raises(ValueError, match="reserved_layout=compact"):
        vocab_learning.learn_vocabulary([str(corpus)], vocab_size=100, layout="bert")


def test_expand_patterns_errors_name_flag_and_pattern(tmp_path, corpus):
    assert input_files.expand_patterns(f"{corpus},{tmp_path}/*.txt", "--input_file") == [str(corpus)]
    with pytest.raises(FileNotFoundError, match=r"--input_file.*nothing-\*\.txt"):
        input_files.expand_patterns(f"{corpus},{tmp_path}/nothing-*.txt", "--input_file")


@pytest.mark.spawns
def test_cli_writes_vocab_and_summary(corpus, tmp_path):
    out = tmp_path / "v.txt"
    result = _run_cli(f"--input_file={corpus}", f"--output_file={out}", "--vocab_size=150", "--reserved_layout=compact")
    assert result.returncode == 0, result.stderr
    summary, shortfall = result.stdout.splitlines()[-2:]
    tokens = out.read_text().splitlines()
    assert summary.startswith(f"vocabulary: {len(tokens)} tokens (5 reserved") and "asked for 150)" in summary
    assert str(out) in summary and f"vocabulary has {len(tokens)} tokens where 150 were asked" in shortfall
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    missing = _run_cli(f"--input_file={tmp_path}/none*.txt", f"--output_file={out}")
    assert missing.returncode != 0 and "--input_file" in missing.stderr and "none*.txt" in missing.stderr


@pytest.mark.spawns
def test_cli_on_local_files_never_imports_tensorflow(corpus, tmp_path):
    out = tmp_path / "v.txt"
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('tensorflow imported:', 'tensorflow' in sys.modules))\n"
        "from kbert.cli import build_vocab\n"
        "build_vocab.run()\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            f"--input_file={corpus}",
            f"--output_file={out}",
            "--vocab_size=150",
            "--reserved_layout=compact",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "tensorflow imported: False" and out.read_text().startswith("[PAD]\n")


@pytest.mark.spawns
def test_cli_keeps_tensorflow_texts_learner(corpus, tmp_path):
    out = tmp_path / "v.txt"
    result = _run_cli(f"--input_file={corpus}", f"--output_file={out}", "--vocab_size=300", "--learner=tensorflow_text")
    assert result.returncode == 0, result.stderr
    tokens = out.read_text().splitlines()
    assert tokens[:104] == reserved_tokens("bert") and len(set(tokens)) == len(tokens) < 300
    assert {"quick", "fox", "##s"} <= set(tokens) and "tensorflow-text's learner returned" in result.stdout
