"""The records' tokenizer, identified: kbert-create-pretraining-data writes kbert_records.json beside its records
(the tokenizer's file, SHA-256 and size) only with them, globs over the records' folder never match it, and
kbert-pretrain refuses a data.tokenizer or data.vocab_file of another SHA-256 before it trains, in one line naming
both files."""

import hashlib
import json

import pytest
from tokenizer_fixtures import MODERNBERT, ROBERTA, generated_lines, write_tokenizer
from training_fixtures import write_config, write_shards

from kbert import experiment
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.hf_tokenizer import HfTokenizer
from kbert.data.input_files import RECORDS_INFO, expand_patterns
from kbert.data.instances import InstanceConfig
from kbert.data.records_info import tokenizer_mismatch
from kbert.errors import InputDataError
from kbert.training.stage import with_layouts

CONFIG = InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1)


def _corpus(path) -> str:
    lines = generated_lines(120, seed=2)
    path.write_text("\n\n".join("\n".join(lines[i : i + 6]) for i in range(0, 120, 6)) + "\n")
    return str(path)


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_each_output_folder_names_the_records_tokenizer_and_globs_skip_it(tmp_path):
    tokenizer = write_tokenizer(tmp_path / "tok", MODERNBERT)
    outs = [tmp_path / "a" / "train-0.tfrecord", tmp_path / "a" / "train-1.tfrecord", tmp_path / "b" / "eval.tfrecord"]
    create_pretraining_data(
        [_corpus(tmp_path / "corpus.txt")], [str(o) for o in outs], None, True, CONFIG, tokenizer=str(tokenizer.parent)
    )
    expected = {
        "tokenizer": str(tokenizer),
        "tokenizer_sha256": _sha256(tokenizer),
        "vocab_size": HfTokenizer(str(tokenizer)).vocab_size,
    }
    for folder in ("a", "b"):
        assert json.loads((tmp_path / folder / RECORDS_INFO).read_text()) == expected
    assert expand_patterns(f"{tmp_path / 'a'}/*", "--input_file") == [str(outs[0]), str(outs[1])]

    records = f"{tmp_path / 'a'}/*,{tmp_path / 'b'}/*"
    assert tokenizer_mismatch(records, "data.train_files", str(tokenizer.parent), "data.tokenizer") is None
    other = write_tokenizer(tmp_path / "roberta", ROBERTA)
    message = tokenizer_mismatch(records, "data.train_files", str(other.parent), "data.tokenizer")
    assert "\n" not in message and message.startswith(f"data.tokenizer={other.parent}: {other} (sha256 ")
    assert f"the records beside {tmp_path / 'a' / RECORDS_INFO} were written with, {tokenizer} (sha256 " in message


def test_a_failed_run_writes_no_records_info(tmp_path):
    tokenizer = write_tokenizer(tmp_path / "tok", MODERNBERT)
    outs = [str(tmp_path / "out" / f"{i}.tfrecord") for i in range(500)]  # more files than records: refused
    with pytest.raises(InputDataError, match="would leave"):
        create_pretraining_data([_corpus(tmp_path / "corpus.txt")], outs, None, True, CONFIG, tokenizer=str(tokenizer))
    assert not (tmp_path / "out" / RECORDS_INFO).exists()


def test_pretraining_with_another_vocabulary_than_the_records_stops_before_it_trains(tmp_path):
    records = write_shards(str(tmp_path / "data"), "train", shards=1, records_per_shard=8)
    written_with, other = tmp_path / "vocab.txt", tmp_path / "other.txt"
    written_with.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nw\n")
    other.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nv\n")
    info = {"tokenizer": str(written_with), "tokenizer_sha256": _sha256(written_with), "vocab_size": 6}
    (tmp_path / "data" / RECORDS_INFO).write_text(json.dumps(info))

    def run(vocab_file):
        config = write_config(str(tmp_path / "c.yaml"), records, data={"vocab_file": str(vocab_file)})
        stages = experiment.stages_of(experiment.load_experiment([config]))
        return with_layouts(stages)

    assert len(run(written_with)) == 1
    with pytest.raises(InputDataError) as error:
        run(other)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"training: data.vocab_file={other}: {other} (sha256 ")
    assert f"{tmp_path / 'data' / RECORDS_INFO} were written with, {written_with} (sha256 " in message
