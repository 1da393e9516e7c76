"""`kbert-pretrain`: BERT pretraining on a TPU VM, a multi-worker GPU cluster or one machine.

Example:

    kbert-pretrain --config_file=configs/experiments/bert_tiny_cpu.yaml \\
        --params_override=data.train_files=/data/train.tfrecord-* --model_dir=/tmp/bert_tiny --mode=train
"""

from __future__ import annotations

import sys

from absl import flags

from kbert.choices import MODES
from kbert.cli import entry, run_flags
from kbert.errors import KbertError

PROGRAM = "kbert-pretrain"
FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "train", list(MODES), "What to run.")


def _refuse_other_backends() -> None:
    """One line under another Keras backend: this engine is tf.distribute's, the recipe for JAX is
    kbert.fit_pretraining."""
    import keras

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise KbertError(
            f"KERAS_BACKEND={backend}: {PROGRAM} is the TensorFlow engine (tf.distribute); unset "
            "KERAS_BACKEND to run it, or pretrain with model.fit through kbert.fit_pretraining.fit_pretraining "
            "(docs/jax.md)."
        )


def main(argv: list[str]) -> None:
    run_flags.no_arguments(argv)
    run_flags.set_up_controller(PROGRAM)
    _refuse_other_backends()
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert import experiment
    from kbert.runtime.preemption import PREEMPTED_EXIT_CODE, Preempted

    run_flags.freeze_imports()
    config = experiment.load_experiment(FLAGS.config_file, FLAGS.params_override)
    strategy = run_flags.make_strategy(PROGRAM)
    try:
        experiment.run(config, FLAGS.model_dir, strategy, FLAGS.mode)
    except Preempted as e:
        print(f"{PROGRAM}: {e}", file=sys.stderr)
        sys.exit(PREEMPTED_EXIT_CODE)


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
