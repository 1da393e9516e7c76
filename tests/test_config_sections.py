"""Sections validate themselves: a shared key is checked the same in kbert-pretrain's and kbert-finetune's configs,
and leaf types come from the annotations (Optional[float], Union[bool, str])."""

import pytest

from kbert.config import load_config
from kbert.errors import ConfigError
from kbert.experiment import ExperimentConfig
from kbert.finetuning.config import FinetuneConfig

FINETUNE_BASE = "task.name=tsv,data.vocab_file=vocab.txt,"


def _error(config_class, override: str) -> str:
    base = FINETUNE_BASE if config_class is FinetuneConfig else ""
    with pytest.raises(ConfigError) as raised:
        load_config(config_class, [], base + override)
    return str(raised.value)


@pytest.mark.parametrize(
    "override, message",
    [
        ("optimizer.lamb.beta_1=1.5", "optimizer.lamb.beta_1=1.5 must be in [0, 1)."),
        ("optimizer.lamb.epsilon=0", "optimizer.lamb.epsilon=0.0 must be positive"),
        ("optimizer.exclude_from_weight_decay=['(']", "optimizer.exclude_from_weight_decay: '(' is not a regular"),
        ("optimizer.global_clipnorm=-1", "optimizer.global_clipnorm=-1.0 must be positive, or unset."),
        ("schedule.power=-1", "schedule.power=-1.0 must be >= 0."),
        ("schedule.end_learning_rate=1.0", "schedule.end_learning_rate=1.0 must be in [0, peak_learning_rate]."),
        ("schedule.peak_learning_rate=1e39", "schedule.peak_learning_rate=1e+39 is not a finite float32 number."),
    ],
)
def test_a_shared_key_is_checked_the_same_in_both_commands(override, message):
    assert message in _error(ExperimentConfig, override)
    assert message in _error(FinetuneConfig, override)


def test_fine_tuning_sections_check_their_own_keys():
    assert "schedule.warmup_fraction=1.0 must be in [0, 1)" in _error(FinetuneConfig, "schedule.warmup_fraction=1")
    assert "train.epochs=0 must be positive" in _error(FinetuneConfig, "train.epochs=0")


def test_leaf_types_follow_the_annotations():
    config = load_config(ExperimentConfig, [], "optimizer.global_clipnorm=1,train.jit_compile=step")
    assert config.optimizer.global_clipnorm == 1.0 and isinstance(config.optimizer.global_clipnorm, float)
    assert config.train.jit_compile == "step"
    assert load_config(ExperimentConfig, [], "train.jit_compile=true").train.jit_compile is True
    assert "config key 'train.total_steps' must be of type int" in _error(ExperimentConfig, "train.total_steps=1.5")


def test_model_overrides_take_the_bert_config_fields_types(tmp_path):
    # YAML 1.1 reads `1e-5` (no dot) as a string; a JSON --params_override of 1e-05 is read through YAML too.
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  overrides:\n    layer_norm_eps: 1e-5\n    rope_theta: 160000\n")
    config = load_config(ExperimentConfig, [str(path)], '{"model": {"overrides": {"local_attention": 128.0}}}')
    bert = config.model.bert_config()
    assert (bert.layer_norm_eps, bert.rope_theta, bert.local_attention) == (1e-5, 160000.0, 128)
    assert type(bert.layer_norm_eps) is float and type(bert.local_attention) is int
    wrong = _error(ExperimentConfig, "model.overrides.hidden_size=x")
    assert "'model.overrides.hidden_size' must be of type int" in wrong
