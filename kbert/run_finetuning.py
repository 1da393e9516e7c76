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

from absl import app, flags

from kbert.choices import STRATEGIES
from kbert.cli import entry, tpu_launch

PROGRAM = "kbert-finetune"
FLAGS = flags.FLAGS
flags.DEFINE_multi_string("config_file", [], "Fine-tuning YAML; repeat to merge several, later ones win.")
flags.DEFINE_string("params_override", "",
                    "Overrides after the files, e.g. 'task.name=sst2,task.data_dir=glue_data,train.epochs=2'.")
flags.DEFINE_string("model_dir", None, "Checkpoints, best weights, predictions, TensorBoard logs and summary.json; "
                                       "a partial run there resumes.")
flags.DEFINE_enum("strategy", "auto", list(STRATEGIES), "Distribution strategy.")
flags.DEFINE_string("tpu", "", tpu_launch.TPU_FLAG_HELP)
flags.DEFINE_list("seeds", [], "With task.name=glue: fine-tune every GLUE task once per seed (default: train.seed).")
flags.mark_flag_as_required("model_dir")


def _seeds(values: list[str]) -> list[int]:
    from kbert.errors import ConfigError

    try:
        return [int(value) for value in values]
    except ValueError:
        raise ConfigError(f"--seeds={','.join(values)}: give integers, e.g. --seeds=1,2,3.") from None


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    tpu_launch.set_up_controller(PROGRAM, FLAGS.strategy, FLAGS.tpu)  # before TF loads
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.finetuning import load_finetune_config, run_finetuning
    from kbert.finetuning.glue import GLUE_TABLE, run_glue
    from kbert.training.strategy import make_strategy

    config = load_finetune_config(FLAGS.config_file, FLAGS.params_override)
    strategy = make_strategy(FLAGS.strategy, FLAGS.tpu)
    if config.task.name == GLUE_TABLE:
        run_glue(config, FLAGS.model_dir, strategy, _seeds(FLAGS.seeds) or [config.train.seed])
    else:
        run_finetuning(config, FLAGS.model_dir, strategy)


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
