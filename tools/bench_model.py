"""Training-step throughput of kbert's BertPretrainer vs Model Garden's BERT pretrainer, side by side in one run.

    python tools/bench_model.py --model=bert_small --seq_length=128 --batch_size=32

Both train the same config on the same synthetic batch with Adam, each in its own tf.function; rounds alternate
between the two so machine noise hits both. Prints the CPU's vector ISA (and any `ONEDNN_MAX_CPU_ISA` cap),
sequences/s, MFU against a large float32 matmul measured in the same run (the best of one measurement per round),
and the kbert / Model Garden ratio last. Where the cap is below AVX-512 on an AVX-512 CPU (`ONEDNN_MAX_CPU_ISA=AVX2`),
the mixed_bfloat16 row is left out: oneDNN would abort on it.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
from absl import app, flags  # noqa: E402
from model_garden_peer import kbert_train_step, model_garden_train_step, synthetic_batch  # noqa: E402

from kbert.modeling import BertConfig  # noqa: E402
from kbert.runtime.cpu_isa import cpu_flags, onednn_cap  # noqa: E402
from kbert.runtime.flops import model_flops_utilisation, training_flops_per_sequence  # noqa: E402
from kbert.training.peak_flops import measured_peak_flops  # noqa: E402

bench_flags.define("model", "seq_length", "max_predictions", "batch_size", "steps", rounds=4)
flags.DEFINE_bool("jit_compile", False, "XLA-compile both training steps.")
flags.DEFINE_bool("with_bfloat16", True, "Also time kbert under the mixed_bfloat16 policy (extra row).")
FLAGS = flags.FLAGS
_CAPS_BELOW_AVX512 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"}


def timed_round(step, batch, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loss = step(batch)
    float(loss)
    return time.perf_counter() - start


def bfloat16_row_runs() -> bool:
    """False where `ONEDNN_MAX_CPU_ISA` caps oneDNN below AVX-512 on an AVX-512 CPU: TensorFlow, which reads the CPU
    and not the cap, still sends bfloat16 matmuls to oneDNN, which then has no kernel for them and aborts."""
    return not ("avx512f" in cpu_flags() and onednn_cap() in _CAPS_BELOW_AVX512)


def main(argv):
    del argv
    with_bfloat16 = FLAGS.with_bfloat16 and bfloat16_row_runs()
    if FLAGS.with_bfloat16 and not with_bfloat16:
        print("No mixed_bfloat16 row: ONEDNN_MAX_CPU_ISA caps oneDNN below this CPU's AVX-512 (it would abort).")
    config = BertConfig.load(FLAGS.model)
    batch = synthetic_batch(config, FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions)
    contestants = {
        "model_garden (tf_keras, float32)": model_garden_train_step(config, jit_compile=FLAGS.jit_compile)[0],
        "kbert (keras 3, float32)": kbert_train_step(config, FLAGS.jit_compile),
    }
    if with_bfloat16:
        contestants["kbert (keras 3, mixed_bfloat16)"] = kbert_train_step(config, FLAGS.jit_compile, "mixed_bfloat16")
    for step in contestants.values():  # trace and warm up
        timed_round(step, batch, 2)
    times = {name: [] for name in contestants}
    peaks = []
    for _ in range(FLAGS.rounds):
        for name, step in contestants.items():
            times[name].append(timed_round(step, batch, FLAGS.steps))
        peaks.append(measured_peak_flops())
    peak = max(peaks)  # the best of one measurement per round: on a shared machine one can land in a busy moment
    flops = training_flops_per_sequence(config, FLAGS.seq_length, FLAGS.max_predictions)
    print(
        f"\n{FLAGS.model}, seq {FLAGS.seq_length}, batch {FLAGS.batch_size}, jit_compile={FLAGS.jit_compile}; "
        f"float32 matmul peak {peak / 1e9:.1f} GFLOP/s"
    )
    print(bench_flags.cpu_isa())
    print(f"{'contestant':36s} {'seq/s':>8s} {'MFU':>7s}")
    rate = {}
    for name, ts in times.items():
        rate[name] = FLAGS.batch_size * FLAGS.steps / statistics.median(ts)
        print(f"{name:36s} {rate[name]:8.1f} {model_flops_utilisation(rate[name], flops, peak):7.1%}")
    names = list(contestants)
    if with_bfloat16:
        print(f"ratio kbert bf16 / model_garden: {rate[names[2]] / rate[names[0]]:.2f}x")
    print(f"ratio kbert / model_garden (float32): {rate[names[1]] / rate[names[0]]:.2f}x")


if __name__ == "__main__":
    app.run(main)
