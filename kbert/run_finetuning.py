"""`kbert-finetune`: fine-tune a pretrained BERT on a GLUE task or a TSV/CSV/JSONL file, keep the best epoch.

Example:

    kbert-finetune --config_file=configs/finetune/glue_sst2.yaml \\
        --params_override=task.data_dir=glue_data,train.init_checkpoint=runs/bert_base,data.vocab_file=vocab.txt \\
        --model_dir=runs/sst2
"""

from __future__ import annotations

from absl import app, flags

from kbert.choices import STRATEGIES
from kbert.cli import entry

PROGRAM = "kbert-finetune"
FLAGS = flags.FLAGS
flags.DEFINE_multi_string("config_file", [], "Fine-tuning YAML; repeat to merge several, later ones win.")
flags.DEFINE_string("params_override", "",
                    "Overrides after the files, e.g. 'task.name=sst2,task.data_dir=glue_data,train.epochs=2'.")
flags.DEFINE_string("model_dir", None, "Checkpoints, best weights, predictions, TensorBoard logs and summary.json; "
                                       "a partial run there resumes.")
flags.DEFINE_enum("strategy", "auto", list(STRATEGIES), "Distribution strategy.")
flags.DEFINE_string("tpu", "", "TPU name, or 'local' on a TPU VM (the default with --strategy=tpu).")
flags.mark_flag_as_required("model_dir")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.finetuning import load_finetune_config, run_finetuning
    from kbert.training.strategy import make_strategy

    config = load_finetune_config(FLAGS.config_file, FLAGS.params_override)
    run_finetuning(config, FLAGS.model_dir, make_strategy(FLAGS.strategy, FLAGS.tpu))


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
