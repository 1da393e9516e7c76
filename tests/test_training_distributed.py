"""kbert-pretrain end to end in processes of its own (the mirrored runs and the TPU refusal share one): strategies
agree, multi-worker, kill -9 resume, SIGTERM."""

import json
import os
import signal
import subprocess
import time

import forkserver
import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_batch
from training_fixtures import (
    cli_env,
    kill_once_written,
    pretrain_command,
    run_here,
    write_config,
    write_train_and_eval,
)

from kbert.bench.localhost_cluster import free_ports, tf_configs


def _weights(model_dir, step):
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", f"ckpt-{step}"))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/")]
    assert len(names) > 30  # every block's weights, not just the top-level layers
    return {n: reader.get_tensor(n) for n in names}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_train_and_eval(str(tmp_path_factory.mktemp("data")), 48)


def _mirrored_config(directory, data) -> str:
    no_dropout = {
        "bert": "bert_tiny",
        "overrides": {
            "vocab_size": 64,
            "hidden_size": 32,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "max_position_embeddings": 32,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
        },
    }
    # Eval batches of 6 of the 16 records: one replica reads 6, 6, 4 from one kept iterator; two read 3 each,
    # and an iterator of each evaluation shares the last batches.
    return write_config(
        str(directory / "mirrored.yaml"),
        data[0],
        data[1],
        model=no_dropout,
        train={"gradient_accumulation_steps": 2, "total_steps": 4},
        eval={"global_batch_size": 6},
    )


# Set-up code for a batch of mirrored runs in one process: each MirroredStrategy gets collective keys of its own, as
# in a fresh process (TF's own tests do the same, strategy_combinations.py). Without it a second run whose gradients
# have other shapes reuses the first run's keys and fails ("Shape mismatch in the collective instance 117").
FRESH_COLLECTIVE_KEYS = """
from tensorflow.python.distribute import mirrored_strategy
_init = mirrored_strategy.MirroredStrategy.__init__
def _init_with_fresh_keys(self, *args, **kwargs):
    mirrored_strategy.MirroredStrategy._collective_key_base += 100000
    _init(self, *args, **kwargs)
mirrored_strategy.MirroredStrategy.__init__ = _init_with_fresh_keys
"""


def _mslt_config(directory, data, build_ahead: bool) -> str:
    mslt = {
        "stages": [{"num_layers": 1, "steps": 3}, {"num_layers": 2, "steps": 3}],
        "final_stage": {"steps": 0},
        "build_ahead": build_ahead,
    }
    return write_config(str(directory / f"mslt_{build_ahead}.yaml"), data[0], train={"total_steps": 4}, mslt=mslt)


@pytest.fixture(scope="module")
def two_cpus(tmp_path_factory, data):
    """On two logical CPU devices, in one kbert-pretrain process (one TensorFlow start-up for all): the mirrored
    train_and_eval, the mirrored MSLT runs with and without building ahead, then --strategy=tpu. Name -> (config,
    model_dir, CompletedProcess)."""
    tmp = tmp_path_factory.mktemp("two_cpus")
    runs = {
        "mirrored": (_mirrored_config(tmp, data), "mirrored", "train_and_eval"),
        **{f"mslt_{ahead}": (_mslt_config(tmp, data, ahead), "mirrored", "train") for ahead in (True, False)},
        # Last, so that whatever a failed TPU start-up leaves in the process cannot disturb another run.
        "tpu": (write_config(str(tmp / "tpu.yaml"), data[0]), "tpu", "train"),
    }
    results = run_batch(
        "pretrain",
        [
            pretrain_command(c, tmp / name, strategy, cpus=2, mode=mode)[4:]
            for name, (c, strategy, mode) in runs.items()
        ],
        cpus=2,
        setup=FRESH_COLLECTIVE_KEYS,
        timeout=900,
    )
    return {name: (c, tmp / name, result) for (name, (c, _, _)), result in zip(runs.items(), results)}


@pytest.mark.spawns
@pytest.mark.xdist_group("two_cpus")  # one worker runs the shared batch once
def test_one_device_and_two_mirrored_replicas_reach_the_same_weights_and_evaluations(tmp_path, two_cpus):
    config, two, result = two_cpus["mirrored"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_here(config, tmp_path / "one", "train_and_eval")
    summaries = [json.loads((run / "summary.json").read_text()) for run in (tmp_path / "one", two)]
    assert summaries[1]["replicas"] == 2, result.stdout
    assert summaries[0]["eval"]["sequences"] == summaries[1]["eval"]["sequences"] == 16
    for name in ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy"):
        assert summaries[1]["eval"][name] == pytest.approx(summaries[0]["eval"][name], rel=1e-4, abs=1e-6), name
    one, two = _weights(tmp_path / "one", 4), _weights(two, 4)
    assert one.keys() == two.keys()
    for name in one:
        np.testing.assert_allclose(one[name], two[name], rtol=1e-4, atol=2e-5, err_msg=name)
    start = _weights(tmp_path / "one", 2)
    assert any(not np.allclose(start[n], one[n]) for n in one)  # training moved the weights


def _start_workers(config, model_dir, output=subprocess.PIPE, **env):
    """Two kbert-pretrain processes forming a MultiWorkerMirroredStrategy cluster on localhost."""
    return [
        forkserver.Popen(
            pretrain_command(config, model_dir, "multi_worker_mirrored"),
            stdout=output,
            stderr=output,
            text=True,
            env=cli_env(TF_CONFIG=tf_config, **env),
        )
        for tf_config in tf_configs(free_ports(2))
    ]


def _finish(workers):
    outputs = [w.communicate(timeout=900) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(
        f"worker {i}: {out[-2000:]}{err[-3000:]}" for i, (out, err) in enumerate(outputs)
    )
    return outputs


def _wait_for(path, process, timeout=600):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, process.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.spawns
def test_kill_9_and_restart_gives_the_uninterrupted_weights(tmp_path, data):
    # Dropout stays on: its seed states are checkpointed too. A save every 12 steps (each costs as much as ~6
    # steps): the kill after the first, at step 12, still leaves 48 steps and 3 saves to land in.
    config = write_config(
        str(tmp_path / "c.yaml"),
        data[0],
        train={"total_steps": 60, "steps_per_loop": 1, "checkpoint_interval": 12, "max_checkpoints": 100},
    )
    run_here(config, tmp_path / "straight")
    kill_once_written(pretrain_command(config, tmp_path / "killed"), tmp_path / "killed" / "checkpoints" / "checkpoint")
    assert not (tmp_path / "killed" / "checkpoints" / "ckpt-60.index").exists()
    assert "Resumed from" in run_here(config, tmp_path / "killed")
    straight, resumed = _weights(tmp_path / "straight", 60), _weights(tmp_path / "killed", 60)
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)


def test_the_two_workers_read_different_batches(data):
    import tempfile

    from kbert.experiment import load_experiment
    from kbert.tasks.bert import dataset_fn

    config = load_experiment([write_config(os.path.join(tempfile.mkdtemp(), "c.yaml"), data[0])])
    make = dataset_fn(config, True, vocab_size=64)
    first = [next(iter(make(tf.distribute.InputContext(2, worker, 2))))["input_ids"].numpy() for worker in (0, 1)]
    assert first[0].shape == first[1].shape and not np.array_equal(first[0], first[1])


@pytest.mark.spawns
def test_two_workers_train_only_the_chief_writes_and_killed_with_sigkill_resume_bit_identically(tmp_path, data):
    # A save every 8 steps: the kill after the first, at step 8, still leaves 32 steps and 3 saves to land in.
    config = write_config(
        str(tmp_path / "c.yaml"),
        data[0],
        train={"total_steps": 40, "steps_per_loop": 1, "checkpoint_interval": 8, "max_checkpoints": 100},
    )
    model_dir = tmp_path / "straight"
    outputs = _finish(_start_workers(config, model_dir))
    assert "step 40/40" in outputs[0][0] and "step 40/40" not in outputs[1][0]  # only the chief reports
    summary = json.loads((model_dir / "summary.json").read_text())
    assert summary["replicas"] == 2 and summary["global_step"] == 40
    assert sorted(os.listdir(model_dir)) == ["checkpoints", "summary.json", "train"]
    assert len(os.listdir(model_dir / "train")) == 1  # one event file: the chief's
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")).endswith("ckpt-40")

    # Killed with SIGKILL after the first save, and restarted: each worker resumes its own data.
    temp = tmp_path / "temp"  # the workers' temp dir
    temp.mkdir()
    workers = _start_workers(config, tmp_path / "killed", output=subprocess.DEVNULL, TMPDIR=str(temp))
    # The first save is complete: each worker saves its input position before it joins the weights' save, whose
    # index the chief writes last.
    _wait_for(tmp_path / "killed" / "checkpoints" / "checkpoint", workers[0])
    # Under load the index can come before worker 1's position is in place; without it the save is unfinished and
    # the restart would start over instead of resuming.
    _wait_for(tmp_path / "killed" / "checkpoints" / "input" / "worker_1" / "ckpt-8.index", workers[0])
    # Worker 1 first: killed second, it could see the chief's collectives fail, exit, and remove its copy itself.
    for process in reversed(workers):
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
    assert not (tmp_path / "killed" / "checkpoints" / "ckpt-40.index").exists()
    leftovers = [name for name in os.listdir(temp) if name.startswith("kbert_worker_ckpt_")]
    assert len(leftovers) == 1  # the killed worker 1's copy of the save
    outputs = _finish(_start_workers(config, tmp_path / "killed", TMPDIR=str(temp)))
    assert "Resumed from" in outputs[0][0]
    assert not [name for name in os.listdir(temp) if name.startswith("kbert_worker_ckpt_")]  # reused, then removed
    straight, resumed = _weights(tmp_path / "straight", 40), _weights(tmp_path / "killed", 40)
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)


@pytest.mark.spawns
def test_sigterm_to_one_of_two_workers_saves_on_both_and_exits_42(tmp_path, data):
    """What a spot VM or GKE sends, to one worker: both save the same step and exit 42."""
    config = write_config(
        str(tmp_path / "c.yaml"), data[0], train={"total_steps": 400, "steps_per_loop": 1, "checkpoint_interval": 4}
    )
    workers = _start_workers(config, tmp_path / "run")
    _wait_for(tmp_path / "run" / "checkpoints" / "checkpoint", workers[0])
    workers[1].send_signal(signal.SIGTERM)
    outputs = [w.communicate(timeout=600) for w in workers]
    assert [w.returncode for w in workers] == [42, 42], "\n".join(err[-3000:] for _, err in outputs)
    assert "kbert-pretrain: preempted (another worker's termination notice): saved" in outputs[0][1], outputs[0][1]
    assert "kbert-pretrain: preempted (SIGTERM): saved" in outputs[1][1], outputs[1][1][-3000:]
    saved = int(tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).rsplit("-", 1)[1])
    assert 4 <= saved < 400


@pytest.mark.spawns
def test_sigterm_saves_and_exits_for_a_restart(tmp_path, data):
    config = write_config(
        str(tmp_path / "c.yaml"), data[0], train={"total_steps": 1000, "steps_per_loop": 1, "checkpoint_interval": 500}
    )
    command = pretrain_command(config, tmp_path / "run")
    process = forkserver.Popen(command, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    line = ""
    while "step 2/1000" not in line:  # training is under way
        line = process.stdout.readline()
        assert line or process.poll() is None, process.communicate()
        assert time.time() < deadline
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 42, out[-2000:] + err[-2000:]
    assert "kbert-pretrain: preempted (SIGTERM): saved" in err and "Traceback" not in err
    saved = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert saved is not None and int(saved.rsplit("-", 1)[1]) >= 2


@pytest.mark.spawns
@pytest.mark.xdist_group("two_cpus")
def test_strategy_tpu_without_a_tpu_is_a_one_line_error(two_cpus):
    _, model_dir, result = two_cpus["tpu"]
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "kbert-pretrain: error: --strategy=tpu" in result.stderr
    assert "Traceback" not in result.stderr
    assert not model_dir.exists()


@pytest.mark.spawns
@pytest.mark.xdist_group("two_cpus")
def test_mslt_stages_built_ahead_under_two_mirrored_replicas_match_building_them_in_turn(two_cpus):
    """The second stage is built on a thread while the first trains under MirroredStrategy (the one-device
    equivalent, with more stages, is in tests/test_mslt_runner.py)."""
    exports = {}
    for build_ahead in (True, False):
        _, model_dir, result = two_cpus[f"mslt_{build_ahead}"]
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert result.stdout.count("its graph built ahead in") == (1 if build_ahead else 0), result.stdout
        assert json.loads((model_dir / "summary.json").read_text())["replicas"] == 2
        reader = tf.train.load_checkpoint(str(model_dir / "stage_2" / "export" / "bert_model.ckpt"))
        exports[build_ahead] = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
    assert exports[True].keys() == exports[False].keys() and len(exports[True]) > 30
    for name in exports[True]:
        np.testing.assert_array_equal(exports[True][name], exports[False][name], err_msg=name)
