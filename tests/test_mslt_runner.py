"""MSLT end to end: stages train, freeze and export; kill -9 mid-stage resumes in that stage; bad plans stop early."""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import (
    checkpoint_weights,
    kill_once_written,
    pretrain_command,
    run_cli,
    run_here,
    write_config,
    write_train_and_eval,
)

from kbert import experiment
from kbert.errors import PlanError
from kbert.experiment import load_experiment
from kbert.runtime.strategy import make_strategy

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


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_train_and_eval(str(tmp_path_factory.mktemp("data")), 48)


def mslt_config(path, data, mslt, model=FOUR_LAYERS, **train):
    return write_config(str(path), data[0], data[1], model=model, train=train, mslt=mslt)


def export(model_dir, stage):
    reader = tf.train.load_checkpoint(os.path.join(model_dir, f"stage_{stage}", "export", "bert_model.ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.slow
def test_stages_train_only_their_layers_and_export(tmp_path, data, monkeypatch):
    """Embeddings frozen after stage 1, so every weight below the cut is checked bit-identical across stage 2.
    Stage 2 is built ahead on a thread; building stage 3 ahead fails (as out of host memory would): that is
    reported, and the stage is built when it starts (the run it trains is the same: the bit-identical comparison
    of the two ways is the build-ahead test's)."""
    from kbert.training.trainer import PretrainingTrainer

    build_graph = PretrainingTrainer.build_graph

    def fail_ahead(self):  # stage 3's build on the thread fails; the stage builds its graph when it starts
        if threading.current_thread().name == "kbert-build-3":
            raise RuntimeError("out of host memory")
        build_graph(self)

    monkeypatch.setattr(PretrainingTrainer, "build_graph", fail_ahead)
    mslt = {
        "stages": [{"num_layers": 2, "steps": 4}, {"num_layers": 4, "steps": 4}],
        "final_stage": {"steps": 2},
        "embeddings": "freeze_after_first_stage",
    }
    config = load_experiment([mslt_config(tmp_path / "c.yaml", data, mslt, deterministic=False)])
    lines = []
    summary = experiment.run(
        config,
        str(tmp_path / "run"),
        make_strategy("one_device"),
        "train_and_eval",
        print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))),  # noqa: B023 (called within the iteration)
    )
    assert lines[0].startswith(
        "MSLT plan: mode mslt"
    ) and "MSLT stage 2/3: 4 layers, training blocks [2, 3]" in "\n".join(lines)
    assert [(s["stage"], s["global_step"], s["trainable_variables"]) for s in summary["stages"]] == [
        (1, 4, 46),
        (2, 8, 16 * 2 + 9),
        (3, 10, 78),
    ]
    assert "MSLT stage 3/3: building it ahead failed (RuntimeError: out of host memory); building it now." in lines
    assert [s["built_ahead_seconds"] > 0 for s in summary["stages"]] == [False, True, False]
    assert summary["stages"][2]["built_ahead_seconds"] == 0.0
    # The eval ran on the model trained in memory; evaluating the last stage's checkpoint gives the same numbers.
    assert summary["evaluated_checkpoint"].endswith(os.path.join("run", "checkpoints", "ckpt-10"))
    again = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "eval", print_fn=lambda *a, **k: None
    )
    assert again["eval"] == summary["eval"] and summary["eval"]["sequences"] == 16

    one, two, three = export(tmp_path / "run", 1), export(tmp_path / "run", 2), export(tmp_path / "run", 3)
    frozen = [n for n in one if n.startswith(("bert/embeddings/", "bert/encoder/layer_0/", "bert/encoder/layer_1/"))]
    assert len(frozen) == 5 + 2 * 16
    for name in frozen:  # bit-identical across stage 2
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)
    trained = [
        n
        for n in two
        if n.startswith(("bert/encoder/layer_2/", "bert/encoder/layer_3/", "cls/"))
        and n.endswith(("kernel", "output_weights"))
    ]
    for name in trained:  # new layers moved away from their copies of layers 0-1; heads moved
        source = name.replace("layer_2/", "layer_0/").replace("layer_3/", "layer_1/")
        assert not np.array_equal(one[source], two[name]), name
    for name in frozen:  # the final stage trains everything
        assert name.endswith("beta") or not np.array_equal(two[name], three[name]), name

    # Done: the same command again trains nothing; another plan in the same model_dir is refused.
    again = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train", print_fn=lambda *a, **k: 0
    )
    assert [s["global_step"] for s in again["stages"]] == [4, 8, 10]
    mslt["stages"][0]["steps"] = 6
    other = load_experiment([mslt_config(tmp_path / "c2.yaml", data, mslt)])
    with pytest.raises(PlanError, match="holds a run of other stages"):
        experiment.run(other, str(tmp_path / "run"), make_strategy("one_device"))


@pytest.mark.slow
def test_stages_built_ahead_on_a_thread_train_bit_identically(tmp_path, data):
    """Stages 2 and 3 are built while the stage before trains, then get its weights: same run as building each
    when it starts (random new layers, dropout seeds and input position included). Both ways carry the weights
    over with the same code after the build, so `random` new layers, whose weights come from the build's own
    seeding, are the case that can differ."""
    mslt = {
        "stages": [{"num_layers": 2, "steps": 3}, {"num_layers": 4, "steps": 3}],
        "final_stage": {"steps": 2},
        "new_layer_init": "random",
        "frozen_dropout": True,
    }
    runs = {}
    for build_ahead in (True, False):
        config = load_experiment(
            [mslt_config(tmp_path / "c.yaml", data, dict(mslt, build_ahead=build_ahead), steps_per_loop=1)]
        )
        lines = []
        summary = experiment.run(
            config,
            str(tmp_path / str(build_ahead)),
            make_strategy("one_device"),
            print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))),  # noqa: B023 (called within the iteration)
        )
        runs[build_ahead] = summary
        ahead = [s["built_ahead_seconds"] > 0 for s in summary["stages"]]
        assert ahead == ([False, True, True] if build_ahead else [False, False, False])
        assert ("graph built ahead in" in "\n".join(lines)) == build_ahead
    for stage in (1, 2, 3):
        built_ahead, built_then = export(tmp_path / "True", stage), export(tmp_path / "False", stage)
        assert built_ahead.keys() == built_then.keys()
        for name in built_ahead:
            np.testing.assert_array_equal(built_ahead[name], built_then[name], err_msg=f"stage {stage}: {name}")
    assert [s["train"]["loss"] for s in runs[True]["stages"]] == [s["train"]["loss"] for s in runs[False]["stages"]]


@pytest.mark.slow
def test_a_pre_layer_norm_model_grows_and_trains_through_its_stages(tmp_path, data):
    """norm_placement=pre, block 0 without its attention norm (ModernBERT's): stage 2's new blocks start as copies
    of blocks 0-1 (block 2's attention norm, which block 0 lacks, as built), the frozen blocks stay bit-identical,
    the final norm trains with the heads, and no stage is exported (Google's format cannot hold it)."""
    mslt = {
        "stages": [{"num_layers": 2, "steps": 3}, {"num_layers": 4, "steps": 3}],
        "final_stage": {"steps": 2},
        "embeddings": "freeze_after_first_stage",
    }
    pre = {
        "bert": "bert_tiny",
        "overrides": dict(FOUR_LAYERS["overrides"], norm_placement="pre", first_block_attention_norm=False),
    }
    config = load_experiment([mslt_config(tmp_path / "c.yaml", data, mslt, model=pre, max_checkpoints=10)])
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train_and_eval", print_fn=lambda *a, **k: 0
    )
    assert [(s["global_step"], s["export"]) for s in summary["stages"]] == [(3, None), (6, None), (8, None)]
    assert np.isfinite(summary["eval"]["loss"])
    one, two = checkpoint_weights(tmp_path / "run", 3), checkpoint_weights(tmp_path / "run", 6)
    frozen = [n for n in one if any(f".S{part}." in n for part in ("embeddings", "layer_0", "layer_1"))]
    assert len(frozen) == 5 + 14 + 16  # the embeddings, block 0 (without its attention norm) and block 1
    for name in frozen:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)
    final_norm = [n for n in one if "final_layer_norm" in n]
    assert len(final_norm) == 2 and not np.array_equal(one[final_norm[0]], two[final_norm[0]])


def _command(config, model_dir):
    return pretrain_command(config, model_dir)


@pytest.mark.spawns
def test_kill_9_mid_stage_resumes_in_that_stage(tmp_path, data):
    mslt = {"stages": [{"num_layers": 1, "steps": 2}, {"num_layers": 2, "steps": 60}], "final_stage": {"steps": 0}}
    two_layers = {"bert": "bert_tiny", "overrides": dict(FOUR_LAYERS["overrides"], num_hidden_layers=2)}
    config = mslt_config(
        tmp_path / "c.yaml", data, mslt, model=two_layers, steps_per_loop=1, checkpoint_interval=12, max_checkpoints=100
    )
    run_here(config, tmp_path / "straight")
    # Stage 2's first save (12 steps into it), 12 steps before its next and 48 before its end: the kill lands
    # between the two.
    kill_once_written(_command(config, tmp_path / "killed"), tmp_path / "killed" / "checkpoints" / "ckpt-14.index")
    assert not (tmp_path / "killed" / "stage_2" / "summary.json").exists()  # killed inside stage 2
    resumed = run_here(config, tmp_path / "killed")
    assert "MSLT stage 1/2" not in resumed  # stage 1 is done and not rebuilt
    assert "MSLT stage 2/2: 2 layers, training blocks [1]" in resumed and "(resuming)" in resumed
    assert "Resumed from" in resumed and "checkpoints/ckpt-14" in resumed
    straight, resumed = checkpoint_weights(tmp_path / "straight", 62), checkpoint_weights(tmp_path / "killed", 62)
    assert straight.keys() == resumed.keys() and len(straight) > 30
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)


@pytest.mark.spawns
def test_a_bad_plan_is_a_one_line_error_before_training(tmp_path, data):
    mslt = {"stages": [{"num_layers": 2, "steps": 4}, {"num_layers": 2, "steps": 4}]}
    config = mslt_config(tmp_path / "c.yaml", data, mslt)
    result = run_cli(_command(config, tmp_path / "run"), expect=1)
    assert result.stderr.strip().splitlines()[-1] == (
        "kbert-pretrain: error: mslt.stages[1] (stage 2).num_layers=2: must be greater than the previous "
        "stage's 2: each stage grows the model."
    )
    assert not (tmp_path / "run").exists()
