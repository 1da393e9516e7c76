"""The pretraining config: its own sections (`data`, `train`, `eval`) beside the shared ones
(`kbert.runtime.sections`), each checking its own values; the root relates them (steps, batch sizes, lengths).

Example:

>>> cfg = load_config(PretrainingConfig, ["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=40")
>>> cfg.train.total_steps
40
"""

from __future__ import annotations

import dataclasses
import math

from kbert.choices import JIT_COMPILE, PRECISION_POLICIES, is_jit_compile_choice
from kbert.config import MAX_STEPS, Section, load_config, need
from kbert.data.masking import BERT_MASKED_LM_PROB, predictions_needed
from kbert.errors import ConfigError
from kbert.modeling import BertConfig
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.runtime.checkpoint_model import checkpoint_bert_config, checkpoint_vocab_file
from kbert.runtime.sections import ModelConfig, OptimizerConfig, ScheduleConfig
from kbert.training.batch_ramp import RATE_SCALINGS, BatchRamp
from kbert.training.eval_schedule import MLPERF_TARGET, mlperf_interval

EVAL_PROTOCOLS = ("", "mlperf")
# The model of a run that names none and starts from no imported checkpoint.
DEFAULT_BERT = "bert_tiny"

__all__ = [
    "DataConfig",
    "EvalConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PhaseConfig",
    "PretrainingConfig",
    "PretrainingModelConfig",
    "ScheduleConfig",
    "TrainConfig",
    "check_batch_sizes",
    "load_config",
]


@dataclasses.dataclass
class PretrainingModelConfig(ModelConfig):
    """`bert` empty: the model of `train.init_checkpoint` when that is a Hugging Face or keras-hub BERT, else
    bert_tiny (`PretrainingConfig.check` writes which); set, it and `overrides` must agree with such a checkpoint
    (`kbert.runtime.checkpoint_model`)."""

    bert: str = ""

    def bert_config(self) -> BertConfig:
        """The named model with the overrides applied; bert_tiny's while `bert` is empty."""
        return super().bert_config() if self.bert else self.replace(bert=DEFAULT_BERT).bert_config()


@dataclasses.dataclass
class DataConfig(Section):
    """TFRecords in Google's pretraining schema; file patterns are comma-separated globs.

    With `dynamic_masking`, `masked_lm_prob` of each sequence's real tokens (of its words, with whole-word
    masking) is masked anew on every pass, but never more than `max_predictions` tokens: a sequence of
    `seq_length` has up to `seq_length - 2` maskable tokens ([CLS] and [SEP] never are), so `max_predictions` must
    be at least `ceil(masked_lm_prob * (seq_length - 2))` (30% of 128: 38). Unmasked records (`--no_masking`)
    carry no predictions, so `max_predictions` is the pipeline's alone there.

    Example:

    >>> DataConfig(dynamic_masking=True, masked_lm_prob=0.3, max_predictions=38).validate("data.")
    """

    train_files: str = ""
    eval_files: str = ""
    seq_length: int = 128
    max_predictions: int = 20
    dynamic_masking: bool = False
    # The vocabulary the records were written with: dynamic masking takes the special-token ids and the `##`
    # pieces (whole-word masking) from it. Required with dynamic_masking (or `tokenizer`); a Hugging Face or
    # keras-hub train.init_checkpoint sets it to its own (another file of other tokens is refused).
    vocab_file: str = ""
    # In place of vocab_file, the Hugging Face tokenizer.json (or its directory) the records were written with
    # (kbert-create-pretraining-data --tokenizer): its special tokens are never masked, and its pieces' word
    # boundaries (Ġ, ▁ or ##: kbert.data.word_boundaries) cut words for whole-word masking.
    tokenizer: str = ""
    whole_word_masking: bool = False
    # Share of the tokens dynamic masking masks (BERT 0.15; MosaicBERT, ModernBERT 0.3; Wettig et al. 2022 0.4).
    masked_lm_prob: float = BERT_MASKED_LM_PROB
    # Check every record's ids against the model's tables as it is read (input and masked-LM ids < vocab_size,
    # segment ids < type_vocab_size, packed positions < max_position_embeddings): the first bad record stops the
    # run, naming its file and index, before a checkpoint is written after it.
    check_vocab_size: bool = True
    # Checkpoint the input iterator so a restart continues the data (costs the shuffle buffer's size on disk).
    checkpoint_input: bool = True

    def check(self) -> None:
        need(
            self.seq_length > 0 and self.max_predictions > 0,
            "data.seq_length and data.max_predictions must be positive.",
        )
        need(
            not (self.vocab_file and self.tokenizer),
            f"data.vocab_file={self.vocab_file} and data.tokenizer={self.tokenizer} both name the records' "
            "tokenizer: set one (data.tokenizer for a tokenizer.json, data.vocab_file for a WordPiece vocabulary).",
        )
        p = self.masked_lm_prob
        need(0 < p < 1, f"data.masked_lm_prob={p} must be in (0, 1).")
        need(
            self.dynamic_masking or p == BERT_MASKED_LM_PROB,
            f"data.masked_lm_prob={p} is dynamic masking's rate, but data.dynamic_masking is off and static records "
            "carry the masks they were written with (kbert-create-pretraining-data --masked_lm_prob): set "
            "data.dynamic_masking=true (records written with --no_masking) or remove data.masked_lm_prob.",
        )
        needed = predictions_needed(p, self.seq_length)
        need(
            not self.dynamic_masking or self.max_predictions >= needed,
            f"data.max_predictions={self.max_predictions} caps dynamic masking below data.masked_lm_prob={p} of "
            f"data.seq_length={self.seq_length} ({needed} tokens): set data.max_predictions={needed} or more.",
        )


@dataclasses.dataclass
class TrainConfig(Section):
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
    jit_compile: bool | str = False
    # Weights only, no optimizer slots: a kbert checkpoint (directory or prefix), a Google TF1 BERT checkpoint, a
    # Hugging Face BERT directory (config.json, model.safetensors, vocab.txt) or a keras-hub BERT preset; the last
    # two bring the model section and the vocabulary.
    init_checkpoint: str = ""
    seed: int = 12345
    # tf.config.experimental.enable_op_determinism(): bit-identical reruns and resumes, somewhat slower.
    deterministic: bool = False
    # A batch-size ramp (kbert.training.batch_ramp): the global batch at the first step, a multiple of the
    # micro-batch (global_batch_size / gradient_accumulation_steps), grown a micro-batch at a time to
    # global_batch_size over batch_ramp_steps; 0: none. Only the run's first phase or MSLT stage ramps.
    batch_ramp_start: int = 0
    batch_ramp_steps: int = 0
    # The rate during the ramp: the schedule's times (batch / global_batch_size) ** 1/2 (sqrt), 1 (linear) or 0.
    batch_ramp_rate_scaling: str = "sqrt"

    def check(self) -> None:
        need(
            self.mixed_precision in PRECISION_POLICIES,
            f"train.mixed_precision={self.mixed_precision!r}: choose one of {', '.join(PRECISION_POLICIES)}.",
        )
        need(
            is_jit_compile_choice(self.jit_compile),
            f"train.jit_compile={self.jit_compile!r}: choose "
            + ", ".join(f"{str(k).lower()} ({what})" for k, what in JIT_COMPILE.items())
            + ".",
        )
        for key in (
            "global_batch_size",
            "gradient_accumulation_steps",
            "total_steps",
            "steps_per_loop",
            "checkpoint_interval",
            "max_checkpoints",
            "summary_interval",
        ):
            need(getattr(self, key) > 0, f"train.{key}={getattr(self, key)} must be positive.")
        for key in ("total_steps", "steps_per_loop", "checkpoint_interval", "summary_interval"):
            need(getattr(self, key) <= MAX_STEPS, f"train.{key}={getattr(self, key)} is more than {MAX_STEPS} steps.")
        for key in ("checkpoint_interval", "summary_interval"):
            need(
                getattr(self, key) % self.steps_per_loop == 0,
                f"train.{key}={getattr(self, key)} must be a multiple of train.steps_per_loop={self.steps_per_loop}.",
            )
        need(
            self.batch_ramp_rate_scaling in RATE_SCALINGS,
            f"train.batch_ramp_rate_scaling={self.batch_ramp_rate_scaling!r}: choose one of "
            f"{', '.join(RATE_SCALINGS)}.",
        )

    def batch_ramp(self) -> BatchRamp | None:
        """The batch-size ramp these keys ask for, or None."""
        if not self.batch_ramp_start:
            return None
        micro = self.global_batch_size // self.gradient_accumulation_steps
        return BatchRamp(
            self.batch_ramp_start // micro,
            self.gradient_accumulation_steps,
            self.batch_ramp_steps,
            self.batch_ramp_rate_scaling,
        )

    def check_batch_ramp(self) -> None:
        """The ramp fits this stage's batch and steps (a phase or MSLT stage resolves them: checked per stage)."""
        start, steps = self.batch_ramp_start, self.batch_ramp_steps
        if not start and not steps:
            return
        micro = self.global_batch_size // self.gradient_accumulation_steps
        need(
            start > 0 and steps > 0,
            f"train.batch_ramp_start={start} and train.batch_ramp_steps={steps}: set both "
            "(a batch that grows from batch_ramp_start over batch_ramp_steps) or neither.",
        )
        need(
            start % micro == 0 and start < self.global_batch_size,
            f"train.batch_ramp_start={start} must be a multiple of the micro-batch (train.global_batch_size="
            f"{self.global_batch_size} / gradient_accumulation_steps={self.gradient_accumulation_steps} = {micro}) "
            f"and below global_batch_size: the ramp adds micro-batches (e.g. gradient_accumulation_steps="
            f"{max(self.global_batch_size // math.gcd(start, self.global_batch_size), 2)}).",
        )
        need(
            steps <= self.total_steps,
            f"train.batch_ramp_steps={steps} is longer than the {self.total_steps} steps "
            "it ramps (the run's, or its first phase's or MSLT stage's).",
        )

    def without_batch_ramp(self) -> TrainConfig:
        """This section at the full batch from its first step (a phase or MSLT stage after the first)."""
        return self.replace(batch_ramp_start=0, batch_ramp_steps=0)


@dataclasses.dataclass
class EvalConfig(Section):
    """`steps=-1` evaluates the whole of `data.eval_files` once; `interval_samples` or `protocol` also evaluate
    during training (`kbert.training.eval_schedule`)."""

    global_batch_size: int = 256
    steps: int = -1
    # Evaluate data.eval_files every this many training samples (sequences, packed or not) and at the run's end;
    # 0: none in training.
    interval_samples: int = 0
    # Stop (after a checkpoint) once held-out masked-LM accuracy reaches this; summary.json records when.
    target_mlm_accuracy: float | None = None
    # "mlperf": MLPerf BERT's protocol: its interval formula, target 0.720 unless set, :::MLLOG result lines.
    protocol: str = ""

    def check(self) -> None:
        need(self.global_batch_size > 0, "eval.global_batch_size must be positive.")
        need(self.steps == -1 or self.steps > 0, f"eval.steps={self.steps} must be -1 or positive.")
        need(self.interval_samples >= 0, f"eval.interval_samples={self.interval_samples} must be >= 0.")
        need(
            self.protocol in EVAL_PROTOCOLS,
            f"eval.protocol={self.protocol!r}: choose one of {', '.join(map(repr, EVAL_PROTOCOLS))}.",
        )
        need(
            self.target_mlm_accuracy is None or 0 < self.target_mlm_accuracy <= 1,
            f"eval.target_mlm_accuracy={self.target_mlm_accuracy} must be in (0, 1].",
        )
        need(
            self.target_mlm_accuracy is None or self.interval_samples > 0 or self.protocol == "mlperf",
            "eval.target_mlm_accuracy needs a schedule to be checked on: set eval.interval_samples (training "
            "samples between held-out evaluations) or eval.protocol=mlperf.",
        )

    def interval(self, global_batch_size: int) -> int:
        """Training samples between held-out evaluations (MLPerf's formula under its protocol); 0: none."""
        return mlperf_interval(global_batch_size) if self.protocol == "mlperf" else self.interval_samples

    def target(self) -> float | None:
        """The held-out MLM accuracy that stops the run: MLPerf's 0.720 under its protocol unless set."""
        if self.target_mlm_accuracy is None and self.protocol == "mlperf":
            return MLPERF_TARGET
        return self.target_mlm_accuracy


@dataclasses.dataclass
class PhaseConfig(Section):
    """One phase: its steps, and what it changes of the experiment's data, batch, schedule and, for a model with
    rotary positions, the global layers' rotary base (`rope_theta`: ModernBERT's context extension raises it with
    the sequence length) (unset: the same)."""

    steps: int | None = None
    train_files: str | None = None
    eval_files: str | None = None
    seq_length: int | None = None
    max_predictions: int | None = None
    global_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    peak_learning_rate: float | None = None
    warmup_steps: int | None = None
    power: float | None = None
    end_learning_rate: float | None = None
    rope_theta: float | None = None


@dataclasses.dataclass
class PretrainingConfig(Section):
    """The sections the pretraining loop reads (`kbert.experiment.ExperimentConfig` adds `mslt`)."""

    model: PretrainingModelConfig = dataclasses.field(default_factory=PretrainingModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    # Pretraining phases (kbert.training.phases): BERT's seq 128 then seq 512 in one run; empty: one phase.
    phases: list[PhaseConfig] = dataclasses.field(default_factory=list)

    def grows_init_checkpoint(self) -> bool:
        """Whether the run deepens `train.init_checkpoint`'s model (an MSLT plan does: `ExperimentConfig`), so the
        model's depth may differ from the checkpoint's."""
        return False

    def adopt_init_checkpoint(self) -> None:
        """Sets `model.bert` (and an unset `data.vocab_file`, unless `data.tokenizer` is set) to those of an imported
        `train.init_checkpoint`, after checking the user's model fields and vocabulary against it; `model.bert` to
        bert_tiny where neither names a model.

        Raises:
          ConfigError: a model field set to another value than the checkpoint's (naming it and both values).
          VocabularyError: `data.vocab_file` is not the checkpoint's vocabulary.
        """
        source = imported_checkpoint(self.train.init_checkpoint) if self.train.init_checkpoint else None
        if source is None:
            self.model.bert = self.model.bert or DEFAULT_BERT
            return
        checkpoint_bert_config(self.model, source, free=("num_hidden_layers",) if self.grows_init_checkpoint() else ())
        self.model.bert = source.path
        if not self.data.tokenizer:  # the records' tokenizer.json, not the checkpoint's vocabulary
            self.data.vocab_file = checkpoint_vocab_file(source, self.data.vocab_file)

    def check(self) -> None:
        """What relates the sections: the model is the checkpoint's, the schedule fits the steps, the batches
        split, the length fits the model."""
        self.adopt_init_checkpoint()
        t, s, d = self.train, self.schedule, self.data
        need(
            s.step_offset < t.total_steps,
            f"schedule.step_offset={s.step_offset} must be in [0, train.total_steps={t.total_steps}).",
        )
        need(
            s.warmup_steps <= t.total_steps - s.step_offset,
            f"schedule.warmup_steps={s.warmup_steps} must be >= 0 and no longer than the training it warms up "
            f"(train.total_steps - schedule.step_offset = {t.total_steps - s.step_offset}).",
        )
        s.span(t.total_steps - s.step_offset)
        check_batch_sizes(self, replicas=1)
        need(
            not self.eval.interval(t.global_batch_size) or bool(d.eval_files),
            "eval.interval_samples / eval.protocol evaluate data.eval_files during training: set data.eval_files.",
        )
        need(
            self.eval.protocol != "mlperf" or bool(t.init_checkpoint),
            "eval.protocol=mlperf starts from a phase-1 checkpoint: set train.init_checkpoint.",
        )
        try:
            bert = self.model.bert_config()
        except (ValueError, FileNotFoundError, TypeError) as e:
            raise ConfigError(f"model: {e}") from None
        need(
            d.seq_length <= bert.max_position_embeddings,
            f"data.seq_length={d.seq_length} exceeds the model's max_position_embeddings="
            f"{bert.max_position_embeddings}.",
        )


def check_batch_sizes(config: PretrainingConfig, replicas: int) -> None:
    """Train and eval batches split evenly over `replicas` (checked before anything is built)."""
    t = config.train
    need(
        t.global_batch_size % (t.gradient_accumulation_steps * replicas) == 0,
        f"train.global_batch_size={t.global_batch_size} must be a multiple of train.gradient_accumulation_steps"
        f" ({t.gradient_accumulation_steps}) x replicas ({replicas}).",
    )
    need(
        config.eval.global_batch_size % replicas == 0,
        f"eval.global_batch_size={config.eval.global_batch_size} must be a multiple of the replicas ({replicas}).",
    )
