"""The pretraining experiment config: Model Garden `hyperparams` dataclasses, YAML files and `a.b=1` overrides.

Example:

>>> cfg = load_experiment(["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=20")
>>> cfg.train.total_steps
20
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Optional, Sequence

import yaml
from official.modeling.hyperparams import base_config, params_dict

from kbert.choices import OPTIMIZERS, PRECISION_POLICIES
from kbert.errors import ConfigError
from kbert.modeling.config import BertConfig
from kbert.mslt.plan import MsltConfig



# One optional override field per `bert_config.json` key, so typos in `model.overrides` are caught like any other.
BertOverrides = dataclasses.make_dataclass(
    "BertOverrides",
    [(f.name, Optional[Any], None) for f in dataclasses.fields(BertConfig)],
    bases=(base_config.Config,),
)
BertOverrides.__doc__ = "Fields of `bert_config.json` to change; `None` keeps the named config's value."


@dataclasses.dataclass
class ModelConfig(base_config.Config):
    """`bert`: a `configs/models` entry (`bert_base`) or a `bert_config.json` path; `overrides` change fields."""

    bert: str = "bert_tiny"
    overrides: BertOverrides = dataclasses.field(default_factory=BertOverrides)

    def bert_config(self) -> BertConfig:
        changes = {k: v for k, v in self.overrides.as_dict().items() if v is not None}
        return BertConfig.load(self.bert).replace(**changes)


@dataclasses.dataclass
class DataConfig(base_config.Config):
    """TFRecords in Google's pretraining schema; file patterns are comma-separated globs."""

    train_files: str = ""
    eval_files: str = ""
    seq_length: int = 128
    max_predictions: int = 20
    dynamic_masking: bool = False
    # The vocabulary the records were written with: dynamic masking takes the special-token ids and the `##`
    # pieces (whole-word masking) from it. Required with dynamic_masking.
    vocab_file: str = ""
    whole_word_masking: bool = False
    # Reject token ids >= the model's vocab_size before training (reads the first records of each file).
    check_vocab_size: bool = True
    # Checkpoint the input iterator so a restart continues the data (costs the shuffle buffer's size on disk).
    checkpoint_input: bool = True


@dataclasses.dataclass
class OptimizerConfig(base_config.Config):
    """`type`: lamb, lars or adamw. Exclusion regexes match `variable.path`."""

    type: str = "lamb"
    weight_decay: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    momentum: float = 0.9
    eeta: float = 0.001
    nesterov: bool = False
    # NVLAMB pre-normalisation: gradients divided by max(global_norm / clip_norm, 1) after the all-reduce.
    global_clipnorm: Optional[float] = None
    exclude_from_weight_decay: Sequence[str] = ("layer_norm", "LayerNorm", "bias")
    exclude_from_layer_adaptation: Sequence[str] = ("layer_norm", "LayerNorm", "bias")


@dataclasses.dataclass
class ScheduleConfig(base_config.Config):
    """Linear warmup to `peak_learning_rate`, then polynomial decay to `end_learning_rate`.

    `decay_steps` defaults to `train.total_steps`; `step_offset` shifts the schedule (phase 2, MSLT stages).
    """

    peak_learning_rate: float = 1e-4
    warmup_steps: int = 0
    decay_steps: Optional[int] = None
    power: float = 0.5
    end_learning_rate: float = 0.0
    step_offset: int = 0


@dataclasses.dataclass
class TrainConfig(base_config.Config):
    """Steps count optimizer updates; each sees `global_batch_size` sequences over all replicas."""

    global_batch_size: int = 256
    gradient_accumulation_steps: int = 1
    total_steps: int = 1000
    steps_per_loop: int = 100
    checkpoint_interval: int = 1000
    max_checkpoints: int = 5
    summary_interval: int = 100
    mixed_precision: str = "float32"
    jit_compile: bool = False
    # A kbert checkpoint (directory or prefix) or a Google TF1 BERT checkpoint; weights only, no optimizer slots.
    init_checkpoint: str = ""
    seed: int = 12345
    # tf.config.experimental.enable_op_determinism(): bit-identical reruns and resumes, somewhat slower.
    deterministic: bool = False


@dataclasses.dataclass
class EvalConfig(base_config.Config):
    """`steps=-1` evaluates the whole of `data.eval_files` once."""

    global_batch_size: int = 256
    steps: int = -1


@dataclasses.dataclass
class ExperimentConfig(base_config.Config):
    """Everything `kbert-pretrain` needs besides the model dir and the strategy."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    # Multi-stage layerwise training (kbert.mslt); None trains the whole model at once.
    mslt: Optional[MsltConfig] = None


def _field_type(config: params_dict.ParamsDict, key: str) -> str:
    """'float', 'int', 'bool', 'str' or '' for a field, from its current value or its annotation."""
    value = getattr(config, key)
    if value is not None:
        return type(value).__name__ if isinstance(value, (bool, int, float, str)) else ""
    annotation = str(getattr(type(config), "__annotations__", {}).get(key, ""))
    return next((t for t in ("float", "int", "bool", "str") if t in annotation), "")


def _coerce(value: Any, kind: str, path: str, source: str) -> Any:
    """YAML reads `1e-4` as a string and users write `1` for `1.0`: convert, or name the key and the type."""
    if value is None or kind == "" or isinstance(value, (dict, list, tuple)):
        return value
    try:
        if kind == "float" and not isinstance(value, bool):
            return float(value)
        if kind == "int" and not isinstance(value, bool) and float(value) == int(float(value)):
            return int(float(value))
        if kind == "bool" and isinstance(value, bool):
            return value
        if kind == "str":
            return str(value)
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"{source}: config key '{path}' must be of type {kind}, got {value!r}.")


def _check_keys_and_types(config: params_dict.ParamsDict, values: dict, source: str, prefix: str = "") -> dict:
    """`values` with leaf types fixed; raises ConfigError naming the first unknown key or ill-typed value."""
    known = set(config.as_dict())
    checked = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if key not in known:
            hint = difflib.get_close_matches(str(key), sorted(known), n=1)
            did_you_mean = f" Did you mean '{prefix}{hint[0]}'?" if hint else ""
            raise ConfigError(
                f"{source}: unknown config key '{path}'.{did_you_mean} "
                f"Known keys{' under ' + prefix.rstrip('.') if prefix else ''}: {', '.join(sorted(known))}.")
        child = getattr(config, key)
        if isinstance(value, dict) and isinstance(child, params_dict.ParamsDict):
            checked[key] = _check_keys_and_types(child, value, source, f"{path}.")
        else:
            checked[key] = _coerce(value, _field_type(config, key), path, source)
    return checked


def _apply(config: ExperimentConfig, values: Any, source: str) -> None:
    if values is None:
        return
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a mapping of config sections, got {type(values).__name__}.")
    values = _check_keys_and_types(config, values, source)
    try:
        config.override(values, is_strict=True)
    except (KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def parse_override(params_override: str) -> dict:
    """'a.b=1,c.d=x' (or a YAML/JSON mapping) -> nested dict, the syntax of Model Garden's `--params_override`."""
    text = params_override.strip()
    try:
        text = params_dict.nested_csv_str_to_json_str(text)
    except ValueError:
        pass  # Not the CSV form: read it as YAML/JSON below.
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--params_override={params_override!r} is not 'a.b=1,c.d=x' nor YAML: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--params_override={params_override!r} must look like 'train.total_steps=100,data.x=y'.")
    return values


def validate(config: ExperimentConfig) -> None:
    """Checks values that need no files or devices; raises ConfigError naming the key."""
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    t, s, o, d = config.train, config.schedule, config.optimizer, config.data
    need(o.type in OPTIMIZERS, f"optimizer.type={o.type!r}: choose one of {', '.join(OPTIMIZERS)}.")
    need(t.mixed_precision in PRECISION_POLICIES,
         f"train.mixed_precision={t.mixed_precision!r}: choose one of {', '.join(PRECISION_POLICIES)}.")
    for key in ("global_batch_size", "gradient_accumulation_steps", "total_steps", "steps_per_loop",
                "checkpoint_interval", "max_checkpoints", "summary_interval"):
        need(getattr(t, key) > 0, f"train.{key}={getattr(t, key)} must be positive.")
    need(t.global_batch_size % t.gradient_accumulation_steps == 0,
         f"train.global_batch_size={t.global_batch_size} must be a multiple of "
         f"train.gradient_accumulation_steps={t.gradient_accumulation_steps}.")
    for key in ("checkpoint_interval", "summary_interval"):
        need(getattr(t, key) % t.steps_per_loop == 0,
             f"train.{key}={getattr(t, key)} must be a multiple of train.steps_per_loop={t.steps_per_loop}.")
    need(s.peak_learning_rate > 0, f"schedule.peak_learning_rate={s.peak_learning_rate} must be positive.")
    need(s.warmup_steps >= 0, f"schedule.warmup_steps={s.warmup_steps} must be >= 0.")
    need(d.seq_length > 0 and d.max_predictions > 0, "data.seq_length and data.max_predictions must be positive.")
    need(config.eval.global_batch_size > 0, "eval.global_batch_size must be positive.")
    try:
        bert = config.model.bert_config()
    except (ValueError, FileNotFoundError, TypeError) as e:
        raise ConfigError(f"model: {e}") from None
    need(d.seq_length <= bert.max_position_embeddings,
         f"data.seq_length={d.seq_length} exceeds the model's max_position_embeddings="
         f"{bert.max_position_embeddings}.")


def load_experiment(config_files: Sequence[str] = (), params_override: str = "") -> ExperimentConfig:
    """Defaults, then each YAML file in order, then `params_override`; validated.

    Raises:
      ConfigError: an unknown key (named, with the file or flag), a bad value, or an unreadable file.
    """
    config = ExperimentConfig()
    for path in config_files:
        try:
            values = params_dict.read_yaml_to_params_dict(path).as_dict()
        except Exception as e:  # gfile raises NotFoundError, yaml raises YAMLError; both mean "fix this file".
            raise ConfigError(f"--config_file={path}: cannot read it as YAML: {e}") from None
        _apply(config, values, f"--config_file={path}")
    if params_override:
        _apply(config, parse_override(params_override), f"--params_override={params_override!r}")
    validate(config)
    return config
