"""Pretraining-loop throughput: kbert's distributed loop vs Model Garden's BERT pretraining, side by side in one run;
or kbert's loop under its three `train.jit_compile` choices; or with synchronous vs asynchronous checkpoints.

    python tools/bench_pretraining.py --model=bert_small --seq_length=128 --batch_size=16
    python tools/bench_pretraining.py --compare=jit_compile --model=bert_mini --batch_size=16
    python tools/bench_pretraining.py --compare=checkpoint --model=bert_small --batch_size=16

Both sides train the same BERT config with LAMB (weight decay 0.01, LayerNorm/bias excluded) on the same batch,
under the same `tf.distribute` strategy, each in its own loop of `--steps` steps inside one `tf.function`:
kbert's `PretrainingTrainer` (Keras 3) and Model Garden's `MaskedLMTask.train_step` on its tf_keras
`BertPretrainerV2` with Model Garden's LAMB (the step its orbit trainer runs with `use_tf_while_loop`). Rounds
alternate so machine noise hits both. float32 only: Model Garden's `MaskedLM` head fails under a tf_keras
`mixed_bfloat16` policy (a float32 bias added to bfloat16 logits). Prints sequences/s, MFU against a large
float32 matmul measured in the same run (the best of one measurement per round), and the kbert / Model Garden
ratio last. `--compare=jit_compile` races kbert's loop without XLA, with the forward and backward pass compiled
(`train.jit_compile=true`) and with the whole replica step compiled, LAMB update included (`step`).
`--compare=checkpoint` saves a checkpoint (`TrainingCheckpoints`) after every step, written synchronously or in
the background (`train.async_checkpoint`), each round ending when its last write is on disk; it also prints the
seconds the loop spent blocked in saves per save. The ratio of every contestant to each one listed before it
comes last.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

bench_flags.define(
    "model",
    "seq_length",
    "max_predictions",
    "steps",
    "rounds",
    batch_size=16,
    notes={"steps": "One tf.function call runs them all."},
)
flags.DEFINE_enum("strategy", "one_device", ["one_device", "mirrored", "auto"], "Strategy for both sides.")
flags.DEFINE_enum(
    "compare",
    "model_garden",
    ["model_garden", "jit_compile", "checkpoint"],
    "model_garden: kbert against Model Garden; jit_compile: kbert with XLA off, gradients, whole step; "
    "checkpoint: kbert saving after every step, synchronously or asynchronously.",
)
FLAGS = flags.FLAGS


def kbert_trainer(config, batch, strategy, jit_compile=False):
    """A `PretrainingTrainer` (with `jit_compile`) fed `batch` forever."""
    from kbert.modeling import BertPretrainer
    from kbert.optimizers import LAMB
    from kbert.tasks.bert import BertPretrainingTask
    from kbert.training.trainer import PretrainingTrainer

    with strategy.scope():
        model = BertPretrainer(config)
        optimizer = LAMB(1e-4, weight_decay=0.01)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        trainer = PretrainingTrainer(
            strategy,
            model,
            optimizer,
            lambda context: (
                tf.data.Dataset.from_tensors(batch)
                .unbatch()
                .batch(context.get_per_replica_batch_size(FLAGS.batch_size), drop_remainder=True)
                .repeat()
            ),
            task=BertPretrainingTask(config),
            global_step=step,
            global_batch_size=FLAGS.batch_size,
            jit_compile=jit_compile,
        )
    return trainer


def kbert_loop(config, batch, strategy, jit_compile=False):
    """`run(steps)` of a `kbert_trainer`."""
    trainer = kbert_trainer(config, batch, strategy, jit_compile)
    return lambda steps: trainer.train(tf.constant(steps))


def checkpointed_loop(config, batch, strategy, async_writes):
    """`run(steps)`: `steps` times one step and a save, then waits for the writes; `run.blocked` collects the
    seconds each round spent in saves and that wait."""
    import atexit
    import shutil
    import tempfile

    from kbert.runtime.checkpointing import TrainingCheckpoints

    trainer = kbert_trainer(config, batch, strategy)
    directory = tempfile.mkdtemp(prefix="bench_checkpoint_")
    atexit.register(shutil.rmtree, directory, True)  # two checkpoints of the model: hundreds of MB at real sizes
    checkpoints = TrainingCheckpoints(
        trainer.model,
        trainer.optimizer,
        trainer.global_step,
        None,
        directory,
        strategy,
        max_to_keep=1,
        interval=1,
        async_writes=async_writes,
    )

    def run(steps):
        blocked = 0.0
        for _ in range(steps):
            trainer.train(tf.constant(1))
            start = time.perf_counter()
            checkpoints.save(int(trainer.global_step.numpy()))
            blocked += time.perf_counter() - start
        start = time.perf_counter()
        checkpoints.wait()  # the round is over when its last checkpoint is on disk
        run.blocked.append(blocked + time.perf_counter() - start)

    run.blocked = []
    return run


def model_garden_loop(config, batch, strategy):
    """Model Garden's `MaskedLMTask.train_step` with its LAMB in a `tf.range` loop; returns `run(steps)`."""
    from model_garden_peer import model_garden_batch, model_garden_task
    from official.modeling.optimization.lamb import LAMB

    with strategy.scope():
        task = model_garden_task(config)
        model = task.build_model()
        metrics = task.build_metrics()
        optimizer = LAMB(1e-4, weight_decay_rate=0.01, exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    dataset = strategy.distribute_datasets_from_function(
        lambda context: (
            tf.data.Dataset.from_tensors(model_garden_batch(batch))
            .unbatch()
            .batch(context.get_per_replica_batch_size(FLAGS.batch_size), drop_remainder=True)
            .repeat()
        )
    )
    iterator = iter(dataset)

    @tf.function
    def loop(steps):
        for _ in tf.range(steps):
            strategy.run(lambda b: task.train_step(b, model, optimizer, metrics), (next(iterator),))

    def run(steps):
        loop(tf.constant(steps))
        return float(metrics[0].result())

    return run


def contestants(config, batch, strategy) -> dict:
    """`{name: run}` of `--compare`; a name's words before " (" label its ratios."""
    if FLAGS.compare == "jit_compile":
        return {
            f"jit_compile={str(choice).lower()} ({what})": kbert_loop(config, batch, strategy, choice)
            for choice, what in (
                (False, "kbert, no XLA"),
                (True, "forward and backward"),
                ("step", "whole replica step"),
            )
        }
    if FLAGS.compare == "checkpoint":
        return {
            f"{kind} (a checkpoint every step)": checkpointed_loop(config, batch, strategy, kind == "async")
            for kind in ("sync", "async")
        }
    return {
        "model_garden (tf_keras MaskedLMTask, LAMB)": model_garden_loop(config, batch, strategy),
        "kbert (PretrainingTrainer, LAMB)": kbert_loop(config, batch, strategy),
    }


def timed(run, steps: int) -> float:
    start = time.perf_counter()
    run(steps)  # both read a metric at the end, so the work has finished
    return time.perf_counter() - start


def main(argv):
    del argv
    from model_garden_peer import synthetic_batch

    from kbert.modeling import BertConfig
    from kbert.runtime.flops import model_flops_utilisation, training_flops_per_sequence
    from kbert.runtime.strategy import make_strategy
    from kbert.training.peak_flops import measured_peak_flops

    config = BertConfig.load(FLAGS.model)
    batch = synthetic_batch(config, FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions)
    strategy = make_strategy(FLAGS.strategy)
    runs = contestants(config, batch, strategy)
    for run in runs.values():  # trace and warm up
        timed(run, 2)
    times = {name: [] for name in runs}
    peaks = []
    for _ in range(FLAGS.rounds):
        for name, run in runs.items():
            times[name].append(timed(run, FLAGS.steps))
        peaks.append(measured_peak_flops())
    # The best matmul rate of the run: on a shared machine a single measurement can land in a busy moment.
    peak = max(peaks)
    flops = training_flops_per_sequence(config, FLAGS.seq_length, FLAGS.max_predictions)
    print(
        f"\n{FLAGS.model}, seq {FLAGS.seq_length}, global batch {FLAGS.batch_size}, float32, "
        f"{type(strategy).__name__} x{strategy.num_replicas_in_sync}, {FLAGS.steps} steps x {FLAGS.rounds} "
        f"rounds; float32 matmul peak {peak / 1e9:.1f} GFLOP/s"
    )
    print(bench_flags.cpu_isa())
    print(f"{'contestant':44s} {'seq/s':>8s} {'MFU':>7s}")
    rates = {name.split(" (")[0]: FLAGS.batch_size * FLAGS.steps / statistics.median(ts) for name, ts in times.items()}
    for name, rate in zip(times, rates.values()):
        print(f"{name:44s} {rate:8.1f} {model_flops_utilisation(rate, flops, peak):7.1%}")
    for name, run in runs.items():
        if hasattr(run, "blocked"):  # the warm-up round traced the step and made the first (slower) save
            print(
                f"{name.split(' (')[0]}: blocked in saves {statistics.median(run.blocked[1:]) / FLAGS.steps:.3f} "
                "s per save"
            )
    labels = list(rates)
    for i, ours in enumerate(labels):
        for peer in labels[:i]:
            print(f"ratio {ours} / {peer}: {rates[ours] / rates[peer]:.2f}x")


if __name__ == "__main__":
    app.run(main)
