"""Benchmark: kbert's create_pretraining_data against Model Garden's, same corpus and settings, two corpus sizes.

Runs each tool as a subprocess (end to end: interpreter and TensorFlow start-up included) and samples its process
tree every 0.2 s for peak memory: PSS summed over the tree (pages shared by forked workers counted once) and the
largest single-process RSS. The second corpus is the first one twice, documents shuffled. Also times a process that
only imports each tool, and reports instances/s over the wall time minus that start-up. Prints the end-to-end speed
ratios last.

    python tools/bench_data.py --dupe_factor=3
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time

import psutil
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", "/work/shared/data/pydoc_sample.txt", "Text in BERT's pretraining format.")
flags.DEFINE_string("vocab_file", "/work/shared/data/bert_uncased_vocab.txt", "WordPiece vocabulary.")
flags.DEFINE_integer("dupe_factor", 3, "Passes over the data (both tools).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
flags.DEFINE_integer("num_workers", 2, "kbert worker processes.")
flags.DEFINE_float("work_unit_mb", 1.0, "kbert work-unit size.")
flags.DEFINE_string("work_dir", None, "Scratch directory (default: a temporary one).")


def _doubled_corpus(path: str, out: str) -> None:
    with open(path, "rb") as f:
        documents = [d for d in f.read().split(b"\n\n") if d.strip()]
    documents = documents * 2
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
    doubled = os.path.join(work, "corpus_2x.txt")
    _doubled_corpus(FLAGS.corpus, doubled)
    common = [
        f"--vocab_file={FLAGS.vocab_file}", "--do_lower_case=true", f"--max_seq_length={FLAGS.max_seq_length}",
        f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}", f"--dupe_factor={FLAGS.dupe_factor}",
        "--masked_lm_prob=0.15", "--short_seq_prob=0.1", "--random_seed=12345",
    ]
    startup = {
        tool: _measure([sys.executable, "-c", f"import {module}"])[0]
        for tool, module in (("kbert", "kbert.cli.create_pretraining_data"),
                             ("model_garden", "official.nlp.data.create_pretraining_data"))
    }
    rows = []
    for label, corpus in (("1x", FLAGS.corpus), ("2x", doubled)):
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
            rows.append((label, size_mb, tool, instances, seconds, instances / seconds, pss, rss))
            print(f"{label} {tool}: {instances:,} instances in {seconds:.1f} s", flush=True)
    print(f"\ncpu cores: {os.cpu_count()}, load average at end: {os.getloadavg()[0]:.1f}; "
          f"dupe_factor={FLAGS.dupe_factor}, max_seq_length={FLAGS.max_seq_length}, kbert workers={FLAGS.num_workers}")
    print(f"start-up (import only): kbert {startup['kbert']:.1f} s, model_garden {startup['model_garden']:.1f} s")
    print(f"{'corpus':>8} {'MB':>5} {'tool':>13} {'instances':>10} {'wall s':>7} {'inst/s':>8} "
          f"{'inst/s ex start-up':>18} {'peak PSS MB':>11} {'max RSS MB':>10}")
    work_rates = {}
    for label, size_mb, tool, instances, seconds, rate, pss, rss in rows:
        work_rates[(label, tool)] = instances / max(seconds - startup[tool], 1e-3)
        print(f"{label:>8} {size_mb:5.1f} {tool:>13} {instances:10,} {seconds:7.1f} {rate:8,.0f} "
              f"{work_rates[(label, tool)]:18,.0f} {pss:11,.0f} {rss:10,.0f}")
    for label in ("1x", "2x"):
        ratio = work_rates[(label, "kbert")] / work_rates[(label, "model_garden")]
        print(f"speed ratio excluding start-up ({label} corpus): {ratio:.1f}x")
    rates = {(r[0], r[2]): r[5] for r in rows}
    for label in ("1x", "2x"):
        ratio = rates[(label, "kbert")] / rates[(label, "model_garden")]
        print(f"speed ratio kbert / model_garden ({label} corpus): {ratio:.1f}x")


if __name__ == "__main__":
    app.run(main)
