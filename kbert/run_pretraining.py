"""`kbert-pretrain`: BERT pretraining on a TPU VM, a multi-worker GPU cluster or one machine.

Example:

    kbert-pretrain --config_file=configs/experiments/bert_tiny_cpu.yaml \\
        --params_override=data.train_files=/data/train-*.tfrecord --model_dir=/tmp/bert_tiny --mode=train
"""

from __future__ import annotations

import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("config_file", [], "Experiment YAML; repeat to merge several, later ones win.")
flags.DEFINE_string("params_override", "",
                    "Overrides after the files, e.g. 'train.total_steps=100,data.seq_length=64'.")
flags.DEFINE_string("model_dir", None, "Checkpoints, TensorBoard logs and summary.json; training resumes from here.")
flags.DEFINE_enum("strategy", "auto", ["auto", "tpu", "multi_worker_mirrored", "mirrored", "one_device"],
                  "Distribution strategy.")
flags.DEFINE_string("tpu", "", "TPU name, or 'local' on a TPU VM (the default with --strategy=tpu).")
flags.DEFINE_enum("mode", "train", ["train", "eval", "train_and_eval"], "What to run.")
flags.mark_flag_as_required("model_dir")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.data.validation import InputDataError
    from kbert.mslt import PlanError
    from kbert.training.checkpointing import CheckpointMismatchError
    from kbert.training.config import ConfigError, load_experiment
    from kbert.training.loop import PREEMPTED_EXIT_CODE, Preempted, run_experiment
    from kbert.training.reporting import NonFiniteLossError
    from kbert.training.strategy import StrategyError, make_strategy

    import tensorflow as tf

    tf.get_logger().setLevel("WARNING")  # per-save INFO lines would drown the progress lines
    try:
        config = load_experiment(FLAGS.config_file, FLAGS.params_override)
        strategy = make_strategy(FLAGS.strategy, FLAGS.tpu)
        if config.mslt is not None:
            from kbert.mslt.runner import run_mslt
            run_mslt(config, FLAGS.model_dir, strategy, FLAGS.mode)
        else:
            run_experiment(config, FLAGS.model_dir, strategy, FLAGS.mode)
    except (ConfigError, PlanError, StrategyError, InputDataError, NonFiniteLossError, CheckpointMismatchError,
            FileNotFoundError) as e:
        sys.exit(f"kbert-pretrain: error: {e}")
    except Preempted as e:
        print(f"kbert-pretrain: {e}", file=sys.stderr)
        sys.exit(PREEMPTED_EXIT_CODE)


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
