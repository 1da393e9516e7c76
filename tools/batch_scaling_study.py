"""The LAMB paper's central claim at small scale: LAMB vs AdamW vs LARS as the global batch grows.

Every run sees the same number of sequences (equal epochs), so a 4x larger batch takes 4x fewer steps. The peak
learning rate of each optimizer is tuned at the smallest batch (a grid of multipliers around a default, the best
final held-out MLM loss wins) and scaled by the square-root rule, lr(B) = lr(B0) * sqrt(B / B0), with linear
warmup over `--warmup_fraction` of the steps and polynomial (power 0.5) decay. Batches above `--max_micro_batch`
use gradient accumulation. Reported per optimizer and batch: the final held-out MLM loss and the steps (and
sequences) to reach a target held-out MLM loss; as a Markdown table, a JSON file and a PNG.

    python tools/batch_scaling_study.py --out=runs/batch_scaling --batch_sizes=32,128,512
    python tools/batch_scaling_study.py --data_dir=runs/demo/data ...   # reuse the demo's TFRecords

Without --data_dir it builds the demo's data (docstring corpus, vocabulary, TFRecords) into --out/data.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import bench_flags
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "runs/batch_scaling", "Output folder: results.md, results.json, batch_scaling.png.")
flags.DEFINE_string("data_dir", None, "A folder with train.tfrecord, heldout.tfrecord and vocab.txt (as the demo "
                    "writes); default: build them into --out/data.")
flags.DEFINE_list("optimizers", ["lamb", "adamw", "lars"], "Optimizers to compare.")
flags.DEFINE_list("batch_sizes", ["32", "128", "512"], "Global batch sizes, smallest first (the tuning batch).")
flags.DEFINE_integer("sequences", 32 * 400, "Training sequences per run (equal epochs at every batch size).")
flags.DEFINE_list("base_learning_rates", ["lamb=5e-3", "adamw=2e-3", "lars=1.0"],
                  "Centre of the learning-rate grid at the smallest batch, per optimizer.")
flags.DEFINE_list("tune_multipliers", ["0.333", "1", "3"], "Grid of multipliers of the base rate tried at the "
                  "smallest batch; '1' alone skips tuning.")
flags.DEFINE_float("warmup_fraction", 0.1, "Warmup steps as a fraction of each run's steps.")
flags.DEFINE_integer("eval_points", 10, "Held-out evaluations per run, evenly spaced in steps.")
flags.DEFINE_integer("eval_sequences", 512, "Held-out sequences per evaluation.")
flags.DEFINE_float("target_loss", None, "Held-out MLM loss target; default: the worst final loss among the "
                   "optimizers at the smallest batch, plus 1%.")
flags.DEFINE_integer("max_micro_batch", 256, "Largest batch run at once; bigger ones accumulate gradients.")
flags.DEFINE_integer("num_layers", 2, "Transformer blocks.")
flags.DEFINE_integer("hidden_size", 128, "Hidden size (heads of 64, feed-forward 4x).")
bench_flags.define(seq_length=64, max_predictions=10, notes={"seq_length": "Used when building the data.",
                                                               "max_predictions": "Used when building the data."})
flags.DEFINE_string("from_results", None, "Only redraw the table and plot (e.g. with another --target_loss) from "
                    "a results.json of an earlier run, into --out.")
flags.DEFINE_integer("seed", 12345, "Seed of the weights (the same initial model for every run) and the data order.")


@dataclasses.dataclass
class Run:
    """One training run: its settings, held-out MLM loss at each evaluated step, and seconds (evaluations included)."""

    optimizer: str
    batch_size: int
    learning_rate: float
    steps: int
    warmup_steps: int
    accumulation_steps: int
    eval_steps: list
    eval_losses: list
    wall_seconds: float

    @property
    def final_loss(self) -> float:
        return self.eval_losses[-1]

    def steps_to(self, target: float):
        """The first evaluated step whose held-out MLM loss is at most `target`, or None."""
        return next((s for s, loss in zip(self.eval_steps, self.eval_losses) if loss <= target), None)


def _data(out: str):
    from kbert.data.vocab_file import read_vocabulary
    from kbert.data.prepare_data import DataSettings, PreparedData, prepare_data

    if FLAGS.data_dir:
        paths = {name: os.path.join(FLAGS.data_dir, name) for name in ("train.tfrecord", "heldout.tfrecord",
                                                                       "vocab.txt")}
        missing = [p for p in paths.values() if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"--data_dir={FLAGS.data_dir} lacks {', '.join(missing)}; point it at a demo's "
                                    "data folder or leave it out to build the data.")
        vocab_size = len(read_vocabulary(paths["vocab.txt"]))
        return PreparedData(paths["train.tfrecord"], paths["heldout.tfrecord"], paths["vocab.txt"], vocab_size, 0, 0,
                            text_file="", sources_file="")
    return prepare_data(DataSettings(seq_length=FLAGS.seq_length, max_predictions=FLAGS.max_predictions,
                                     seed=FLAGS.seed), os.path.join(out, "data"), step_format="[data {}/4]")


def _experiment(data, optimizer: str, batch_size: int, learning_rate: float, steps: int, warmup: int,
                accumulation: int):
    from kbert.experiment import load_experiment

    h = FLAGS.hidden_size
    eval_batch = min(64, FLAGS.eval_sequences)
    override = {
        "model": {"bert": "bert_tiny", "overrides": {
            "vocab_size": data.vocab_size, "num_hidden_layers": FLAGS.num_layers, "hidden_size": h,
            "num_attention_heads": max(1, h // 64), "intermediate_size": 4 * h}},
        "data": {"train_files": data.train_files, "eval_files": data.eval_files,
                 "seq_length": FLAGS.seq_length, "max_predictions": FLAGS.max_predictions},
        "optimizer": {"type": optimizer, "weight_decay": 0.01, "epsilon": 1e-6},
        "schedule": {"peak_learning_rate": learning_rate, "warmup_steps": warmup, "power": 0.5},
        "train": {"global_batch_size": batch_size, "gradient_accumulation_steps": accumulation,
                  "total_steps": steps, "steps_per_loop": 1, "summary_interval": 1, "checkpoint_interval": 1,
                  "seed": FLAGS.seed},
        # About --eval_sequences held-out sequences, the same ones at every evaluation (read in file order).
        "eval": {"global_batch_size": eval_batch, "steps": max(1, FLAGS.eval_sequences // eval_batch)},
    }
    return load_experiment(params_override=json.dumps(override))


def train_run(data, optimizer: str, batch_size: int, learning_rate: float) -> Run:
    import tensorflow as tf

    from kbert.training.loop import evaluate
    from kbert.training.trainer_from_config import trainer_from_config

    steps = max(1, FLAGS.sequences // batch_size)
    warmup = max(1, round(FLAGS.warmup_fraction * steps))
    accumulation = max(1, batch_size // FLAGS.max_micro_batch)
    config = _experiment(data, optimizer, batch_size, learning_rate, steps, warmup, accumulation)
    trainer = trainer_from_config(config, tf.distribute.OneDeviceStrategy("/cpu:0"))
    points = sorted({max(1, round(steps * (i + 1) / FLAGS.eval_points)) for i in range(FLAGS.eval_points)})
    eval_steps, losses, done = [], [], 0
    start = time.perf_counter()
    for point in points:
        metrics = trainer.train(tf.constant(point - done, tf.int32))
        done = point
        loss = (evaluate(config, trainer.strategy, trainer.model)["masked_lm_loss"] if math.isfinite(metrics["loss"])
                else float("nan"))
        eval_steps.append(point)
        losses.append(loss)
        if not math.isfinite(loss):
            break  # diverged: the rest of the run would be NaN too
    run = Run(optimizer, batch_size, learning_rate, steps, warmup, accumulation, eval_steps, losses,
              time.perf_counter() - start)
    print(f"{optimizer:>5} batch {batch_size:>5} lr {learning_rate:.3g} ({steps} steps, warmup {warmup}, "
          f"accumulation {accumulation}): held-out MLM loss {' '.join(f'{x:.3f}' for x in losses)} "
          f"[{run.wall_seconds:.0f} s]", flush=True)
    return run


def _best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.final_loss if math.isfinite(r.final_loss) else float("inf"))


def results_table(runs: list[Run], tuning: dict[str, list[Run]], target: float) -> str:
    rows = [f"Target held-out MLM loss: {target:.3f}. Steps to target are the first of {len(runs[0].eval_steps)} "
            "evenly spaced evaluations at or below it (-: not reached).", "",
            "| optimizer | batch | peak lr | steps | warmup | accum. | final held-out MLM loss | steps to target "
            "| sequences to target | time (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        hit = r.steps_to(target)
        rows.append(f"| {r.optimizer} | {r.batch_size} | {r.learning_rate:.3g} | {r.steps} | {r.warmup_steps} "
                    f"| {r.accumulation_steps} | {r.final_loss:.3f} | {hit if hit else '-'} "
                    f"| {hit * r.batch_size if hit else '-'} | {r.wall_seconds:.0f} |")
    rows += ["", f"Tuning at batch {runs[0].batch_size} (final held-out MLM loss by peak lr):", ""]
    for name, candidates in tuning.items():
        rows.append(f"- {name}: " + ", ".join(f"{r.learning_rate:.3g} -> {r.final_loss:.3f}" for r in candidates))
    return "\n".join(rows)


def plot(runs: list[Run], target: float, path: str) -> None:
    """Left: final held-out loss against batch size. Right: held-out loss against sequences seen, every run."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
    # A diverged run would squash every other curve: cap the scale 2.5 nats above the best loss.
    finite = [x for r in runs for x in r.eval_losses if math.isfinite(x)]
    low, top = min(finite) - 0.05, min(max(finite), min(finite) + 2.5) + 0.05
    batches = sorted({r.batch_size for r in runs})
    styles = dict(zip(batches, ["-", "--", ":", "-."] * len(batches)))
    for name in dict.fromkeys(r.optimizer for r in runs):
        mine = [r for r in runs if r.optimizer == name]
        line, = left.plot([r.batch_size for r in mine], [r.final_loss for r in mine], marker="o", label=name)
        for r in mine:
            off_scale = " (off scale)" if max(r.eval_losses) > top or not math.isfinite(r.final_loss) else ""
            right.plot([s * r.batch_size for s in r.eval_steps], r.eval_losses, styles[r.batch_size],
                       color=line.get_color(), label=f"{name} {r.batch_size}{off_scale}")
    right.axhline(target, color="k", linewidth=0.8, linestyle=":")
    left.set_xscale("log", base=2)
    left.set_xlabel("global batch size (equal epochs)")
    left.set_ylabel("final held-out MLM loss")
    right.set_xlabel("training sequences seen")
    right.set_ylabel("held-out MLM loss")
    right.set_title(f"dotted: target {target:.2f}", fontsize=9)
    for ax in (left, right):
        ax.set_ylim(low, top)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3 if ax is right else 1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(runs: list[Run], tuning: dict[str, list[Run]], out: str) -> str:
    """Writes results.md, results.json and batch_scaling.png into `out`; returns the table."""
    smallest = min(r.batch_size for r in runs)
    finals = [r.final_loss for r in runs if r.batch_size == smallest and math.isfinite(r.final_loss)]
    target = FLAGS.target_loss if FLAGS.target_loss is not None else max(finals) * 1.01
    table = results_table(runs, tuning, target)
    paths = {name: os.path.join(out, name) for name in ("results.md", "results.json", "batch_scaling.png")}
    with open(paths["results.md"], "w") as f:
        f.write(table + "\n")
    with open(paths["results.json"], "w") as f:
        json.dump({"target_loss": target, "runs": [dataclasses.asdict(r) for r in runs],
                   "tuning": {k: [dataclasses.asdict(r) for r in v] for k, v in tuning.items()},
                   "flags": {k: FLAGS[k].value for k in ("sequences", "batch_sizes", "num_layers", "hidden_size",
                                                          "seq_length", "warmup_fraction", "max_micro_batch",
                                                          "eval_points")}},
                  f, indent=2)
    plot(runs, target, paths["batch_scaling.png"])
    print("\n" + table + "\n")
    print(f"wrote {', '.join(paths.values())}")
    return table


def _load_results(path: str) -> tuple[list[Run], dict[str, list[Run]]]:
    with open(path) as f:
        saved = json.load(f)
    return ([Run(**r) for r in saved["runs"]], {k: [Run(**r) for r in v] for k, v in saved["tuning"].items()})


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    if batch_sizes != sorted(batch_sizes) or batch_sizes[0] < 1:
        raise app.UsageError(f"--batch_sizes={','.join(FLAGS.batch_sizes)}: give positive sizes, smallest first.")
    base = {k: float(v) for k, v in (item.split("=") for item in FLAGS.base_learning_rates)}
    unknown = [o for o in FLAGS.optimizers if o not in base]
    if unknown:
        raise app.UsageError(f"--base_learning_rates has no rate for {', '.join(unknown)}.")
    import tensorflow as tf

    # Every run builds a new model, hence new traced functions; TF's "retracing" warnings say nothing here.
    tf.get_logger().setLevel("ERROR")
    os.makedirs(FLAGS.out, exist_ok=True)
    if FLAGS.from_results:
        write_report(*_load_results(FLAGS.from_results), FLAGS.out)
        return
    started = time.time()
    data = _data(FLAGS.out)
    runs, tuning = [], {}
    for name in FLAGS.optimizers:
        candidates = [train_run(data, name, batch_sizes[0], base[name] * float(m))
                      for m in FLAGS.tune_multipliers]
        tuning[name] = candidates
        best = _best(candidates)
        runs.append(best)
        for batch in batch_sizes[1:]:
            scaled = best.learning_rate * math.sqrt(batch / batch_sizes[0])
            runs.append(train_run(data, name, batch, scaled))
    write_report(runs, tuning, FLAGS.out)
    print(f"Done in {time.time() - started:,.0f} s.")


if __name__ == "__main__":
    app.run(main)
