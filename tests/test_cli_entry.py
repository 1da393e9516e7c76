"""Every CLI's start: a kbert error or a TensorFlow I/O error is one line and exit 1; --verbose shows the trace."""

import subprocess
import sys

import forkserver
import pytest
from training_fixtures import cli_env

PROGRAM = """
import sys
if sys.argv[1] != "config":  # a kbert error needs no TensorFlow (kbert-build-vocab's start has none): one start less
    import tensorflow as tf
from kbert.cli import entry
from kbert.errors import ConfigError

def main(argv):
    if sys.argv[1] == "config":
        raise ConfigError("train.total_steps=-1 must be positive.")
    if sys.argv[1] == "disk":
        raise tf.errors.ResourceExhaustedError(None, None, "/data/run/checkpoints/ckpt-9_temp; No space left on device")
    raise RuntimeError("a bug")

sys.argv = ["kbert-x"] + sys.argv[1:]
entry.run(main, "kbert-x")
"""


def _run(*args):
    return forkserver.run(
        [sys.executable, "-c", PROGRAM, *args], env=cli_env(), capture_output=True, text=True, timeout=300
    )


@pytest.mark.spawns
@pytest.mark.parametrize(
    "case, line",
    [
        ("config", "kbert-x: error: train.total_steps=-1 must be positive."),
        (
            "disk",
            "kbert-x: error: ResourceExhausted: /data/run/checkpoints/ckpt-9_temp; No space left on device (out of "
            "disk space or memory: free some (or lower the batch size) and rerun the same command, which resumes "
            "from the last checkpoint).",
        ),
    ],
)
def test_user_errors_are_one_line(case, line):
    result = _run(case)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == line, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.spawns
def test_verbose_shows_the_traceback_and_a_bug_keeps_its_own():
    verbose = _run("disk", "--verbose")
    assert verbose.returncode == 1 and "Traceback (most recent call last)" in verbose.stderr
    assert "ResourceExhaustedError" in verbose.stderr
    bug = _run("bug")
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "RuntimeError: a bug" in bug.stderr


@pytest.mark.spawns
def test_kbert_pretrain_shows_only_its_own_lines_unless_verbose(tmp_path):
    from training_fixtures import write_config, write_shards

    data = write_shards(str(tmp_path / "data"), "train", shards=1, records_per_shard=16)
    config = write_config(str(tmp_path / "c.yaml"), data, data, train={"total_steps": 2})
    env = cli_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")
    command = [
        sys.executable,
        "-m",
        "kbert.run_pretraining",
        f"--config_file={config}",
        f"--model_dir={tmp_path / 'run'}",
        "--mode=train_and_eval",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
    assert [line.split(" |")[0] for line in result.stdout.splitlines()] == [
        "kbert-pretrain: devices: CPU x1",
        "step 2/2",
        "eval",
    ]


@pytest.mark.spawns
def test_kbert_predict_refuses_a_batch_of_no_rows(tmp_path):
    # A batch size of 0 read the whole file as one batch.
    result = forkserver.run(
        [sys.executable, "-m", "kbert.cli.predict", "--model=m", "--input_file=i", "--output_file=o", "--batch_size=0"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "flag --batch_size=0: 0 is not a positive integer" in result.stderr.splitlines()[0]


def test_kbert_pretrain_and_finetune_freeze_their_imports_before_they_read_the_config(tmp_path, monkeypatch):
    """What importing TensorFlow, Keras and kbert made is out of the garbage collector's sight before a run starts
    (`run_flags.freeze_imports`), so tracing's full collections and clear_session's do not traverse it."""
    import gc

    from absl import flags

    from kbert.cli import finetune, pretrain
    from kbert.errors import KbertError

    for command, program in ((pretrain, "kbert-pretrain"), (finetune, "kbert-finetune")):
        frozen = []
        monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))  # noqa: B023 (called within the iteration)
        flags.FLAGS([program, f"--config_file={tmp_path / 'missing.yaml'}", f"--model_dir={tmp_path / 'run'}"])
        try:
            with pytest.raises(KbertError, match="missing.yaml"):
                command.main([program])
        finally:
            flags.FLAGS.unparse_flags()
        assert frozen == [True], program
        assert not (tmp_path / "run").exists()
