"""The files a run reads and writes under its model_dir go through tf.io.gfile, so a model_dir on any TensorFlow file
system works (users give gs://). The tests run on TensorFlow's in-memory file system, `ram://`, where a plain
`open()` or `os.*` call fails (one, of an export to a bare file name, runs in a local folder).

What ram:// does not do as GCS or a local disk would, and these tests keep clear of: renaming a folder leaves its
files behind (only files are renamed here); `exists` and `isdir` match any string prefix of a stored path, so
`tf.train.load_checkpoint(prefix)` takes a checkpoint prefix for a folder (a folder with a `checkpoint` index is
given instead); only folders made with `makedirs` can be removed with `rmtree`; `stat` has no mtime (0).
"""

import os
import uuid

import pytest
import tensorflow as tf

from kbert.checkpoint_index import write_checkpoint_index
from kbert.demo.history import read_loss_curve
from kbert.errors import ConfigError, MissingFileError
from kbert.finetuning import pretrained, run_dir, subprocess_run
from kbert.modeling import BertConfig, BertPretrainer, export_google_checkpoint, load_google_checkpoint
from kbert.runtime import checkpoint_files, preemption
from kbert.runtime.sections import ModelConfig
from kbert.training.evaluation_history import read_summary
from kbert.training.reporting import write_summary_json

TINY = BertConfig(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=32,
)


@pytest.fixture
def model_dir():
    """A fresh run folder in this process's memory."""
    path = f"ram://test-{uuid.uuid4().hex}/run"
    tf.io.gfile.makedirs(path)
    return path


@pytest.fixture
def checkpoints(model_dir):
    """`model_dir/checkpoints` holding real checkpoints of steps 1, 2 and 3, the index naming all three."""
    directory = os.path.join(model_dir, "checkpoints")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), directory, max_to_keep=3)
    for step in (1, 2, 3):
        manager.save(checkpoint_number=step)
    return directory


def _write(path, text=""):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def test_summary_json_round_trips_and_is_replaced_whole(model_dir):
    path = write_summary_json(model_dir, {"eval": {"masked_lm_accuracy": 0.25}, "wall_seconds": 3})
    assert path == f"{model_dir}/summary.json"
    assert read_summary(model_dir) == {"eval": {"masked_lm_accuracy": 0.25}, "wall_seconds": 3}
    write_summary_json(model_dir, {"wall_seconds": 4})
    assert read_summary(model_dir) == {"wall_seconds": 4}
    assert tf.io.gfile.listdir(model_dir) == ["summary.json"]  # the temp file was renamed over it


def test_a_finetuning_run_dir_records_its_config_and_refuses_another(model_dir):
    run_dir.check_resumable(model_dir, {"train": {"epochs": 3}})
    assert run_dir.read_json(os.path.join(model_dir, run_dir.CONFIG_FILE)) == {"train": {"epochs": 3}}
    run_dir.check_resumable(model_dir, {"train": {"epochs": 3}})  # the same config resumes
    with pytest.raises(ConfigError, match="another config"):
        run_dir.check_resumable(model_dir, {"train": {"epochs": 4}})
    run_dir.write_json(os.path.join(model_dir, run_dir.SUMMARY_FILE), {"eval": {"accuracy": 0.75}})
    assert subprocess_run.read_summary(model_dir) == {"eval": {"accuracy": 0.75}}
    with pytest.raises(ConfigError, match="finished"):
        run_dir.check_resumable(model_dir, {"train": {"epochs": 3}})
    assert run_dir.read_json(os.path.join(model_dir, "absent.json")) is None


def test_the_checkpoint_index_names_base_names_and_follows_a_copy(model_dir, checkpoints):
    write_checkpoint_index(checkpoints, [f"{checkpoints}/ckpt-1", f"{checkpoints}/ckpt-2"])
    with tf.io.gfile.GFile(os.path.join(checkpoints, "checkpoint")) as f:
        assert f.read().splitlines() == [
            'model_checkpoint_path: "ckpt-2"',
            'all_model_checkpoint_paths: "ckpt-1"',
            'all_model_checkpoint_paths: "ckpt-2"',
        ]
    assert tf.train.latest_checkpoint(checkpoints) == f"{checkpoints}/ckpt-2"
    assert not tf.io.gfile.exists(os.path.join(checkpoints, "checkpoint.tmp"))
    copy = os.path.join(model_dir, "copy")
    tf.io.gfile.makedirs(copy)
    for name in tf.io.gfile.listdir(checkpoints):
        tf.io.gfile.copy(os.path.join(checkpoints, name), os.path.join(copy, name))
    assert tf.train.latest_checkpoint(copy) == f"{copy}/ckpt-2"


def test_listed_names_every_checkpoint_newest_first_indexed_or_not(checkpoints):
    tf.train.Checkpoint(v=tf.Variable(2.0)).write(f"{checkpoints}/ckpt-7")  # not in the index
    tf.io.gfile.remove(f"{checkpoints}/ckpt-1.index")  # in the index, but gone
    assert [checkpoint_files.step_of(p) for p in checkpoint_files.listed(checkpoints)] == [7, 3, 2, 1]
    assert checkpoint_files.listed(checkpoints)[0] == f"{checkpoints}/ckpt-7"
    assert checkpoint_files.step_of(f"{checkpoints}/ckpt-4_temp") == -1


def test_missing_files_names_a_lost_index_or_shard(checkpoints):
    assert checkpoint_files.missing_files(f"{checkpoints}/ckpt-3") is None
    tf.io.gfile.remove(f"{checkpoints}/ckpt-2.data-00000-of-00001")
    assert checkpoint_files.missing_files(f"{checkpoints}/ckpt-2") == "some of its .data files are missing"
    tf.io.gfile.remove(f"{checkpoints}/ckpt-1.index")
    assert checkpoint_files.missing_files(f"{checkpoints}/ckpt-1") == "its .index file is missing"


def test_the_leftovers_of_unfinished_saves_are_removed_and_nothing_else(checkpoints):
    before = sorted(tf.io.gfile.listdir(checkpoints))
    tf.io.gfile.makedirs(f"{checkpoints}/ckpt-4_temp")
    _write(f"{checkpoints}/ckpt-4_temp/part-00000-of-00001.index")
    _write(f"{checkpoints}/ckpt-5_temp_1f2e.index")
    removed = checkpoint_files.remove_unfinished_saves(checkpoints)
    assert sorted(removed) == [f"{checkpoints}/ckpt-4_temp", f"{checkpoints}/ckpt-5_temp_1f2e.index"]
    assert sorted(tf.io.gfile.listdir(checkpoints)) == before
    assert checkpoint_files.remove_unfinished_saves(checkpoints) == []


def test_set_aside_moves_the_files_and_points_the_index_at_the_rest(checkpoints):
    folder = checkpoint_files.set_aside(checkpoints, [f"{checkpoints}/ckpt-3"], "diverged_at_step_3")
    assert folder == f"{checkpoints}/diverged_at_step_3"
    assert sorted(tf.io.gfile.listdir(folder)) == ["ckpt-3.data-00000-of-00001", "ckpt-3.index"]
    assert tf.train.latest_checkpoint(checkpoints) == f"{checkpoints}/ckpt-2"
    rest = [f"{checkpoints}/ckpt-1", f"{checkpoints}/ckpt-2"]
    checkpoint_files.set_aside(checkpoints, rest, "diverged_at_step_1")
    assert tf.train.latest_checkpoint(checkpoints) is None  # the index went with the last checkpoints
    assert "checkpoint" in tf.io.gfile.listdir(f"{checkpoints}/diverged_at_step_1")
    assert checkpoint_files.listed(checkpoints) == []


def test_a_preemption_saves_the_step_in_the_model_dir(checkpoints):
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), checkpoints, max_to_keep=5)
    with preemption.PreemptionWatcher(tf.distribute.get_strategy(), gce=False) as watcher:
        watcher.check(manager, 4)  # no termination: nothing saved
        watcher.reason = "SIGTERM"
        with pytest.raises(preemption.Preempted, match="at step 5"):
            watcher.check(manager, 5)
    assert tf.train.latest_checkpoint(checkpoints) == f"{checkpoints}/ckpt-5"


def test_a_google_export_reloads_with_its_config(model_dir):
    model = BertPretrainer(TINY)
    path = export_google_checkpoint(model, f"{model_dir}/export/bert_model.ckpt")
    export = f"{model_dir}/export"
    assert BertConfig.from_json_file(f"{export}/bert_config.json") == TINY
    assert pretrained.resolve_checkpoint(export) == path
    assert pretrained.bert_config_for(ModelConfig(bert=""), path) == TINY
    other = BertPretrainer(TINY)
    assert not load_google_checkpoint(other, export)["missing"]
    for a, b in zip(model.weights, other.weights):
        assert (a.numpy() == b.numpy()).all()


def test_a_google_export_to_a_bare_name_lands_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert export_google_checkpoint(BertPretrainer(TINY), "bert_model.ckpt") == "bert_model.ckpt"
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "bert_model.ckpt")
    assert BertConfig.from_json_file(str(tmp_path / "bert_config.json")) == TINY


def test_a_missing_bert_config_is_named(model_dir):
    with pytest.raises(MissingFileError, match="does not exist"):
        BertConfig.from_json_file(f"{model_dir}/bert_config.json")


def test_finetuning_finds_a_pretraining_runs_checkpoint_and_model(model_dir, checkpoints):
    assert pretrained.resolve_checkpoint(model_dir) == f"{checkpoints}/ckpt-3"
    write_summary_json(model_dir, {"config": {"model": {"bert": "bert_tiny", "overrides": {"num_hidden_layers": 1}}}})
    found = pretrained.bert_config_for(ModelConfig(bert=""), f"{checkpoints}/ckpt-3")
    assert found == BertConfig.load("bert_tiny").replace(num_hidden_layers=1)


def test_the_loss_curve_is_read_from_every_train_folder(model_dir):
    for folder, losses in (("stage_1/train", {1: 5.0, 2: 4.0}), ("train", {3: 3.0}), ("eval", {3: 9.0})):
        writer = tf.summary.create_file_writer(os.path.join(model_dir, folder))
        with writer.as_default():
            for step, loss in losses.items():
                tf.summary.scalar("loss", loss, step=step)
        writer.close()
    curve = read_loss_curve(model_dir, start_time=0.0)
    assert (curve.steps, curve.losses) == ([1, 2, 3], [5.0, 4.0, 3.0])
    with pytest.raises(FileNotFoundError, match="No 'loss' training summaries"):
        read_loss_curve(f"{model_dir}/absent", start_time=0.0)
