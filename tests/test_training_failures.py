"""kbert-pretrain's failure paths keep the user's work: divergence, missing or cut checkpoints, another model."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import pretrain_command, run_cli, write_config, write_train_and_eval

from kbert import experiment
from kbert.errors import CheckpointMismatchError, CorruptCheckpointError, InputDataError, NonFiniteLossError
from kbert.experiment import load_experiment
from kbert.runtime.checkpoint_files import set_aside
from kbert.runtime.strategy import make_strategy
from kbert.tasks.bert import BertPretrainingTask
from kbert.training.loop import build_optimizer
from kbert.training.trainer import PretrainingTrainer

EVERY_STEP = {"steps_per_loop": 1, "checkpoint_interval": 1, "summary_interval": 1, "max_checkpoints": 1}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_train_and_eval(str(tmp_path_factory.mktemp("data")))


pytestmark = pytest.mark.usefixtures("float32_policy")


def _config(tmp_path, data, override="", **train):
    path = write_config(str(tmp_path / "c.yaml"), data[0], train=train)
    return load_experiment([path], override)


def _run(config, model_dir, lines=None):
    return experiment.run(
        config,
        str(model_dir),
        make_strategy("one_device"),
        print_fn=lambda *a, **k: (lines if lines is not None else []).append(" ".join(map(str, a))),
    )


def _files(directory):
    """{relative path: bytes} of every file under `directory`."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, directory)] = f.read()
    return found


def _checkpoint_files(model_dir, step):
    ckpts = model_dir / "checkpoints"
    return {name: data for name, data in _files(ckpts).items() if name.startswith(f"ckpt-{step}.")}


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory, data):
    """A finished 4-step run with checkpoints at steps 2 and 4, for tests to copy and damage or go on from past a
    bad step, and the uninterrupted run a resumed one is compared with (each of the overflow, divergence and scalar
    trust ratio tests trained a 4-step run of its own before): read only, copy it to run in it."""
    folder = tmp_path_factory.mktemp("four_steps")
    _run(_config(folder, data, total_steps=4, steps_per_loop=2, checkpoint_interval=2), folder / "run")
    return folder / "run"


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")  # its tests share the four_steps run: one worker builds it once
def test_an_update_that_overflows_is_never_saved(tmp_path, data, four_steps, monkeypatch):
    shutil.copytree(four_steps, tmp_path / "run")
    before = _files(tmp_path / "run" / "checkpoints")
    apply = PretrainingTrainer._apply

    def overflowing(self, batch):  # step 5's update turns a weight to NaN; step 5's own loss is still finite
        apply(self, batch)
        weight = self.model.weights[0]
        weight.assign(tf.where(self.global_step == 4, weight * np.nan, weight))

    monkeypatch.setattr(PretrainingTrainer, "_apply", overflowing)
    with pytest.raises(
        NonFiniteLossError,
        match=r"^Non-finite weights after step 5 .*without saving them.*"
        r"No checkpoint holds those weights; a rerun resumes from the",
    ):
        _run(_config(tmp_path, data, total_steps=6, **EVERY_STEP), tmp_path / "run")
    assert _files(tmp_path / "run" / "checkpoints") == before  # ckpt-4 still the newest, byte for byte


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")
def test_a_divergence_sets_its_checkpoints_aside_and_a_rerun_resumes_from_the_last_good_one(tmp_path, data, four_steps):
    shutil.copytree(four_steps, tmp_path / "run")
    good = _checkpoint_files(tmp_path / "run", 4)
    # A finite rate that passes validation: step 5's weights are huge but finite (saved), step 6's loss is not.
    diverging = _config(tmp_path, data, "schedule.peak_learning_rate=1e30", total_steps=8, **EVERY_STEP)
    with pytest.raises(
        NonFiniteLossError,
        match=r"Non-finite loss at step 6 .*Moved ckpt-5 \(made from the "
        r"diverging weights\) to .*diverged_at_step_5; a rerun resumes "
        r"from .*ckpt-4",
    ):
        _run(diverging, tmp_path / "run")
    assert _checkpoint_files(tmp_path / "run", 4) == good
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith("ckpt-4")
    # Relative names, as CheckpointManager writes them: the run folder can still move.
    assert (tmp_path / "run" / "checkpoints" / "checkpoint").read_text().splitlines()[
        0
    ] == 'model_checkpoint_path: "ckpt-4"'
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints" / "diverged_at_step_5"))[0].startswith("ckpt-5.")

    lines = []
    summary = _run(_config(tmp_path, data, total_steps=6, **EVERY_STEP), tmp_path / "run", lines)
    assert any(line.startswith("Resumed from") and line.endswith("ckpt-4 at step 4.") for line in lines), lines
    assert summary["global_step"] == 6 and np.isfinite(summary["train"]["loss"])


@pytest.mark.xdist_group("four_steps")  # its cases share the four_steps run: one worker builds it once
@pytest.mark.parametrize(
    "damage, why",
    [
        ("delete", "its .index file is missing"),
        ("truncate", "it cannot be read"),
        # killed while it merged its shards (named in the index file: a first save not named is the test below's)
        ("truncate_index", "its .index file cannot be read (file is too short to be an sstable"),
        ("unfinished", "the save did not finish"),
    ],
)
@pytest.mark.slow
def test_an_unreadable_newest_checkpoint_is_skipped_for_the_one_before(tmp_path, data, four_steps, damage, why):
    shutil.copytree(four_steps, tmp_path / "run")
    older = _checkpoint_files(tmp_path / "run", 2)
    ckpts = tmp_path / "run" / "checkpoints"
    if damage == "delete":
        for name in _checkpoint_files(tmp_path / "run", 4):
            os.remove(ckpts / name)
    elif damage == "unfinished":  # a worker was killed before it saved its input position
        for path in (ckpts / "input" / "worker_0").glob("ckpt-4.*"):
            os.remove(path)
    else:
        cut = next(ckpts.glob("ckpt-4.index" if damage == "truncate_index" else "ckpt-4.data-*"))
        cut.write_bytes(cut.read_bytes()[: 10 if damage == "truncate_index" else cut.stat().st_size // 2])
    lines = []
    summary = _run(
        _config(tmp_path, data, total_steps=6, steps_per_loop=2, checkpoint_interval=2), tmp_path / "run", lines
    )
    assert any(line.startswith(f"Skipped {ckpts / 'ckpt-4'}: {why}") for line in lines), lines
    assert any(line == f"Resumed from {ckpts / 'ckpt-2'} at step 2." for line in lines), lines
    assert summary["global_step"] == 6 and _checkpoint_files(tmp_path / "run", 2) == older


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, four_steps):
    """four_steps stopped after step 2 (ckpt-4 and the input position of step 4 gone), as a finished 2-step run of
    the same deterministic config would leave it (ckpt-2), for the tests that damage it, refuse another model or
    other files on it or start from it (each trained a 2-step run of its own before, then a fixture did): read only,
    copy it to run in it."""
    run = tmp_path_factory.mktemp("two_steps") / "run"
    shutil.copytree(four_steps, run)
    ckpts = run / "checkpoints"
    shutil.rmtree(set_aside(str(ckpts), [str(ckpts / "ckpt-4")], "later"))
    for path in (ckpts / "input" / "worker_0").glob("ckpt-4.*"):
        os.remove(path)
    assert tf.train.latest_checkpoint(str(ckpts)).endswith("ckpt-2")
    return run


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")  # two_steps is made of the four_steps run: one worker builds both
def test_checkpoints_that_cannot_be_read_stop_the_run_and_stay(tmp_path, data, two_steps):
    config = _config(tmp_path, data, total_steps=2, steps_per_loop=2, checkpoint_interval=2)
    shutil.copytree(two_steps, tmp_path / "run")
    ckpts = tmp_path / "run" / "checkpoints"
    os.remove(ckpts / "ckpt-2.index")
    (ckpts / "ckpt-9_temp").mkdir()  # what a save killed midway leaves
    before = _files(ckpts)
    with pytest.raises(
        CorruptCheckpointError,
        match=r"none of its 1 checkpoints can be read \(Skipped .*ckpt-2: "
        r"its .index file is missing.*kbert deletes nothing",
    ):
        _run(config, tmp_path / "run")
    assert _files(ckpts) == before and not (ckpts / "ckpt-9_temp").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")
def test_a_first_save_killed_while_it_wrote_its_index_is_no_checkpoint(tmp_path, data, two_steps):
    """Killed while it merged ckpt-2's shards (an index cut short, which the index file does not name yet): the
    rerun starts over instead of stopping at a checkpoint that never was."""
    config = _config(tmp_path, data, total_steps=2, steps_per_loop=2, checkpoint_interval=2)
    shutil.copytree(two_steps, tmp_path / "run")
    ckpts = tmp_path / "run" / "checkpoints"
    os.remove(ckpts / "checkpoint")
    (ckpts / "ckpt-2.index").write_bytes((ckpts / "ckpt-2.index").read_bytes()[:10])
    lines = []
    summary = _run(config, tmp_path / "run", lines)
    assert any(line.startswith(f"Skipped {ckpts / 'ckpt-2'}: its .index file cannot be read") for line in lines), lines
    assert not any(line.startswith("Resumed from") for line in lines), lines
    assert summary["global_step"] == 2 and summary["sequences_trained"] == 2 * config.train.global_batch_size
    assert tf.train.latest_checkpoint(str(ckpts)).endswith("ckpt-2")


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")
def test_a_model_dir_or_init_checkpoint_of_a_deeper_model_is_refused(tmp_path, data, two_steps):
    shutil.copytree(two_steps, tmp_path / "run")  # its own copy: the refused run starts in it
    before = _files(tmp_path / "run" / "checkpoints")
    shallower = _config(tmp_path, data, "model.overrides.num_hidden_layers=1", total_steps=4)
    with pytest.raises(
        CheckpointMismatchError,
        match=r"does not fit the model \(1 layers, hidden 32, vocab 64\) "
        r"\(48 unexpected, 1 wrong-shape variables\).*\n.*unexpected "
        r"in the checkpoint \(48\):\n    model/bert/layer_1/",
    ):
        _run(shallower, tmp_path / "run")
    assert _files(tmp_path / "run" / "checkpoints") == before
    init = _config(
        tmp_path, data, f"model.overrides.num_hidden_layers=1,train.init_checkpoint={tmp_path / 'run'}", total_steps=2
    )
    with pytest.raises(
        CheckpointMismatchError,
        match=r"\(16 unexpected variables\): set model.\* to the "
        r"checkpoint's sizes",
    ):
        _run(init, tmp_path / "fresh")


def _rewrite(prefix, change):
    """Writes checkpoint `prefix` again with `change(values)` applied to its {object path: value} (the object graph
    rebuilt from the keys: nested dicts serve for the checkpoint's dicts and lists alike)."""
    reader, root = tf.train.load_checkpoint(prefix), {}
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    values = {
        key[: -len(suffix)]: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.endswith(suffix) and not key.startswith("save_counter/")
    }  # the Checkpoint's own
    for path, value in change(values).items():
        *parents, name = (part.replace(".S", "/").replace("..", ".") for part in path.split("/"))  # TF's escapes
        node = root
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = tf.Variable(value)
    for suffix in (".index", ".data-00000-of-00001"):
        os.remove(prefix + suffix)
    tf.train.Checkpoint(**root).write(prefix)


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")
def test_a_checkpoint_with_a_scalar_per_trust_ratio_resumes_exactly(tmp_path, data, four_steps, two_steps):
    """Checkpoints of kbert before 2026-12-04 kept each LAMB trust ratio in a scalar of its own: a run resumes from
    them as from its own, to the bits of an uninterrupted run (four_steps). The excluded variables' ratios, never
    written again, are marked 0.5 in the old checkpoint to show that they were read."""
    # The uninterrupted run's ckpt-2, its newest: four_steps stopped after step 2 (two_steps).
    shutil.copytree(two_steps, tmp_path / "run")
    ckpts = tmp_path / "run" / "checkpoints"
    assert tf.train.latest_checkpoint(str(ckpts)).endswith("ckpt-2")
    config = _config(tmp_path, data, total_steps=2, steps_per_loop=2, checkpoint_interval=2)
    vector = "optimizer/lamb.Strust_ratios"
    # 'lamb/<variable path with _ for />_trust_ratio', in vector order: the paths of the run's own model
    variables = BertPretrainingTask(config.model.bert_config()).build_model().trainable_variables
    optimizer = build_optimizer(config, variables)
    optimizer.build(variables)
    _, names = optimizer.trust_ratio_paths()

    excluded = []

    def scalars(values):
        ratios = values.pop(vector)
        excluded.extend(ratios == 1.0)  # never written again: the resumed run ends with what it read for them
        assert len(ratios) == len(names) and 0 < sum(excluded) < len(ratios)
        marked = np.where(excluded, 0.5, ratios)
        return {**values, **{"optimizer/" + name.replace("/", ".S"): r for name, r in zip(names, marked)}}

    _rewrite(str(tmp_path / "run" / "checkpoints" / "ckpt-2"), scalars)
    assert (
        vector + "/.ATTRIBUTES/VARIABLE_VALUE"
        not in tf.train.load_checkpoint(str(tmp_path / "run" / "checkpoints" / "ckpt-2")).get_variable_to_shape_map()
    )
    config.override({"train": {"total_steps": 4}})
    lines = []
    _run(config, tmp_path / "run", lines)
    assert f"Resumed from {ckpts / 'ckpt-2'} at step 2." in lines, lines
    straight, resumed = (
        tf.train.load_checkpoint(str(run / "checkpoints" / "ckpt-4")) for run in (four_steps, tmp_path / "run")
    )
    key = vector + "/.ATTRIBUTES/VARIABLE_VALUE"
    ratios = straight.get_tensor(key)
    np.testing.assert_array_equal(resumed.get_tensor(key), np.where(excluded, 0.5, ratios))
    for key in straight.get_variable_to_shape_map():
        if key.startswith(("model/", "optimizer/")) and not key.startswith(vector):
            np.testing.assert_array_equal(resumed.get_tensor(key), straight.get_tensor(key), err_msg=key)


@pytest.mark.slow
@pytest.mark.xdist_group("four_steps")
def test_changed_train_files_name_checkpoint_input(tmp_path, data, two_steps):
    shutil.copytree(two_steps, tmp_path / "run")
    more = load_experiment(
        [
            write_config(
                str(tmp_path / "more.yaml"),
                f"{data[0]},{data[1]}",  # one file more
                train={"total_steps": 4},
            )
        ]
    )
    with pytest.raises(
        InputDataError,
        match=r"ckpt-2: its saved input position does not fit data.train_files .*"
        r"data.checkpoint_input=false",
    ):
        _run(more, tmp_path / "run")
    more.override({"data": {"checkpoint_input": False}})
    assert _run(more, tmp_path / "run")["global_step"] == 4


@pytest.mark.spawns
@pytest.mark.xdist_group("four_steps")
def test_wrong_shapes_are_one_line_and_a_listing_not_a_traceback(tmp_path, data, two_steps):
    config = write_config(
        str(tmp_path / "wide.yaml"),
        data[0],
        train={"init_checkpoint": str(two_steps)},  # read only: weights are all an init_checkpoint takes
        model={
            "bert": "bert_tiny",
            "overrides": {
                "vocab_size": 64,
                "hidden_size": 32,
                "num_attention_heads": 2,
                "intermediate_size": 256,
                "num_hidden_layers": 2,
                "max_position_embeddings": 32,
            },
        },
    )
    result = run_cli(pretrain_command(config, tmp_path / "wide"), expect=1)
    lines = result.stderr.strip().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("kbert-pretrain: error: "))
    assert lines[first].endswith(
        "does not fit the model (2 layers, hidden 32, vocab 64) (6 wrong-shape variables): "
        "set model.* to the checkpoint's sizes, or give train.init_checkpoint a checkpoint "
        "of this model's."
    ), lines[first]
    assert lines[first + 1] == "  wrong shape (6):" and "Traceback" not in result.stderr
