"""Runs of several stages in one model_dir: BERT's two phases in one command, MSLT grown from a pretrained model
and followed by a seq-32 phase; each killed with SIGKILL mid-stage and restarted ends bit-identical to a run that
went straight through. Bad phases stop before anything is built; an old MSLT layout gets one line."""

import json
import os

import numpy as np
import pytest
from training_fixtures import (
    checkpoint_weights,
    kill_once_written,
    pretrain_command,
    run_here,
    write_config,
    write_shards,
    write_train_and_eval,
)

from kbert import experiment
from kbert.errors import ConfigError, PlanError
from kbert.experiment import load_experiment
from kbert.runtime.strategy import make_strategy

LONG = 32  # phase 2's sequence length (the fixture model's max_position_embeddings)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("data"))
    train, eval_files = write_train_and_eval(root, 48)
    long_train = write_shards(
        os.path.join(root, "long"), "train", shards=2, records_per_shard=24, seed=2, seq_length=LONG
    )
    long_eval = write_shards(os.path.join(root, "long"), "eval", shards=1, records_per_shard=8, seed=3, seq_length=LONG)
    return train, eval_files, long_train, long_eval


def second_phase(data, steps):
    return {
        "steps": steps,
        "train_files": data[2],
        "eval_files": data[3],
        "seq_length": LONG,
        "global_batch_size": 4,
        "peak_learning_rate": 5e-3,
        "warmup_steps": 1,
    }


def assert_same_weights(straight, resumed, step):
    a, b = checkpoint_weights(straight, step), checkpoint_weights(resumed, step)
    assert a.keys() == b.keys() and len(a) > 30
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _two_phase_config(path, data, second_steps: int) -> str:
    """4 steps at seq 16, then `second_steps` at seq 32, a save every 4 steps of a phase."""
    return write_config(
        str(path),
        data[0],
        data[1],
        phases=[{"steps": 4}, second_phase(data, second_steps)],
        train={"steps_per_loop": 1, "checkpoint_interval": 4, "max_checkpoints": 100},
    )


@pytest.fixture(scope="module")
def two_phases(tmp_path_factory, data):
    """BERT's two phases in one run (4 steps at seq 16, then 30 at seq 32, a save every 4 steps of a phase), run
    straight through once: its config file and model_dir. Tests that use it copy the run before touching it."""
    root = tmp_path_factory.mktemp("two_phases")
    config = _two_phase_config(root / "c.yaml", data, 30)
    run_here(config, root / "straight")
    return config, root / "straight"


@pytest.mark.spawns
@pytest.mark.xdist_group("run_stages_two_phases")  # one worker runs the shared straight run once
def test_two_phases_in_one_command_resume_bit_identically_after_kill_9(tmp_path, two_phases):
    config, straight = two_phases
    killed = tmp_path / "killed"
    kill_once_written(pretrain_command(config, killed), killed / "checkpoints" / "ckpt-8.index")  # inside phase 2
    resumed = run_here(config, killed)
    assert "Phase 1/2" not in resumed  # phase 1 is done and not rebuilt
    assert "Phase 2/2: seq 32, batch 4" in resumed and "(resuming)" in resumed
    assert_same_weights(straight, killed, 34)

    with open(straight / "summary.json") as f:
        summary = json.load(f)
    assert [(s["label"], s["start_step"], s["global_step"]) for s in summary["stages"]] == [
        ("phase 1/2", 0, 4),
        ("phase 2/2", 4, 34),
    ]
    assert summary["global_step"] == 34 and summary["stages"][1]["train_data"]["layout"]
    assert summary["sequences_trained"] == 4 * 8 + 30 * 4
    assert os.path.exists(straight / "stage_1" / "export" / "bert_model.ckpt.index")


@pytest.mark.slow
@pytest.mark.xdist_group("run_stages_two_phases")  # one worker runs the shared straight run once
def test_the_old_two_command_way_still_works(tmp_path, data, two_phases):
    """Phase 2 as its own run: train.init_checkpoint (weights only) an earlier run's directory (its newest
    checkpoint), and schedule.step_offset."""
    second = write_config(
        str(tmp_path / "2.yaml"),
        data[2],
        data[3],
        data={"seq_length": LONG},
        train={"total_steps": 8, "init_checkpoint": str(two_phases[1])},
        schedule={"step_offset": 4, "warmup_steps": 1},
    )
    lines = []
    summary = experiment.run(
        load_experiment([second]),
        str(tmp_path / "two"),
        make_strategy("one_device"),
        "train_and_eval",
        print_fn=lambda *a, **k: lines.append(a[0]),
    )
    assert any(line.startswith("Initialised the model from kbert checkpoint") for line in lines)
    assert summary["global_step"] == 8 and np.isfinite(summary["eval"]["loss"])


FOUR_LAYERS = {
    "bert": "bert_tiny",
    "overrides": {
        "vocab_size": 64,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "max_position_embeddings": 32,
    },
}


@pytest.mark.spawns
@pytest.mark.xdist_group("run_stages_two_phases")
def test_mslt_grows_a_pretrained_model_then_a_phase_follows_resumed_bit_identically(tmp_path, data, two_phases):
    """A pretrained 2-layer model (phase 1 of `two_phases`' straight run: 4 steps at seq 16) grown to 4 layers
    (training blocks 2-3 only), then phase 2 at seq 32 (all layers); killed inside the growth stage, whose restart
    finishes it and runs phase 2 in the same process (a kill inside phase 2 is the two-phase test's)."""
    mslt = {"init_layers": 2, "stages": [{"num_layers": 4, "steps": 6}], "final_stage": {"steps": 0}}
    config = write_config(
        str(tmp_path / "c.yaml"),
        data[0],
        data[1],
        model=FOUR_LAYERS,
        mslt=mslt,
        phases=[{}, second_phase(data, 8)],
        train={
            "steps_per_loop": 1,
            "checkpoint_interval": 2,
            "max_checkpoints": 100,
            "init_checkpoint": str(two_phases[1] / "checkpoints" / "ckpt-4"),
        },
    )
    straight = run_here(config, tmp_path / "straight")
    assert "MSLT stage 1/1: 4 layers, training blocks [2, 3]" in straight
    assert "Initialised the model from kbert checkpoint" in straight
    killed = tmp_path / "killed"
    # Killed in MSLT stage 1 as ckpt-4 is written, so the first checkpoint, ckpt-2, is whole: a kill as ckpt-2's
    # index appears may come before the save completes, and the restart then rightly starts afresh.
    kill_once_written(pretrain_command(config, killed), killed / "checkpoints" / "ckpt-4.index")
    resumed = run_here(config, killed)
    assert "(resuming)" in resumed and "MSLT stage 1/1" in resumed and "Phase 2/2" in resumed
    assert_same_weights(tmp_path / "straight", tmp_path / "killed", 14)

    # The pretrained blocks stayed as they were through the growth stage; the new ones moved.
    before, grown = checkpoint_weights(two_phases[1], 4), checkpoint_weights(tmp_path / "straight", 6)
    lower = [n for n in before if ".Slayer_0." in n or ".Slayer_1." in n]
    assert len(lower) == 2 * 16
    for name in lower:
        np.testing.assert_array_equal(before[name], grown[name], err_msg=name)
    assert not np.array_equal(grown[lower[0].replace("layer_0", "layer_2")], before[lower[0]])


def test_bad_phases_and_plans_are_one_line_before_anything_is_built(tmp_path, data):
    def load(**sections):
        return load_experiment([write_config(str(tmp_path / "c.yaml"), data[0], data[1], **sections)])

    with pytest.raises(ConfigError, match=r"phases\[1\] \(phase 2\).warmup_steps=5: must be in \[0, steps=3\)"):
        load(phases=[{"steps": 4}, {"steps": 3, "warmup_steps": 5}])
    with pytest.raises(ConfigError, match=r"phases\[0\] \(phase 1\).steps=None: must be a positive"):
        load(phases=[{}])
    with pytest.raises(ConfigError, match=r"phases\[1\] \(phase 2\).seq_length=64: must be in \[1, the model's"):
        load(phases=[{"steps": 4}, {"steps": 3, "seq_length": 64}])
    with pytest.raises(ConfigError, match="seq_len"):
        load(phases=[{"steps": 4, "seq_len": 32}])
    with pytest.raises(PlanError, match="mslt.init_layers=0 with train.init_checkpoint='x'"):
        load(model=FOUR_LAYERS, mslt={"stages": [{"num_layers": 4, "steps": 2}]}, train={"init_checkpoint": "x"})
    # An MSLT plan is phase 1: its steps replace phase 1's, as they replace train.total_steps.
    planned = load(
        model=FOUR_LAYERS,
        mslt={"stages": [{"num_layers": 4, "steps": 2}], "final_stage": {"steps": 0}},
        phases=[{"steps": 9}, {"steps": 3}],
    )
    assert [(s.label, s.start_step, s.end_step) for s in experiment.stages_of(planned)] == [
        ("MSLT stage 1/1", 0, 2),
        ("phase 2/2", 2, 5),
    ]


@pytest.mark.slow
@pytest.mark.xdist_group("run_stages_two_phases")
def test_a_run_resumed_with_other_phases_is_refused(tmp_path, data, two_phases):
    import shutil

    shutil.copytree(two_phases[1], tmp_path / "run")  # a run of phases of 4 and 30 steps
    other = _two_phase_config(tmp_path / "c.yaml", data, 29)
    with pytest.raises(PlanError, match="holds a run of other stages"):
        experiment.run(
            load_experiment([other]), str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None
        )


@pytest.mark.slow
def test_a_run_of_the_per_stage_layout_gets_one_line_then_converts_and_resumes_bit_identically(tmp_path, data):
    """kbert before the engine kept an MSLT run's checkpoints in stage_N/checkpoints (global steps, with input
    positions) beside mslt_plan.json; a run killed at step 6 in that layout, converted, ends as one that was not."""
    import shutil

    from kbert.runtime.convert_mslt_run import convert_stage_checkpoints

    mslt = {"stages": [{"num_layers": 1, "steps": 2}, {"num_layers": 2, "steps": 8}], "final_stage": {"steps": 0}}
    config = load_experiment(
        [write_config(str(tmp_path / "c.yaml"), data[0], data[1], mslt=mslt, train={"max_checkpoints": 100})]
    )
    quiet = {"print_fn": lambda *a, **k: None}
    # Read as that kbert read records (unchecked past each file's first 16), so the copied input positions are its.
    unchecked = config.replace(data={"check_vocab_size": False})
    experiment.run(unchecked, str(tmp_path / "straight"), make_strategy("one_device"), **quiet)
    old = tmp_path / "old"
    for stage, steps in ((1, (2,)), (2, (4, 6))):  # as the old runner left it when killed after step 6
        for step in steps:
            for path in (tmp_path / "straight" / "checkpoints").rglob(f"ckpt-{step}.*"):
                relative = path.relative_to(tmp_path / "straight" / "checkpoints")
                (old / f"stage_{stage}" / "checkpoints" / relative.parent).mkdir(parents=True, exist_ok=True)
                shutil.copy(path, old / f"stage_{stage}" / "checkpoints" / relative)
    shutil.copytree(tmp_path / "straight" / "stage_1", old / "stage_1", dirs_exist_ok=True)
    (old / "mslt_plan.json").write_text("[]")

    with pytest.raises(
        ConfigError,
        match=r"holds an MSLT run in the per-stage layout .* convert it with "
        r"`kbert-convert-mslt-run --model_dir=",
    ):
        experiment.run(config, str(old), make_strategy("one_device"), **quiet)
    moved = convert_stage_checkpoints(str(old))
    assert [os.path.basename(p) for p in moved] == ["ckpt-2", "ckpt-4", "ckpt-6"]
    assert not (old / "stage_2" / "checkpoints").exists() and (old / "checkpoints" / "input" / "worker_0").is_dir()
    with pytest.raises(ConfigError, match="nothing to convert"):
        convert_stage_checkpoints(str(old))
    lines = []
    experiment.run(config, str(old), make_strategy("one_device"), print_fn=lambda *a, **k: lines.append(a[0]))
    assert any(line.startswith("Resumed from") and line.endswith("ckpt-6 at step 6.") for line in lines)
    assert_same_weights(tmp_path / "straight", old, 10)


def test_a_phase_whose_records_are_of_another_length_stops_the_run_before_phase_1(tmp_path, data):
    from kbert.errors import InputDataError

    wrong = dict(second_phase(data, 2), train_files=data[0])  # seq-16 records for a seq-32 phase
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), data[0], data[1], phases=[{"steps": 3}, wrong])])
    with pytest.raises(
        InputDataError,
        match=r"^phase 2/2: its train_files=.* hold records of seq_length 16, but "
        r"it trains at 32",
    ):
        experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_a_short_phase_is_scored_on_the_long_held_out_records_of_the_phase_after_it(tmp_path, data):
    """BERT's phase 1 at seq 16 names phase 2's seq-32 held-out records: its evaluations read them at 32, the
    same sequences and measure as phase 2's, and equal a later evaluation of its checkpoint at seq 32."""
    config = load_experiment(
        [
            write_config(
                str(tmp_path / "c.yaml"),
                data[0],
                data[3],
                eval={"interval_samples": 32},
                train={"max_checkpoints": 10},
                phases=[{"steps": 4}, second_phase(data, 8)],
            )
        ]
    )
    summary = experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)
    assert [(e["step"], e["sequences"]) for e in summary["evaluations"]] == [(4, 8), (12, 8)]

    from kbert.training.evaluation_history import METRIC

    phase_2 = load_experiment(
        [
            write_config(
                str(tmp_path / "2.yaml"),
                data[2],
                data[3],
                data={"seq_length": LONG},
                train={"init_checkpoint": str(tmp_path / "run" / "checkpoints" / "ckpt-4")},
            )
        ]
    )
    again = experiment.run(
        phase_2, str(tmp_path / "again"), make_strategy("one_device"), "eval", print_fn=lambda *a, **k: None
    )
    assert again["eval"][METRIC] == pytest.approx(summary["evaluations"][0][METRIC], abs=1e-6)


def test_held_out_records_longer_than_the_model_s_positions_stop_the_run_before_it_trains(tmp_path, data):
    from kbert.errors import InputDataError

    too_long = write_shards(str(tmp_path / "eval64"), "eval", shards=1, records_per_shard=2, seed=4, seq_length=64)
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), data[0], too_long, eval={"interval_samples": 16})])
    with pytest.raises(
        InputDataError,
        match=r"^training: its eval_files=.* hold records of seq_length 64, longer "
        r"than the model's max_position_embeddings=32: give it held-out records",
    ):
        experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("run_stages_two_phases")
def test_a_phase_whose_checkpoints_are_all_gone_starts_again_from_the_last_of_the_phase_before(tmp_path, two_phases):
    """Deleting (or losing) every checkpoint of phase 2 is a rerun of phase 2 from phase 1's last checkpoint,
    ending as the run did the first time; nothing of phase 1 is retrained."""
    import shutil

    config, straight = two_phases
    shutil.copytree(straight, tmp_path / "run")
    gone = [
        path
        for path in (tmp_path / "run" / "checkpoints").rglob("ckpt-*")  # phase 2's saves, input positions too
        if int(path.name.split(".")[0].split("-")[1]) > 4
    ]
    assert len(gone) > 7 * 2
    for path in gone:
        path.unlink()
    lines = []
    experiment.run(
        load_experiment([config]),
        str(tmp_path / "run"),
        make_strategy("one_device"),
        print_fn=lambda *a, **k: lines.append(a[0]),
    )
    assert f"Phase 2/2 starts from {tmp_path / 'run' / 'checkpoints' / 'ckpt-4'}." in lines
    assert not any(line.startswith("Phase 1/2") for line in lines)
    assert_same_weights(straight, tmp_path / "run", 34)
