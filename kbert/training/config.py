"""The pretraining config sections (Model Garden `hyperparams` dataclasses), and loading any such config from YAML
files and `a.b=1` overrides with every key and type checked.

Example:

>>> cfg = load_config(PretrainingConfig, ["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=20")
>>> cfg.train.total_steps
20
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from typing import Any, Callable, Optional, Sequence, Union

import tensorflow as tf
import yaml
from official.modeling.hyperparams import base_config

from kbert.choices import JIT_COMPILE, OPTIMIZERS, PRECISION_POLICIES, is_jit_compile_choice
from kbert.errors import ConfigError
from kbert.modeling.config import BertConfig


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

    `decay_steps` defaults to the steps left after the warmup, `train.total_steps - step_offset - warmup_steps`.
    `step_offset` restarts the schedule, warmup included, at that optimizer step: a second pretraining phase that
    resumes the first one's step count sets it to the first phase's steps. (MSLT stages get their own schedules
    from the `mslt` section.)
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
    # Write periodic checkpoints on a background thread (the final and a preemption's save are synchronous).
    async_checkpoint: bool = False
    summary_interval: int = 100
    mixed_precision: str = "float32"
    # false, true (XLA-compile the forward and backward pass) or step (the whole replica step, update included).
    jit_compile: Union[bool, str] = False
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
class PretrainingConfig(base_config.Config):
    """The sections the pretraining loop reads (`kbert.experiment.ExperimentConfig` adds `mslt`)."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)


def _section_class(annotation: Any) -> Optional[type]:
    """The Config class a field holds (through `Optional[...]`), or None for a leaf."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, base_config.Config):
            return candidate
    return None


def _list_item_class(annotation: Any) -> Optional[type]:
    """For `List[SomeConfig]` (possibly Optional): SomeConfig; else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) in (list, typing.List):
            return _section_class(typing.get_args(candidate)[0])
    return None


def _leaf_kind(annotation: Any) -> str:
    """'float', 'int', 'bool', 'str' or '' (anything goes) for a leaf field's annotation; a union of several kinds
    (`Union[bool, str]`) is '', its values being checked by the section's `validate`."""
    text = str(annotation)
    kinds = [kind for kind in ("float", "int", "bool", "str") if kind in text]
    return kinds[0] if len(kinds) == 1 else ""


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
    except (TypeError, ValueError, OverflowError):
        pass
    raise ConfigError(f"{source}: config key '{path}' must be of type {kind}, got {value!r}.")


def _unknown_key(key: Any, known: list[str], prefix: str, source: str) -> ConfigError:
    hint = difflib.get_close_matches(str(key), known, n=1)
    did_you_mean = f" Did you mean '{prefix}{hint[0]}'?" if hint else ""
    where = f" under {prefix.rstrip('.')}" if prefix else ""
    return ConfigError(f"{source}: unknown config key '{prefix}{key}'.{did_you_mean} "
                       f"Known keys{where}: {', '.join(known)}.")


def check_values(config_class: type, values: dict, source: str, prefix: str = "") -> dict:
    """`values` with leaf types fixed, checked against `config_class`'s fields all the way down: optional
    sections (`mslt`, None by default) and lists of sections (`mslt.stages`) included.

    Raises:
      ConfigError: naming the first unknown key (with a "did you mean") or ill-typed value, and `source`.
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: '{prefix.rstrip('.') or 'the config'}' must be a mapping of keys, "
                          f"got {values!r}.")
    hints = typing.get_type_hints(config_class)
    known = sorted(f.name for f in dataclasses.fields(config_class))
    checked = {}
    for key, value in values.items():
        if key not in known:
            raise _unknown_key(key, known, prefix, source)
        path = f"{prefix}{key}"
        item, section = _list_item_class(hints[key]), _section_class(hints[key])
        if item is not None:
            if isinstance(value, (list, tuple)):
                value = [check_values(item, v, source, f"{path}[{i}].") for i, v in enumerate(value)]
            checked[key] = value
        elif section is not None and value is not None:
            checked[key] = check_values(section, value, source, f"{path}.")
        else:
            checked[key] = _coerce(value, _leaf_kind(hints[key]), path, source)
    return checked


def _apply(config: base_config.Config, values: Any, source: str) -> None:
    if values is None:
        return
    values = check_values(type(config), values, source)
    try:
        config.override(values, is_strict=True)
    except (KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def read_yaml(path: str) -> Any:
    """The YAML file's plain data (safe loader: a `!!python/...` tag is an error, never an object)."""
    try:
        with tf.io.gfile.GFile(path) as f:
            return yaml.safe_load(f)
    except (tf.errors.OpError, OSError, yaml.YAMLError) as e:
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"--config_file={path}: cannot read it as plain YAML ({first_line}); fix the file or "
                          "the path (tags such as !!python/... are not allowed).") from None


# `key.path=` at the start or after a comma: where one override of 'a.b=1,c.d=x,y' ends and the next begins.
_ASSIGNMENT = re.compile(r"(?:^|,)\s*([A-Za-z_][\w.]*)\s*=")
# The largest float32: a rate or a norm beyond it is inf on the device.
FLOAT32_MAX = 3.4028234663852886e38
# Step counts travel as int32 into the training graph.
MAX_STEPS = 2**31 - 1


def _assignments(text: str, params_override: str) -> dict:
    """'a.b=1,c.d=x,y' -> {'a': {'b': 1}, 'c': {'d': 'x,y'}}: a comma starts a new override only when a key and
    '=' follow it, so comma lists (`data.train_files=a,b`) and YAML flow values (`[1, 2]`) stay whole."""
    values: dict = {}
    matches = list(_ASSIGNMENT.finditer(text))
    for match, following in zip(matches, matches[1:] + [None]):
        raw = text[match.end():following.start() if following else len(text)].strip()
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw  # a plain string such as a glob with YAML-special characters
        *sections, leaf = match.group(1).split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--params_override={params_override!r}: '{match.group(1)}' is set twice.")
        node[leaf] = value
    return values


def parse_override(params_override: str) -> dict:
    """'a.b=1,c.d=x' (or a YAML/JSON mapping) -> nested dict, the syntax of Model Garden's `--params_override`."""
    text = params_override.strip()
    if _ASSIGNMENT.match(text):
        return _assignments(text, params_override)
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--params_override={params_override!r} is not 'a.b=1,c.d=x' nor YAML: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--params_override={params_override!r} must look like 'train.total_steps=100,data.x=y'.")
    return values


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_numbers(config: PretrainingConfig) -> None:
    """Every number finite and in its range: a rate of 1e39 is inf in float32, beta_1=1.5 never converges."""
    for section in ("optimizer", "schedule"):
        for key, value in getattr(config, section).as_dict().items():
            if isinstance(value, float):
                _need(math.isfinite(value) and abs(value) <= FLOAT32_MAX,
                      f"{section}.{key}={value} is not a finite float32 number.")
    t, s, o = config.train, config.schedule, config.optimizer
    for key in ("beta_1", "beta_2", "momentum"):
        _need(0 <= getattr(o, key) < 1, f"optimizer.{key}={getattr(o, key)} must be in [0, 1).")
    _need(o.epsilon > 0, f"optimizer.epsilon={o.epsilon} must be positive (it keeps a division finite).")
    _need(o.eeta > 0, f"optimizer.eeta={o.eeta} must be positive.")
    _need(o.weight_decay >= 0, f"optimizer.weight_decay={o.weight_decay} must be >= 0.")
    _need(o.global_clipnorm is None or o.global_clipnorm > 0,
          f"optimizer.global_clipnorm={o.global_clipnorm} must be positive, or unset.")
    _need(s.peak_learning_rate > 0, f"schedule.peak_learning_rate={s.peak_learning_rate} must be positive.")
    _need(0 <= s.end_learning_rate <= s.peak_learning_rate,
          f"schedule.end_learning_rate={s.end_learning_rate} must be in [0, peak_learning_rate].")
    _need(s.power >= 0, f"schedule.power={s.power} must be >= 0.")
    _need(s.decay_steps is None or s.decay_steps > 0, f"schedule.decay_steps={s.decay_steps} must be positive.")
    for key in ("total_steps", "steps_per_loop", "checkpoint_interval", "summary_interval"):
        _need(getattr(t, key) <= MAX_STEPS, f"train.{key}={getattr(t, key)} is more than {MAX_STEPS} steps.")
    _need(0 <= s.step_offset < t.total_steps,
          f"schedule.step_offset={s.step_offset} must be in [0, train.total_steps={t.total_steps}).")
    _need(0 <= s.warmup_steps <= t.total_steps - s.step_offset,
          f"schedule.warmup_steps={s.warmup_steps} must be >= 0 and no longer than the training it warms up "
          f"(train.total_steps - schedule.step_offset = {t.total_steps - s.step_offset}).")


def _check_patterns(config: PretrainingConfig) -> None:
    for key in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
        for pattern in getattr(config.optimizer, key):
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"optimizer.{key}: {pattern!r} is not a regular expression ({e}).") from None


def check_batch_sizes(config: PretrainingConfig, replicas: int) -> None:
    """Train and eval batches split evenly over `replicas` (checked before anything is built)."""
    t = config.train
    _need(t.global_batch_size % (t.gradient_accumulation_steps * replicas) == 0,
          f"train.global_batch_size={t.global_batch_size} must be a multiple of train.gradient_accumulation_steps"
          f" ({t.gradient_accumulation_steps}) x replicas ({replicas}).")
    _need(config.eval.global_batch_size % replicas == 0,
          f"eval.global_batch_size={config.eval.global_batch_size} must be a multiple of the replicas ({replicas}).")


def validate(config: PretrainingConfig) -> None:
    """Checks values that need no files or devices; raises ConfigError naming the key."""
    t, o, d = config.train, config.optimizer, config.data
    _need(o.type in OPTIMIZERS, f"optimizer.type={o.type!r}: choose one of {', '.join(OPTIMIZERS)}.")
    _need(t.mixed_precision in PRECISION_POLICIES,
          f"train.mixed_precision={t.mixed_precision!r}: choose one of {', '.join(PRECISION_POLICIES)}.")
    _need(is_jit_compile_choice(t.jit_compile),
          f"train.jit_compile={t.jit_compile!r}: choose " + ", ".join(
              f"{str(k).lower()} ({what})" for k, what in JIT_COMPILE.items()) + ".")
    for key in ("global_batch_size", "gradient_accumulation_steps", "total_steps", "steps_per_loop",
                "checkpoint_interval", "max_checkpoints", "summary_interval"):
        _need(getattr(t, key) > 0, f"train.{key}={getattr(t, key)} must be positive.")
    check_batch_sizes(config, replicas=1)
    for key in ("checkpoint_interval", "summary_interval"):
        _need(getattr(t, key) % t.steps_per_loop == 0,
              f"train.{key}={getattr(t, key)} must be a multiple of train.steps_per_loop={t.steps_per_loop}.")
    _check_numbers(config)
    _check_patterns(config)
    _need(d.seq_length > 0 and d.max_predictions > 0, "data.seq_length and data.max_predictions must be positive.")
    _need(config.eval.global_batch_size > 0, "eval.global_batch_size must be positive.")
    _need(config.eval.steps == -1 or config.eval.steps > 0, f"eval.steps={config.eval.steps} must be -1 or positive.")
    try:
        bert = config.model.bert_config()
    except (ValueError, FileNotFoundError, TypeError) as e:
        raise ConfigError(f"model: {e}") from None
    _need(d.seq_length <= bert.max_position_embeddings,
          f"data.seq_length={d.seq_length} exceeds the model's max_position_embeddings="
          f"{bert.max_position_embeddings}.")


def load_config(config_class: type, config_files: Sequence[str] = (), params_override: str = "",
                validate: Optional[Callable[[Any], None]] = None) -> Any:
    """`config_class()` defaults, then each YAML file in order, then `params_override`; then `validate`.

    Raises:
      ConfigError: an unknown key (named, with the file or flag), a bad value, or an unreadable file.
    """
    config = config_class()
    for path in config_files:
        _apply(config, read_yaml(path), f"--config_file={path}")
    if params_override:
        _apply(config, parse_override(params_override), f"--params_override={params_override!r}")
    if validate is not None:
        validate(config)
    return config
