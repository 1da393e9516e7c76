"""`kbert-convert-mslt-run`: moves an MSLT run's per-stage checkpoints (`stage_N/checkpoints/`, the layout of
kbert before one engine ran every run) into `checkpoints/`, so the command that started it resumes it.

Example:

    kbert-convert-mslt-run --model_dir=gs://bucket/runs/bert_base_mslt
"""

from __future__ import annotations

from absl import flags

from kbert.cli import entry

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The MSLT run's --model_dir.")
flags.mark_flags_as_required(["model_dir"])


def main(argv: list[str]) -> None:
    del argv
    from kbert.runtime.convert_mslt_run import convert_stage_checkpoints

    moved = convert_stage_checkpoints(FLAGS.model_dir)
    print(
        f"Moved {len(moved)} checkpoints into {FLAGS.model_dir}/checkpoints (newest: {moved[-1] if moved else '-'}); "
        "rerun the same kbert-pretrain command to resume."
    )


def run() -> None:
    entry.run(main, "kbert-convert-mslt-run")


if __name__ == "__main__":
    run()
