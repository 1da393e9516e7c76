"""The engine's seam: a task defined only in tests/ (`toy_task.py`, a bag-of-words masked LM) trains, resumes
bit-identically after kill -9, and evaluates through `kbert.training.engine` with no edit to kbert/training/."""

import os
import sys

import numpy as np
import pytest
import toy_task
from training_fixtures import ROOT, checkpoint_weights, cli_env, kill_once_written, write_config, write_train_and_eval

pytestmark = pytest.mark.usefixtures("float32_policy")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    train, held_out = write_train_and_eval(str(root))
    return write_config(
        str(root / "c.yaml"),
        train,
        held_out,
        optimizer={"type": "adamw", "weight_decay": 0.0},
        schedule={"peak_learning_rate": 5e-2, "warmup_steps": 0},
        train={"total_steps": 24, "steps_per_loop": 2, "checkpoint_interval": 4, "max_checkpoints": 100},
    )


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, config_file):
    """The toy task's run of all 24 steps, done once: its directory, summary and printed lines."""
    model_dir, lines = tmp_path_factory.mktemp("straight") / "run", []
    summary = toy_task.run(config_file, str(model_dir), print_fn=lambda *a, **k: lines.append(a[0]))
    return model_dir, summary, lines


@pytest.mark.slow
@pytest.mark.xdist_group("toy_task_run")  # one worker trains the shared run once
def test_a_task_of_its_own_trains_and_evaluates_through_the_engine(straight_run, config_file):
    model_dir, summary, lines = straight_run
    assert summary["global_step"] == 24 and summary["sequences_trained"] == 24 * 8
    assert summary["stages"][0]["train_data"]["objective"] == "bag-of-words masked LM"
    assert set(summary["eval"]) == {"loss", "bag_accuracy", "sequences"} and summary["eval"]["sequences"] == 16
    losses = [float(line.split("loss ")[1].split()[0].rstrip(",")) for line in lines if "loss " in str(line)]
    assert losses and losses[-1] < losses[0]  # it learns the bag's token frequencies
    again = toy_task.run(config_file, str(model_dir), print_fn=lambda *a, **k: None)  # finished: resumes
    assert again["eval"] == summary["eval"]


@pytest.mark.spawns
@pytest.mark.xdist_group("toy_task_run")
def test_a_task_of_its_own_resumes_bit_identically_after_kill_9(tmp_path, config_file, straight_run):
    """Killed (SIGKILL, a process of its own) once it saved step 8, then resumed in this process: the weights at
    step 24 are the straight run's."""
    env = cli_env(PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    command = [sys.executable, os.path.join(ROOT, "tests", "toy_task.py"), config_file, str(tmp_path / "killed")]
    kill_once_written(command, tmp_path / "killed" / "checkpoints" / "ckpt-8.index", env=env)
    resumed = toy_task.run(config_file, str(tmp_path / "killed"), print_fn=lambda *a, **k: None)
    assert resumed["restored_from"].endswith(("ckpt-8", "ckpt-12"))  # the kill may land after a later save
    straight, killed = checkpoint_weights(straight_run[0], 24), checkpoint_weights(tmp_path / "killed", 24)
    assert straight.keys() == killed.keys() and len(straight) == 3
    for name in straight:
        np.testing.assert_array_equal(straight[name], killed[name], err_msg=name)
