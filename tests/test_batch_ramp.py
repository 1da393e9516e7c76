"""The batch-size ramp: the micro-batches each step takes, the rate scaled to the batch, the loss normalised by the
step's own batch, the config's checks, and a run that ramps (kbert.training.batch_ramp)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import write_config, write_train_and_eval

from kbert import experiment
from kbert.errors import ConfigError
from kbert.experiment import load_experiment, stages_of
from kbert.optimizers import LAMB
from kbert.optimizers.schedules import PolynomialWarmup
from kbert.runtime.strategy import make_strategy
from kbert.tasks.bert import BertPretrainingTask
from kbert.training.batch_ramp import BatchRamp, RampedSchedule
from kbert.training.loop import build_optimizer, learning_rate_schedule
from kbert.training.trainer import PretrainingTrainer

pytestmark = pytest.mark.usefixtures("float32_policy")
NO_DROPOUT = "model.overrides.hidden_dropout_prob=0.0,model.overrides.attention_probs_dropout_prob=0.0"
# A global batch of 8 in 4 micro-batches of 2, starting at 2 sequences and full from step 3: 1, 2, 3, 4, 4, ...
RAMP = "train.gradient_accumulation_steps=4,train.batch_ramp_start=2,train.batch_ramp_steps=3"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_train_and_eval(str(tmp_path_factory.mktemp("data")))


def _experiment(tmp_path, data, override="", **sections):
    return load_experiment([write_config(str(tmp_path / "c.yaml"), data[0], data[1], **sections)], override)


def test_micro_batches_grow_linearly_and_count_up():
    ramp = BatchRamp(first=3, full=10, steps=4)
    expected = [3, 4, 6, 8, 10, 10, 10]  # 3 + 7 * s // 4
    assert [ramp.micro_batches_at(s) for s in range(7)] == expected
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(ramp.micro_batches(np.arange(7))), expected)
    for start, end in [(0, 7), (2, 5), (4, 6), (5, 5)]:
        assert ramp.micro_batches_between(start, end) == sum(expected[start:end])
    for bad in [
        dict(first=0, full=4, steps=2),
        dict(first=4, full=4, steps=2),
        dict(first=1, full=4, steps=0),
        dict(first=1, full=4, steps=2, rate_scaling="cube"),
    ]:
        with pytest.raises(ValueError, match="needs 0 < first < full"):
            BatchRamp(**bad)


@pytest.mark.parametrize("scaling, power", [("sqrt", 0.5), ("linear", 1.0), ("none", 0.0)])
def test_the_rate_is_the_schedules_scaled_to_the_batch_and_round_trips(scaling, power):
    base = PolynomialWarmup(peak_learning_rate=1e-2, warmup_steps=2, decay_steps=10)
    ramp = BatchRamp(first=1, full=4, steps=6, rate_scaling=scaling)
    schedule = RampedSchedule(base, ramp)
    for step in range(10):
        expected = float(base(step)) * (ramp.micro_batches_at(step) / 4) ** power
        np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-6)
    again = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert again.ramp == ramp and [float(again(s)) for s in range(10)] == [float(schedule(s)) for s in range(10)]


def _trainer(config, model, optimizer, skip=0, **overrides):
    t = config.train.replace(**overrides)
    task = BertPretrainingTask(config.model.bert_config())
    make = task.dataset_fn(config, True)
    return PretrainingTrainer(
        tf.distribute.get_strategy(),
        model,
        optimizer,
        lambda context: make(context).skip(skip),
        task=task,
        global_step=tf.Variable(0, dtype=tf.int64),
        global_batch_size=t.global_batch_size,
        accumulation_steps=t.gradient_accumulation_steps,
        batch_ramp=t.batch_ramp(),
    )


@pytest.mark.slow
def test_each_step_trains_its_ramped_batch_at_its_scaled_rate_and_normalises_by_it(tmp_path, data):
    """Step 0 of a ramp from 2 to 8 sequences equals a step at batch 2 at a quarter's sqrt of the rate; step 1's
    gradient (4 sequences in 2 micro-batches) is that of a batch-4 step from the same weights on the same records."""
    config = _experiment(tmp_path, data, f"{NO_DROPOUT},{RAMP},schedule.warmup_steps=0")
    ramped = BertPretrainingTask(config.model.bert_config()).build_model()
    optimizer = build_optimizer(config, ramped.trainable_variables)
    assert isinstance(learning_rate_schedule(config), RampedSchedule)
    trainer = _trainer(config, ramped, optimizer)
    reference = BertPretrainingTask(config.model.bert_config()).build_model()
    reference.set_weights(ramped.get_weights())
    rate = float(optimizer.learning_rate)  # at step 0
    np.testing.assert_allclose(rate, 1e-2 * 0.5, rtol=1e-6)  # the schedule's peak x sqrt(1 / 4)

    trained = []
    first = trainer.train(1)
    trained.append(int(trainer.sequences_trained.numpy()))
    one = _trainer(
        config,
        reference,
        LAMB(rate, weight_decay=0.01, exclude_from_weight_decay=config.optimizer.exclude_from_weight_decay),
        global_batch_size=2,
        gradient_accumulation_steps=1,
        batch_ramp_start=0,
        batch_ramp_steps=0,
    )
    one_metrics = one.train(1)
    for a, b in zip(ramped.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(first["gradient_norm"], one_metrics["gradient_norm"], rtol=1e-6)

    second = trainer.train(1)
    trained.append(int(trainer.sequences_trained.numpy()))
    two = _trainer(
        config,
        reference,
        LAMB(1e-3),
        skip=1,
        global_batch_size=4,
        gradient_accumulation_steps=2,
        batch_ramp_start=0,
        batch_ramp_steps=0,
    )
    np.testing.assert_allclose(second["gradient_norm"], two.train(1)["gradient_norm"], rtol=1e-5)
    for _ in range(3):
        trainer.train(1)
        trained.append(int(trainer.sequences_trained.numpy()))
    assert trained == [2, 6, 12, 20, 28]  # 1, 2, 3, 4, 4 micro-batches of 2


@pytest.mark.slow
def test_a_run_ramps_its_first_phase_only(tmp_path, data):
    phases = [{"steps": 4}, {"steps": 2, "warmup_steps": 1}]
    config = _experiment(tmp_path, data, RAMP, phases=phases)
    first, second = [stage.config.train for stage in stages_of(config)]
    assert first.batch_ramp() == BatchRamp(1, 4, 3) and second.batch_ramp() is None
    lines = []
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: lines.append(a[0])
    )
    # phase 1: 1 + 2 + 3 + 4 micro-batches of 2; phase 2: two full batches of 8
    assert summary["global_step"] == 6 and summary["sequences_trained"] == 20 + 16


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.batch_ramp_start=2", r"train.batch_ramp_start=2 and train.batch_ramp_steps=0: set both"),
        (
            "train.batch_ramp_start=3,train.batch_ramp_steps=2,train.gradient_accumulation_steps=4",
            r"train.batch_ramp_start=3 must be a multiple of the micro-batch \(train.global_batch_size=8 / "
            r"gradient_accumulation_steps=4 = 2\).*gradient_accumulation_steps=8\)",
        ),
        ("train.batch_ramp_start=4,train.batch_ramp_steps=2", r"multiple of the micro-batch.*= 8\)"),
        ("train.batch_ramp_start=8,train.batch_ramp_steps=2,train.gradient_accumulation_steps=4", "below global_batch"),
        (f"{RAMP},train.batch_ramp_steps=7", r"train.batch_ramp_steps=7 is longer than the 6 steps"),
        (f"{RAMP},train.batch_ramp_rate_scaling=cube", r"batch_ramp_rate_scaling='cube': choose one of sqrt, linear"),
    ],
)
def test_a_ramp_that_cannot_work_is_refused_at_load(tmp_path, data, override, message):
    with pytest.raises(ConfigError, match=message):
        _experiment(tmp_path, data, override)


def test_an_mslt_plan_ramps_its_first_stage_and_is_checked_against_its_steps(tmp_path, data):
    mslt = {"stages": [{"num_layers": 1, "steps": 3}, {"num_layers": 2, "steps": 3}], "final_stage": {"steps": 0}}
    config = _experiment(tmp_path, data, RAMP, mslt=mslt)
    assert [stage.config.train.batch_ramp() is not None for stage in stages_of(config)] == [True, False]
    with pytest.raises(ConfigError, match=r"MSLT stage 1/2: train.batch_ramp_steps=4 is longer than the 3 steps"):
        _experiment(tmp_path, data, f"{RAMP},train.batch_ramp_steps=4", mslt=mslt)
