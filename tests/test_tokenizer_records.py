"""Pretraining records made with a Hugging Face tokenizer.json (--tokenizer), and the WordPiece path (--vocab_file)
unchanged by it.

The tokenizers are trained here, on generated text: byte-level BPE with ModernBERT's special tokens ([CLS] [SEP]
[MASK] [PAD] [UNK]) and with RoBERTa's (<s> </s> <mask> <pad> <unk>). Nothing is downloaded.
"""

import hashlib
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from cli_batch import assert_refused, run_batch
from tokenizer_fixtures import MODERNBERT, ROBERTA, generated_lines, write_tokenizer
from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers

from kbert.data import hf_tokenizer, schema
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.hf_tokenizer import HfTokenizer
from kbert.data.inspection import inspect_files
from kbert.data.instances import InstanceConfig
from kbert.data.wordpiece.vocab_file import SPECIAL_TOKENS
from kbert.errors import VocabularyError

# A WordPiece corpus: words w0..w39, some with a `##s` piece, and a character no piece covers ([UNK]).
WORDPIECE_VOCAB = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(40)] + ["##s", "."]


def _wordpiece_corpus(path):
    rng = np.random.default_rng(3)
    docs = []
    for _ in range(30):
        sentences = []
        for _ in range(int(rng.integers(2, 9))):
            count = int(rng.integers(2, 12))
            words = [f"w{int(rng.integers(40))}" + ("s" if rng.random() < 0.3 else "") for _ in range(count)]
            if rng.random() < 0.1:
                words.append("\u00a7")
            sentences.append(" ".join(words) + ".")
        docs.append("\n".join(sentences))
    path.write_text("\n\n".join(docs) + "\n")
    return str(path)


def _records(paths):
    return [bytes(r.numpy()) for p in paths for r in tf.data.TFRecordDataset(str(p))]


# The SHA-256 of the records of `test_wordpiece_records_are_unchanged`'s runs, as kbert wrote them before
# --tokenizer (commit fd1d803).
WORDPIECE_DIGESTS = {
    "nsp": "92f19f90f0a78d123332b7c4e0717aad7cacd0e327c06bd50c23a812271f6f31",
    "mlm": "18ac0dacdb465ee87f61180922c545823cbad5a70f7ab55adc1724a9c798093c",
}


@pytest.mark.parametrize("objective", ["nsp", "mlm"])
def test_wordpiece_records_are_unchanged(tmp_path, objective):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(WORDPIECE_VOCAB) + "\n")
    corpus = _wordpiece_corpus(tmp_path / "corpus.txt")
    outputs = [tmp_path / f"out-{i}.tfrecord" for i in range(2)]
    config = InstanceConfig(
        max_seq_length=32, max_predictions_per_seq=6, dupe_factor=2, do_whole_word_mask=True, objective=objective
    )
    create_pretraining_data([corpus], [str(o) for o in outputs], str(vocab), True, config, unit_bytes=700)
    digest = hashlib.sha256(b"".join(_records(outputs))).hexdigest()
    assert digest == WORDPIECE_DIGESTS[objective]


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("modernbert"), MODERNBERT)


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("roberta"), ROBERTA)


@pytest.fixture(params=["modernbert", "roberta"])
def tokenizer_json(request):
    """A tokenizer.json of each style of special tokens."""
    return request.getfixturevalue(request.param)


def _corpus(path, num_docs=30, seed=0, punctuation=True, literal_specials=False):
    """Documents of 2 to 10 generated lines; with `literal_specials`, some lines hold special tokens' spellings as
    text."""
    rng = np.random.default_rng(seed)
    lines = generated_lines(num_docs * 10, seed + 1, punctuation)
    if literal_specials:
        spellings = " ".join(MODERNBERT + ROBERTA)
        lines = [f"{line} {spellings}" if i % 7 == 0 else line for i, line in enumerate(lines)]
    docs, start = [], 0
    for _ in range(num_docs):
        count = int(rng.integers(2, 11))
        docs.append("\n".join(lines[start : start + count]))
        start += count
    path.write_text("\n\n".join(docs) + "\n")
    return str(path)


def _create(corpus, tokenizer, outputs, **kwargs):
    run = {k: kwargs.pop(k) for k in ("num_workers", "unit_bytes") if k in kwargs}
    config = InstanceConfig(**{"max_seq_length": 48, "max_predictions_per_seq": 8, "dupe_factor": 3, **kwargs})
    paths = [str(o) for o in outputs]
    return create_pretraining_data([corpus], paths, None, True, config, tokenizer=str(tokenizer), **run)


def _read(paths, seq_length=48, max_predictions=8, masked=True, sentence_labels=True):
    """Every record of `paths`, parsed, with `original_ids`: the ids before masking."""
    spec = schema.feature_spec(seq_length, max_predictions, False, masked, with_sentence_labels=sentence_labels)
    dataset = tf.data.TFRecordDataset([str(p) for p in paths]).batch(100_000)
    f = {k: v.numpy() for k, v in next(iter(dataset.map(lambda r: tf.io.parse_example(r, spec)))).items()}
    f["original_ids"] = f["input_ids"].copy()
    if masked:
        rows, slots = np.nonzero(f["masked_lm_weights"])
        f["original_ids"][rows, f["masked_lm_positions"][rows, slots]] = f["masked_lm_ids"][rows, slots]
    return f


def _unmarked(marked):
    return np.where(marked < 0, ~marked, marked)


def test_ids_are_the_tokenizers_own_and_word_ids_mark_continuations(tokenizer_json):
    lines = generated_lines(200, seed=5) + ["x", ""]
    ours = HfTokenizer(str(tokenizer_json.parent))  # the directory names its tokenizer.json
    marked, splits = ours.tokenize_marked(lines)
    theirs = Tokenizer.from_file(str(tokenizer_json)).encode_batch(lines, add_special_tokens=False)
    assert len(splits) == len(lines) + 1
    np.testing.assert_array_equal(_unmarked(marked), [i for e in theirs for i in e.ids])
    continues = [i > 0 and e.word_ids[i] == e.word_ids[i - 1] for e in theirs for i in range(len(e.ids))]
    np.testing.assert_array_equal(marked < 0, continues)
    assert 100 < sum(continues) < len(continues) - 100  # words of one piece and of several


def _marked_by_tokenizers(tokenizer, lines):
    """tokenize_marked's result as tokenizers' own encode_batch gives it, line by line."""
    encodings = tokenizer.encode_batch(lines, add_special_tokens=False)
    ids = np.array([i for e in encodings for i in e.ids], np.int64)
    continues = [
        k > 0 and e.word_ids[k] is not None and e.word_ids[k] == e.word_ids[k - 1]
        for e in encodings
        for k in range(len(e.ids))
    ]
    return np.where(continues, ~ids, ids), np.cumsum([0] + [len(e.ids) for e in encodings])


# Text that tests whether tokenize_marked's chunks (hf_tokenizer._chunks) meet tokenizers' own splitting: spaces
# single, doubled, first and last; other whitespace, Python's and not the regex's (\x1c); contractions, digits,
# punctuation, combining marks, non-Latin letters, special tokens' spellings and the added tokens of `_added`.
_PARTS = [
    "ka",
    "To",
    "mi",
    "7",
    "42",
    "'s",
    "'ll",
    "'",
    ".",
    ",!",
    " ",
    " ",
    " ",
    "  ",
    "   ",
    "\t",
    "\u00a0",
    "\u3000",
    "\u2009",
    "\x1c",
    "\x85",
    "\u0301",
    "\u00e9",
    "\u65e5",
    "\U0001f600",
    "\u200b",
    "[MASK]",
    "<mask>",
    "[CLS]",
    "@@",
    "|||EMAIL|||",
]


def _added(path):
    """The tokenizer.json at `path` with added tokens not special, as ModernBERT's: runs of spaces and tabs, a
    placeholder; and a special one."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.add_tokens([AddedToken("  "), AddedToken("   "), AddedToken("\t\t"), AddedToken("|||EMAIL|||")])
    tokenizer.add_special_tokens([AddedToken("<|padding|>")])
    out = path.parent.parent / f"{path.parent.name}-added" / "tokenizer.json"
    out.parent.mkdir(exist_ok=True)
    tokenizer.save(str(out))
    return out


@pytest.mark.parametrize("variant", ["plain", "added tokens", "a normalizer"])
def test_tokenize_marked_is_tokenizers_own_encoding_on_any_text(tokenizer_json, variant):
    path = {"plain": lambda p: p, "added tokens": _added, "a normalizer": _with_normalizer}[variant](tokenizer_json)
    rng = np.random.default_rng(11)
    lines = ["".join(rng.choice(_PARTS, int(rng.integers(0, 14)))) for _ in range(3000)]
    lines += generated_lines(500, seed=9) + ["", " ", "  x", "x  ", "x\ny"]
    ours = HfTokenizer(str(path))
    assert ours.splits_at_spaces == (variant != "a normalizer")
    theirs = Tokenizer.from_file(str(path))
    theirs.encode_special_tokens = True
    for batch in (lines[:2000], lines[1000:], lines):  # strings met before, kept, and new
        marked, splits = ours.tokenize_marked(batch)
        expected_marked, expected_splits = _marked_by_tokenizers(theirs, batch)
        np.testing.assert_array_equal(marked, expected_marked)
        np.testing.assert_array_equal(splits, expected_splits)


def _with_normalizer(path):
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.normalizer = normalizers.NFKC()
    out = path.parent.parent / f"{path.parent.name}-nfkc" / "tokenizer.json"
    out.parent.mkdir(exist_ok=True)
    tokenizer.save(str(out))
    return out


def test_tokenize_marked_forgets_its_words_past_its_bound(modernbert, monkeypatch):
    monkeypatch.setattr(hf_tokenizer, "_KEPT_PIECES", 50)
    ours = HfTokenizer(str(modernbert))
    lines = generated_lines(40, seed=2)
    first, _ = ours.tokenize_marked(lines[:20])
    assert len(ours._pieces) > 50
    again, _ = ours.tokenize_marked(lines[:20] + lines[20:])
    assert len(ours._pieces) <= len(again)
    np.testing.assert_array_equal(again[: len(first)], first)


def test_the_byte_level_regex_whitespace_is_whitespace_to_python():
    # hf_tokenizer._chunks cuts lines at spaces by Python's whitespace; the cut is exact only if every character
    # the ByteLevel regular expression (onig's \s) takes for whitespace is Python's too.
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    kept = pre_tokenizers.Split(Regex(r"\s"), "removed").pre_tokenize_str(every)
    regex_whitespace = set(every) - set("".join(piece for piece, _ in kept))
    assert " " in regex_whitespace and "\u3000" in regex_whitespace
    assert all(c.isspace() for c in regex_whitespace)


def test_records_hold_the_tokenizers_ids(tokenizer_json, tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt")
    out = tmp_path / "mlm.tfrecord"
    _create(corpus, tokenizer_json, [out], objective="mlm", dupe_factor=1, no_masking=True)
    f = _read([out], masked=False, sentence_labels=False)
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    lines = [line for line in pathlib.Path(corpus).read_text().splitlines() if line]
    expected = np.bincount([i for e in tokenizer.encode_batch(lines, add_special_tokens=False) for i in e.ids])
    special = HfTokenizer(str(tokenizer_json)).special_ids
    cls_sep = {special.cls_id, special.sep_id}
    tokens = f["input_ids"][(f["input_mask"] == 1) & ~np.isin(f["input_ids"], list(cls_sep))]
    np.testing.assert_array_equal(np.bincount(tokens, minlength=len(expected)), expected)
    # Rows open with the tokenizer's [CLS]; the post-processor added none of its own.
    assert (f["input_ids"][:, 0] == special.cls_id).all() and (f["input_ids"][:, 1] != special.cls_id).all()


def test_special_tokens_come_from_the_tokenizer(modernbert, roberta):
    tokenizer = Tokenizer.from_file(str(roberta))
    ids = HfTokenizer(str(roberta)).special_ids
    assert (ids.cls_id, ids.sep_id, ids.mask_id, ids.unk_id) == tuple(
        tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<mask>", "<unk>")
    )
    assert (ids.cls_id, ids.sep_id) == (0, 2) and ids.vocab_size == tokenizer.get_vocab_size()
    ids = HfTokenizer(str(modernbert)).special_ids
    assert (ids.cls_id, ids.sep_id, ids.mask_id, ids.unk_id) == (0, 1, 2, 4)


def test_a_directorys_config_names_the_special_tokens(tmp_path):
    path = write_tokenizer(tmp_path / "tok", MODERNBERT, extra_special=("<|endoftext|>",))
    end = Tokenizer.from_file(str(path)).token_to_id("<|endoftext|>")
    (path.parent / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": {"content": "<|endoftext|>", "special": True}, "sep_token": "<|endoftext|>"})
    )
    (path.parent / "special_tokens_map.json").write_text(json.dumps({"sep_token": "[SEP]", "mask_token": "[MASK]"}))
    ids = HfTokenizer(str(path.parent)).special_ids
    assert (ids.cls_id, ids.sep_id, ids.mask_id) == (end, end, 2)  # tokenizer_config.json first
    assert HfTokenizer(str(path)).special_ids.cls_id == 0  # the file alone: the conventional spellings


def test_a_missing_special_token_is_one_line_before_any_record(tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt", num_docs=3)
    out = tmp_path / "out.tfrecord"
    no_mask = write_tokenizer(tmp_path / "no_mask", ("[CLS]", "[SEP]", "[PAD]", "[UNK]"))
    with pytest.raises(VocabularyError) as error:
        _create(corpus, no_mask.parent, [out])
    message = str(error.value)
    assert "\n" not in message and "a mask token ([MASK] or <mask>)" in message and str(no_mask) in message
    assert "tokenizer_config.json" in message  # a directory: its config files were read too
    bad_config = write_tokenizer(tmp_path / "bad_config", MODERNBERT)
    (bad_config.parent / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<mask>"}))
    with pytest.raises(VocabularyError, match=r"tokenizer_config\.json names mask_token '<mask>', which .* not hold"):
        _create(corpus, bad_config.parent, [out])
    assert not out.exists() and list(tmp_path.glob("*out*")) == []


def test_static_masking_never_picks_a_special_token(tokenizer_json, tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt", literal_specials=True)
    out = tmp_path / "nsp.tfrecord"
    summary = _create(corpus, tokenizer_json, [out], dupe_factor=5, max_predictions_per_seq=12)
    f = _read([out], max_predictions=12)
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    special = {tokenizer.token_to_id(t) for t in MODERNBERT + ROBERTA} - {None}
    ids = HfTokenizer(str(tokenizer_json)).special_ids
    weights = f["masked_lm_weights"] > 0
    assert len(f["input_ids"]) == summary.instances > 300 and weights.sum() > 1000
    assert not np.isin(f["masked_lm_ids"][weights], list(special)).any()
    # Special tokens stand only where the layout put them: text spelling them was encoded as text.
    real = f["input_mask"] == 1
    lengths = real.sum(1)
    first_sep = (f["segment_ids"] == 1).argmax(1) - 1
    layout = np.zeros_like(real)
    layout[:, 0] = True
    layout[np.arange(len(layout)), first_sep] = True
    layout[np.arange(len(layout)), lengths - 1] = True
    np.testing.assert_array_equal(np.isin(f["original_ids"], list(special)) & real, layout)
    assert (f["original_ids"][:, 0] == ids.cls_id).all()
    assert (f["original_ids"][np.arange(len(layout)), lengths - 1] == ids.sep_id).all()


def test_whole_word_masks_cover_whole_words(tmp_path):
    # A prefix space before every word and no punctuation: a piece starts a word exactly when it opens with "Ġ".
    path = write_tokenizer(tmp_path / "tok", MODERNBERT, add_prefix_space=True)
    corpus = _corpus(tmp_path / "corpus.txt", punctuation=False)
    out = tmp_path / "wwm.tfrecord"
    _create(corpus, path, [out], do_whole_word_mask=True, dupe_factor=5, max_predictions_per_seq=12)
    f = _read([out], max_predictions=12)
    tokenizer = Tokenizer.from_file(str(path))
    starts_word = np.array([tokenizer.id_to_token(i).startswith("Ġ") for i in range(tokenizer.get_vocab_size())])
    original = f["original_ids"]
    masked = np.zeros_like(original, dtype=bool)
    rows, slots = np.nonzero(f["masked_lm_weights"])
    masked[rows, f["masked_lm_positions"][rows, slots]] = True
    # A piece that continues a word, unless truncation left it first in its segment (a word of its own there).
    layout = np.isin(original, [0, 1])  # [CLS] 0, [SEP] 1
    continuation = (f["input_mask"] == 1) & ~starts_word[original] & ~layout
    continuation[:, 1:] &= ~layout[:, :-1]
    assert continuation.sum() > 1000 and masked[continuation].sum() > 200
    np.testing.assert_array_equal(masked[:, 1:][continuation[:, 1:]], masked[:, :-1][continuation[:, 1:]])


def test_records_are_the_same_for_any_worker_count_and_name_the_tokenizer(modernbert, tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt")
    written = []
    for workers in (1, 2):
        outs = [tmp_path / f"w{workers}-{i}.tfrecord" for i in range(2)]
        summary = _create(
            corpus, modernbert, outs, objective="mlm", do_whole_word_mask=True, num_workers=workers, unit_bytes=600
        )
        assert summary.units > 3
        written.append(_records(outs))
    assert written[0] == written[1] and len(written[0]) > 50
    assert summary.tokenizer == str(modernbert)
    assert summary.tokenizer_sha256 == hashlib.sha256(modernbert.read_bytes()).hexdigest()
    assert f"tokenizer: {modernbert} (sha256 {summary.tokenizer_sha256})" in summary.format()


@pytest.mark.spawns
def test_the_data_tool_takes_a_tokenizer(modernbert, tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt", num_docs=8)
    no_mask = write_tokenizer(tmp_path / "no_mask", ("[CLS]", "[SEP]", "[PAD]", "[UNK]"))
    out, vocab = tmp_path / "out.tfrecord", tmp_path / "vocab.txt"
    vocab.write_text("\n".join(WORDPIECE_VOCAB) + "\n")
    common = [f"--input_file={corpus}", f"--output_file={out}", "--max_seq_length=48", "--max_predictions_per_seq=8"]
    *refused, made = run_batch(
        "create_pretraining_data",
        [
            [*common, f"--tokenizer={no_mask}"],
            [*common, f"--tokenizer={modernbert.parent}", f"--vocab_file={vocab}"],
            [*common],
            [*common, f"--tokenizer={modernbert}", "--do_lower_case"],
            [*common, f"--tokenizer={modernbert.parent}", "--do_whole_word_mask", "--dupe_factor=1"],
        ],
    )
    for result, needles in zip(
        refused,
        (
            [str(no_mask), "a mask token ([MASK] or <mask>)"],
            ["--vocab_file", "--tokenizer", "not both"],
            ["--vocab_file", "--tokenizer"],
            ["--do_lower_case", "--tokenizer"],
        ),
    ):
        assert_refused(result, "kbert-create-pretraining-data", *needles)
    assert made.returncode == 0, made.stderr
    digest = hashlib.sha256(modernbert.read_bytes()).hexdigest()
    assert f"tokenizer: {modernbert} (sha256 {digest})" in made.stdout


@pytest.mark.spawns
def test_records_of_a_tokenizer_are_made_without_tensorflow(modernbert, tmp_path):
    # TensorFlow's import takes seconds in each process; a tokenizer.json's records need none of it.
    corpus, out = _corpus(tmp_path / "corpus.txt", num_docs=8), tmp_path / "out.tfrecord"
    script = (
        "import sys\n"
        "from kbert.data.create_pretraining_data import create_pretraining_data\n"
        "from kbert.data.instances import InstanceConfig\n"
        "config = InstanceConfig(max_seq_length=48, max_predictions_per_seq=8, dupe_factor=3)\n"
        f"create_pretraining_data([{corpus!r}], [{str(out)!r}], None, True, config, tokenizer={str(modernbert)!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_text', 'keras')))\n"
    )
    made = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "[]"
    _create(corpus, modernbert, [tmp_path / "here.tfrecord"])  # in this process, TensorFlow imported
    assert out.read_bytes() == (tmp_path / "here.tfrecord").read_bytes()


def test_the_inspector_decodes_with_a_tokenizer(modernbert, tmp_path, capsys):
    out = tmp_path / "out.tfrecord"
    _create(_corpus(tmp_path / "corpus.txt", num_docs=8), modernbert, [out], dupe_factor=1)
    tokenizer = HfTokenizer(str(modernbert.parent))
    capsys.readouterr()
    inspect_files(str(out), 48, 8, tokenizer, tokenizer.vocab_size, None, num_examples=1)
    printed = capsys.readouterr().out
    f = _read([out])
    first = f["input_ids"][0][: f["input_mask"][0].sum()].tolist()
    theirs = Tokenizer.from_file(str(modernbert))
    assert f"input:  {theirs.decode(first, skip_special_tokens=False)}" in printed
    assert f"< vocab_size {theirs.get_vocab_size()}: ok" in printed
    slots = np.flatnonzero(f["masked_lm_weights"][0])
    targets = [f"{f['masked_lm_positions'][0, s]}:{theirs.id_to_token(int(f['masked_lm_ids'][0, s]))}" for s in slots]
    assert f"masked: {' '.join(targets)}" in printed


@pytest.mark.parametrize(("workers", "cores", "parallel"), [(2, 2, "false"), (4, 2, "false"), (2, 8, None)])
def test_a_worker_a_core_runs_tokenizers_on_one_thread_unless_the_user_says(monkeypatch, workers, cores, parallel):
    from kbert.data import create_pretraining_data as creation

    monkeypatch.setattr(creation, "UnitProcessor", lambda job: job)
    monkeypatch.setattr(creation.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "")  # so that the test's end puts back what was there before
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    creation._init_worker("job", workers)
    assert creation.os.environ.get("TOKENIZERS_PARALLELISM") == parallel
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    creation._init_worker("job", workers)
    assert creation.os.environ["TOKENIZERS_PARALLELISM"] == "true"
