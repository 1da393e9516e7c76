"""The flag block that `kbert-pretrain` and `kbert-finetune` share, and the start of their `main`: the config, the
run's folder, and where it runs (strategy, device, all-reduce, TPU).

Example:

```python
from kbert.cli import run_flags

def main(argv):
    run_flags.no_arguments(argv)
    run_flags.set_up_controller("kbert-finetune")   # before TensorFlow loads
    ...                                             # import what the run needs
    run_flags.freeze_imports()
    config = load_finetune_config(FLAGS.config_file, FLAGS.params_override)   # bad config: one line, early
    strategy = run_flags.make_strategy("kbert-finetune")
```
"""

from __future__ import annotations

import gc

from absl import app, flags

from kbert.choices import ALL_REDUCE, DEVICES, STRATEGIES
from kbert.cli import tpu_launch

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("config_file", [], "YAML config; repeat to merge several, later ones win.")
flags.DEFINE_string(
    "params_override", "", "Overrides after the files, e.g. 'train.total_steps=100,data.seq_length=64'."
)
flags.DEFINE_string(
    "model_dir", None, "The run's folder: checkpoints, TensorBoard logs and summary.json; a run there resumes."
)
flags.DEFINE_enum("strategy", "auto", list(STRATEGIES), "Distribution strategy.")
flags.DEFINE_enum(
    "all_reduce",
    "auto",
    list(ALL_REDUCE),
    "Multi-worker all-reduce: nccl between GPUs, ring (gRPC) otherwise; auto picks nccl when there are GPUs.",
)
flags.DEFINE_string("tpu", "", tpu_launch.TPU_FLAG_HELP)
flags.DEFINE_enum(
    "device",
    "auto",
    list(DEVICES),
    "'cpu' runs on the CPU even on a host with GPUs or a TPU; 'auto' refuses to, naming the cause "
    "(docs/accelerators.md).",
)
flags.mark_flag_as_required("model_dir")


def no_arguments(argv: list[str]) -> None:
    """Refuses positional arguments: every input is a flag."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")


def set_up_controller(program: str) -> None:
    """The pod controller's environment (`kbert.cli.tpu_launch`); call before anything imports TensorFlow."""
    tpu_launch.set_up_controller(program, FLAGS.strategy, FLAGS.tpu)


def freeze_imports() -> None:
    """Moves what importing TensorFlow, Keras and kbert made (about half a million objects) out of the garbage
    collector's sight (`gc.freeze`), so neither the full collections that tracing a graph sets off nor the one
    `keras.backend.clear_session()` runs at every stage start traverse it (0.3 s each on a 2-core EPYC; a tiny
    3-stage MSLT run, kbert-pretrain end to end: 17.5-18.6 s frozen, 20.0-21.4 s not). Call it once the run's
    modules are imported."""
    gc.freeze()


def make_strategy(program: str):
    """The `tf.distribute` strategy of the flags; prints the line that names the devices it runs on.

    Raises:
      StrategyError: `--device=auto` on a host whose accelerators TensorFlow cannot use, naming the cause.
    """
    import tensorflow as tf

    from kbert.runtime import devices
    from kbert.runtime.strategy import make_strategy as strategy_of

    tf.get_logger().setLevel("WARNING")  # per-save INFO lines would drown the progress lines
    if FLAGS.device == "cpu":
        devices.hide_accelerators()
    strategy = strategy_of(FLAGS.strategy, FLAGS.tpu, FLAGS.all_reduce)
    host = devices.find_accelerators()
    print(f"{program}: {devices.report_line(host, strategy)}", flush=True)
    devices.check(host, strategy, FLAGS.device)
    return strategy
