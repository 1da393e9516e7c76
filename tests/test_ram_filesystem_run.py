"""Whole runs with model_dir on TensorFlow's in-memory file system (`ram://`), which only tf.io.gfile and
tf.train.Checkpoint reach: a plain run, and an MSLT plan followed by a phase, write their checkpoints, stage exports,
summary.json and TensorBoard files there and resume from them; a divergence sets its checkpoints aside there. A
file opened with open() or os.* on a run path would miss (or land on the local disk), as it would on gs://."""

import json
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import write_config, write_shards, write_train_and_eval

from kbert import experiment
from kbert.errors import NonFiniteLossError
from kbert.experiment import load_experiment
from kbert.runtime.strategy import make_strategy


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("data"))
    train, eval_files = write_train_and_eval(root)
    long = [
        write_shards(os.path.join(root, "long"), name, 1, 16, seed=seed, seq_length=32)
        for name, seed in (("train", 2), ("eval", 3))
    ]
    return train, eval_files, *long


def _ram_dir(name: str) -> str:
    return f"ram://kbert-{uuid.uuid4().hex}/{name}"


def _read_json(path: str) -> dict:
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def _run(config, model_dir, mode="train_and_eval"):
    lines = []
    summary = experiment.run(
        config,
        model_dir,
        make_strategy("one_device"),
        mode,
        print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))),
    )
    return summary, lines


def _lives_on_ram(tmp_path, config, model_dir: str, restart: bool = True) -> dict:
    """Runs `config` into `model_dir` (on ram://), checks that everything it wrote is there and nothing on the
    local disk, then, if `restart`, runs it again: resumed from ram://, nothing left to train, the same model. Its
    summary."""
    summary, lines = _run(config, model_dir)
    assert any(line.startswith("No lease on --model_dir=ram://") for line in lines)
    assert _read_json(f"{model_dir}/summary.json")["eval"] == summary["eval"]
    assert tf.io.gfile.glob(f"{model_dir}/train/events.out.tfevents.*")
    assert tf.train.latest_checkpoint(f"{model_dir}/checkpoints").endswith(f"ckpt-{summary['global_step']}")
    if len(summary["stages"]) > 1:
        stages = _read_json(f"{model_dir}/stages.json")
        assert [s["end_step"] for s in stages] == [s["end_step"] for s in summary["stages"]]
        for stage in stages:
            assert _read_json(f"{model_dir}/stage_{stage['stage']}/summary.json")["global_step"] == stage["end_step"]
            assert tf.io.gfile.exists(f"{model_dir}/stage_{stage['stage']}/export/bert_model.ckpt.index")
    assert os.listdir(tmp_path) == ["c.yaml"]
    if not restart:
        return summary

    again, lines = _run(config, model_dir)  # resumed from ram://: nothing left to train, the same model
    assert any(line.startswith(f"Resumed from {model_dir}/checkpoints/ckpt-") for line in lines)
    assert again["eval"] == summary["eval"] and again["global_step"] == summary["global_step"]
    return summary


# An MSLT plan (1 layer, then the model's 2) and a second phase after it: every kind of stage a run has, in one run.
MSLT = {"stages": [{"num_layers": 1, "steps": 2}, {"num_layers": 2, "steps": 2}], "final_stage": {"steps": 2}}


@pytest.mark.slow
def test_an_mslt_plan_and_a_phase_after_it_live_entirely_on_ram_and_resume_from_it(tmp_path, data, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written to a relative local path would show up here
    phases = [
        {},
        {
            "steps": 2,
            "train_files": data[2],
            "eval_files": data[3],
            "seq_length": 32,
            "global_batch_size": 4,
            "warmup_steps": 1,
        },
    ]
    path = write_config(str(tmp_path / "c.yaml"), data[0], data[1], mslt=MSLT, phases=phases)
    summary = _lives_on_ram(tmp_path, load_experiment([path]), _ram_dir("mslt_then_phase"))
    assert len(summary["stages"]) == 4


@pytest.mark.slow
def test_a_run_lives_entirely_on_ram_resumes_from_it_and_sets_a_divergence_aside_there(tmp_path, data, monkeypatch):
    """A plain run (6 steps) on ram://; then trained on from its ckpt-6 there with a learning rate that diverges at
    step 7, which sets ckpt-7 aside there; a rerun goes on from ckpt-6. (A finished run's restart from ram:// is the
    MSLT test's.)"""
    monkeypatch.chdir(tmp_path)  # anything written to a relative local path would show up here
    path = write_config(str(tmp_path / "c.yaml"), data[0], data[1])
    model_dir = _ram_dir("plain")
    summary = _lives_on_ram(tmp_path, load_experiment([path]), model_dir, restart=False)
    assert summary["global_step"] == 6 and len(summary["stages"]) == 1

    every_step = {"steps_per_loop": 1, "checkpoint_interval": 1, "summary_interval": 1, "max_checkpoints": 10}
    diverging = load_experiment(
        [write_config(str(tmp_path / "d.yaml"), data[0], train=dict(every_step, total_steps=10))],
        "schedule.peak_learning_rate=1e30",
    )
    with pytest.raises(
        NonFiniteLossError,
        match=r"Moved ckpt-7 .* to ram://.*diverged_at_step_7; a rerun resumes "
        r"from ram://.*ckpt-6",
    ):
        _run(diverging, model_dir, "train")
    assert tf.io.gfile.glob(f"{model_dir}/checkpoints/diverged_at_step_7/ckpt-7.*")
    assert tf.train.latest_checkpoint(f"{model_dir}/checkpoints").endswith("ckpt-6")
    summary, lines = _run(load_experiment([path], "train.total_steps=8"), model_dir, "train")
    assert any(line.endswith("ckpt-6 at step 6.") for line in lines) and np.isfinite(summary["train"]["loss"])
