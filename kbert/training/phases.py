"""Pretraining phases: BERT's seq-128-then-seq-512 recipe as one run, each phase a stage with its own records,
batch and learning-rate schedule (`phases:` in an experiment config), and for a model with rotary positions its
own global rotary base (ModernBERT's context extension: longer records, a higher `rope_theta`).

Every key a phase leaves unset is the experiment's own (`data.*`, `train.*`, `schedule.*`). Each phase has a
fresh optimizer whose schedule warms up and decays over the phase's own steps, as phase 2 of Google's, NVIDIA's
and MLPerf's recipes does; its weights come from the phase before. The phases' steps replace `train.total_steps`.

Example:

>>> config = PretrainingConfig({"phases": [{"steps": 90}, {"steps": 10, "seq_length": 512,
...     "train_files": "seq512/*", "global_batch_size": 64, "peak_learning_rate": 2e-4, "warmup_steps": 2}]})
>>> task_of = lambda phase: object()  # a phase's task: kbert.experiment.task_of, BERT's of its model section
>>> [(s.label, s.start_step, s.end_step, s.config.data.seq_length) for s in phase_stages(config, task_of)]
[('phase 1/2', 0, 90, 128), ('phase 2/2', 90, 100, 512)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kbert.config import need
from kbert.errors import ConfigError
from kbert.training.config import PhaseConfig, PretrainingConfig
from kbert.training.stage import TrainingStage
from kbert.training.task import PretrainingTask

_DATA_KEYS = ("train_files", "eval_files", "seq_length", "max_predictions")
_TRAIN_KEYS = ("global_batch_size", "gradient_accumulation_steps")
_SCHEDULE_KEYS = ("peak_learning_rate", "warmup_steps", "power", "end_learning_rate")


def _set(phase: PhaseConfig, keys: tuple[str, ...]) -> dict:
    return {k: getattr(phase, k) for k in keys if getattr(phase, k) is not None}


def phase_config(config: PretrainingConfig, index: int, steps: int) -> PretrainingConfig:
    """The experiment as phase `index` trains it: its data, batch and a schedule over its `steps` alone, a batch
    ramp in phase 1 only (a run without phases: the experiment as it is, `schedule.decay_steps` and `step_offset`
    included)."""
    if not config.phases:
        return config.replace(train=config.train.replace(total_steps=steps))
    phase = config.phases[index]
    train = config.train if index == 0 else config.train.without_batch_ramp()  # the run ramps its batch once
    model = config.model
    if phase.rope_theta is not None:
        model = model.replace(overrides=model.overrides.replace(rope_theta=phase.rope_theta))
    return config.replace(
        model=model,
        data=config.data.replace(**_set(phase, _DATA_KEYS)),
        train=train.replace(total_steps=steps, **_set(phase, _TRAIN_KEYS)),
        schedule=config.schedule.replace(step_offset=0, decay_steps=None, **_set(phase, _SCHEDULE_KEYS)),
    )


def check_phases(config: PretrainingConfig, first_steps: int | None = None) -> None:
    """Each phase's steps, schedule, batch and data make sense, before anything is built; `first_steps`: phase
    1 is an MSLT plan of that many steps (the plan's stages have their own schedules)."""
    bert = config.model.bert_config()
    positions = bert.max_position_embeddings
    for index, phase in enumerate(config.phases):
        where = f"phases[{index}] (phase {index + 1})"
        need(
            phase.rope_theta is None or (bert.position_embedding == "rotary" and phase.rope_theta > 0),
            f"{where}.rope_theta={phase.rope_theta}: a phase sets the global rotary base of a model with rotary "
            f"positions (position_embedding: rotary), to a positive value; this model's are {bert.position_embedding}.",
        )
        planned = index == 0 and first_steps is not None  # the plan's steps replace phase 1's, as train.total_steps
        need(
            planned or isinstance(phase.steps, int) and phase.steps > 0,
            f"{where}.steps={phase.steps!r}: must be a positive number of optimizer steps.",
        )
        steps = first_steps if planned else phase.steps
        resolved = phase_config(config, index, steps)
        s, t, d = resolved.schedule, resolved.train, resolved.data
        need(
            planned or 0 <= s.warmup_steps < steps,
            f"{where}.warmup_steps={s.warmup_steps}: must be in [0, "
            f"steps={steps}) (unset, it is schedule.warmup_steps).",
        )
        need(
            0 < s.peak_learning_rate and 0 <= s.end_learning_rate <= s.peak_learning_rate,
            f"{where}: learning rates peak {s.peak_learning_rate}, end {s.end_learning_rate} must be positive and "
            "end <= peak.",
        )
        need(
            t.global_batch_size > 0
            and t.gradient_accumulation_steps > 0
            and t.global_batch_size % t.gradient_accumulation_steps == 0,
            f"{where}.global_batch_size={t.global_batch_size} must be a positive multiple of "
            f"gradient_accumulation_steps={t.gradient_accumulation_steps}.",
        )
        need(
            0 < d.seq_length <= positions and d.max_predictions > 0,
            f"{where}.seq_length={d.seq_length}: must be in [1, the model's max_position_embeddings={positions}], "
            "with max_predictions > 0.",
        )
        try:  # the data section's own checks on the phase's length and predictions (masking rate, cap)
            d.check()
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from None
    need(
        not config.phases or config.schedule.step_offset == 0,
        f"schedule.step_offset={config.schedule.step_offset}: a run of phases schedules each phase from its own "
        "first step; remove step_offset (it is for a second phase run as its own command).",
    )


def phase_stages(
    config: PretrainingConfig,
    task_of: Callable[[PretrainingConfig], PretrainingTask],
    first_phase: Sequence[TrainingStage] = (),
) -> list[TrainingStage]:
    """The stages of `config.phases` (one for the whole run when there are no phases), each training the model of
    `task_of(the phase's config)` (a phase may change the rotary base), which it carries over from the stage
    before. Given `first_phase` (the stages that train phase 1
    instead, an MSLT plan's), the phases after it, numbered and stepped on from its last stage and built ahead
    as that one is."""
    count = max(len(config.phases), 1)
    bert = config.model.bert_config()
    first, number, start_step, build_ahead = 0, 1, 0, False
    if first_phase:
        last = first_phase[-1]
        first, number, start_step, build_ahead = 1, last.number + 1, last.end_step, last.build_ahead
    stages = []
    for index in range(first, count):
        steps = config.phases[index].steps if config.phases else config.train.total_steps
        resolved = phase_config(config, index, steps)
        d, t = resolved.data, resolved.train
        stages.append(
            TrainingStage(
                number=number,
                label=f"phase {index + 1}/{count}" if config.phases else "training",
                config=resolved,
                start_step=start_step,
                end_step=start_step + steps,
                task=task_of(resolved),
                num_layers=bert.num_hidden_layers,
                seed=config.train.seed + index,
                init_checkpoint=config.train.init_checkpoint if number == 1 else "",
                description=f"seq {d.seq_length}, batch {t.global_batch_size}, {bert.num_hidden_layers} layers, "
                "every block trains",
                build_ahead=build_ahead,
            )
        )
        number, start_step = number + 1, start_step + steps
    return stages
