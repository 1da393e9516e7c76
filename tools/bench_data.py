"""Benchmark: kbert's create_pretraining_data against Model Garden's, same corpus and settings, two corpus sizes.

Runs each tool as a subprocess (end to end: interpreter and TensorFlow start-up included) and samples its process
tree every 0.2 s for peak memory: PSS summed over the tree (pages shared by forked workers counted once) and the
largest single-process RSS. Corpus "Nx" is the corpus N times over, documents shuffled (`--scales`). Both tools
spend about 5 s importing TensorFlow before any work, which dominates small corpora; so besides the end-to-end
ratios it prints each tool's steady rate, (instances of the larger corpus - of the smaller) / (difference of
their wall times), in which every fixed cost cancels. Prints the speed ratios last.

    python tools/bench_data.py --corpus=runs/demo-.../data/train.txt --vocab_file=vocab.txt --dupe_factor=3 \\
        --scales=1,8
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import psutil
import bench_flags
from absl import app, flags

FLAGS = flags.FLAGS
bench_flags.define("seq_length", "max_predictions", "work_dir", required=("corpus", "vocab_file"),
                   notes={"work_dir": "Default: a temporary one."})
flags.DEFINE_integer("dupe_factor", 3, "Passes over the data (both tools).")
flags.DEFINE_integer("num_workers", 2, "kbert worker processes.")
flags.DEFINE_float("work_unit_mb", 1.0, "kbert work-unit size.")
flags.DEFINE_list("scales", ["1", "8"], "Corpus sizes, in copies of --corpus: the smallest and the largest give "
                  "the steady rates.")


class Run(NamedTuple):
    corpus: str
    size_mb: float
    tool: str
    instances: int
    seconds: float
    pss_mb: float
    rss_mb: float

    @property
    def rate(self) -> float:
        return self.instances / self.seconds


def _scaled_corpus(path: str, copies: int, out: str) -> None:
    with open(path, "rb") as f:
        documents = [d for d in f.read().split(b"\n\n") if d.strip()]
    documents = documents * copies
    random.Random(0).shuffle(documents)
    with open(out, "wb") as f:
        f.write(b"\n\n".join(d.strip(b"\n") for d in documents) + b"\n")


def _measure(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak summed PSS (MB) and peak single-process RSS (MB) of a command's process tree."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    process = psutil.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak_pss = peak_rss = 0.0
    while process.poll() is None:
        pss = 0.0
        try:
            tree = [process] + process.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                info = p.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            pss += info.pss
            peak_rss = max(peak_rss, info.rss)
        peak_pss = max(peak_pss, pss)
        time.sleep(0.2)
    seconds = time.time() - start
    stderr = process.stderr.read().decode(errors="replace")
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return seconds, peak_pss / 2**20, peak_rss / 2**20


def _count(path: str) -> int:
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(path))


def main(argv: list[str]) -> None:
    del argv
    work = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_data_")
    os.makedirs(work, exist_ok=True)
    scales = sorted(int(k) for k in FLAGS.scales)
    corpora = {}
    for copies in scales:
        corpora[f"{copies}x"] = FLAGS.corpus if copies == 1 else os.path.join(work, f"corpus_{copies}x.txt")
        if copies > 1:
            _scaled_corpus(FLAGS.corpus, copies, corpora[f"{copies}x"])
    common = [
        f"--vocab_file={FLAGS.vocab_file}", "--do_lower_case=true", f"--max_seq_length={FLAGS.seq_length}",
        f"--max_predictions_per_seq={FLAGS.max_predictions}", f"--dupe_factor={FLAGS.dupe_factor}",
        "--masked_lm_prob=0.15", "--short_seq_prob=0.1", "--random_seed=12345",
    ]
    startup = {
        tool: _measure([sys.executable, "-c", f"import {module}"])[0]
        for tool, module in (("kbert", "kbert.cli.create_pretraining_data"),
                             ("model_garden", "official.nlp.data.create_pretraining_data"))
    }
    rows = []
    for label, corpus in corpora.items():
        size_mb = os.path.getsize(corpus) / 1e6
        for tool, module, extra in (
            ("kbert", "kbert.cli.create_pretraining_data",
             [f"--num_workers={FLAGS.num_workers}", f"--work_unit_mb={FLAGS.work_unit_mb}"]),
            ("model_garden", "official.nlp.data.create_pretraining_data", []),
        ):
            out = os.path.join(work, f"{tool}_{label}.tfrecord")
            command = [sys.executable, "-m", module, f"--input_file={corpus}", f"--output_file={out}", *common, *extra]
            seconds, pss, rss = _measure(command)
            instances = _count(out)
            rows.append(Run(label, size_mb, tool, instances, seconds, pss, rss))
            print(f"{label} {tool}: {instances:,} instances in {seconds:.1f} s", flush=True)
    print(f"\ncpu cores: {os.cpu_count()}, load average at end: {os.getloadavg()[0]:.1f}; "
          f"dupe_factor={FLAGS.dupe_factor}, seq_length={FLAGS.seq_length}, kbert workers={FLAGS.num_workers}")
    print(f"start-up (import only): kbert {startup['kbert']:.1f} s, model_garden {startup['model_garden']:.1f} s")
    print(f"{'corpus':>8} {'MB':>6} {'tool':>13} {'instances':>10} {'wall s':>7} {'inst/s':>8} "
          f"{'peak PSS MB':>11} {'max RSS MB':>10}")
    for r in rows:
        print(f"{r.corpus:>8} {r.size_mb:6.1f} {r.tool:>13} {r.instances:10,} {r.seconds:7.1f} {r.rate:8,.0f} "
              f"{r.pss_mb:11,.0f} {r.rss_mb:10,.0f}")
    by = {(r.corpus, r.tool): r for r in rows}
    small, large = f"{scales[0]}x", f"{scales[-1]}x"
    steady = {}
    for tool in ("kbert", "model_garden"):
        first, last = by[(small, tool)], by[(large, tool)]
        steady[tool] = (last.instances - first.instances) / max(last.seconds - first.seconds, 1e-3)
    print(f"steady rate ({small} to {large}): kbert {steady['kbert']:,.0f} inst/s, model_garden "
          f"{steady['model_garden']:,.0f} inst/s: {steady['kbert'] / steady['model_garden']:.1f}x")
    for label in corpora:
        ratio = by[(label, "kbert")].rate / by[(label, "model_garden")].rate
        print(f"speed ratio kbert / model_garden, end to end ({label} corpus): {ratio:.1f}x")


if __name__ == "__main__":
    app.run(main)
