"""Byte-level BPE learning (kbert-build-vocab --learner=bpe): the tokenizer.json and tokenizer_config.json it writes,
its special tokens' ids and roles, round trips, the same bytes on every run and from every input format, errors."""

import csv
import json
import pathlib
import random
import re
import subprocess
import sys

import pytest
from cli_batch import assert_refused, run_batch
from tokenizers import Tokenizer

from kbert.data import bpe_learning
from kbert.data.work_units import InputFormat
from kbert.errors import ConfigError, InputDataError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
HELD_OUT = "Zürich's naïve Café → 中文 bakes 42 brownies, quickly!"


def _documents(seed=0, num_docs=40):
    """Documents of sentences of made-up words (accents, CJK, digits and punctuation among their characters), every
    word about three times: merges of equal count everywhere."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzéüßçøåñABCDEFGHIJ"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(400)]
    words += ["中文", "x²", "naïve", "Café", "→", "a_b", "e=mc²", "42", "1,000"]
    words *= 3
    rng.shuffle(words)
    sentences = [" ".join(words[i : i + 9]).capitalize() + "." for i in range(0, len(words), 9)]
    return [sentences[i : i + len(sentences) // num_docs] for i in range(0, len(sentences), len(sentences) // num_docs)]


def _write(directory, documents, input_format="text"):
    """`documents` as BERT's text format, or as JSONL or CSV records of one document each."""
    texts = ["\n".join(document) for document in documents]
    path = directory / f"corpus.{input_format}"
    if input_format == "text":
        path.write_text("".join(text + "\n\n" for text in texts), encoding="utf-8")
    elif input_format == "jsonl":
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    else:
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([["text"], *([text] for text in texts)])
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    return _write(tmp_path, _documents())


def _learn_and_write(corpus, path, vocab_size=800, **kwargs):
    tokenizer, stats = bpe_learning.learn_bpe([corpus], vocab_size, **kwargs)
    bpe_learning.write_tokenizer(tokenizer, str(path))
    return Tokenizer.from_file(str(path)), stats


def test_writes_a_byte_level_tokenizer_of_the_asked_size_with_the_special_tokens_first(corpus, tmp_path):
    seen = []
    tokenizer, stats = _learn_and_write(
        corpus, tmp_path / "bpe" / "tokenizer.json", progress=lambda *args: seen.append(args)
    )
    assert tokenizer.get_vocab_size() == stats.vocab_size == stats.vocab_size_asked == 800 and stats.shortfall is None
    assert [tokenizer.token_to_id(token) for token in DEFAULT_SPECIALS] == [0, 1, 2, 3, 4] and stats.num_reserved == 5
    assert seen[-1] == ("learning", stats.lines, stats.chars) and stats.lines == sum(map(len, _documents()))
    written = json.loads((tmp_path / "bpe" / "tokenizer.json").read_text())
    assert written["model"]["type"] == "BPE" and written["normalizer"] is None
    assert written["pre_tokenizer"] == {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    assert written["decoder"]["type"] == "ByteLevel" and written["post_processor"]["type"] == "TemplateProcessing"
    assert [(token["content"], token["special"]) for token in written["added_tokens"]] == [
        (token, True) for token in DEFAULT_SPECIALS
    ]
    assert [token["lstrip"] for token in written["added_tokens"]] == [False, False, False, False, True]
    assert json.loads((tmp_path / "bpe" / "tokenizer_config.json").read_text()) == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "sep_token": "[SEP]",
        "unk_token": "[UNK]",
    }


def test_a_held_out_sentence_round_trips_between_cls_and_sep(corpus, tmp_path):
    tokenizer, _ = _learn_and_write(corpus, tmp_path / "tokenizer.json")
    encoding = tokenizer.encode(HELD_OUT)
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens[-1] == "[SEP]" and 1 not in encoding.ids
    assert tokenizer.decode(encoding.ids) == HELD_OUT
    pair = tokenizer.encode("A b.", "C d.")
    assert pair.tokens[0] == "[CLS]" and pair.tokens.count("[SEP]") == 2 and pair.tokens[-1] == "[SEP]"
    assert pair.type_ids[: pair.tokens.index("[SEP]") + 1] == [0] * (pair.tokens.index("[SEP]") + 1)
    assert set(pair.type_ids[pair.tokens.index("[SEP]") + 1 :]) == {1}
    masked = tokenizer.encode("Bakes a [MASK].", add_special_tokens=False)
    assert masked.ids.count(4) == 1 and "Ġ" not in masked.tokens  # the mask token takes the space before it


def test_robertas_special_tokens_get_their_ids_and_roles(corpus, tmp_path):
    tokenizer, _ = _learn_and_write(corpus, tmp_path / "tokenizer.json", special_tokens=ROBERTA_SPECIALS)
    assert [tokenizer.token_to_id(token) for token in ROBERTA_SPECIALS] == [0, 1, 2, 3, 4]
    encoding = tokenizer.encode(HELD_OUT)
    assert encoding.tokens[0] == "<s>" and encoding.tokens[-1] == "</s>" and tokenizer.decode(encoding.ids) == HELD_OUT
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert [config[f"{role}_token"] for role in ("cls", "pad", "sep", "unk", "mask")] == ROBERTA_SPECIALS


def test_roles_by_name_unk_optional_and_other_special_tokens_kept(corpus, tmp_path):
    specials = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "<|endoftext|>"]
    tokenizer, stats = _learn_and_write(corpus, tmp_path / "tokenizer.json", special_tokens=specials)
    assert [tokenizer.token_to_id(token) for token in specials] == [0, 1, 2, 3, 4] and stats.num_reserved == 5
    assert "unk_token" not in json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert bpe_learning.special_token_roles(ROBERTA_SPECIALS) == {
        "cls": "<s>",
        "pad": "<pad>",
        "sep": "</s>",
        "unk": "<unk>",
        "mask": "<mask>",
    }


def test_the_same_text_learns_the_same_tokenizer_from_every_input_format(tmp_path):
    documents = _documents(seed=1)
    learned = {}
    for input_format in ("text", "jsonl", "csv"):
        source = _write(tmp_path, documents, input_format)
        tokenizer, stats = bpe_learning.learn_bpe([source], 700, input_format=InputFormat(input_format))
        learned[input_format] = tokenizer.to_str()
        assert stats.lines == sum(map(len, documents)) and stats.vocab_size == 700
    assert learned["jsonl"] == learned["text"] == learned["csv"]


@pytest.mark.spawns
def test_two_processes_write_the_same_bytes(corpus, tmp_path):
    written = []
    for run in range(2):  # two processes: hash maps in the trainer are seeded per process
        out = tmp_path / f"run-{run}" / "tokenizer.json"
        result = _run_cli(f"--input_file={corpus}", f"--output_file={out}", "--vocab_size=900", "--learner=bpe")
        assert result.returncode == 0, result.stderr
        written.append((out.read_bytes(), (out.parent / "tokenizer_config.json").read_bytes()))
    assert written[0] == written[1]
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("vocabulary: 900 tokens (5 reserved, 895 learned; asked for 900)")
    assert summary.endswith(f"-> {out} and {out.parent / 'tokenizer_config.json'}")


def test_lower_case_normalizes_and_lower_cases_cased_is_the_default(corpus, tmp_path):
    cased, _ = bpe_learning.learn_bpe([corpus], 800)
    lowered, _ = bpe_learning.learn_bpe([corpus], 800, lower_case=True)

    # ASCII letters are their own byte pieces; a learned (longer) piece with a capital comes from cased text only
    def capitalized(tokenizer):
        return [t for t in tokenizer.get_vocab() if len(t) > 1 and re.search("[A-Z]", t) and t not in DEFAULT_SPECIALS]

    assert capitalized(cased) and not capitalized(lowered)
    assert lowered.encode("CAFE\u0301 [MASK]").ids == lowered.encode("caf\u00e9 [MASK]").ids  # NFC, then lower case
    assert lowered.decode(lowered.encode(HELD_OUT).ids) == HELD_OUT.lower()


def test_text_with_too_few_merges_gives_a_smaller_tokenizer_and_says_so(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("abc abc abd.\n" * 10)
    tokenizer, stats = bpe_learning.learn_bpe([str(path)], 5000)
    merges = tokenizer.get_vocab_size() - 5 - 256
    assert 0 < merges < 20 and stats.vocab_size == tokenizer.get_vocab_size()
    assert stats.shortfall == (
        f"the text holds only {merges} merges; tokenizer has {stats.vocab_size} tokens where 5,000 were asked: give "
        "more text or a smaller --vocab_size"
    )


@pytest.mark.parametrize(
    "special_tokens,message",
    [
        (["[PAD]", "[UNK]", "[CLS]", "[SEP]"], r"no token plays mask \(\[MASK\] or <mask>\); add one, e\.g\."),
        (["[PAD]", "[CLS]", "<s>", "[SEP]", "[MASK]"], r"\[CLS\] and <s> both play cls; keep one"),
        (["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"], r"names \[PAD\] twice"),
        (["[PAD]", " ", "[CLS]", "[SEP]", "[MASK]"], r"token 2 is blank"),
    ],
)
def test_bad_special_tokens_are_one_line_before_any_reading(tmp_path, special_tokens, message):
    missing = str(tmp_path / "never-read.txt")
    with pytest.raises(ConfigError, match=r"^--special_tokens=.*" + message):
        bpe_learning.learn_bpe([missing], 1000, special_tokens=special_tokens)


def test_errors_name_the_flag_and_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"^--vocab_size=261 leaves no room .* raise it to at least 262"):
        bpe_learning.learn_bpe([str(tmp_path / "never-read.txt")], 261)
    with pytest.raises(ConfigError, match=r"--output_file=out/bpe\.json: .* e\.g\. --output_file=out/tokenizer\.json"):
        bpe_learning.output_files("out/bpe.json")
    with pytest.raises(ConfigError, match=r"e\.g\. --output_file=out/bpe/tokenizer\.json\.$"):
        bpe_learning.output_files("out/bpe")
    assert bpe_learning.output_files("tokenizer.json") == ["tokenizer.json", "tokenizer_config.json"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(InputDataError, match="--input_file: .*empty.txt holds no text"):
        bpe_learning.learn_bpe([str(empty)], 1000)
    records = tmp_path / "corpus.jsonl"
    records.write_text('{"body": "a"}\n{"body": "b"}\n')
    with pytest.raises(InputDataError, match="--input_file: all 2 records are bad.*--text_column=text"):
        bpe_learning.learn_bpe([str(records)], 1000, input_format=InputFormat("jsonl"))


def _run_cli(*args):
    return subprocess.run([sys.executable, "tools/build_vocab.py", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.spawns
def test_cli_refuses_bad_flags_in_one_line_before_writing(corpus, tmp_path):
    out = tmp_path / "bpe"
    refusals = {
        "--reserved_layout lays out a WordPiece vocabulary": [
            "--learner=bpe",
            f"--output_file={out}/tokenizer.json",
            "--reserved_layout=bert",
        ],
        "--special_tokens are --learner=bpe's": [f"--output_file={out}/vocab.txt", "--special_tokens=<s>,</s>"],
        "name it vocab.txt, or pass --learner=bpe": [f"--output_file={out}/tokenizer.json"],
        f"e.g. --output_file={out}/tokenizer.json.": ["--learner=bpe", f"--output_file={out}/bpe.json"],
        "no token plays mask": ["--learner=bpe", f"--output_file={out}/tokenizer.json", "--special_tokens=<s>,</s>"],
    }
    results = run_batch("build_vocab", [[f"--input_file={corpus}", *args] for args in refusals.values()])
    for message, result in zip(refusals, results):
        assert_refused(result, "kbert-build-vocab", message)
    assert not out.exists()
