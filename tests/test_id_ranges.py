"""Every record's ids are checked as it is read (`kbert.data.id_ranges`): the first out-of-range id stops the input
pipeline, `kbert-pretrain` and `kbert.fit_pretraining` in one line naming its file and index; good records pass
unchanged."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_batch
from training_fixtures import MAX_PREDICTIONS, SEQ_LENGTH, VOCAB_SIZE, pretrain_command, write_config

from kbert.data import pretraining_dataset
from kbert.data.id_ranges import id_error
from kbert.data.packing.pack_pretraining_data import pack_pretraining_data
from kbert.data.synthetic import random_instance
from kbert.data.tfrecord_writer import example_proto

BAD_RECORD = 300


def _write(path: str, records: int = 600, bad: dict | None = None, seed: int = 0) -> str:
    """`records` random instances; `bad` = {feature: value} is written into record BAD_RECORD's second slot."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for index in range(records):
            instance = random_instance(rng, SEQ_LENGTH, MAX_PREDICTIONS, VOCAB_SIZE)
            for name, value in (bad or {}).items() if index == BAD_RECORD else ():
                instance[name][1] = value
            writer.write(example_proto(instance))
    return path


def _read_all(path: str, **bounds) -> list[dict]:
    dataset = pretraining_dataset(path, SEQ_LENGTH, MAX_PREDICTIONS, 8, is_training=False, **bounds)
    return list(dataset.as_numpy_iterator())


@pytest.mark.parametrize(
    "feature,value", [("input_ids", VOCAB_SIZE), ("masked_lm_ids", VOCAB_SIZE + 7), ("input_ids", -1)]
)
def test_a_bad_id_deep_in_a_file_stops_the_pipeline_naming_file_and_record(tmp_path, feature, value):
    path = _write(str(tmp_path / "bad.tfrecord"), bad={feature: value})
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        _read_all(path, vocab_size=VOCAB_SIZE)
    line = str(id_error(raised.value))
    assert line.startswith(f"{path}: record {BAD_RECORD} has {feature} id {value}, outside [0, 64) of vocab_size=64")
    assert "\n" not in line and "regenerate the file" in line


def test_good_records_pass_unchanged_and_other_errors_are_not_taken_for_bad_ids(tmp_path):
    path = _write(str(tmp_path / "good.tfrecord"))
    checked = _read_all(path, vocab_size=VOCAB_SIZE, type_vocab_size=2, max_position_embeddings=SEQ_LENGTH)
    unchecked = _read_all(path)
    assert len(checked) == len(unchecked) == 75
    for a, b in zip(checked, unchecked):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert id_error(tf.errors.InvalidArgumentError(None, None, "indices[3] = 70 is not in [0, 64)")) is None


def test_segment_ids_and_packed_positions_have_their_own_bounds(tmp_path):
    path = _write(str(tmp_path / "records.tfrecord"), records=64)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        _read_all(path, type_vocab_size=1)
    assert "has segment_ids id 1, outside [0, 1) of type_vocab_size=1" in str(id_error(raised.value))
    packed = str(tmp_path / "packed.tfrecord")
    pack_pretraining_data([path], [packed], sequences_per_row=3)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        _read_all(packed, max_position_embeddings=4)
    assert f"{packed}: record " in str(id_error(raised.value))
    assert "has positions id 4, outside [0, 4) of max_position_embeddings=4" in str(id_error(raised.value))
    assert _read_all(packed, max_position_embeddings=SEQ_LENGTH)  # positions restart with each sequence


@pytest.mark.spawns
def test_kbert_pretrain_stops_in_one_line_on_a_bad_train_or_eval_record(tmp_path):
    good = _write(str(tmp_path / "good.tfrecord"), records=64, seed=1)
    bad = _write(str(tmp_path / "bad.tfrecord"), bad={"input_ids": VOCAB_SIZE})
    expected = f"kbert-pretrain: error: {bad}: record {BAD_RECORD} has input_ids id {VOCAB_SIZE}, outside [0, 64)"
    cases = [("train", bad, good, "train"), ("eval", good, bad, "train_and_eval")]
    commands = []  # kbert-pretrain's arguments (the launcher's python -c and device count left off)
    for name, train, eval_files, mode in cases:
        config = write_config(str(tmp_path / f"{name}.yaml"), train, eval_files, train={"total_steps": 2})
        commands.append(pretrain_command(config, tmp_path / name, mode=mode)[4:])
    results = run_batch("pretrain", commands)  # both commands in one fresh process, each as its own would run
    for (name, *_), result in zip(cases, results):
        model_dir = tmp_path / name
        assert result.returncode == 1, result.stderr[-3000:]
        own = [line for line in result.stderr.splitlines() if line.startswith("kbert-pretrain")]  # not TF's logs
        assert len(own) == 1 and own[0].startswith(expected), result.stderr[-3000:]
        assert "Traceback" not in result.stderr
        checkpoints = sorted(os.listdir(model_dir / "checkpoints")) if (model_dir / "checkpoints").exists() else []
        if name == "train":  # the shuffle buffer reads the bad record before the first step: nothing is saved
            assert not [c for c in checkpoints if c.startswith("ckpt-")], checkpoints
        else:  # training ends with its step-2 checkpoint; the evaluation after it stops on the bad record
            assert "ckpt-2.index" in checkpoints
            # A fresh run records that it saved the positions of checked records (test_a_run_resumes_its_input...).
            assert "its saved input positions" not in result.stdout + result.stderr
            assert json.loads((model_dir / "checkpoints" / "input_format.json").read_text()) == {
                "records_checked": True
            }


@pytest.mark.slow
def test_kbert_fit_stops_in_one_line_taking_the_bounds_from_the_model(tmp_path):
    import keras

    from kbert.errors import InputDataError
    from kbert.fit_pretraining import fit_pretraining
    from kbert.modeling import BertConfig, BertPretrainer

    bad = _write(str(tmp_path / "bad.tfrecord"), bad={"masked_lm_ids": VOCAB_SIZE})
    config = BertConfig.load("bert_tiny").replace(
        vocab_size=VOCAB_SIZE, hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1
    )

    def build_model():
        model = BertPretrainer(config)
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
        return model

    with pytest.raises(InputDataError) as raised:
        fit_pretraining(build_model, bad, SEQ_LENGTH, MAX_PREDICTIONS, 8, 4, str(tmp_path / "fit"), verbose=0)
    assert str(raised.value).startswith(f"{bad}: record {BAD_RECORD} has masked_lm_ids id {VOCAB_SIZE}")


@pytest.mark.slow
def test_a_run_resumes_its_input_as_it_was_saved_checked_or_not(tmp_path):
    """Checking every record adds steps to the pipeline, whose saved position only a pipeline of the same steps can
    read: a run directory keeps the way its positions were saved (`checkpoints/input_format.json`; one saved
    before that file existed read unchecked records), so the same command resumes it bit-identically."""
    from training_fixtures import checkpoint_weights, run_here, write_shards

    data = write_shards(str(tmp_path / "data"), "train", shards=2, records_per_shard=24)
    unchecked = write_config(str(tmp_path / "unchecked.yaml"), data, data={"check_vocab_size": False})
    checked = write_config(str(tmp_path / "checked.yaml"), data)
    run_here(unchecked, tmp_path / "whole")
    for name, keep_record in [("old", False), ("toggled", True)]:
        model_dir = tmp_path / name
        # The unchecked run again, as it would be (deterministic): a copy of the whole one, not a third training.
        shutil.copytree(tmp_path / "whole", model_dir)
        checkpoints = model_dir / "checkpoints"
        for path in list(checkpoints.glob("ckpt-6.*")) + list(checkpoints.glob("input/*/ckpt-6.*")):
            path.unlink()  # the newest checkpoint lost: the run resumes from step 4
        if not keep_record:
            (checkpoints / "input_format.json").unlink()  # as a run written before the record existed
        printed = run_here(checked, model_dir)
        assert "its saved input positions" in printed and "Resumed from" in printed, printed
        whole, resumed = checkpoint_weights(tmp_path / "whole", 6), checkpoint_weights(model_dir, 6)
        assert all(np.array_equal(whole[key], resumed[key]) for key in whole), name
    # A fresh checked run's record: test_kbert_pretrain_stops_in_one_line_on_a_bad_train_or_eval_record.
