"""Bad TFRecords fail up front with an error naming the file and the fix."""

import re

import pytest
import tensorflow as tf
from tfrecord_fixtures import make_instances, write_records

from kbert.data import pretraining_dataset
from kbert.data.input_files import match_files
from kbert.data.tfrecord_writer import example_proto
from kbert.data.validation import InputDataError, check_framing, validate_file

SEQ, PRED, VOCAB = 32, 5, 200


@pytest.fixture()
def good(tmp_path):
    return write_records(tmp_path / "good.tfrecord", make_instances(40, SEQ, PRED, VOCAB))


def build(tmp_path, **kwargs):
    kwargs.setdefault("vocab_size", VOCAB)
    return pretraining_dataset(str(tmp_path / "*.tfrecord"), SEQ, PRED, 4, **kwargs)


def raises_naming(path, *patterns):
    """pytest.raises for an InputDataError whose message names `path` and matches every pattern."""
    return pytest.raises(InputDataError, match=re.escape(str(path)) + "".join(f"(?s:.*){p}" for p in patterns))


def test_no_files_match(tmp_path, good):
    with pytest.raises(InputDataError, match=r"file_pattern: no file matches .*nothing-\*\.tfrecord"):
        pretraining_dataset(str(tmp_path / "nothing-*.tfrecord"), SEQ, PRED, 4)
    with pytest.raises(InputDataError, match="no file matches .*missing"):
        match_files(f"{tmp_path}/*.tfrecord,{tmp_path}/missing")


def test_truncated_file_is_named(tmp_path, good):
    data = open(good, "rb").read()
    bad = tmp_path / "truncated.tfrecord"
    bad.write_bytes(data[: len(data) // 3])
    with raises_naming(bad, "corrupt or truncated", "regenerate"):
        build(tmp_path, validate_records=None)


def test_truncation_beyond_the_first_records_is_found_by_the_header_walk(tmp_path, good):
    data = open(good, "rb").read()
    bad = tmp_path / "truncated.tfrecord"
    bad.write_bytes(data[:-7])
    # Reading 4 records would not reach the cut; walking the headers does, and counts the whole records.
    with raises_naming(bad, "truncated TFRecord: record 40 ", "39 whole records", "re-copy or regenerate"):
        build(tmp_path, validate_records=4)
    with raises_naming(bad, "after 39 good records"):
        build(tmp_path, validate_records=None)


def test_header_walk_counts_records_and_skips_gzip(tmp_path, good):
    assert check_framing(str(good)) == 40
    gzipped = write_records(tmp_path / "gz.tfrecord", make_instances(6, SEQ, PRED, VOCAB), gzip_compressed=True)
    assert validate_file(str(gzipped), SEQ, PRED, VOCAB, num_records=4).compression == "GZIP"


def test_header_walk_finds_a_cut_inside_a_header(tmp_path, good):
    data = open(good, "rb").read()
    bad = tmp_path / "cut_header.tfrecord"
    bad.write_bytes(data + data[:5])  # 40 whole records and 5 bytes of a 41st header
    with raises_naming(bad, "record 41 "):
        validate_file(str(bad), SEQ, PRED, VOCAB)


def test_corrupt_record_is_named(tmp_path, good):
    data = bytearray(open(good, "rb").read())
    data[30] ^= 0xFF  # inside the first record's payload: its CRC no longer matches
    bad = tmp_path / "corrupt.tfrecord"
    bad.write_bytes(bytes(data))
    with raises_naming(bad, "corrupt or truncated"):
        build(tmp_path)


def test_not_a_tfrecord_file_is_named(tmp_path, good):
    bad = tmp_path / "notes.tfrecord"
    bad.write_text("one sentence per line\nis text, not TFRecords\n")
    with raises_naming(bad, "corrupt or truncated"):
        build(tmp_path)


def test_empty_file_is_named(tmp_path, good):
    bad = tmp_path / "empty.tfrecord"
    bad.write_bytes(b"")
    with raises_naming(bad, "no records"):
        build(tmp_path)


def test_other_max_seq_length_is_an_error_not_a_truncation(tmp_path, good):
    bad = write_records(tmp_path / "seq64.tfrecord", make_instances(8, 64, PRED, VOCAB))
    with raises_naming(bad, "max_seq_length=64", "seq_length=32", "--max_seq_length=32"):
        build(tmp_path)


def test_other_max_predictions_is_an_error(tmp_path, good):
    bad = write_records(tmp_path / "pred7.tfrecord", make_instances(8, SEQ, 7, VOCAB))
    with raises_naming(bad, "max_predictions_per_seq=7", "max_predictions=5"):
        build(tmp_path)


def test_mixed_lengths_inside_a_file_are_an_error(tmp_path):
    instances = make_instances(4, SEQ, PRED, VOCAB) + make_instances(4, 48, PRED, VOCAB)
    bad = write_records(tmp_path / "mixed.tfrecord", instances)
    with raises_naming(bad, "mixes settings"):
        build(tmp_path)


@pytest.mark.parametrize("feature", ["input_ids", "masked_lm_ids"])
def test_token_ids_beyond_vocab_size_are_an_error(tmp_path, good, feature):
    instances = make_instances(8, SEQ, PRED, VOCAB)
    instances[5][feature] = [VOCAB + 7 if i and t else t for i, t in enumerate(instances[5][feature])]
    bad = write_records(tmp_path / "big-ids.tfrecord", instances)
    with raises_naming(bad, f"record 5 has {feature} id {VOCAB + 7}", f"vocab_size={VOCAB}", "wrong loss"):
        build(tmp_path)
    build(tmp_path, vocab_size=VOCAB + 8)  # the right vocabulary passes


def test_unmasked_records_need_dynamic_masking(tmp_path):
    bad = write_records(tmp_path / "unmasked.tfrecord", make_instances(8, SEQ, None, VOCAB))
    with raises_naming(bad, "unmasked", "dynamic_masking=True"):
        build(tmp_path)


def test_not_bert_records_are_named(tmp_path):
    bad = tmp_path / "images.tfrecord"
    with tf.io.TFRecordWriter(str(bad)) as writer:
        writer.write(example_proto({"image_ids": [1, 2, 3]}))
    with raises_naming(bad, "neither 'input_ids' nor 'input_word_ids'"):
        build(tmp_path)


def test_feature_names_are_detected_and_must_agree(tmp_path, good):
    assert not validate_file(good, SEQ, PRED).use_v2_feature_names
    v2 = write_records(tmp_path / "v2.tfrecord", make_instances(8, SEQ, PRED, VOCAB), v2=True)
    assert validate_file(v2, SEQ, PRED).use_v2_feature_names
    with raises_naming(v2, "v2 feature names"):
        build(tmp_path)
    with raises_naming(good, "use_v2_feature_names=True", "v1 names"):
        pretraining_dataset(good, SEQ, PRED, 4, use_v2_feature_names=True)


def test_compression_is_detected_and_must_agree(tmp_path, good):
    zipped = write_records(tmp_path / "zipped.tfrecord", make_instances(8, SEQ, PRED, VOCAB), gzip_compressed=True)
    assert validate_file(zipped, SEQ, PRED).compression == "GZIP"
    with raises_naming(zipped, "compression 'GZIP'"):
        build(tmp_path)
