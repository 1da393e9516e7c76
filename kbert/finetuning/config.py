"""The `kbert-finetune` config: Model Garden `hyperparams` dataclasses, loaded like kbert-pretrain's.

The `optimizer` section is kbert-pretrain's own class, and `model` and `schedule` extend its `ModelConfig` and
`ScheduleConfig`, so a key means the same in both commands; `task`, `data` and `train` are the fine-tuning ones. Keys, types and
typos ("did you mean") are checked by `kbert.training.config.load_config`.

Example:

>>> cfg = load_finetune_config(["configs/finetune/glue_sst2.yaml"], "task.data_dir=glue_data,train.epochs=2")
>>> cfg.task.name, cfg.train.epochs
('sst2', 2)
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from official.modeling.hyperparams import base_config

from kbert.choices import OPTIMIZERS, PRECISION_POLICIES
from kbert.errors import ConfigError
from kbert.training.config import ModelConfig, OptimizerConfig, ScheduleConfig, load_config


@dataclasses.dataclass
class TaskConfig(base_config.Config):
    """`name`: a GLUE task (cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli) read from `data_dir`, or a file
    format (tsv, csv, jsonl) read from `train_file`/`eval_file` with the `*_column` keys and `type`."""

    name: str = ""
    data_dir: str = ""
    train_file: str = ""
    eval_file: str = ""
    text_a_column: str = ""
    text_b_column: str = ""
    label_column: str = ""
    type: str = "classification"


@dataclasses.dataclass
class FinetuneModelConfig(ModelConfig):
    """`bert` empty: the `bert_config.json` beside `train.init_checkpoint` (Google downloads, MSLT exports) or the
    model section of the pretraining run's `summary.json`. `classifier_dropout`: on the pooled output."""

    bert: str = ""
    classifier_dropout: float = 0.1


@dataclasses.dataclass
class FinetuneDataConfig(base_config.Config):
    """The pretraining vocabulary; pairs longer than `seq_length` lose pieces from the longer segment first."""

    vocab_file: str = ""
    seq_length: int = 128
    lower_case: bool = True


@dataclasses.dataclass
class FinetuneTrainConfig(base_config.Config):
    """An epoch is one pass over the training file in batches of `global_batch_size` (all replicas together)."""

    epochs: int = 3
    global_batch_size: int = 32
    eval_batch_size: int = 128
    # A kbert pretraining model_dir or checkpoint, an MSLT stage export (stage_N/export), or a Google TF1
    # checkpoint with its bert_config.json; empty: random init.
    init_checkpoint: str = ""
    mixed_precision: str = "float32"
    steps_per_execution: int = 1
    jit_compile: bool = False
    seed: int = 12345


@dataclasses.dataclass
class FinetuneScheduleConfig(ScheduleConfig):
    """`warmup_steps` 0: warm up over `warmup_fraction` of all steps (BERT's 10%); `decay_steps` unset: decay
    over the rest."""

    warmup_fraction: float = 0.1


def _default_optimizer() -> OptimizerConfig:
    # BERT's fine-tuning recipe: Adam with decoupled weight decay 0.01, no decay on LayerNorm and biases.
    return OptimizerConfig(type="adamw")


def _default_schedule() -> ScheduleConfig:
    # BERT's fine-tuning recipe: peak 2e-5, linear decay to 0; `warmup_fraction` of the steps warm up.
    return FinetuneScheduleConfig(peak_learning_rate=2e-5, power=1.0)


@dataclasses.dataclass
class FinetuneConfig(base_config.Config):
    """Everything `kbert-finetune` needs besides the model dir and the strategy."""

    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    model: FinetuneModelConfig = dataclasses.field(default_factory=FinetuneModelConfig)
    data: FinetuneDataConfig = dataclasses.field(default_factory=FinetuneDataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=_default_optimizer)
    schedule: FinetuneScheduleConfig = dataclasses.field(default_factory=_default_schedule)
    train: FinetuneTrainConfig = dataclasses.field(default_factory=FinetuneTrainConfig)


def validate(config: FinetuneConfig) -> None:
    """Checks values that need no files; raises ConfigError naming the key."""
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    t, s, d = config.train, config.schedule, config.data
    need(bool(config.task.name), "task.name is not set: give a GLUE task (e.g. task.name=sst2,task.data_dir=...) "
                                 "or tsv|csv|jsonl with task.train_file and task.eval_file.")
    need(bool(d.vocab_file), "data.vocab_file is not set: give the vocabulary the model was pretrained with.")
    need(config.optimizer.type in OPTIMIZERS,
         f"optimizer.type={config.optimizer.type!r}: choose one of {', '.join(OPTIMIZERS)}.")
    need(t.mixed_precision in PRECISION_POLICIES,
         f"train.mixed_precision={t.mixed_precision!r}: choose one of {', '.join(PRECISION_POLICIES)}.")
    for key in ("epochs", "global_batch_size", "eval_batch_size", "steps_per_execution"):
        need(getattr(t, key) > 0, f"train.{key}={getattr(t, key)} must be positive.")
    need(d.seq_length >= 3, f"data.seq_length={d.seq_length} must be at least 3 ([CLS] a [SEP] b [SEP]).")
    need(s.peak_learning_rate > 0, f"schedule.peak_learning_rate={s.peak_learning_rate} must be positive.")
    need(s.warmup_steps >= 0 and 0 <= s.warmup_fraction < 1,
         "schedule.warmup_steps must be >= 0 and schedule.warmup_fraction in [0, 1).")
    need(0 <= config.model.classifier_dropout < 1,
         f"model.classifier_dropout={config.model.classifier_dropout} must be in [0, 1).")


def load_finetune_config(config_files: Sequence[str] = (), params_override: str = "") -> FinetuneConfig:
    """Defaults, then each YAML file in order, then `params_override`; validated.

    Raises:
      ConfigError: an unknown key (named, with the nearest valid one), a bad value, or an unreadable file.
    """
    return load_config(FinetuneConfig, config_files, params_override, validate)
