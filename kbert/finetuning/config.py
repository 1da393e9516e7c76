"""The `kbert-finetune` config: Model Garden `hyperparams` dataclasses, loaded like kbert-pretrain's.

The `optimizer` section is the one kbert-pretrain reads, and `model` and `schedule` extend its `ModelConfig` and
`ScheduleConfig` (`kbert.runtime.sections`), so a key means the same, and is checked the same, in both commands;
`task`, `data` and `train` are the fine-tuning ones. Each section checks its own values (`kbert.config.Section`);
keys, types and typos ("did you mean") are checked by `kbert.config.load_config`.

Example:

>>> cfg = load_finetune_config(["configs/finetune/glue_sst2.yaml"], "task.data_dir=glue_data,train.epochs=2")
>>> cfg.task.name, cfg.train.epochs
('sst2', 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kbert.choices import CLASSIFIER_POOLINGS, PRECISION_POLICIES
from kbert.config import Section, load_config, need
from kbert.runtime.sections import ModelConfig, OptimizerConfig, ScheduleConfig


@dataclasses.dataclass
class TaskConfig(Section):
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

    def check(self) -> None:
        need(
            bool(self.name),
            "task.name is not set: give a GLUE task (e.g. task.name=sst2,task.data_dir=...) "
            "or tsv|csv|jsonl with task.train_file and task.eval_file.",
        )


@dataclasses.dataclass
class FinetuneModelConfig(ModelConfig):
    """`bert` empty: the `bert_config.json` beside `train.init_checkpoint` (Google downloads, MSLT exports) or the
    model section of the pretraining run's `summary.json`. `classifier_dropout`: on the pooled output.
    `classifier_pooling`, for a model without a pooler (ModernBERT's): "cls" (the first token's output) or "mean"
    (over real tokens); unset: a Hugging Face ModernBERT checkpoint's `classifier_pooling`, else "cls"."""

    bert: str = ""
    classifier_dropout: float = 0.1
    classifier_pooling: str = ""

    def check(self) -> None:
        need(0 <= self.classifier_dropout < 1, f"model.classifier_dropout={self.classifier_dropout} must be in [0, 1).")
        need(
            self.classifier_pooling in ("", *CLASSIFIER_POOLINGS),
            f"model.classifier_pooling={self.classifier_pooling!r}: choose one of {', '.join(CLASSIFIER_POOLINGS)}.",
        )


@dataclasses.dataclass
class FinetuneDataConfig(Section):
    """The pretraining vocabulary and its lower-casing, unset: those of a Hugging Face or keras-hub
    `train.init_checkpoint` (lower-casing: else true; `kbert.finetuning.vocabulary`). `tokenizer`, in place of
    `vocab_file`: a Hugging Face tokenizer.json or its directory, whose own normalizer decides casing; unset with a
    Hugging Face ModernBERT `train.init_checkpoint`, the one in its directory. Pairs longer than `seq_length` lose
    pieces from the longer segment first."""

    vocab_file: str = ""
    tokenizer: str = ""
    seq_length: int = 128
    lower_case: bool | None = None

    def check(self) -> None:
        need(self.seq_length >= 3, f"data.seq_length={self.seq_length} must be at least 3 ([CLS] a [SEP] b [SEP]).")


@dataclasses.dataclass
class FinetuneTrainConfig(Section):
    """An epoch is one pass over the training file in batches of `global_batch_size` (all replicas together)."""

    epochs: int = 3
    global_batch_size: int = 32
    eval_batch_size: int = 128
    # A kbert pretraining model_dir or checkpoint, an MSLT stage export (stage_N/export), a Google TF1
    # checkpoint with its bert_config.json, a Hugging Face BERT directory or a keras-hub preset; empty: random init.
    init_checkpoint: str = ""
    mixed_precision: str = "float32"
    steps_per_execution: int = 1
    jit_compile: bool = False
    seed: int = 12345

    def check(self) -> None:
        need(
            self.mixed_precision in PRECISION_POLICIES,
            f"train.mixed_precision={self.mixed_precision!r}: choose one of {', '.join(PRECISION_POLICIES)}.",
        )
        for key in ("epochs", "global_batch_size", "eval_batch_size", "steps_per_execution"):
            need(getattr(self, key) > 0, f"train.{key}={getattr(self, key)} must be positive.")


@dataclasses.dataclass
class FinetuneScheduleConfig(ScheduleConfig):
    """`warmup_steps` 0: warm up over `warmup_fraction` of all steps (BERT's 10%); `decay_steps` unset: decay
    over the rest."""

    warmup_fraction: float = 0.1

    def check(self) -> None:
        super().check()
        need(0 <= self.warmup_fraction < 1, f"schedule.warmup_fraction={self.warmup_fraction} must be in [0, 1).")


def _default_optimizer() -> OptimizerConfig:
    # BERT's fine-tuning recipe: Adam with decoupled weight decay 0.01, no decay on LayerNorm and biases.
    return OptimizerConfig(type="adamw")


def _default_schedule() -> ScheduleConfig:
    # BERT's fine-tuning recipe: peak 2e-5, linear decay to 0; `warmup_fraction` of the steps warm up.
    return FinetuneScheduleConfig(peak_learning_rate=2e-5, power=1.0)


@dataclasses.dataclass
class FinetuneConfig(Section):
    """Everything `kbert-finetune` needs besides the model dir and the strategy."""

    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    model: FinetuneModelConfig = dataclasses.field(default_factory=FinetuneModelConfig)
    data: FinetuneDataConfig = dataclasses.field(default_factory=FinetuneDataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=_default_optimizer)
    schedule: FinetuneScheduleConfig = dataclasses.field(default_factory=_default_schedule)
    train: FinetuneTrainConfig = dataclasses.field(default_factory=FinetuneTrainConfig)


def load_finetune_config(config_files: Sequence[str] = (), params_override: str = "") -> FinetuneConfig:
    """Defaults, then each YAML file in order, then `params_override`; validated.

    Raises:
      ConfigError: an unknown key (named, with the nearest valid one), a bad value, or an unreadable file.
    """
    return load_config(FinetuneConfig, config_files, params_override)
