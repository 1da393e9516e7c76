"""Benchmark: sequences per second through kbert-pretrain on packed records against the same records unpacked.

A row costs the same packed or not, so packing gains what the padding it removes is worth: the bound is
fill after / fill before (real tokens per row). The benchmark builds a corpus with Wikipedia-like lengths from
`--corpus` offline: it regroups the corpus's sentences into documents whose sentence counts follow a lognormal
distribution (`--document_sentences`, its median), so that at seq 512 about half of all tokens are padding
(Graphcore's Wikipedia histogram: mean real length 255.8 of 512). For each `--seq_lengths` it writes NSP records
(kbert-create-pretraining-data), packs them (kbert-pack-pretraining-data), and trains the same model with the same
batch in rows on both, alternating `--rounds` times; with `--full_sentences` it also writes MLM-only records
(--objective=mlm) and trains on them. It prints the padding, the sequences per second (summary.json, first loop
excluded) and, last, packed against unpacked at the first sequence length with the share of the bound reached.

    python tools/bench_packing.py --corpus=../shared/data/sample.txt --vocab_file=vocab.txt --work_dir=/tmp/bp
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
BASE_CONFIG = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "configs", "experiments", "bert_tiny_cpu.yaml"
)
bench_flags.define(
    "model",
    "batch_size",
    "rounds",
    required=("corpus", "vocab_file", "work_dir"),
    model="bert_tiny",
    batch_size=8,
    rounds=3,
    notes={"batch_size": "Rows per step, packed or not."},
)
flags.DEFINE_list("seq_lengths", ["512", "128"], "Sequence lengths; the first one's ratio is printed last.")
flags.DEFINE_integer(
    "steps", 40, "Optimizer steps per run (four loops; the first, which builds the graph, is not timed)."
)
flags.DEFINE_float("document_sentences", 10.0, "Median sentences per document of the regrouped corpus.")
flags.DEFINE_integer("max_sequences_per_pack", 3, "Sequences per packed row at most.")
flags.DEFINE_bool("full_sentences", True, "Also train on MLM-only full-sentence records.")


def _regrouped_corpus(path: str, out: str, median_sentences: float, seed: int = 0) -> int:
    """The corpus's sentences in order, cut into documents of lognormal sentence counts; returns the count."""
    with open(path, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    rng = np.random.default_rng(seed)
    documents, start = [], 0
    while start < len(sentences):
        size = max(1, int(round(rng.lognormal(np.log(median_sentences), 1.0))))
        documents.append("\n".join(sentences[start : start + size]))
        start += size
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n\n".join(documents) + "\n")
    return len(documents)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{' '.join(command[:4])} ... failed:\n{result.stderr[-3000:]}")


def _records(corpus: str, seq_length: int, name: str, objective: str) -> str:
    out = os.path.join(FLAGS.work_dir, f"{name}-{seq_length}.tfrecord")
    if not os.path.exists(out):
        _run(
            [
                sys.executable,
                "-m",
                "kbert.cli.create_pretraining_data",
                f"--input_file={corpus}",
                f"--output_file={out}",
                f"--vocab_file={FLAGS.vocab_file}",
                f"--max_seq_length={seq_length}",
                f"--max_predictions_per_seq={_predictions(seq_length)}",
                "--dupe_factor=1",
                "--num_workers=2",
                f"--objective={objective}",
            ]
        )
    return out


def _packed(records: str) -> str:
    out = records.replace(".tfrecord", "-packed.tfrecord")
    if not os.path.exists(out):
        _run(
            [
                sys.executable,
                "-m",
                "kbert.cli.pack_pretraining_data",
                f"--input_file={records}",
                f"--output_file={out}",
                f"--max_sequences_per_pack={FLAGS.max_sequences_per_pack}",
                "--num_workers=2",
            ]
        )
    return out


def _predictions(seq_length: int) -> int:
    return max(1, round(0.15 * seq_length))


def _fill(path: str) -> tuple[float, float]:
    """(real tokens / all tokens, sequences per row) of a record file."""
    from kbert.data import validation

    real = total = rows = sequences = 0
    for layout, arrays in validation.scan_file(path, None, None, num_records=None):
        mask = arrays["input_mask"]
        real, total, rows = real + int((mask > 0).sum()), total + mask.size, rows + len(mask)
        sequences += int(arrays["next_sentence_weights"].sum()) if layout.sequences_per_row else len(mask)
    return real / total, sequences / rows


def _throughput(records: str, seq_length: int, name: str, round_index: int) -> float:
    model_dir = os.path.join(FLAGS.work_dir, "runs", f"{name}-{seq_length}-{round_index}")
    loop = FLAGS.steps // 4
    overrides = {
        "model.bert": FLAGS.model,
        "data.train_files": records,
        "data.seq_length": seq_length,
        "data.max_predictions": _predictions(seq_length),
        "train.global_batch_size": FLAGS.batch_size,
        "train.total_steps": FLAGS.steps,
        "train.steps_per_loop": loop,
        "train.checkpoint_interval": FLAGS.steps,
        "train.summary_interval": loop,
        "schedule.warmup_steps": 0,
    }
    _run(
        [
            sys.executable,
            "-m",
            "kbert.cli.pretrain",
            f"--config_file={BASE_CONFIG}",
            "--params_override=" + ",".join(f"{k}={v}" for k, v in overrides.items()),
            f"--model_dir={model_dir}",
            "--device=cpu",
        ]
    )
    with open(os.path.join(model_dir, "summary.json")) as f:
        return json.load(f)["sequences_per_second"]


def _contest(files: dict[str, str], seq_length: int) -> dict[str, float]:
    """Median sequences per second of each file, the contestants alternating round by round."""
    rates: dict[str, list[float]] = {name: [] for name in files}
    for round_index in range(FLAGS.rounds):
        for name, path in files.items():
            rates[name].append(_throughput(path, seq_length, name, round_index))
    return {name: statistics.median(values) for name, values in rates.items()}


def main(argv):
    del argv
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    corpus = os.path.join(FLAGS.work_dir, "corpus.txt")
    documents = _regrouped_corpus(FLAGS.corpus, corpus, FLAGS.document_sentences)
    print(
        f"corpus: {documents:,} documents of lognormal sentence counts (median {FLAGS.document_sentences}) from "
        f"{FLAGS.corpus}; model {FLAGS.model}, batch {FLAGS.batch_size} rows, {FLAGS.steps} steps, "
        f"median of {FLAGS.rounds} alternating rounds"
    )
    results = []
    for seq_length in map(int, FLAGS.seq_lengths):
        files = {"unpacked": _records(corpus, seq_length, "nsp", "nsp")}
        files["packed"] = _packed(files["unpacked"])
        if FLAGS.full_sentences:
            files["full_sentences"] = _records(corpus, seq_length, "mlm", "mlm")
        fills = {name: _fill(path) for name, path in files.items()}
        rates = _contest(files, seq_length)
        print(f"\nseq {seq_length}:")
        for name in files:
            fill, per_row = fills[name]
            print(
                f"  {name:15s} padding {100 * (1 - fill):5.2f}% | {per_row:.2f} sequences a row | "
                f"{rates[name]:8.1f} seq/s | {rates[name] / per_row * fill * seq_length:9.0f} real tokens/s"
            )
        bound = fills["packed"][0] / fills["unpacked"][0]
        ratio = rates["packed"] / rates["unpacked"]
        results.append((seq_length, ratio, bound))
        if FLAGS.full_sentences:
            print(
                f"  full sentences / unpacked NSP records: {rates['full_sentences'] / rates['unpacked']:.2f}x "
                "sequences per second"
            )
    print()
    for seq_length, ratio, bound in reversed(results):
        print(
            f"seq {seq_length}: packed / unpacked {ratio:.2f}x sequences per second; bound (fill after / fill "
            f"before) {bound:.2f}x; {100 * ratio / bound:.0f}% of the bound"
        )
    print(f"{results[0][1]:.2f}x")


if __name__ == "__main__":
    app.run(main)
