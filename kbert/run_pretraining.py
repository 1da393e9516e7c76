"""`kbert-pretrain`: BERT pretraining on a TPU VM, a multi-worker GPU cluster or one machine.

Example:

    kbert-pretrain --config_file=configs/experiments/bert_tiny_cpu.yaml \\
        --params_override=data.train_files=/data/train-*.tfrecord --model_dir=/tmp/bert_tiny --mode=train
"""

from __future__ import annotations

import sys

from absl import app, flags

from kbert.choices import ALL_REDUCE, DEVICES, MODES, STRATEGIES
from kbert.cli import entry, tpu_launch

PROGRAM = "kbert-pretrain"
FLAGS = flags.FLAGS
flags.DEFINE_multi_string("config_file", [], "Experiment YAML; repeat to merge several, later ones win.")
flags.DEFINE_string("params_override", "",
                    "Overrides after the files, e.g. 'train.total_steps=100,data.seq_length=64'.")
flags.DEFINE_string("model_dir", None, "Checkpoints, TensorBoard logs and summary.json; training resumes from here.")
flags.DEFINE_enum("strategy", "auto", list(STRATEGIES), "Distribution strategy.")
flags.DEFINE_enum("all_reduce", "auto", list(ALL_REDUCE), "Multi-worker all-reduce: nccl between GPUs, ring "
                  "(gRPC) otherwise; auto picks nccl when there are GPUs.")
flags.DEFINE_string("tpu", "", tpu_launch.TPU_FLAG_HELP)
flags.DEFINE_enum("mode", "train", list(MODES), "What to run.")
flags.DEFINE_enum("device", "auto", list(DEVICES),
                  "'cpu' trains on the CPU even on a host with GPUs or a TPU; 'auto' refuses to, naming the cause "
                  "(docs/accelerators.md).")
flags.mark_flag_as_required("model_dir")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    tpu_launch.set_up_controller(PROGRAM, FLAGS.strategy, FLAGS.tpu)  # before TF loads
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert import experiment
    from kbert.training import devices
    from kbert.training.preemption import PREEMPTED_EXIT_CODE, Preempted
    from kbert.training.strategy import make_strategy

    import tensorflow as tf

    tf.get_logger().setLevel("WARNING")  # per-save INFO lines would drown the progress lines
    try:
        config = experiment.load_experiment(FLAGS.config_file, FLAGS.params_override)
        if FLAGS.device == "cpu":
            devices.hide_accelerators()
        strategy = make_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.all_reduce)
        host = devices.find_accelerators()
        print(f"{PROGRAM}: {devices.report_line(host, strategy)}", flush=True)
        devices.check(host, strategy, FLAGS.device)
        experiment.run(config, FLAGS.model_dir, strategy, FLAGS.mode)
    except Preempted as e:
        print(f"{PROGRAM}: {e}", file=sys.stderr)
        sys.exit(PREEMPTED_EXIT_CODE)


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
