"""Held-out evaluation on a sample schedule inside kbert-pretrain, the stop at a target accuracy (after a checkpoint,
with samples and seconds to target in summary.json), MLPerf's protocol and the MFU in the progress line."""

import json
import os
import shutil

import pytest
from training_fixtures import write_config, write_train_and_eval

from kbert import experiment
from kbert.errors import ConfigError
from kbert.experiment import load_experiment
from kbert.runtime.strategy import make_strategy
from kbert.training.eval_schedule import mlperf_interval

pytestmark = pytest.mark.usefixtures("float32_policy")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_train_and_eval(str(tmp_path_factory.mktemp("data")))


def _run(tmp_path, data, override, **sections):
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), data[0], data[1], **sections)], override)
    lines = []
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: lines.append(a[0])
    )
    return summary, lines


# 8 steps of batch 8 in loops of 2: 16 samples a loop; an evaluation every 24 samples
EIGHT_STEPS = "train.total_steps=8,eval.interval_samples=24,eval.steps=2"


@pytest.fixture(scope="module")
def eight_steps(tmp_path_factory, data):
    """The default run, 8 steps long, with an evaluation every 24 samples (and at its end), once for the tests of
    its evaluations and those that start it again (each of the schedule's and the run's end's trained a run of its
    own before): (its model_dir, read only: copy it to run in it; its summary; the lines it printed)."""
    folder = tmp_path_factory.mktemp("eight_steps")
    summary, lines = _run(folder, data, EIGHT_STEPS)
    return folder / "run", summary, lines


@pytest.mark.slow
@pytest.mark.xdist_group("eight_steps")  # its tests share the eight_steps run: one worker trains it once
def test_evaluations_follow_the_sample_schedule(eight_steps):
    _, summary, lines = eight_steps
    # 16 samples a loop; evaluations at the loop ends that pass 24 and reach 48: 32 and 48 (then the run's end's, 64)
    assert [e["samples"] for e in summary["evaluations"]] == [32, 48, 64]
    assert summary["sequences_trained"] == 64 and summary["time_to_target"] is None
    assert sum(line.startswith("eval |") for line in lines) == 3
    assert all("MFU" in line for line in lines if line.startswith("step "))


@pytest.mark.slow
@pytest.mark.xdist_group("eight_steps")
def test_a_run_ending_between_two_evaluations_evaluates_at_its_end_and_started_again_times_nothing(
    tmp_path, data, eight_steps
):
    """One run for both (they were two tests training the same run): its evaluations, then the same command again
    with a target, on the finished run."""
    trained, first, lines = eight_steps
    # 64 samples: the evaluations at 32 and 48, then the final model's at 64, the run's last step, before 72
    assert [(e["samples"], e["step"]) for e in first["evaluations"]] == [(32, 4), (48, 6), (64, 8)]
    assert sum(line.startswith("eval |") for line in lines) == 3
    assert first["global_step"] == 8 and [e["samples"] for e in first["evaluations"]] == [32, 48, 64]
    # Started again, finished: its model was trained before this process, so an evaluation now would time it at a
    # few seconds.
    shutil.copytree(trained, tmp_path / "run")
    summary, lines = _run(tmp_path, data, f"{EIGHT_STEPS},eval.target_mlm_accuracy=1e-6")
    assert summary["global_step"] == 8 and summary["sequences_trained"] == 64
    assert summary["evaluations"] == [] and summary["time_to_target"] is None
    assert not any(line.startswith(("eval |", "Reached the target")) for line in lines)


@pytest.mark.slow
def test_reaching_the_target_stops_after_a_checkpoint(tmp_path, data):
    # Any hit reaches 1e-6; an evaluation every loop (16 samples) over up to 12 steps: the run stops at the first
    # evaluation with a hit, wherever the random labels and the initialisation put it.
    summary, lines = _run(
        tmp_path, data, "train.total_steps=12,eval.interval_samples=16,eval.steps=2,eval.target_mlm_accuracy=1e-6"
    )
    *before, last = summary["evaluations"]
    assert all(e["masked_lm_accuracy"] == 0 for e in before) and last["masked_lm_accuracy"] > 0, summary
    reached = summary["time_to_target"]
    assert (reached["samples"], reached["step"]) == (last["samples"], last["step"]) and reached["seconds"] > 0
    assert summary["global_step"] == reached["step"] < 12  # stopped at the first evaluation that reached it
    assert os.path.exists(tmp_path / "run" / "checkpoints" / f"ckpt-{reached['step']}.index")
    with open(tmp_path / "run" / "summary.json") as f:
        assert json.load(f)["time_to_target"]["samples"] == reached["samples"]
    assert any(line.startswith("Reached the target masked-LM accuracy") for line in lines)


@pytest.mark.slow
@pytest.mark.xdist_group("eight_steps")
def test_a_resumed_run_counts_samples_on_from_its_checkpoint(tmp_path, data, eight_steps):
    shutil.copytree(eight_steps[0], tmp_path / "run")  # ckpt-8: 64 samples trained
    summary, _ = _run(tmp_path, data, "train.total_steps=10,eval.interval_samples=8,eval.steps=1")
    # one loop of 16 samples from the checkpoint's 64: one evaluation, at 80 (not at 8, nor at 72)
    assert [e["samples"] for e in summary["evaluations"]] == [80] and summary["sequences_trained"] == 80


@pytest.mark.slow
def test_mlperf_protocol_prints_its_result_lines(tmp_path, data):
    from kbert.modeling import BertPretrainer, export_google_checkpoint

    config = load_experiment([write_config(str(tmp_path / "c.yaml"), data[0], data[1])])
    phase1 = export_google_checkpoint(BertPretrainer(config.model.bert_config()), str(tmp_path / "p1" / "bert.ckpt"))
    assert mlperf_interval(8) == 150000  # floor(0.05 x (230.23 x 8 + 3,000,000)) to a multiple of 25,000
    summary, lines = _run(tmp_path, data, f"eval.protocol=mlperf,train.init_checkpoint={phase1},eval.steps=1")
    assert summary["interval_samples"] == mlperf_interval(8) and summary["target_mlm_accuracy"] == 0.72
    assert summary["evaluations"] == []  # 48 samples never reach MLPerf's first interval


def test_schedule_keys_are_checked(tmp_path, data):
    path = write_config(str(tmp_path / "c.yaml"), data[0], data[1])
    with pytest.raises(ConfigError, match="eval.target_mlm_accuracy needs a schedule"):
        load_experiment([path], "eval.target_mlm_accuracy=0.5")
    with pytest.raises(ConfigError, match="eval.protocol=mlperf starts from a phase-1 checkpoint"):
        load_experiment([path], "eval.protocol=mlperf")
    with pytest.raises(ConfigError, match="eval.protocol='nvidia'"):
        load_experiment([path], "eval.protocol=nvidia")


@pytest.mark.slow
def test_mslt_carries_the_schedule_and_the_samples_over_its_stages(tmp_path, data):
    mslt = {"stages": [{"num_layers": 1, "steps": 2}, {"num_layers": 2, "steps": 2}], "final_stage": {"steps": 2}}
    summary, _ = _run(tmp_path, data, "eval.interval_samples=16,eval.steps=1,eval.target_mlm_accuracy=1.0", mslt=mslt)
    # 16 samples a stage; one evaluation at the end of each, the sample count running on across the stages
    assert [e["samples"] for e in summary["evaluations"]] == [16, 32, 48]
    assert [s["sequences_trained"] for s in summary["stages"]] == [16, 32, 48] and summary["sequences_trained"] == 48
    assert summary["time_to_target"] is None
