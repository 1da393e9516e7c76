"""The training loop in-process on one CPU: eval numbers, init checkpoints, the NaN guard, precision policies."""

import functools
import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import MAX_PREDICTIONS, SEQ_LENGTH, write_config, write_shards, write_train_and_eval

from kbert import experiment
from kbert.data import first_layout, schema
from kbert.errors import CheckpointMismatchError, ConfigError, NonFiniteLossError
from kbert.experiment import load_experiment
from kbert.modeling import BertPretrainer, export_google_checkpoint
from kbert.runtime.strategy import make_strategy
from kbert.tasks.bert import BertPretrainingTask
from kbert.training import loop
from kbert.training.loop import build_optimizer
from kbert.training.trainer import PretrainingTrainer


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_train_and_eval(str(tmp_path_factory.mktemp("data")))


pytestmark = pytest.mark.usefixtures("float32_policy")


def _experiment(tmp_path, data, override="", **sections):
    path = write_config(str(tmp_path / "c.yaml"), data[0], data[1], **sections)
    return load_experiment([path], override)


def _google_checkpoint(config, directory):
    keras.utils.set_random_seed(7)
    model = BertPretrainer(config.model.bert_config())
    return model, export_google_checkpoint(model, os.path.join(directory, "bert_model.ckpt"))


@pytest.fixture(scope="module")
def google_start(tmp_path_factory, data):
    """The default run trained 2 steps from a Google TF1 checkpoint at a learning rate of ~0 (which keeps the weights
    where the Google checkpoint put them), once for the test of that start and the tests that start from its run or
    refuse another model on it (each trained a 2-step run of its own before): (its model_dir, read only: copy it to
    run in it; the Google model's weights, by variable path; the lines it printed)."""
    folder = tmp_path_factory.mktemp("two_steps")
    config = _experiment(folder, data, "schedule.peak_learning_rate=1e-12,train.total_steps=2")
    model, checkpoint = _google_checkpoint(config, str(folder / "google"))
    config.override({"train": {"init_checkpoint": checkpoint}})
    printed = []
    experiment.run(config, str(folder / "run"), make_strategy("one_device"), print_fn=lambda s, **k: printed.append(s))
    return folder / "run", {variable.path: variable.numpy() for variable in model.weights}, printed


@pytest.fixture(scope="module")
def two_steps(google_start):
    """The default run trained 2 steps (google_start's): its model_dir, read only (copy it to run in it)."""
    return google_start[0]


def _log_softmax(logits):
    logits = logits - logits.max(-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def test_eval_matches_a_direct_float64_computation(tmp_path, data):
    config = _experiment(tmp_path, data)
    model, checkpoint = _google_checkpoint(config, str(tmp_path / "google"))
    config.override({"train": {"init_checkpoint": checkpoint}})
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), mode="eval", print_fn=lambda *a, **k: None
    )

    records = list(tf.data.TFRecordDataset(tf.io.gfile.glob(data[1])).batch(100))[0]
    parsed = tf.io.parse_example(records, schema.feature_spec(SEQ_LENGTH, MAX_PREDICTIONS))
    batch = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}
    outputs = model(batch, training=False)
    mlm = _log_softmax(np.asarray(outputs["mlm_logits"], np.float64))
    nsp = _log_softmax(np.asarray(outputs["nsp_logits"], np.float64))
    ids, weights = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy().astype(np.float64)
    labels = batch["next_sentence_labels"].numpy()[:, 0]
    mlm_ce = -np.take_along_axis(mlm, ids[..., None], -1)[..., 0]
    nsp_ce = -nsp[np.arange(len(labels)), labels]
    expected = {
        "masked_lm_loss": (weights * mlm_ce).sum() / (weights.sum() + 1e-5),
        "masked_lm_accuracy": (weights * (mlm.argmax(-1) == ids)).sum() / weights.sum(),
        "next_sentence_loss": nsp_ce.mean(),
        "next_sentence_accuracy": (nsp.argmax(-1) == labels).mean(),
    }
    expected["loss"] = expected["masked_lm_loss"] + expected["next_sentence_loss"]
    for name, value in expected.items():
        assert summary["eval"][name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert summary["eval"]["sequences"] == 16
    assert json.loads((tmp_path / "run" / "eval_summary.json").read_text())["eval"]["loss"] == pytest.approx(
        expected["loss"], rel=1e-5
    )
    assert not (tmp_path / "run" / "summary.json").exists()  # a trainer's summary is never overwritten


def _model_weights(model_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")))
    return reader


@pytest.mark.parametrize("records", [13, 5])
def test_eval_counts_every_record_even_the_last_partial_batch(tmp_path, data, records):
    eval_files = write_shards(str(tmp_path / "eval"), "eval", shards=1, records_per_shard=records, seed=3)
    config = _experiment(tmp_path, (data[0], eval_files))
    model, checkpoint = _google_checkpoint(config, str(tmp_path / "google"))
    config.override({"train": {"init_checkpoint": checkpoint}})
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), mode="eval", print_fn=lambda *a, **k: None
    )
    assert summary["eval"]["sequences"] == records and summary["eval"]["loss"] > 0


def test_an_evaluator_reads_the_same_records_at_every_call(tmp_path, data):
    # With one replica the evaluator keeps one iterator over its records repeated: each call takes one pass.
    config = _experiment(tmp_path, data, "eval.global_batch_size=6,eval.steps=2")
    strategy = make_strategy("one_device")
    task = BertPretrainingTask(config.model.bert_config())
    with strategy.scope():
        model = task.build_model()
    evaluate = loop.evaluator(config, strategy, task, model)
    first = evaluate()
    assert first["sequences"] == 12 and [evaluate(), evaluate()] == [first, first]
    config.override({"eval": {"steps": -1}})
    every = loop.evaluator(config, strategy, task, model)
    assert [every()["sequences"], every()["sequences"]] == [16, 16]


@pytest.mark.slow
@pytest.mark.xdist_group("two_steps")  # one worker trains the shared run once
def test_train_starts_from_a_google_tf1_checkpoint(google_start):
    # A learning rate of ~0 keeps the weights where the Google checkpoint put them.
    run, weights, printed = google_start
    assert any("from google checkpoint" in line for line in printed)
    reader = _model_weights(str(run))
    for path, value in weights.items():
        key = f"model/{path.replace('/', '.S')}/.ATTRIBUTES/VARIABLE_VALUE"
        np.testing.assert_allclose(reader.get_tensor(key), value, atol=1e-6, err_msg=path)


@pytest.mark.slow
@pytest.mark.xdist_group("two_steps")
def test_phase_two_starts_from_phase_one_weights_with_a_fresh_optimizer(tmp_path, data, two_steps):
    phase2 = _experiment(
        tmp_path,
        data,
        f"train.total_steps=2,schedule.peak_learning_rate=1e-12,train.init_checkpoint={two_steps}",
    )
    summary = experiment.run(
        phase2, str(tmp_path / "phase2"), make_strategy("one_device"), print_fn=lambda *a, **k: None
    )
    assert summary["global_step"] == 2 and summary["restored_from"] is None
    first, second = _model_weights(str(two_steps)), _model_weights(str(tmp_path / "phase2"))
    for name in first.get_variable_to_shape_map():
        if name.startswith("model/"):
            np.testing.assert_allclose(first.get_tensor(name), second.get_tensor(name), atol=1e-6, err_msg=name)


@pytest.mark.slow
@pytest.mark.xdist_group("two_steps")
def test_init_checkpoint_of_another_size_is_refused(tmp_path, data, two_steps):
    bigger = _experiment(tmp_path, data, f"model.overrides.num_hidden_layers=3,train.init_checkpoint={two_steps}")
    with pytest.raises(ValueError, match="init_checkpoint"):
        experiment.run(bigger, str(tmp_path / "big"), make_strategy("one_device"), print_fn=lambda *a, **k: None)


@pytest.mark.slow
def test_non_finite_loss_stops_with_the_step_and_never_saves_bad_weights(tmp_path, data):
    config = _experiment(
        tmp_path,
        data,
        "schedule.peak_learning_rate=1e12,schedule.warmup_steps=0,"
        "train.total_steps=20,train.steps_per_loop=1,train.checkpoint_interval=1,"
        "train.max_checkpoints=100",
    )
    with pytest.raises(NonFiniteLossError, match=r"Non-finite loss at step \d+ \(.*loss=(nan|inf)") as error:
        experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)
    bad_step = int(str(error.value).split("step ")[1].split(" ")[0])
    directory = str(tmp_path / "run" / "checkpoints")
    saved = tf.train.get_checkpoint_state(directory)
    steps = [int(p.rsplit("-", 1)[1]) for p in (saved.all_model_checkpoint_paths if saved else [])]
    assert all(step < bad_step for step in steps)
    for step in steps:
        reader = tf.train.load_checkpoint(os.path.join(directory, f"ckpt-{step}"))
        for name in reader.get_variable_to_shape_map():
            if name.startswith("model/"):
                assert np.isfinite(reader.get_tensor(name)).all(), (step, name)
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize(
    "override",
    [
        "train.mixed_precision=mixed_bfloat16",
        "train.mixed_precision=mixed_float16",
        "train.jit_compile=true,train.gradient_accumulation_steps=2",
    ],
)
@pytest.mark.slow
def test_precision_policies_and_xla_train(tmp_path, data, override, monkeypatch):
    config = _experiment(tmp_path, data, f"{override},train.total_steps=2")
    peaks = []  # MFU's denominator on a CPU: a matmul timed in the run's compute precision
    monkeypatch.setattr(loop, "peak_flops_of", lambda strategy, model, dtype: peaks.append(dtype) or (1e9, ""))
    summary = experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)
    assert np.isfinite(summary["train"]["loss"]) and summary["global_step"] == 2
    assert peaks == [
        {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}.get(config.train.mixed_precision, "float32")
    ]
    reader = _model_weights(str(tmp_path / "run"))
    kernels = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/") and "kernel" in n]
    assert kernels and all(reader.get_tensor(n).dtype == np.float32 for n in kernels)  # float32 master weights


@pytest.mark.slow
@pytest.mark.xdist_group("two_steps")
def test_model_dir_of_another_model_is_refused_by_name(tmp_path, data, two_steps):
    shutil.copytree(two_steps, tmp_path / "run")  # its own copy: the refused run starts in it
    bigger = _experiment(tmp_path, data, "model.overrides.num_hidden_layers=3,train.total_steps=4")
    # 16 weights of layer 2 and their 32 LAMB moments; the trust-ratio vector is longer
    with pytest.raises(
        CheckpointMismatchError,
        match=r"ckpt-2 does not fit the model \(3 layers, hidden 32, "
        r"vocab 64\) \(48 missing, 1 wrong-shape variables\): "
        r"resume with the config that wrote it",
    ):
        experiment.run(bigger, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)


def _spy_on_saves(monkeypatch, asynchronous):
    """Appends to `asynchronous`, at each checkpoint save, whether it is written in the background."""
    from kbert.runtime import checkpointing

    save = checkpointing._Manager.save

    def spy(self, checkpoint_number=None, check_interval=True, options=None):
        asynchronous.append(bool(options and options.experimental_enable_async_checkpoint))
        return save(self, checkpoint_number, check_interval, options)

    monkeypatch.setattr(checkpointing._Manager, "save", spy)


@pytest.fixture(scope="module")
def straight(tmp_path_factory, data):
    """The default run trained 6 steps and evaluated, with a fixed decay (so a 4-step run of it is the start of this
    one) and synchronous saves, once for the test of its outputs and as the uninterrupted run an asynchronously
    saved one resumes to (each trained a run of its own before): (its model_dir, read only; the lines it printed;
    whether each save was written in the background)."""
    folder = tmp_path_factory.mktemp("straight")
    config = _experiment(folder, data, "schedule.decay_steps=10,train.total_steps=6")
    printed, asynchronous = [], []
    with pytest.MonkeyPatch.context() as monkeypatch:
        _spy_on_saves(monkeypatch, asynchronous)
        experiment.run(
            config,
            str(folder / "run"),
            make_strategy("one_device"),
            mode="train_and_eval",
            print_fn=lambda s, **k: printed.append(s),
        )
    return folder / "run", printed, asynchronous


@pytest.mark.slow
@pytest.mark.xdist_group("straight")  # its tests share the straight run: one worker trains it once
def test_outputs_console_tensorboard_and_summary_json(straight):
    run, printed, _ = straight
    progress = [line for line in printed if line.startswith("step ")]
    assert len(progress) == 3 and progress[-1].startswith("step 6/6 | loss ")
    for field in ("mlm_acc", "nsp_acc", "lr", "seq/s", "ETA"):
        assert field in progress[-1]
    assert any(line.startswith("eval | loss ") for line in printed)
    tags = set()
    for events in tf.io.gfile.glob(str(run / "train" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(events):
            tags.update(value.tag for value in event.summary.value)
    for tag in (
        "loss",
        "masked_lm_loss",
        "masked_lm_accuracy",
        "next_sentence_accuracy",
        "learning_rate",
        "gradient_norm",
        "sequences_per_second",
        "trust_ratio/all",
    ):
        assert tag in tags, tag
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 6 and summary["replicas"] == 1 and summary["train"]["loss"] > 0
    assert summary["eval"]["sequences"] == 16 and summary["config"]["train"]["total_steps"] == 6


def test_adamw_exclusions_match_variable_paths(tmp_path, data):
    config = _experiment(tmp_path, data, "optimizer.type=adamw")
    model = BertPretrainingTask(config.model.bert_config()).build_model()
    optimizer = build_optimizer(config, model.trainable_variables)
    decayed = {v.path: optimizer._use_weight_decay(v) for v in model.trainable_variables}
    assert not any(decayed[p] for p in decayed if "layer_norm" in p or p.endswith("bias"))
    assert all(decayed[p] for p in decayed if p.endswith("kernel"))


def test_fp16_uses_the_loss_scaler_whose_check_spans_replicas(tmp_path, data):
    """kbert's LossScaleOptimizer (tested across replicas in test_optimizers_distributed) is what the loop uses."""
    from kbert.optimizers import LossScaleOptimizer
    from kbert.training.loop import build_optimizer

    config = _experiment(tmp_path, data, "train.mixed_precision=mixed_float16")
    optimizer = build_optimizer(config)
    assert isinstance(optimizer, LossScaleOptimizer)
    weights = keras.Variable([1.0, 2.0])
    optimizer.build([weights])
    scale = float(optimizer.dynamic_scale)
    optimizer.apply_gradients([(tf.constant([np.inf, 1.0]), weights)])  # an overflow: skipped, scale halved
    np.testing.assert_array_equal(weights.numpy(), [1.0, 2.0])
    assert (float(optimizer.dynamic_scale), int(optimizer.iterations)) == (scale / 2, 0)
    optimizer.apply_gradients([(tf.constant([scale, scale]), weights)])  # finite: the step is taken
    assert (float(optimizer.dynamic_scale), int(optimizer.iterations)) == (scale / 2, 1)


def test_optimizer_and_masking_settings_that_cannot_work_are_refused(tmp_path, data):
    # AdamW clips after the all-reduce as LAMB does (tests/test_optimizers_distributed.py), so it takes the key.
    assert build_optimizer(
        _experiment(tmp_path, data, "optimizer.type=adamw,optimizer.global_clipnorm=1.0")
    ).global_clipnorm
    with pytest.raises(ConfigError, match="data.dynamic_masking needs data.vocab_file"):
        config = _experiment(tmp_path, data, "data.dynamic_masking=true")
        BertPretrainingTask(config.model.bert_config()).dataset_fn(config, True)


@pytest.mark.slow
@pytest.mark.parametrize("accumulation_steps, passes", [(1, 1), (3, 2)])
def test_the_step_graph_holds_one_forward_backward_pass_per_distinct_micro_step(
    tmp_path, data, accumulation_steps, passes
):
    """Without accumulation the traced loop has no (empty) accumulation loop holding a second copy of the model."""
    config = _experiment(
        tmp_path, data, train={"global_batch_size": 6, "gradient_accumulation_steps": accumulation_steps}
    )
    strategy = tf.distribute.get_strategy()
    task = BertPretrainingTask(config.model.bert_config())
    model = task.build_model()
    trainer = PretrainingTrainer(
        strategy,
        model,
        build_optimizer(config),
        task.dataset_fn(config, True),
        task=task,
        global_step=tf.Variable(0, dtype=tf.int64),
        global_batch_size=6,
        accumulation_steps=accumulation_steps,
    )
    traced = []
    trace_gradients = trainer._gradients
    trainer._gradients = lambda *args: traced.append(1) or trace_gradients(*args)
    trainer.train(tf.constant(2))
    assert len(traced) == passes
    assert int(trainer.global_step.numpy()) == 2


@pytest.mark.slow
def test_where_the_input_position_is_not_saved_a_later_start_reshuffles_instead_of_replaying(tmp_path, data):
    """TPUs (and data.checkpoint_input=false, which feeds through TF's distributed iterator, prefetching to the
    devices) cannot restore the input position: a run that starts at step N (a restart, an MSLT stage) shuffles
    with seed + N rather than replaying the first batches again."""
    from kbert.training.inputs import DistributedInput, WorkerInput
    from kbert.training.loop import InputStart, input_start, make_trainer

    @functools.cache  # a pipeline built once per (config, start): the comparisons below reuse its first batch
    def first_batch(override, initial_step):
        config = _experiment(tmp_path, data, override)
        strategy = make_strategy("one_device")
        task = BertPretrainingTask(config.model.bert_config())
        with strategy.scope():
            model = task.build_model()
            optimizer = build_optimizer(config, model.trainable_variables)
        layout = first_layout(data[0])
        trainer = make_trainer(config, strategy, task, model, optimizer, layout, initial_step=initial_step)
        feed = DistributedInput if "checkpoint_input=false" in override else WorkerInput
        assert type(trainer.input) is feed
        return next(trainer.input.iterator)["input_ids"].numpy()

    np.testing.assert_array_equal(first_batch("", 0), first_batch("", 6))  # restored position: same pipeline
    unsaved = "data.checkpoint_input=false"
    np.testing.assert_array_equal(first_batch(unsaved, 0), first_batch("", 0))
    assert not np.array_equal(first_batch(unsaved, 0), first_batch(unsaved, 6))

    config = _experiment(tmp_path, data, f"{unsaved},train.total_steps=2")
    experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)
    # decided once, before the input is built: the step the trainer starts at seeds its shuffle
    assert input_start(config, make_strategy("one_device"), 2) == InputStart(False, 2)
    assert input_start(_experiment(tmp_path, data, ""), make_strategy("one_device"), 2) == InputStart(True, 0)
    lines = []
    summary = experiment.run(
        _experiment(tmp_path, data, f"{unsaved},train.total_steps=4"),
        str(tmp_path / "run"),
        make_strategy("one_device"),
        print_fn=lambda *a, **k: lines.append(a[0]),
    )
    assert any(line.endswith("at step 2.") for line in lines) and summary["global_step"] == 4


@pytest.mark.slow
@pytest.mark.xdist_group("straight")
def test_async_checkpoints_resume_bit_identically_and_are_on_disk_when_train_returns(
    tmp_path, data, straight, monkeypatch
):
    """The periodic saves of train.async_checkpoint are written in the background; a run resumed from them ends
    with exactly the weights and optimizer state of an uninterrupted synchronous run (straight)."""
    asynchronous = []
    _spy_on_saves(monkeypatch, asynchronous)

    def run(model_dir, override):  # a fixed decay, so a 4-step run is the start of the 6-step one
        config = _experiment(tmp_path, data, f"schedule.decay_steps=10,{override}")
        experiment.run(config, str(tmp_path / model_dir), make_strategy("one_device"), print_fn=lambda *a, **k: None)
        return tf.train.latest_checkpoint(str(tmp_path / model_dir / "checkpoints"))

    straight_dir, _, straight_saves = straight
    straight = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(straight_dir / "checkpoints")))
    assert straight_saves == [False] * 3
    assert run("async", "train.async_checkpoint=true,train.total_steps=4").endswith("ckpt-4")
    assert asynchronous == [True, True]  # steps 2 and 4: ckpt-4, resumed below, was written in the background
    last = run("async", "train.async_checkpoint=true,train.total_steps=6")
    assert last.endswith("ckpt-6")
    resumed = tf.train.load_checkpoint(last)  # indexed and whole when the run returned
    names = [n for n in straight.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
    assert len(names) > 30
    for name in names:
        np.testing.assert_array_equal(straight.get_tensor(name), resumed.get_tensor(name), err_msg=name)
