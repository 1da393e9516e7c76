"""Pretraining-loop throughput: kbert's distributed loop vs Model Garden's BERT pretraining, side by side in one run.

    python tools/bench_pretraining.py --model=bert_small --seq_length=128 --batch_size=16

Both sides train the same BERT config with LAMB (weight decay 0.01, LayerNorm/bias excluded) on the same batch,
under the same `tf.distribute` strategy, each in its own loop of `--steps` steps inside one `tf.function`:
kbert's `PretrainingTrainer` (Keras 3) and Model Garden's `MaskedLMTask.train_step` on its tf_keras
`BertPretrainerV2` with Model Garden's LAMB (the step its orbit trainer runs with `use_tf_while_loop`). Rounds
alternate so machine noise hits both. float32 only: Model Garden's `MaskedLM` head fails under a tf_keras
`mixed_bfloat16` policy (a float32 bias added to bfloat16 logits). Prints sequences/s, MFU against a large
float32 matmul measured in the same run (the best of one measurement per round), and the kbert / Model Garden
ratio last.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import bench_flags  # noqa: E402
from absl import app, flags  # noqa: E402

bench_flags.define("model", "seq_length", "max_predictions", "steps", "rounds", batch_size=16,
                   notes={"steps": "One tf.function call runs them all."})
flags.DEFINE_enum("strategy", "one_device", ["one_device", "mirrored", "auto"], "Strategy for both sides.")
FLAGS = flags.FLAGS


def kbert_loop(config, batch, strategy):
    """A `PretrainingTrainer` fed `batch` forever; returns `run(steps)`."""
    from kbert.modeling import BertPretrainer
    from kbert.optimizers import LAMB
    from kbert.training.trainer import PretrainingTrainer

    with strategy.scope():
        model = BertPretrainer(config)
        optimizer = LAMB(1e-4, weight_decay=0.01)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        trainer = PretrainingTrainer(
            strategy, model, optimizer,
            lambda context: tf.data.Dataset.from_tensors(batch).unbatch().batch(
                context.get_per_replica_batch_size(FLAGS.batch_size), drop_remainder=True).repeat(),
            global_step=step, global_batch_size=FLAGS.batch_size)
    return lambda steps: trainer.train(tf.constant(steps))


def model_garden_loop(config, batch, strategy):
    """Model Garden's `MaskedLMTask.train_step` with its LAMB in a `tf.range` loop; returns `run(steps)`."""
    from official.modeling.optimization.lamb import LAMB

    from model_garden_peer import model_garden_batch, model_garden_task

    with strategy.scope():
        task = model_garden_task(config)
        model = task.build_model()
        metrics = task.build_metrics()
        optimizer = LAMB(1e-4, weight_decay_rate=0.01,
                         exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    dataset = strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensors(model_garden_batch(batch)).unbatch().batch(
            context.get_per_replica_batch_size(FLAGS.batch_size), drop_remainder=True).repeat())
    iterator = iter(dataset)

    @tf.function
    def loop(steps):
        for _ in tf.range(steps):
            strategy.run(lambda b: task.train_step(b, model, optimizer, metrics), (next(iterator),))

    def run(steps):
        loop(tf.constant(steps))
        return float(metrics[0].result())
    return run


def timed(run, steps: int) -> float:
    start = time.perf_counter()
    run(steps)  # both read a metric at the end, so the work has finished
    return time.perf_counter() - start


def main(argv):
    del argv
    from kbert.modeling import BertConfig
    from kbert.training.strategy import make_strategy
    from model_garden_peer import measured_peak_flops, synthetic_batch, training_flops_per_sequence

    config = BertConfig.load(FLAGS.model)
    batch = synthetic_batch(config, FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions)
    strategy = make_strategy(FLAGS.strategy)
    contestants = {"model_garden (tf_keras MaskedLMTask, LAMB)": model_garden_loop(config, batch, strategy),
                   "kbert (PretrainingTrainer, LAMB)": kbert_loop(config, batch, strategy)}
    for run in contestants.values():  # trace and warm up
        timed(run, 2)
    times = {name: [] for name in contestants}
    peaks = []
    for _ in range(FLAGS.rounds):
        for name, run in contestants.items():
            times[name].append(timed(run, FLAGS.steps))
        peaks.append(measured_peak_flops())
    # The best matmul rate of the run: on a shared machine a single measurement can land in a busy moment.
    peak = max(peaks)
    flops = training_flops_per_sequence(config, FLAGS.seq_length, FLAGS.max_predictions)
    print(f"\n{FLAGS.model}, seq {FLAGS.seq_length}, global batch {FLAGS.batch_size}, float32, "
          f"{type(strategy).__name__} x{strategy.num_replicas_in_sync}, {FLAGS.steps} steps x {FLAGS.rounds} "
          f"rounds; float32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(f"{'contestant':44s} {'seq/s':>8s} {'MFU':>7s}")
    rate = {}
    for name, ts in times.items():
        rate[name] = FLAGS.batch_size * FLAGS.steps / statistics.median(ts)
        print(f"{name:44s} {rate[name]:8.1f} {rate[name] * flops / peak:7.1%}")
    peer, ours = list(contestants)
    print(f"ratio kbert / model_garden: {rate[ours] / rate[peer]:.2f}x")


if __name__ == "__main__":
    app.run(main)
