"""One stage of a pretraining run: its global steps, its own config (data, batch, schedule) and its task (the
model, how it starts, its input and loss: `kbert.training.task`). A plain run is one stage; BERT's two phases are
two; an MSLT plan makes one per growth stage. Each kind of stage has its builder (`kbert.training.phases`,
`kbert.mslt.stages`); `kbert.experiment` composes them.

Which way a stage's model starts is decided by the engine (`kbert.training.engine`) from the stage and the run
directory, never by the stage's maker; how it starts that way is its task's:

- fresh: the built weights (stage 1 without `init_checkpoint`);
- from a checkpoint (`task.load`): stage 1 with `init_checkpoint`, or any stage at its first step from the
  checkpoint that the stage before it saved last (a run resumed at a stage boundary);
- carried over (`task.carry_over`): from the model of the stage before, trained in this process.

Example:

```python
stages = phase_stages(config, kbert.experiment.task_of)  # one stage, or one per phase
stages = with_layouts(stages)                # each stage's record layout, read once
stages[0].start_step, stages[0].end_step, stages[0].layout.describe()
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kbert.data import RecordLayout, first_layout
from kbert.data.records_info import tokenizer_mismatch
from kbert.errors import InputDataError
from kbert.training.config import PretrainingConfig
from kbert.training.task import PretrainingTask


@dataclasses.dataclass(frozen=True)
class TrainingStage:
    """Global steps [start_step, end_step) of a run, trained with `config` (its `train.total_steps` is the stage's
    steps, its `schedule` the stage's own: each stage has a fresh optimizer)."""

    number: int  # 1-based
    label: str  # how progress lines name it: "phase 2/2", "MSLT stage 3/3"
    config: PretrainingConfig
    start_step: int
    end_step: int
    task: PretrainingTask  # the stage's model, how it starts, its input, loss and metrics
    num_layers: int
    seed: int = 0  # Keras seed set before the stage is built (weights of new layers, dropout)
    init_checkpoint: str = ""  # stage 1: start from this checkpoint's weights (grown from it with `grow`)
    description: str = ""  # what trains, for the stage's first line: "2 layers, training blocks [1]"
    facts: dict = dataclasses.field(default_factory=dict)  # what stages.json and the summary record of it
    layout: RecordLayout | None = None  # of `config.data.train_files` (`with_layouts`)
    hint: str = ""  # said after a config error of this stage: where its values come from
    build_ahead: bool = False  # may be built on a thread while the stage before trains (`kbert.training.build_ahead`)

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    @property
    def name(self) -> str:
        """The stage's folder under model_dir in a run of several stages (its export and summary)."""
        return f"stage_{self.number}"

    def record(self) -> dict:
        """The stage as `stages.json` holds it: a run resumed with other stages is refused."""
        d = self.config.data
        return {
            "stage": self.number,
            "label": self.label,
            "num_layers": self.num_layers,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "train_files": d.train_files,
            "seq_length": d.seq_length,
            "global_batch_size": self.config.train.global_batch_size,
            **self.facts,
        }

    def same_data(self, other: TrainingStage) -> bool:
        """Whether this stage reads `other`'s training input, so it continues where `other` stopped."""
        keys = ("train_files", "seq_length", "max_predictions", "dynamic_masking", "whole_word_masking")
        return (
            all(getattr(self.config.data, k) == getattr(other.config.data, k) for k in keys)
            and self.config.train.global_batch_size == other.config.train.global_batch_size
        )


def with_layouts(stages: Sequence[TrainingStage], evaluates: bool = False) -> list[TrainingStage]:
    """The stages with the layout of their training records (packed, MLM-only, ...), read from the first record
    once per set of files: it decides which variables train and what the progress line shows.

    Raises:
      InputDataError: a stage's records carry next-sentence labels its model has no head for, or its training
        records are of another sequence length than the stage trains at (or,
        when the run `evaluates`, its eval records are longer than its model's positions), or a folder of its
        records names another tokenizer than its `data.tokenizer` or `data.vocab_file` (records_info.py): said
        before the first stage starts, not when that stage does. Eval records of another length are read at their
        own.
    """
    layouts: dict[str, RecordLayout] = {}
    tokenizers_checked: set[tuple[str, str]] = set()

    def layout_of(files: str, key: str) -> RecordLayout:
        if files not in layouts:
            layouts[files] = first_layout(files, key)
        return layouts[files]

    out = []
    for stage in stages:
        d = stage.config.data
        layout = layout_of(d.train_files, "data.train_files")
        if layout.seq_length != d.seq_length:
            raise InputDataError(
                f"{stage.label}: its train_files={d.train_files!r} hold records of seq_length {layout.seq_length}, "
                f"but it trains at {d.seq_length}: give it records written with --max_seq_length={d.seq_length}, "
                f"or set its seq_length to {layout.seq_length} (data.seq_length, or phases[N].seq_length for a "
                "phase)."
            )
        tokenizer, tokenizer_key = (d.tokenizer, "data.tokenizer") if d.tokenizer else (d.vocab_file, "data.vocab_file")
        bert = stage.config.model.bert_config()
        for files, key in ((d.train_files, "train_files"), (d.eval_files if evaluates else "", "eval_files")):
            if files and tokenizer and (files, tokenizer) not in tokenizers_checked:
                mismatch = tokenizer_mismatch(files, f"data.{key}", tokenizer, tokenizer_key)
                if mismatch:
                    raise InputDataError(f"{stage.label}: {mismatch}")
                tokenizers_checked.add((files, tokenizer))
            if files and layout_of(files, f"data.{key}").sentence_labels and not bert.sentence_head:
                raise InputDataError(
                    f"{stage.label}: its {key}={files!r} hold records with next-sentence labels, but the model has no "
                    "sentence head (sentence_head: false, as ModernBERT's): give it MLM-only records "
                    "(kbert-create-pretraining-data --objective=mlm)."
                )
        if evaluates and d.eval_files:
            evaluated = layout_of(d.eval_files, "data.eval_files").seq_length
            positions = bert.max_position_embeddings
            if evaluated > positions:
                raise InputDataError(
                    f"{stage.label}: its eval_files={d.eval_files!r} hold records of seq_length {evaluated}, longer "
                    f"than the model's max_position_embeddings={positions}: give it held-out records written with "
                    f"--max_seq_length={positions} or less (data.eval_files, or phases[N].eval_files for a phase)."
                )
        out.append(dataclasses.replace(stage, layout=layout))
    return out


def stage_at(stages: Sequence[TrainingStage], step: int) -> int:
    """The index of the stage that trains global step `step` (0-based) next; the last one past the end."""
    for index, stage in enumerate(stages):
        if step < stage.end_step:
            return index
    return len(stages) - 1
