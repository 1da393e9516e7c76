"""`kbert-finetune`: fine-tune a pretrained BERT on a GLUE task or a TSV/CSV/JSONL file, keep the best epoch.

Example:

    kbert-finetune --config_file=configs/finetune/glue_sst2.yaml \\
        --params_override=task.data_dir=glue_data,train.init_checkpoint=runs/bert_base,data.vocab_file=vocab.txt \\
        --model_dir=runs/sst2

    # The GLUE table: every GLUE task under task.data_dir, three seeds each, and the average
    kbert-finetune --config_file=configs/finetune/glue_sst2.yaml --params_override=task.name=glue,... \
        --seeds=1,2,3 --model_dir=runs/glue
"""

from __future__ import annotations

from absl import flags

from kbert.cli import entry, run_flags

PROGRAM = "kbert-finetune"
FLAGS = flags.FLAGS
flags.DEFINE_list("seeds", [], "With task.name=glue: fine-tune every GLUE task once per seed (default: train.seed).")


def _seeds(values: list[str]) -> list[int]:
    from kbert.errors import ConfigError

    try:
        return [int(value) for value in values]
    except ValueError:
        raise ConfigError(f"--seeds={','.join(values)}: give integers, e.g. --seeds=1,2,3.") from None


def main(argv: list[str]) -> None:
    run_flags.no_arguments(argv)
    run_flags.set_up_controller(PROGRAM)
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.finetuning import load_finetune_config, run_finetuning
    from kbert.finetuning.glue import GLUE_TABLE, run_glue

    run_flags.freeze_imports()
    config = load_finetune_config(FLAGS.config_file, FLAGS.params_override)
    seeds = _seeds(FLAGS.seeds) or [config.train.seed]
    strategy = run_flags.make_strategy(PROGRAM)
    if config.task.name == GLUE_TABLE:
        run_glue(config, FLAGS.model_dir, strategy, seeds)
    else:
        run_finetuning(config, FLAGS.model_dir, strategy)


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
