"""Fixtures for the training tests: tiny pretraining TFRecords, a tiny experiment YAML, and kbert-pretrain run in a
subprocess (logical CPU devices and TF_CONFIG must be set before TensorFlow starts, and SIGKILL needs a process of
its own: a child of the fork server, which imported TensorFlow once) or, on one device, in this process."""

from __future__ import annotations

import os
import subprocess
import sys

import forkserver
import numpy as np
import tensorflow as tf

from kbert.data.synthetic import random_instance
from kbert.data.tfrecord_writer import example_proto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB_SIZE = 64
SEQ_LENGTH = 16
MAX_PREDICTIONS = 4


def _example(rng: np.random.Generator, seq_length: int = SEQ_LENGTH) -> bytes:
    return example_proto(random_instance(rng, seq_length, MAX_PREDICTIONS, VOCAB_SIZE))


def write_shards(
    directory: str, prefix: str, shards: int, records_per_shard: int, seed: int = 0, seq_length: int = SEQ_LENGTH
) -> str:
    """Writes `shards` TFRecord files of random instances `seq_length` tokens long; returns their glob."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    for shard in range(shards):
        with tf.io.TFRecordWriter(os.path.join(directory, f"{prefix}-{shard:03d}.tfrecord")) as writer:
            for _ in range(records_per_shard):
                writer.write(_example(rng, seq_length))
    return os.path.join(directory, f"{prefix}-*.tfrecord")


def write_train_and_eval(root: str, train_records_per_shard: int = 24) -> tuple[str, str]:
    """Two training shards and one eval shard of 16 records under `root`; returns their globs."""
    return (
        write_shards(root, "train", shards=2, records_per_shard=train_records_per_shard),
        write_shards(root, "eval", shards=1, records_per_shard=16, seed=1),
    )


def write_config(path: str, train_files: str, eval_files: str = "", **sections) -> str:
    """A YAML experiment for a 2-layer, hidden-32 BERT on the fixture records; `sections` update it (or add one,
    e.g. `mslt={...}`, `phases=[...]`)."""
    import yaml

    config = {
        "model": {
            "bert": "bert_tiny",
            "overrides": {
                "vocab_size": VOCAB_SIZE,
                "hidden_size": 32,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "max_position_embeddings": 32,
            },
        },
        "data": {
            "train_files": train_files,
            "eval_files": eval_files,
            "seq_length": SEQ_LENGTH,
            "max_predictions": MAX_PREDICTIONS,
        },
        "optimizer": {"type": "lamb", "weight_decay": 0.01},
        "schedule": {"peak_learning_rate": 1e-2, "warmup_steps": 2, "power": 0.5},
        "train": {
            "global_batch_size": 8,
            "total_steps": 6,
            "steps_per_loop": 2,
            "checkpoint_interval": 2,
            "summary_interval": 2,
            "max_checkpoints": 3,
            "deterministic": True,
        },
        "eval": {"global_batch_size": 8},
    }
    for section, values in sections.items():
        if isinstance(values, list):  # phases
            config[section] = values
        else:
            config.setdefault(section, {}).update(values)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


# Runs kbert-pretrain after splitting the CPU into N logical devices (argv[1]).
LAUNCHER = """
import sys
import tensorflow as tf
cpus = int(sys.argv[1])
if cpus > 1:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * cpus)
sys.argv = ["kbert-pretrain"] + sys.argv[2:]
from kbert.run_pretraining import run
run()
"""


def pretrain_command(
    config: str, model_dir, strategy: str = "one_device", cpus: int = 1, mode: str = "train"
) -> list[str]:
    """The kbert-pretrain command line, on `cpus` logical CPU devices (the CPU even where a GPU is visible)."""
    return [
        sys.executable,
        "-c",
        LAUNCHER,
        str(cpus),
        f"--config_file={config}",
        f"--model_dir={model_dir}",
        f"--strategy={strategy}",
        f"--mode={mode}",
        "--device=cpu",
    ]


def cli_env(**extra: str) -> dict:
    """This process's environment for a kbert subprocess (`forkserver.server_environment`), plus `extra`."""
    return {**forkserver.server_environment(), **extra}


def run_cli(command: list[str], env: dict = None, expect: int = 0) -> subprocess.CompletedProcess:
    """Runs `command`, asserting its exit status (its output's tail is the assertion message)."""
    result = forkserver.run(command, env=env or cli_env(), capture_output=True, text=True, timeout=900)
    assert result.returncode == expect, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def run_here(config: str, model_dir, mode: str = "train") -> str:
    """kbert-pretrain's run of `config` on one device in this process; returns the lines it printed, as the CLI's
    stdout holds them."""
    from kbert import experiment
    from kbert.runtime.strategy import make_strategy

    lines = []
    experiment.run(
        experiment.load_experiment([config]),
        str(model_dir),
        make_strategy("one_device"),
        mode,
        print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))),
    )
    return "\n".join(lines)


def kill_once_written(command: list[str], path, timeout: float = 600, env: dict | None = None) -> None:
    """Starts `command` (in `env`, default `cli_env()`) and kills it with SIGKILL as soon as `path` exists (a
    checkpoint it writes)."""
    import signal
    import time

    process = forkserver.Popen(command, env=env or cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, f"{command} ended before writing {path}"
        assert time.time() < deadline, f"{path} not written in {timeout} s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def checkpoint_weights(model_dir, step: int) -> dict:
    """The model weights of `model_dir/checkpoints/ckpt-STEP`, by checkpoint key."""
    reader = tf.train.load_checkpoint(os.path.join(str(model_dir), "checkpoints", f"ckpt-{step}"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith("model/")}
