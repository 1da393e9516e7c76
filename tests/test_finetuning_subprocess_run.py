"""kbert.finetuning.subprocess_run: kbert-finetune's command line, and a failed run named by its log."""

import subprocess
import sys

import forkserver
import pytest

from kbert.finetuning.subprocess_run import finetune_command, run_finetune, score


@pytest.mark.spawns
def test_the_command_runs_this_pythons_kbert_finetune_with_the_flags_before_the_model_dir():
    assert finetune_command("c.yaml", "runs/a", "--strategy=one_device") == [
        sys.executable,
        "-m",
        "kbert.run_finetuning",
        "--config_file=c.yaml",
        "--strategy=one_device",
        "--model_dir=runs/a",
    ]
    assert score({"eval": {"accuracy": 0.625}}) == 62.5


@pytest.mark.spawns
def test_a_failed_run_is_an_error_naming_its_log_which_holds_kbert_finetunes_error_line(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", forkserver.Popen)  # kbert-finetune as a child of the fork server
    config = tmp_path / "finetune.yaml"
    config.write_text(
        "task: {name: tsv, train_file: missing.tsv, eval_file: missing.tsv}\ndata: {vocab_file: missing_vocab.txt}\n"
    )
    log = tmp_path / "run.log"
    with pytest.raises(RuntimeError, match=f"see {log}"):
        run_finetune(str(config), str(tmp_path / "run"), str(log))
    assert "kbert-finetune: " in log.read_text()
