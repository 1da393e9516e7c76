"""The TFRecord inspector: counts, histogram, NSP balance, masked share, decoded examples, and its errors."""

import os
import sys

import forkserver
import numpy as np
import pytest
from tfrecord_fixtures import make_instances, write_records, write_vocab

from kbert.data.inspection import inspect_files
from kbert.data.record_stats import VocabDecoder, decode
from kbert.data.validation import InputDataError

SEQ, PRED = 32, 5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def corpus(tmp_path):
    vocab = write_vocab(str(tmp_path / "vocab.txt"))
    parts = [make_instances(30, SEQ, PRED, len(vocab), seed=s) for s in (1, 2)]
    for i, part in enumerate(parts):
        write_records(tmp_path / f"part-{i}.tfrecord", part)
    return tmp_path, vocab, parts[0] + parts[1]


def test_report_numbers_match_the_records(corpus, capsys):
    tmp_path, vocab, instances = corpus
    stats = inspect_files(
        str(tmp_path / "part-*.tfrecord"), SEQ, PRED, VocabDecoder(vocab), len(vocab), None, num_examples=2
    )
    out = capsys.readouterr().out

    lengths = np.array([sum(inst["input_mask"]) for inst in instances])
    labels = np.array([inst["next_sentence_labels"][0] for inst in instances])
    predictions = sum(sum(inst["masked_lm_weights"]) for inst in instances)
    assert stats.records == 60
    np.testing.assert_array_equal(stats.length_counts, np.bincount(lengths, minlength=SEQ + 1))
    assert sum(count for _, _, count in stats.histogram()) == 60
    assert stats.nsp_counts.tolist() == [int((labels == 0).sum()), int((labels == 1).sum())]
    assert stats.masked_share() == pytest.approx(predictions / lengths.sum())

    assert "part-0.tfrecord" in out and "part-1.tfrecord" in out
    assert f"{'total':<60} {60:>10,}" in out
    assert f"1 random next {int(labels.sum())}" in out
    assert "seq_length 32, max_predictions 5, masked, v1 feature names" in out
    assert f"input:  {decode(instances[0]['input_ids'], vocab)}" in out
    assert f"input:  {decode(instances[1]['input_ids'], vocab)}" in out
    assert "example 2" not in out


def test_decode_glues_word_pieces():
    vocab = ["[PAD]", "[CLS]", "[SEP]", "play", "##ing", "chess"]
    assert decode([1, 3, 4, 5, 2, 0, 0], vocab) == "[CLS] playing chess [SEP]"


def test_settings_mismatch_is_an_error_naming_the_file(corpus):
    tmp_path, vocab, _ = corpus
    with pytest.raises(InputDataError, match="part-0.tfrecord.*max_seq_length=32.*seq_length=64"):
        inspect_files(str(tmp_path / "part-*.tfrecord"), 64, PRED, VocabDecoder(vocab), len(vocab), None, 0)


@pytest.mark.spawns
def test_tool_exits_1_naming_a_truncated_file(corpus):
    tmp_path, vocab, _ = corpus
    path = tmp_path / "part-1.tfrecord"
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # the last record is cut: only a full read finds it
    result = forkserver.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "inspect_tfrecords.py"),
            f"--input_file={tmp_path}/part-*.tfrecord",
            f"--vocab_file={tmp_path}/vocab.txt",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 1
    assert (
        f"kbert-inspect-tfrecords: error: {path}: corrupt or truncated TFRecord after 29 good records" in result.stderr
    )
    assert "part-0.tfrecord" in result.stdout  # the good file was reported before
