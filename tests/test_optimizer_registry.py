"""Optimizers by registry (#60): one config section per optimizer (`optimizer.<type>`), old flat keys refused with
their new place (and translated in saved run directories), a toy optimizer registered and trained through
kbert-pretrain with no edit to the factory, kbert's AdamW (replica-correct clipping, update ratios) and `.keras` files
of the classes before the mixin still loading."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import run_here, write_config, write_train_and_eval

from kbert.config import Section, load_config, load_saved_config, need
from kbert.errors import ConfigError
from kbert.experiment import ExperimentConfig
from kbert.finetuning import run_dir
from kbert.finetuning.config import FinetuneConfig
from kbert.optimizers import LAMB, LARS, AdamW, DistributedMixin
from kbert.runtime.optimizer_factory import make_optimizer
from kbert.runtime.optimizer_registry import register_optimizer, registered_optimizers, unregister_optimizer

# `get_config()` of LAMB(1e-3, global_clipnorm=1.0) and LARS(0.1, weight_decay=1e-4) at 4ac07ef, before the
# registry and the mixin: the keys `.keras` files hold.
GOLDEN_LAMB = {
    "name": "lamb",
    "learning_rate": 0.0010000000474974513,
    "weight_decay": 0.01,
    "clipnorm": None,
    "global_clipnorm": 1.0,
    "clipvalue": None,
    "use_ema": False,
    "ema_momentum": 0.99,
    "ema_overwrite_frequency": None,
    "loss_scale_factor": None,
    "gradient_accumulation_steps": None,
    "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
    "exclude_from_layer_adaptation": ["LayerNorm", "layer_norm", "bias"],
    "beta_1": 0.9,
    "beta_2": 0.999,
    "epsilon": 1e-06,
    "weight_decay_mode": "lamb",
    "bias_correction": True,
    "always_adapt": False,
    "min_trust_ratio": 0.0,
    "max_trust_ratio": None,
}
GOLDEN_LARS = {
    "name": "lars",
    "learning_rate": 0.10000000149011612,
    "weight_decay": 0.0001,
    "clipnorm": None,
    "global_clipnorm": None,
    "clipvalue": None,
    "use_ema": False,
    "ema_momentum": 0.99,
    "ema_overwrite_frequency": None,
    "loss_scale_factor": None,
    "gradient_accumulation_steps": None,
    "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
    "exclude_from_layer_adaptation": ["LayerNorm", "layer_norm", "bias"],
    "momentum": 0.9,
    "nesterov": False,
    "eeta": 0.001,
    "epsilon": 0.0,
    "classic_momentum": True,
    "larc_clip": False,
}
# finetune_config.json as 4ac07ef wrote it (configs/finetune/tiny_cpu.yaml with optimizer.beta_2=0.98): flat keys.
OLD_FINETUNE_CONFIG = {
    "data": {"lower_case": True, "seq_length": 64, "vocab_file": "vocab.txt"},
    "model": {
        "bert": "bert_tiny",
        "classifier_dropout": 0.1,
        "overrides": {
            "attention_probs_dropout_prob": None,
            "hidden_act": None,
            "hidden_dropout_prob": None,
            "hidden_size": None,
            "initializer_range": None,
            "intermediate_size": None,
            "layer_norm_eps": None,
            "max_position_embeddings": None,
            "mlm_hidden_act": None,
            "mlm_layer_norm_eps": None,
            "num_attention_heads": None,
            "num_hidden_layers": None,
            "type_vocab_size": None,
            "vocab_size": None,
        },
    },
    "optimizer": {
        "beta_1": 0.9,
        "beta_2": 0.98,
        "eeta": 0.001,
        "epsilon": 1e-06,
        "exclude_from_layer_adaptation": ["layer_norm", "LayerNorm", "bias"],
        "exclude_from_weight_decay": ["layer_norm", "LayerNorm", "bias"],
        "global_clipnorm": None,
        "momentum": 0.9,
        "nesterov": False,
        "type": "adamw",
        "weight_decay": 0.01,
    },
    "schedule": {
        "decay_share": 0.1,
        "decay_steps": None,
        "end_learning_rate": 0.0,
        "peak_learning_rate": 0.0001,
        "power": 1.0,
        "shape": "polynomial",
        "step_offset": 0,
        "warmup_fraction": 0.1,
        "warmup_steps": 0,
    },
    "task": {
        "data_dir": "",
        "eval_file": "",
        "label_column": "label",
        "name": "tsv",
        "text_a_column": "sentence",
        "text_b_column": "",
        "train_file": "",
        "type": "classification",
    },
    "train": {
        "epochs": 3,
        "eval_batch_size": 64,
        "global_batch_size": 32,
        "init_checkpoint": "",
        "jit_compile": False,
        "mixed_precision": "float32",
        "seed": 12345,
        "steps_per_execution": 1,
    },
}
FLAT_KEYS = {
    "beta_1": "optimizer.lamb.beta_1 (and optimizer.adamw.beta_1)",
    "beta_2": "optimizer.lamb.beta_2 (and optimizer.adamw.beta_2)",
    "epsilon": "optimizer.lamb.epsilon (and optimizer.adamw.epsilon)",
    "momentum": "optimizer.lars.momentum",
    "eeta": "optimizer.lars.eeta",
    "nesterov": "optimizer.lars.nesterov",
    "exclude_from_layer_adaptation": "optimizer.lamb.exclude_from_layer_adaptation "
    "(and optimizer.lars.exclude_from_layer_adaptation)",
}


# -- the config: one section per optimizer ------------------------------------------------------------------------


def test_each_optimizer_reads_its_own_section_with_the_defaults_of_the_flat_layout():
    config = load_config(ExperimentConfig, [], "optimizer.type=lars,optimizer.lars.momentum=0.5")
    assert list(registered_optimizers())[:3] == ["lamb", "lars", "adamw"]
    assert config.optimizer.get() is config.optimizer.lars and config.optimizer.lars.momentum == 0.5
    assert config.optimizer.as_dict() == {
        "type": "lars",
        "weight_decay": 0.01,
        "global_clipnorm": None,
        "exclude_from_weight_decay": ("layer_norm", "LayerNorm", "bias"),
        "lars": {
            "momentum": 0.5,
            "eeta": 0.001,
            "nesterov": False,
            "exclude_from_layer_adaptation": ("layer_norm", "LayerNorm", "bias"),
        },
    }
    lamb, adamw = ExperimentConfig().optimizer.lamb, FinetuneConfig().optimizer.adamw
    assert (lamb.beta_1, lamb.beta_2, lamb.epsilon) == (adamw.beta_1, adamw.beta_2, adamw.epsilon) == (0.9, 0.999, 1e-6)
    assert FinetuneConfig().optimizer.type == "adamw"


def test_an_unknown_type_is_one_line_listing_the_registered_names():
    with pytest.raises(ConfigError, match=r"^optimizer.type='sgd': choose one of lamb, lars, adamw\.$"):
        load_config(ExperimentConfig, [], "optimizer.type=sgd")


@pytest.mark.parametrize("key", sorted(FLAT_KEYS))
def test_a_flat_key_names_its_new_place(key, tmp_path):
    value = "['bias']" if key == "exclude_from_layer_adaptation" else "0.5"
    override = f"optimizer.{key}={value}"
    with pytest.raises(ConfigError) as raised:
        load_config(ExperimentConfig, [], override)
    message = str(raised.value)
    assert f"optimizer.{key} moved to {FLAT_KEYS[key]}; set it there" in message and "\n" not in message
    yaml_file = tmp_path / "old.yaml"
    yaml_file.write_text(f"optimizer:\n  type: adamw\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=f"--config_file={yaml_file}: optimizer.{key} moved to "):
        load_config(FinetuneConfig, [str(yaml_file)])


def test_shipped_configs_with_an_optimizer_section_load():
    import glob
    import pathlib

    for path in glob.glob("configs/*/*.yaml"):
        if "\noptimizer:" not in pathlib.Path(path).read_text():
            continue
        if "/finetune/" in path:
            load_config(FinetuneConfig, [path], "task.data_dir=x,data.vocab_file=v")
        else:
            load_config(ExperimentConfig, [path], "data.train_files=x")


# -- saved run directories ----------------------------------------------------------------------------------------


def test_a_fine_tuning_run_saved_with_flat_keys_loads_and_resumes(tmp_path):
    saved = tmp_path / run_dir.CONFIG_FILE
    saved.write_text(json.dumps(OLD_FINETUNE_CONFIG))
    config = load_saved_config(FinetuneConfig, str(saved))  # kbert-predict and kbert-export read it so
    assert (config.optimizer.type, config.optimizer.adamw.beta_2) == ("adamw", 0.98)
    assert config.optimizer.as_dict()["adamw"] == {
        "beta_1": 0.9,
        "beta_2": 0.98,
        "epsilon": 1e-6,
        "update_ratios": False,
    }
    # The same command, its YAML migrated (optimizer.adamw.beta_2=0.98), resumes the run; another value does not.
    # (The run's other sections are taken as saved: only the optimizer's layout is under test.)
    for beta_2 in (0.98, 0.97):
        migrated = load_config(FinetuneConfig, ["configs/finetune/tiny_cpu.yaml"], f"optimizer.adamw.beta_2={beta_2}")
        rerun = {**OLD_FINETUNE_CONFIG, "optimizer": migrated.optimizer.as_dict()}
        if beta_2 == 0.98:
            run_dir.check_resumable(str(tmp_path), rerun, write=False)
        else:
            with pytest.raises(ConfigError, match=r"\(optimizer.adamw.beta_2: 0.98 -> 0.97\)"):
                run_dir.check_resumable(str(tmp_path), rerun, write=False)


# -- .keras files and get_config ----------------------------------------------------------------------------------


def test_get_config_keeps_the_keys_and_values_of_the_classes_before_the_mixin():
    assert LAMB(1e-3, global_clipnorm=1.0).get_config() == GOLDEN_LAMB
    assert LARS(0.1, weight_decay=1e-4).get_config() == GOLDEN_LARS


def _tiny_model() -> keras.Model:
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(2, name="head")(keras.layers.LayerNormalization(name="layer_norm")(inputs))
    return keras.Model(inputs, outputs)


def test_a_keras_file_saved_with_the_old_lamb_config_loads(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
    model = _tiny_model()
    model.compile(LAMB(1e-3, global_clipnorm=1.0), "mse")
    model.fit(x, y, batch_size=4, verbose=0)
    saved, old = tmp_path / "new.keras", tmp_path / "old.keras"
    model.save(saved)
    # The same file with the optimizer's config as the class before the mixin wrote it.
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(old, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                assert config["compile_config"]["optimizer"]["registered_name"] == "kbert>LAMB"
                config["compile_config"]["optimizer"]["config"] = GOLDEN_LAMB
                data = json.dumps(config).encode()
            target.writestr(item, data)
    loaded = keras.saving.load_model(old)
    assert type(loaded.optimizer) is LAMB and loaded.optimizer.get_config() == GOLDEN_LAMB
    for ours, theirs in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=ours.path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


# -- kbert's AdamW ------------------------------------------------------------------------------------------------


def _train(optimizer, steps: int = 3) -> tuple[list[np.ndarray], object]:
    variables = [keras.Variable([[1.0, -2.0], [0.5, 3.0]], name="kernel"), keras.Variable([0.1, 0.2], name="bias")]
    step = tf.function(lambda grads: optimizer.apply_gradients(zip(grads, variables)))
    for scale in (1.0, -0.5, 2.0)[:steps]:
        step([tf.fill(v.shape, scale) * tf.convert_to_tensor(v) + 0.3 for v in variables])
    return [v.numpy() for v in variables], optimizer


def test_kbert_adamw_takes_keras_adamw_steps_bit_for_bit_and_records_update_ratios():
    keras_weights, _ = _train(keras.optimizers.AdamW(1e-2, weight_decay=0.1))
    plain, _ = _train(AdamW(1e-2, weight_decay=0.1))
    recorded, optimizer = _train(AdamW(1e-2, weight_decay=0.1, update_ratios=True))
    for theirs, ours, with_ratios in zip(keras_weights, plain, recorded):
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(with_ratios, theirs)
    ratios = {path: float(ratio) for path, ratio in optimizer.trust_ratios.items()}
    assert set(ratios) == {"kernel", "bias"} and all(0 < r < 1 for r in ratios.values()), ratios
    assert AdamW(1e-2).trust_ratios == {} and AdamW(1e-2, update_ratios=True).get_config()["update_ratios"]


def test_adamw_clips_by_global_norm_and_the_factory_builds_it():
    clipped, _ = _train(AdamW(1e-2, global_clipnorm=1e-3), steps=1)
    free, _ = _train(AdamW(1e-2), steps=1)
    assert not np.array_equal(clipped[0], free[0])  # Adam's first step is ±lr: the clip shows through epsilon only
    config = load_config(
        FinetuneConfig,
        ["configs/finetune/tiny_cpu.yaml"],
        "optimizer.global_clipnorm=1.0,optimizer.adamw.update_ratios=true",
    )
    built = make_optimizer(config.optimizer, 1e-3)
    assert type(built) is AdamW and built.global_clipnorm == 1.0 and built.records_ratios


# -- a toy optimizer, registered and trained by kbert-pretrain ----------------------------------------------------


@dataclasses.dataclass
class ScaledSgdConfig(Section):
    """`optimizer.scaled_sgd`: plain SGD at `learning_rate_scale` times the schedule's rate."""

    learning_rate_scale: float = 1.0

    def check(self) -> None:
        need(self.learning_rate_scale > 0, f"optimizer.scaled_sgd.learning_rate_scale={self.learning_rate_scale} > 0")


class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, schedule, scale: float):
        self.schedule, self.scale = schedule, scale

    def __call__(self, step):
        return self.schedule(step) * self.scale


class ToySGD(DistributedMixin, keras.optimizers.SGD):
    """Keras SGD with kbert's mixin: global_clipnorm after the all-reduce."""


BUILT = []  # (optimizer, its schedule) of every build


def _build_scaled_sgd(optimizer, own: ScaledSgdConfig, learning_rate, variables):
    schedule = ScaledSchedule(learning_rate, own.learning_rate_scale)
    BUILT.append((ToySGD(schedule, global_clipnorm=optimizer.global_clipnorm), schedule))
    return BUILT[-1][0]


@pytest.fixture
def scaled_sgd():
    register_optimizer("scaled_sgd", ScaledSgdConfig, _build_scaled_sgd)
    yield
    unregister_optimizer("scaled_sgd")
    BUILT.clear()


@pytest.mark.slow
def test_a_registered_optimizer_has_its_section_and_trains_through_kbert_pretrain(tmp_path, scaled_sgd):
    with pytest.raises(ConfigError, match="optimizer.scaled_sgd.learning_rate_scale=0.0 > 0"):
        load_config(ExperimentConfig, [], "optimizer.type=scaled_sgd,optimizer.scaled_sgd.learning_rate_scale=0")
    with pytest.raises(ConfigError, match="optimizer.learning_rate_scale moved to optimizer.scaled_sgd"):
        load_config(ExperimentConfig, [], "optimizer.learning_rate_scale=2")
    train, _ = write_train_and_eval(str(tmp_path / "data"))
    optimizer = {"type": "scaled_sgd", "global_clipnorm": 1.0, "scaled_sgd": {"learning_rate_scale": 0.5}}
    train_settings = {"total_steps": 2, "steps_per_loop": 2, "checkpoint_interval": 2}
    config = write_config(str(tmp_path / "c.yaml"), train, optimizer=optimizer, train=train_settings)
    run_here(config, tmp_path / "run")
    ((built, schedule),) = BUILT
    assert int(built.iterations) == 2 and built.global_clipnorm == 1.0 and schedule.scale == 0.5
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["global_step"] == 2 and np.isfinite(summary["train"]["loss"])
    assert summary["config"]["optimizer"]["scaled_sgd"] == {"learning_rate_scale": 0.5}
