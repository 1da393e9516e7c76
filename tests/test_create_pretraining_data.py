"""Pretraining-data creation: the algorithm's statistics, the file format against Model Garden, determinism, bad input.

The corpus is synthetic so instances can be decoded back to where they came from: sentence s of document d is made
of the word `w{d * 20 + s}` (plus `##s` pieces in the whole-word tests), so every token names its document and
its sentence.
"""

import collections
import pathlib
import sys

import forkserver
import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_tools

from kbert.data import full_sentences, schema
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.instances import InstanceConfig
from kbert.data.tfrecord_writer import RecordFile, ShardedWriter, encode_examples, example_proto
from kbert.data.wordpiece.tokenizer import WordpieceTokenizer
from kbert.data.wordpiece.vocab_file import SPECIAL_TOKENS
from kbert.errors import VocabularyError

ROOT = pathlib.Path(__file__).resolve().parents[1]
NUM_DOCS, SENTENCES = 20, 20
SPECIAL = list(SPECIAL_TOKENS)  # the compact layout: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4
WORDS = [f"w{i}" for i in range(NUM_DOCS * SENTENCES)]
VOCAB = SPECIAL + WORDS + ["##s", "x", "."]
WORD0 = len(SPECIAL)  # id of w0


def _sentence(doc, s, rng, plural=False):
    word = f"w{doc * SENTENCES + s}"
    words = [word + ("s" if plural and rng.random() < 0.5 else "") for _ in range(rng.integers(2, 9))]
    return " ".join(words)


def _write_corpus(path, num_docs=NUM_DOCS, plural=False, seed=0):
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(num_docs):
        n = int(rng.integers(3, SENTENCES + 1))
        docs.append("\n".join(_sentence(d % NUM_DOCS, s, rng, plural) for s in range(n)))
    path.write_text("\n\n".join(docs) + "\n")
    return path


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    return str(_write_corpus(tmp_path / "corpus.txt"))


def _read(path, seq_length, max_predictions, with_predictions=True, v2=False, compression="", sentence_labels=True):
    spec = schema.feature_spec(seq_length, max_predictions, v2, with_predictions, with_sentence_labels=sentence_labels)
    dataset = tf.data.TFRecordDataset(path, compression_type=compression).batch(100_000)
    batch = next(iter(dataset.map(lambda r: tf.io.parse_example(r, spec))))
    return {k: v.numpy() for k, v in batch.items()}


def _create(corpus, vocab_file, out, **kwargs):
    options = dict(max_seq_length=64, max_predictions_per_seq=20, dupe_factor=5)
    run_options = {
        k: kwargs.pop(k)
        for k in ("num_workers", "use_v2_feature_names", "gzip", "unit_bytes", "random_seed")
        if k in kwargs
    }
    options.update(kwargs)
    outputs = [str(out)] if not isinstance(out, list) else [str(o) for o in out]
    return create_pretraining_data([corpus], outputs, vocab_file, True, InstanceConfig(**options), **run_options)


def _originals(f):
    """Ids before masking: masked_lm_ids put back at masked_lm_positions."""
    ids = f["input_ids"].copy()
    rows, slots = np.nonzero(f["masked_lm_weights"])
    ids[rows, f["masked_lm_positions"][rows, slots]] = f["masked_lm_ids"][rows, slots]
    return ids


def _sep_positions(f):
    length = f["input_mask"].sum(1)
    first_sep = (f["segment_ids"] == 1).argmax(1) - 1
    return first_sep, length - 1


def test_masking_statistics_and_special_tokens(corpus, vocab_file, tmp_path):
    out = tmp_path / "out.tfrecord"
    summary = _create(corpus, vocab_file, out, max_predictions_per_seq=64, dupe_factor=20)
    f = _read(str(out), 64, 64)
    n = len(f["input_ids"])
    assert n == summary.instances > 900
    weights = f["masked_lm_weights"]
    lengths = f["input_mask"].sum(1)
    # round(len * 0.15) per instance, exactly (max_predictions does not bind here).
    np.testing.assert_array_equal(weights.sum(1), np.maximum(1, np.round(lengths * 0.15)))
    assert abs(weights.sum() / lengths.sum() - 0.15) < 0.005
    rows, slots = np.nonzero(weights)
    positions = f["masked_lm_positions"][rows, slots]
    current = f["input_ids"][rows, positions]
    original = f["masked_lm_ids"][rows, slots]
    mask_share = np.mean(current == VOCAB.index("[MASK]"))
    same_share = np.mean(current == original)
    assert abs(mask_share - 0.8) < 0.015 and abs(same_share - 0.1 - 0.1 / len(VOCAB)) < 0.01
    assert abs(1 - mask_share - same_share - 0.1 * (1 - 1 / len(VOCAB))) < 0.01
    # Positions ascending within the real ones; padding all zeros.
    pos = np.where(weights > 0, f["masked_lm_positions"], 10**6)
    assert (np.diff(np.sort(pos, 1), axis=1) >= 0).all() and (np.sort(pos, 1) == pos).all()
    assert (f["masked_lm_positions"][weights == 0] == 0).all() and (f["masked_lm_ids"][weights == 0] == 0).all()
    # Never [CLS] or [SEP]: they sit where they belong and are never prediction targets.
    first_sep, last_sep = _sep_positions(f)
    all_rows = np.arange(n)
    assert (f["input_ids"][:, 0] == 2).all()
    assert (f["input_ids"][all_rows, first_sep] == 3).all() and (f["input_ids"][all_rows, last_sep] == 3).all()
    assert (positions != 0).all()
    assert (positions != first_sep[rows]).all() and (positions != last_sep[rows]).all()
    assert not np.isin(original, [0, 2, 3]).any()
    # Layout: 1 on real tokens, segment 1 exactly on `B [SEP]`, padding 0.
    columns = np.arange(64)[None]
    np.testing.assert_array_equal(f["input_mask"], (columns < lengths[:, None]).astype(np.int64))
    np.testing.assert_array_equal(
        f["segment_ids"], ((columns > first_sep[:, None]) & (columns < lengths[:, None])).astype(np.int64)
    )
    assert (f["input_ids"][f["input_mask"] == 0] == 0).all()
    assert summary.masked == weights.sum() and summary.tokens == lengths.sum()


def _doc_and_sentence(ids):
    words = ids[(ids >= WORD0) & (ids < WORD0 + len(WORDS))] - WORD0
    return words // SENTENCES, words % SENTENCES


def _check_segments(f, sentence_order):
    first_sep, last_sep = _sep_positions(f)
    labels = f["next_sentence_labels"][:, 0]
    multi_sentence_a = np.zeros(len(labels), bool)
    for row in range(len(labels)):
        doc_a, sent_a = _doc_and_sentence(f["input_ids"][row, 1 : first_sep[row]])
        doc_b, sent_b = _doc_and_sentence(f["input_ids"][row, first_sep[row] + 1 : last_sep[row]])
        assert len(set(doc_a)) == 1 and len(set(doc_b)) == 1  # A and B are each one document's text
        same_document = doc_a[0] == doc_b[0]
        first_segment = sent_a
        if labels[row] == 0:
            assert same_document and sent_a.max() < sent_b.min()  # B is the actual next
        elif sentence_order and same_document:
            assert sent_b.max() < sent_a.min()  # swapped
            first_segment = sent_b
        else:
            assert not same_document  # random next from another document
        multi_sentence_a[row] = len(set(first_segment)) > 1
        if sentence_order and not same_document:
            assert not multi_sentence_a[row]  # as ALBERT: only a one-sentence chunk takes a random next
    return labels, multi_sentence_a


def test_next_sentence_labels_are_balanced_and_correct(corpus, vocab_file, tmp_path):
    out = tmp_path / "nsp.tfrecord"
    summary = _create(corpus, vocab_file, out, no_masking=True, dupe_factor=20)
    f = _read(str(out), 64, 20, with_predictions=False)
    labels, multi_sentence_a = _check_segments(f, sentence_order=False)
    # A chunk of two or more sentences (seen as A holding two sentences) flips a fair coin; a one-sentence chunk
    # always takes a random next, which lifts the overall rate a little above 0.5, as in Google's script.
    fair = labels[multi_sentence_a]
    assert len(fair) > 300 and abs(fair.mean() - 0.5) < 3.5 * np.sqrt(0.25 / len(fair))
    assert 0.5 <= labels.mean() < 0.6
    assert summary.random_next == labels.sum()


def test_sentence_order_swaps_half(corpus, vocab_file, tmp_path):
    out = tmp_path / "sop.tfrecord"
    _create(corpus, vocab_file, out, no_masking=True, sentence_order=True, dupe_factor=20)
    labels, multi_sentence_a = _check_segments(_read(str(out), 64, 20, with_predictions=False), sentence_order=True)
    fair = labels[multi_sentence_a]
    assert len(fair) > 300 and abs(fair.mean() - 0.5) < 3.5 * np.sqrt(0.25 / len(fair))


def test_whole_word_masking_masks_whole_words(tmp_path, vocab_file):
    corpus = str(_write_corpus(tmp_path / "plural.txt", plural=True))
    out = tmp_path / "wwm.tfrecord"
    _create(corpus, vocab_file, out, do_whole_word_mask=True, dupe_factor=10)
    f = _read(str(out), 64, 20)
    original = _originals(f)
    masked = np.zeros_like(original, dtype=bool)
    rows, slots = np.nonzero(f["masked_lm_weights"])
    masked[rows, f["masked_lm_positions"][rows, slots]] = True
    # A `##s` that truncation left at the start of a segment is a word of its own.
    continuation = (original == VOCAB.index("##s")) & ~np.isin(np.roll(original, 1, axis=1), [2, 3])
    assert continuation.sum() > 1000 and masked[:, 1:][continuation[:, 1:]].sum() > 100
    # A `##s` is masked exactly when the piece before it is.
    np.testing.assert_array_equal(masked[:, 1:][continuation[:, 1:]], masked[:, :-1][continuation[:, 1:]])


def test_model_garden_loader_reads_our_files(corpus, vocab_file, tmp_path):
    from official.nlp.data import pretrain_dataloader

    for v2 in (False, True):
        out = tmp_path / f"mg-{v2}.tfrecord"
        _create(corpus, vocab_file, out, use_v2_feature_names=v2)
        ours = _read(str(out), 64, 20, v2=v2)
        config = pretrain_dataloader.BertPretrainDataConfig(
            input_path=str(out),
            global_batch_size=8,
            is_training=False,
            seq_length=64,
            max_predictions_per_seq=20,
            use_v2_feature_names=v2,
        )
        batch = next(iter(pretrain_dataloader.BertPretrainDataLoader(config).load()))
        np.testing.assert_array_equal(batch["input_word_ids"].numpy(), ours[schema.file_name("input_ids", v2)][:8])
        np.testing.assert_array_equal(batch["input_type_ids"].numpy(), ours[schema.file_name("segment_ids", v2)][:8])
        np.testing.assert_array_equal(batch["masked_lm_ids"].numpy(), ours["masked_lm_ids"][:8])
        np.testing.assert_array_equal(batch["next_sentence_labels"].numpy(), ours["next_sentence_labels"][:8])


@pytest.mark.spawns
def test_we_read_model_garden_files(corpus, vocab_file, tmp_path):
    out = tmp_path / "mg.tfrecord"
    forkserver.run(
        [
            sys.executable,
            "-m",
            "official.nlp.data.create_pretraining_data",
            f"--input_file={corpus}",
            f"--output_file={out}",
            f"--vocab_file={vocab_file}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=20",
            "--dupe_factor=1",
        ],
        check=True,
        capture_output=True,
    )
    f = _read(str(out), 64, 20)
    assert len(f["input_ids"]) > 50 and (f["input_ids"][:, 0] == 2).all()
    assert set(np.unique(f["next_sentence_labels"])) == {0, 1}


@pytest.mark.parametrize("rows, width, predictions", [(5, 7, 3), (40, 130, 20), (2, 6000, 3), (0, 7, 3)])
def test_encoding_equals_protobuf_deterministic_serialization(rows, width, predictions):
    # Records of one to three length bytes (widths 7, 130 and 6000), ids of one to six varint bytes, no rows.
    rng = np.random.default_rng(width)
    features = {
        "input_ids": rng.integers(0, 2**40, [rows, width]) * (rng.random([rows, width]) < 0.7),
        "input_mask": rng.integers(0, 2, [rows, width]),
        "segment_ids": rng.integers(0, 2, [rows, width]),
        "masked_lm_positions": rng.integers(0, 300, [rows, predictions]),
        "masked_lm_ids": rng.integers(0, 70_000, [rows, predictions]),
        "masked_lm_weights": rng.random([rows, predictions]).astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, [rows, 1]),
    }
    for v2 in (False, True):
        records = encode_examples(features, v2)
        assert len(records) == rows
        for row, record in enumerate(records):
            assert record == example_proto({name: values[row] for name, values in features.items()}, v2)
    parsed = tf.train.Example.FromString(example_proto({"masked_lm_weights": [0.5], "input_ids": [2**40]}, True))
    assert parsed.features.feature["masked_lm_weights"].float_list.value == [0.5]
    assert parsed.features.feature["input_word_ids"].int64_list.value == [2**40]


@pytest.mark.parametrize("gzip", [False, True])
def test_record_files_are_tensorflows_bytes(tmp_path, gzip):
    rng = np.random.default_rng(4)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 5000, 400)] + [b""]
    ours = RecordFile(str(tmp_path / "ours"), gzip)
    for record in records:
        ours.write(record)
    ours.close()
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    with tf.io.TFRecordWriter(str(tmp_path / "theirs"), options) as theirs:
        for record in records:
            theirs.write(record)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()


@pytest.mark.spawns
def test_output_identical_for_any_worker_count(corpus, vocab_file, tmp_path):
    digests = []
    for workers in (1, 2):
        outs = [tmp_path / f"w{workers}-{i}.tfrecord" for i in range(2)]
        summary = _create(corpus, vocab_file, outs, num_workers=workers, unit_bytes=512, dupe_factor=2)
        assert summary.units > 3
        digests.append([o.read_bytes() for o in outs])
    assert digests[0] == digests[1]
    counts = [len(_read(str(o), 64, 20)["input_ids"]) for o in outs]
    assert abs(counts[0] - counts[1]) <= 1  # round-robin over the shards
    other_seed = tmp_path / "seed.tfrecord"
    _create(corpus, vocab_file, other_seed, dupe_factor=2, random_seed=7, unit_bytes=512)
    assert other_seed.read_bytes() != b"".join(digests[0])


def test_gzip_and_unmasked_records(corpus, vocab_file, tmp_path):
    out = tmp_path / "z.tfrecord.gz"
    _create(corpus, vocab_file, out, gzip=True, no_masking=True, dupe_factor=1)
    f = _read(str(out), 64, 20, with_predictions=False, compression="GZIP")
    assert set(f) == {"input_ids", "input_mask", "segment_ids", "next_sentence_labels"}
    assert (f["input_ids"] != VOCAB.index("[MASK]")).all()
    record = next(iter(tf.data.TFRecordDataset(str(out), compression_type="GZIP"))).numpy()
    assert set(tf.train.Example.FromString(record).features.feature) == set(f)


def test_bad_text_is_repaired_and_counted(vocab_file, tmp_path):
    corpus = tmp_path / "bad.txt"
    huge = " ".join(["w1"] * 350_000)  # a 1 MB line
    corpus.write_bytes(
        b"w0 w0 \xff\xfe w0\nw1 w1\n\n\n\n"  # non-UTF-8 bytes; runs of blank lines
        b"w20 w20\n\n"  # a one-sentence document
        b"\x01\x02\n\n" + huge.encode() + b"\nw2 w2\n\n" + b"w40 w41\nw42\n"  # a document without any token
    )
    out = tmp_path / "bad.tfrecord"
    summary = _create(str(corpus), vocab_file, out, dupe_factor=3)
    assert summary.repaired_lines == 1 and summary.replaced_chars == 2
    assert summary.documents == 4 and summary.dropped_documents == 1
    f = _read(str(out), 64, 20)
    assert len(f["input_ids"]) == summary.instances > 0
    assert (f["input_mask"].sum(1) <= 64).all()
    assert VOCAB.index("[UNK]") in f["input_ids"] or VOCAB.index("[UNK]") in f["masked_lm_ids"]
    assert summary.unk_tokens > 0


def test_vocabulary_without_special_tokens_is_a_clear_error(corpus, tmp_path):
    bad = tmp_path / "nospecial.txt"
    bad.write_text("[PAD]\n[UNK]\nhello\n")
    out = tmp_path / "never.tfrecord"
    with pytest.raises(VocabularyError, match=r"nospecial\.txt.*\[CLS\], \[SEP\], \[MASK\]"):
        _create(corpus, str(bad), out)
    with pytest.raises(FileNotFoundError, match="--vocab_file"):
        WordpieceTokenizer(str(tmp_path / "missing.txt"))
    assert not out.exists() and not list(tmp_path.glob("*never*")) and not list(tmp_path.glob(".*never*"))


def test_crash_leaves_no_finished_looking_file(tmp_path):
    path = tmp_path / "part.tfrecord"
    with pytest.raises(RuntimeError):
        with ShardedWriter([str(path)]) as writer:
            writer.write(b"x")
            raise RuntimeError("worker died")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """tools/create_pretraining_data.py's command lines of the CLI tests, all in one process (tests/cli_batch.py: one
    TensorFlow start), each run as `python tools/create_pretraining_data.py ARGS` would run: name -> (its folder,
    its output, CompletedProcess)."""
    root = tmp_path_factory.mktemp("cli")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    corpus = _write_corpus(root / "corpus.txt")
    runs = {}
    missing = root / "missing"
    runs["missing"] = (
        missing,
        missing / "o.tfrecord",
        [f"--input_file={missing}/nothing-*.txt", f"--output_file={missing}/o.tfrecord", f"--vocab_file={vocab}"],
    )
    ok = root / "ok"
    runs["ok"] = (
        ok,
        ok / "o",
        [
            f"--input_file={corpus}",
            f"--output_file={ok}/o",
            "--num_output_shards=2",
            f"--vocab_file={vocab}",
            "--max_seq_length=64",
            "--dupe_factor=1",
            "--num_workers=2",
        ],
    )
    for flag in MLM_REFUSED_FLAGS:
        folder = root / flag.strip("-").split("=")[0]
        runs[flag] = (
            folder,
            folder / "o.tfrecord",
            [
                f"--input_file={corpus}",
                f"--output_file={folder}/o.tfrecord",
                f"--vocab_file={vocab}",
                "--objective=mlm",
                flag,
            ],
        )
    for folder, _, _ in runs.values():
        folder.mkdir()
    results = run_tools([("tools/create_pretraining_data.py", args) for _, _, args in runs.values()], cwd=ROOT)
    return {name: (folder, out, result) for (name, (folder, out, _)), result in zip(runs.items(), results)}


@pytest.mark.spawns
@pytest.mark.xdist_group("create_pretraining_data_cli")  # one worker runs the shared batch once
def test_cli_missing_input_names_flag_and_pattern(cli_runs):
    _, _, missing = cli_runs["missing"]
    assert missing.returncode != 0 and "--input_file" in missing.stderr and "nothing-*.txt" in missing.stderr
    folder, _, ok = cli_runs["ok"]
    assert ok.returncode == 0, ok.stderr
    assert "instances:" in ok.stdout and "[UNK] rate" in ok.stdout and "masked share" in ok.stdout
    assert sorted(p.name for p in folder.glob("o-*")) == ["o-00000-of-00002", "o-00001-of-00002"]


def test_full_rows_drop_a_separator_that_would_open_a_row_and_carry_leftovers():
    sep = 99
    rows, leftover = full_sentences.cut_rows(np.array([1, 2, sep, 3, 4, 5, sep, 6, sep], np.int32), 3, sep)
    np.testing.assert_array_equal(rows.bodies, [[1, 2, sep, sep], [3, 4, 5, sep]])  # a document ends 1 before
    np.testing.assert_array_equal(rows.lengths, [4, 4])
    np.testing.assert_array_equal(leftover, [6, sep])  # the [SEP] after 5 would have opened this row
    carry = full_sentences.Carry(3, sep)
    assert len(carry.add(leftover).lengths) == 0
    np.testing.assert_array_equal(carry.add(np.array([7, 8, sep], np.int32)).bodies, [[6, sep, 7, sep]])
    last = carry.last_row()  # closed by its last document's [SEP]
    np.testing.assert_array_equal(last.bodies, [[8, sep, 0, 0]])
    np.testing.assert_array_equal(last.lengths, [2])


def _corpus_documents(path):
    """Each document's token ids, from the synthetic corpus's text (`w7s` is `w7 ##s`)."""

    def ids(word):
        return [VOCAB.index(word[:-1]), VOCAB.index("##s")] if word.endswith("s") else [VOCAB.index(word)]

    return [[i for word in doc.split() for i in ids(word)] for doc in pathlib.Path(path).read_text().split("\n\n")]


def _written_order(shards):
    """Rows (ids before masking, and lengths) in the order they were written: round-robin over the shards."""
    rows = [list(zip(_originals(f), f["input_mask"].sum(1))) for f in shards]
    return [rows[k][p] for p in range(len(rows[0])) for k in range(len(rows)) if p < len(rows[k])]


def test_mlm_rows_are_full_and_hold_every_document_whole(corpus, vocab_file, tmp_path):
    cls, sep = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
    outs = [tmp_path / f"mlm-{i}.tfrecord" for i in range(3)]
    summary = _create(corpus, vocab_file, outs, objective="mlm", dupe_factor=1, unit_bytes=512)
    assert summary.units > 3  # leftovers are carried across many units
    shards = [_read(str(o), 64, 20, sentence_labels=False) for o in outs]
    record = next(iter(tf.data.TFRecordDataset(str(outs[0])))).numpy()
    assert set(tf.train.Example.FromString(record).features.feature) == set(shards[0])  # no next_sentence_labels
    assert "next_sentence_labels" not in shards[0]
    for f in shards:
        assert (f["input_mask"][:-1] == 1).all() and (f["segment_ids"] == 0).all()  # only a shard's last row pads
        full = f["input_mask"].sum(1) == 64
        assert (f["masked_lm_weights"][full].sum(1) == round(64 * 0.15)).all()
    by_document = collections.defaultdict(list)
    separators = 0
    for ids, length in _written_order(shards):
        assert ids[0] == cls and ids[length - 1] == sep and ids[1] != sep
        pieces = np.split(ids[1 : length - 1], np.flatnonzero(ids[1 : length - 1] == sep))
        pieces = [p[p != sep] for p in pieces]
        # Each [SEP] inside a row stands between two documents; only a row's end may hold [SEP] [SEP].
        assert all(len(p) for p in pieces[:-1])
        documents = [set(_doc_and_sentence(p)[0]) for p in pieces if len(p)]
        assert all(len(d) == 1 for d in documents) and all(a != b for a, b in zip(documents, documents[1:]))
        separators += len(pieces) - 1
        for p in pieces:
            if len(p):
                by_document[_doc_and_sentence(p)[0][0]].extend(p.tolist())
    assert separators >= NUM_DOCS - 1 - summary.units  # rows cross document boundaries
    # Every document once, whole and in order: the rows hold the corpus's token stream.
    assert by_document == dict(enumerate(_corpus_documents(corpus)))
    assert summary.instances == sum(len(f["input_ids"]) for f in shards) and summary.padded_rows <= 1
    assert "objective mlm" in summary.format() and "padding" in summary.format()


@pytest.mark.spawns
def test_mlm_output_identical_for_any_worker_count(tmp_path, vocab_file):
    corpus = str(_write_corpus(tmp_path / "plural.txt", plural=True))
    digests = []
    for workers in (1, 2):
        outs = [tmp_path / f"w{workers}-{i}.tfrecord" for i in range(2)]
        summary = _create(
            corpus,
            vocab_file,
            outs,
            objective="mlm",
            num_workers=workers,
            unit_bytes=512,
            dupe_factor=3,
            do_whole_word_mask=True,
        )
        assert summary.units > 3
        digests.append([o.read_bytes() for o in outs])
    assert digests[0] == digests[1]
    shards = [_read(str(o), 64, 20, sentence_labels=False) for o in outs]
    tokens = np.concatenate([ids[:length] for ids, length in _written_order(shards)])
    words = np.concatenate([np.array(d) for d in _corpus_documents(corpus)])
    # --dupe_factor=3: every token three times, with new masks each pass.
    np.testing.assert_array_equal(
        np.bincount(tokens, minlength=len(VOCAB))[len(SPECIAL) :],
        3 * np.bincount(words, minlength=len(VOCAB))[len(SPECIAL) :],
    )


MLM_REFUSED_FLAGS = ["--sentence_order", "--short_seq_prob=0.2"]


@pytest.mark.spawns
@pytest.mark.xdist_group("create_pretraining_data_cli")
@pytest.mark.parametrize("flag", MLM_REFUSED_FLAGS)
def test_cli_refuses_sentence_pair_flags_with_mlm(cli_runs, flag):
    _, out, result = cli_runs[flag]
    errors = [line for line in result.stderr.splitlines() if "kbert-create-pretraining-data: error:" in line]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and flag.split("=")[0] in errors[0] and "--objective=nsp" in errors[0]
    assert not out.exists()
