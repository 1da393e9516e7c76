"""Corpora in every input format: the same documents give byte-identical records; bad records are counted and
named, never fatal unless all are bad; whole-file problems are one line before anything is written."""

import csv
import json
import re
import sys

import numpy as np
import pytest
from tokenizer_fixtures import write_tokenizer

from kbert.data import sentences, work_units
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.instances import InstanceConfig
from kbert.data.wordpiece.vocab_file import SPECIAL_TOKENS
from kbert.errors import InputDataError

WORDS = [f"w{i}" for i in range(60)]
FORMATS = ("text", "jsonl", "csv", "parquet", "hf_dataset")


def corpus_documents(num_docs=24, seed=0):
    """Documents of sentences that end with a full stop, one word repeated: sentencex keeps each one whole."""
    rng = np.random.default_rng(seed)
    return [
        [
            " ".join([WORDS[int(rng.integers(len(WORDS)))]] * int(rng.integers(2, 9))) + "."
            for _ in range(int(rng.integers(2, 12)))
        ]
        for _ in range(num_docs)
    ]


def write_corpus(directory, docs, input_format, extra_rows=()):
    """`docs` in `input_format` under `directory`: text as BERT's format, records one document each with its
    sentences on lines of their own; `extra_rows` are raw JSONL lines or CSV rows appended."""
    texts = ["\n".join(doc) for doc in docs]
    path = directory / f"corpus.{input_format}"
    if input_format == "text":
        path.write_text("".join(text + "\n\n" for text in texts))
    elif input_format == "jsonl":
        lines = [json.dumps({"id": i, "text": text}) for i, text in enumerate(texts)] + list(extra_rows)
        path.write_text("\n".join(lines) + "\n")
    elif input_format == "csv":
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerows([["id", "text"]] + [[i, text] for i, text in enumerate(texts)] + list(extra_rows))
    elif input_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path, row_group_size=5)
    else:
        import datasets

        datasets.Dataset.from_dict({"id": list(range(len(texts))), "text": texts}).save_to_disk(str(path))
    return str(path)


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(list(SPECIAL_TOKENS) + WORDS + ["."]) + "\n")
    return str(path)


def records_of(paths):
    import tensorflow as tf

    return [[bytes(r.numpy()) for r in tf.data.TFRecordDataset(p)] for p in paths]


def create(tmp_path, vocab_file, source, input_format, objective, name, **kwargs):
    outputs = [str(tmp_path / f"{name}-{i}.tfrecord") for i in range(2)]
    config = InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, objective=objective)
    summary = create_pretraining_data(
        [source],
        outputs,
        vocab_file,
        True,
        config,
        unit_bytes=400,
        input_format=work_units.InputFormat(input_format),
        **kwargs,
    )
    return records_of(outputs), summary


@pytest.mark.parametrize("tokenizer", ["vocab_file", "tokenizer.json"])
@pytest.mark.parametrize("objective", ["nsp", "mlm"])
def test_every_format_writes_the_same_bytes(tmp_path, vocab_file, objective, tokenizer):
    files = {"vocab_file": vocab_file, "tokenizer": None}
    if tokenizer == "tokenizer.json":
        files = {"vocab_file": None, "tokenizer": str(write_tokenizer(tmp_path / "tokenizer"))}
    docs = corpus_documents()
    written = {}
    for input_format in FORMATS:
        source = write_corpus(tmp_path, docs, input_format)
        written[input_format], summary = create(
            tmp_path, files["vocab_file"], source, input_format, objective, input_format, tokenizer=files["tokenizer"]
        )
        assert summary.units > 3 and summary.bad_records == 0
    assert sum(map(len, written["text"])) > 50
    for input_format in FORMATS[1:]:
        assert written[input_format] == written["text"], input_format


def test_bad_records_are_counted_and_named_never_fatal(tmp_path, vocab_file):
    docs = corpus_documents(num_docs=6)
    bad = ['{"text": "w1 w1.", ', "[1, 2]", '{"id": 7}', '{"text": 3}', '{"text": null}', '{"text": "   "}']
    source = write_corpus(tmp_path, docs, "jsonl", extra_rows=bad)
    _, summary = create(tmp_path, vocab_file, source, "jsonl", "mlm", "out")
    assert (summary.records, summary.bad_records, summary.documents) == (12, 6, 6)
    assert summary.problems == (
        f"{source} line 7: bad JSON (Expecting property name enclosed in double quotes)",
        f"{source} line 8: a JSON list, not an object",
        f"{source} line 9: no 'text' field",
    )
    assert "bad records: 6 of 12 skipped, e.g. " in summary.format()


def test_a_short_csv_row_is_a_bad_record(tmp_path, vocab_file):
    docs = corpus_documents(num_docs=3)
    source = write_corpus(tmp_path, docs, "csv", extra_rows=[["9"]])  # on the line after the header and docs
    _, summary = create(tmp_path, vocab_file, source, "csv", "mlm", "out")
    line = sum(map(len, docs)) + 2
    assert summary.bad_records == 1 and summary.problems == (f"{source} line {line}: 1 field(s), no 'text'",)


def test_all_bad_records_fail_before_writing(tmp_path, vocab_file):
    source = tmp_path / "corpus.jsonl"
    source.write_text('{"body": "w1 w1."}\n{"body": "w2."}\n')
    out = tmp_path / "out.tfrecord"
    out.write_bytes(b"kept")
    with pytest.raises(
        InputDataError,
        match=r"all 2 records are bad, e\.g\. .*line 1: no 'text' field; check "
        r"--input_format=jsonl and --text_column=text",
    ):
        create_pretraining_data(
            [str(source)],
            [str(out)],
            vocab_file,
            True,
            InstanceConfig(objective="mlm"),
            input_format=work_units.InputFormat("jsonl"),
        )
    assert out.read_bytes() == b"kept"


@pytest.mark.parametrize("input_format", ["csv", "parquet", "hf_dataset"])
def test_a_missing_column_is_one_line_naming_the_columns(tmp_path, vocab_file, input_format):
    source = write_corpus(tmp_path, corpus_documents(num_docs=2), input_format)
    with pytest.raises(
        InputDataError,
        match=r"--text_column: .* has no column 'body' \(its columns: 'id', "
        r"'text'\); pass --text_column=NAME",
    ):
        work_units.plan_work_units([source], 1 << 20, work_units.InputFormat(input_format, text_column="body"))


def test_a_column_that_is_not_text_is_one_line(tmp_path):
    source = write_corpus(tmp_path, corpus_documents(num_docs=2), "parquet")
    with pytest.raises(InputDataError, match=r"column 'id' holds int64, not text"):
        work_units.plan_work_units([source], 1 << 20, work_units.InputFormat("parquet", text_column="id"))


def test_records_stream_through_byte_ranges(tmp_path):
    """Units of a record file cover every record once, whatever the unit size."""
    docs = corpus_documents(num_docs=30)
    for input_format in FORMATS[1:]:
        source = write_corpus(tmp_path, docs, input_format)
        fmt = work_units.InputFormat(input_format)
        for unit_bytes in (1, 300, 1 << 20):
            units, report = work_units.plan_work_units([source], unit_bytes, fmt)
            read = [doc for unit in units for doc in work_units.read_documents(unit)[0]]
            assert read == docs and report.records == 30, (input_format, unit_bytes)


def test_corpus_lines_are_the_records_lines(tmp_path):
    docs = corpus_documents(num_docs=4)
    source = write_corpus(tmp_path, docs, "jsonl", extra_rows=["not json"])
    report = work_units.ScanReport()
    assert list(work_units.corpus_lines([source], work_units.InputFormat("jsonl"), report)) == sum(docs, [])
    assert (report.records, report.bad) == (5, 1)


def test_sentences_come_from_sentencex():
    lines = sentences.lines("  Dr. Smith came at 5 p.m. on Jan. 3rd! Did he stay?\n\n The value is 3.14. Yes. ")
    assert sentences.split(lines, "en") == [
        "Dr. Smith came at 5 p.m. on Jan. 3rd!",
        "Did he stay?",
        "The value is 3.14.",
        "Yes.",
    ]


def test_crlf_text_is_cut_at_document_ends(tmp_path):
    """Units of a text file with Windows line ends start and end on document boundaries (a GFile's own line
    iteration drops the \\r, which once shifted every unit after the first line)."""
    docs = corpus_documents(num_docs=30)
    source = tmp_path / "corpus.txt"
    source.write_bytes("".join("\r\n".join(doc) + "\r\n\r\n" for doc in docs).encode())
    for unit_bytes in (1, 300):
        units, _ = work_units.plan_work_units([str(source)], unit_bytes)
        assert [doc for unit in units for doc in work_units.read_documents(unit)[0]] == docs


def test_a_vocabulary_learns_the_same_from_every_format(tmp_path):
    from kbert.data.wordpiece.vocab_learning import learn_vocabulary

    docs = corpus_documents(num_docs=12)
    learned = {}
    for input_format in FORMATS:
        source = write_corpus(tmp_path, docs, input_format)
        learned[input_format], stats = learn_vocabulary(
            [source], 120, layout="compact", input_format=work_units.InputFormat(input_format)
        )
        assert stats.lines == sum(map(len, docs))
    assert all(learned[f] == learned["text"] for f in FORMATS)


@pytest.mark.parametrize(
    "input_format,module,extra",
    [("parquet", "pyarrow.parquet", "kbert[parquet]"), ("hf_dataset", "datasets", "kbert[hf]")],
)
def test_a_missing_extra_is_named(tmp_path, monkeypatch, input_format, module, extra):
    from kbert.errors import ConfigError

    source = write_corpus(tmp_path, corpus_documents(num_docs=2), input_format)
    monkeypatch.setitem(sys.modules, module, None)  # what `import` meets where the package is not installed
    with pytest.raises(
        ConfigError,
        match=re.escape(f"--input_format={input_format} needs") + ".*" + re.escape(f"pip install '{extra}'"),
    ):
        work_units.plan_work_units([source], 1 << 20, work_units.InputFormat(input_format))
