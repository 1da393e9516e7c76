"""`schedule.shape`: the warmup-stable-decay and one-cycle schedules against their closed forms, their `.keras`
round trip, the key reaching the optimizer of both commands, the polynomial default unchanged, bad keys in one
line, and the same numbers under JAX."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from kbert.errors import ConfigError
from kbert.finetuning.config import FinetuneConfig
from kbert.finetuning.runner import learning_rate
from kbert.optimizers import LAMB, PolynomialWarmup
from kbert.optimizers.schedules import OneCycle, WarmupStableDecay
from kbert.runtime.optimizer_factory import make_schedule
from kbert.runtime.sections import ScheduleConfig
from kbert.training.config import PretrainingConfig, load_config
from kbert.training.loop import build_optimizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs/experiments/bert_tiny_cpu.yaml")

# peak 1.0, end 0.1, warmup 10, 100 steps from step_offset 5, decay_share 0.2: the decay runs over s in [80, 100].
WSD = dict(
    peak_learning_rate=1.0, warmup_steps=10, total_steps=100, decay_share=0.2, end_learning_rate=0.1, step_offset=5
)
WSD_VALUES = [  # (global step, closed-form rate); s = step - 5
    (0, 0.0),  # before the offset: the warmup's start
    (5, 0.0),  # warmup start
    (9, 0.4),  # 1.0 * 4 / 10
    (15, 1.0),  # peak
    (50, 1.0),  # stable middle
    (85, 1.0),  # decay start, s = 0.8 * 100
    (95, 1.0 - 0.9 * 10 / 20),  # halfway down: 0.55
    (105, 0.1),  # end
    (500, 0.1),  # after the end
]
# Cramming's triangle: peak 2.0 at the middle of 100 steps, down to end 0.
ONE_CYCLE = dict(peak_learning_rate=2.0, total_steps=100)
ONE_CYCLE_VALUES = [(0, 0.0), (10, 0.4), (50, 2.0), (75, 1.0), (90, 0.4), (100, 0.0), (300, 0.0)]


def _rates(schedule, steps) -> np.ndarray:
    return np.array([float(schedule(s)) for s in steps], np.float64)


def _check(schedule, values) -> None:
    steps, expected = zip(*values)
    np.testing.assert_allclose(_rates(schedule, steps), np.array(expected, np.float64), rtol=1e-6, atol=1e-7)


def test_warmup_stable_decay_closed_form():
    _check(WarmupStableDecay(**WSD), WSD_VALUES)


def test_one_cycle_peaks_at_the_middle_or_at_warmup_steps():
    _check(OneCycle(**ONE_CYCLE), ONE_CYCLE_VALUES)
    # warmup_steps 20, end 0.5, offset 10: up 0.1 a step to 2.0 at s=20, down (1.5 / 80) a step to 0.5 at s=100.
    early = OneCycle(peak_learning_rate=2.0, total_steps=100, warmup_steps=20, end_learning_rate=0.5, step_offset=10)
    _check(early, [(10, 0.0), (20, 1.0), (30, 2.0), (70, 2.0 - 1.5 * 40 / 80), (110, 0.5), (111, 0.5)])


@pytest.mark.parametrize(
    "schedule",
    [
        WarmupStableDecay(**WSD),
        OneCycle(**ONE_CYCLE),
        OneCycle(1e-3, 50, warmup_steps=5, end_learning_rate=1e-5, step_offset=3),
    ],
    ids=["wsd", "one_cycle", "one_cycle_warmup"],
)
def test_get_config_and_keras_file_round_trip(tmp_path, schedule):
    steps = [0, 3, 7, 26, 49, 90, 120]
    config = schedule.get_config()
    again = type(schedule).from_config(config)
    assert again.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert type(restored) is type(schedule) and restored.get_config() == config

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(LAMB(schedule), "mse")
    model.train_on_batch(np.ones((4, 2), "float32"), np.zeros((4, 1), "float32"))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path).optimizer._learning_rate
    assert type(loaded) is type(schedule) and loaded.get_config() == config
    np.testing.assert_array_equal(_rates(loaded, steps), _rates(schedule, steps))


def test_polynomial_default_is_the_schedule_it_was():
    """Unset, `schedule.shape` keeps the PolynomialWarmup over total_steps - step_offset - warmup_steps."""
    config = load_config(PretrainingConfig, [TINY], "schedule.step_offset=40")
    schedule = build_optimizer(config)._learning_rate
    assert type(schedule) is PolynomialWarmup
    assert schedule.get_config() == PolynomialWarmup(5e-3, 30, 300 - 40 - 30, power=0.5, step_offset=40).get_config()


def test_shape_reaches_the_pretraining_optimizer():
    config = load_config(
        PretrainingConfig, [TINY], "schedule.shape=wsd,schedule.decay_share=0.25,schedule.end_learning_rate=1e-4"
    )
    schedule = build_optimizer(config)._learning_rate
    assert type(schedule) is WarmupStableDecay
    # 300 steps, warmup 30, decay over the last 75 (from step 225), peak 5e-3 to 1e-4.
    _check(schedule, [(15, 2.5e-3), (30, 5e-3), (225, 5e-3), (262.5, 5e-3 - 4.9e-3 / 2), (300, 1e-4)])

    config = load_config(PretrainingConfig, [TINY], "schedule.shape=one_cycle,schedule.warmup_steps=0")
    schedule = build_optimizer(config)._learning_rate
    assert type(schedule) is OneCycle
    _check(schedule, [(75, 2.5e-3), (150, 5e-3), (225, 2.5e-3), (300, 0.0)])


def test_shape_reaches_the_finetuning_schedule():
    """kbert-finetune shares the section: its warmup_fraction is the one-cycle's rise (10% of 200 steps here)."""
    config = FinetuneConfig()
    config.schedule = config.schedule.replace(shape="one_cycle", peak_learning_rate=1e-4)
    schedule = learning_rate(config, 200)
    assert type(schedule) is OneCycle
    _check(schedule, [(10, 5e-5), (20, 1e-4), (110, 5e-5), (200, 0.0)])


@pytest.mark.parametrize(
    "override, key",
    [
        ("schedule.shape=cosine", "schedule.shape='cosine': choose one of polynomial, wsd, one_cycle."),
        ("schedule.shape=wsd,schedule.decay_share=0", "schedule.decay_share=0"),
        ("schedule.shape=wsd,schedule.decay_share=1.5", "schedule.decay_share=1.5"),
        ("schedule.decay_share=0.2", "schedule.decay_share=0.2 is for schedule.shape=wsd"),
        ("schedule.shape=wsd,schedule.warmup_steps=280", "schedule.warmup_steps=280 runs into the wsd decay"),
    ],
)
def test_bad_schedule_keys_are_one_line(override, key):
    with pytest.raises(ConfigError) as error:
        load_config(PretrainingConfig, [TINY], override)
    message = str(error.value)
    assert key in message and "\n" not in message, message


def test_wsd_warmup_into_the_decay_is_caught_where_the_steps_are_known():
    """Fine-tuning knows its steps only when it builds the schedule: the same one line then."""
    with pytest.raises(
        ConfigError, match=r"^schedule.warmup_steps=95 runs into the wsd decay, which starts at step 90 "
    ):
        make_schedule(ScheduleConfig(shape="wsd", warmup_steps=95), 100)
    with pytest.raises(ValueError, match="`warmup_steps` must end before the decay starts"):
        WarmupStableDecay(1.0, warmup_steps=95, total_steps=100)


def test_a_phase_or_mslt_stage_whose_wsd_warmup_runs_into_its_decay_is_one_line_at_load(tmp_path):
    """Phases and MSLT stages each schedule their own steps: a bad one is named when the config loads, not when
    the run reaches it."""
    from kbert.experiment import load_experiment

    def load(**sections):
        path = str(tmp_path / "c.yaml")
        with open(path, "w") as f:
            json.dump({"schedule": {"shape": "wsd", "decay_share": 0.5, "warmup_steps": 1}, **sections}, f)
        return load_experiment([path])

    with pytest.raises(ConfigError, match=r"^phase 2/2: schedule.warmup_steps=3 runs into the wsd decay"):
        load(phases=[{"steps": 10}, {"steps": 4, "warmup_steps": 3}])
    four = {"bert": "bert_tiny", "overrides": {"num_hidden_layers": 4}}
    with pytest.raises(ConfigError, match=r"^MSLT stage 2/3: schedule.warmup_steps=3 .*mslt.warmup_fraction"):
        load(
            model=four,
            mslt={"stages": [{"num_layers": 2, "steps": 4}, {"num_layers": 4, "steps": 4, "warmup_steps": 3}]},
        )
    assert len(load(phases=[{"steps": 10}, {"steps": 4, "warmup_steps": 2}]).phases) == 2


def test_a_phase_whose_predictions_cap_dynamic_masking_is_one_line_at_load(tmp_path):
    """Phase 2's longer sequences need more predictions at the same masking rate: data's check, per phase."""
    from kbert.experiment import load_experiment

    path = str(tmp_path / "c.yaml")
    with open(path, "w") as f:
        json.dump(
            {
                "data": {"dynamic_masking": True, "masked_lm_prob": 0.3, "seq_length": 32, "max_predictions": 10},
                "phases": [{"steps": 4}, {"steps": 4, "seq_length": 128, "max_predictions": 20}],
            },
            f,
        )
    with pytest.raises(
        ConfigError,
        match=r"^phases\[1\] \(phase 2\): data.max_predictions=20 caps dynamic masking "
        r"below data.masked_lm_prob=0.3 of data.seq_length=128 \(38 tokens\)",
    ):
        load_experiment([path])


@pytest.mark.spawns
def test_same_numbers_under_jax():
    code = (
        "import json; from kbert.optimizers.schedules import OneCycle, WarmupStableDecay; "
        f"w = WarmupStableDecay(**{WSD!r}); o = OneCycle(**{ONE_CYCLE!r}); "
        f"print(json.dumps([[float(w(s)) for s, _ in {WSD_VALUES!r}], [float(o(s)) for s, _ in "
        f"{ONE_CYCLE_VALUES!r}]]))"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
    wsd, one_cycle = json.loads(out.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(wsd, [v for _, v in WSD_VALUES], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(one_cycle, [v for _, v in ONE_CYCLE_VALUES], rtol=1e-6, atol=1e-7)
