"""The LAMB paper's large-batch claim, measured as the paper frames it: samples to a target held-out accuracy
against the global batch, for LAMB and AdamW.

Every run has the same budget of training sequences (equal epochs), so a 4x larger batch takes 4x fewer steps.
Each optimizer's peak rate is searched once, at the smallest batch (a grid of multipliers around a default; the
best final held-out masked-LM accuracy wins); every larger batch takes the paper's "untuned" rules from there
(kbert.bench.large_batch): the square-root rate, lr(B) = lr(B0) * sqrt(B / B0), and a warmup share of the steps
proportional to the batch (the paper's 1/320 at its smallest batch, 512, to 1/5 at 32K). Batches above
`--max_micro_batch` accumulate gradients. Held-out masked-LM accuracy is evaluated every `--eval_interval` samples,
the same held-out sequences and interval for every run; a run stops at the first evaluation at or above the target.
The target is `--target_mlm_accuracy`, or by default the lower of the optimizers' held-out accuracies at the
smallest batch after `--target_at` of the budget, a level both reach there with room to spare.

The claim holds where LAMB's samples to target stay within 20% of its smallest batch's to a larger batch than
AdamW's do. Prints the samples to target of every optimizer and batch, then the largest batch at which each stays
within 20%, LAMB's against AdamW's last; writes results.md, results.json and batch_scaling.png into --out.

    python tools/batch_scaling_study.py --out=runs/batch_scaling
    python tools/batch_scaling_study.py --data_dir=runs/demo/data ...   # reuse the demo's TFRecords

Without --data_dir it builds the demo's data (docstring corpus, vocabulary, TFRecords) into --out/data.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "runs/batch_scaling", "Output folder: results.md, results.json, batch_scaling.png.")
flags.DEFINE_string(
    "data_dir",
    None,
    "A folder with train.tfrecord, heldout.tfrecord and vocab.txt (as the demo "
    "writes); default: build them into --out/data.",
)
flags.DEFINE_list("optimizers", ["lamb", "adamw"], "Optimizers to compare (lars too, if asked).")
flags.DEFINE_list(
    "batch_sizes",
    ["64", "128", "256", "512", "1024", "2048"],
    "Global batch sizes, smallest first (the tuning batch); at least 4 to see a trend.",
)
flags.DEFINE_integer("sequences", 64 * 3200, "Training sequences per run (equal epochs at every batch size).")
flags.DEFINE_list(
    "base_learning_rates",
    ["lamb=1e-2", "adamw=2e-3", "lars=1.0"],
    "Centre of the learning-rate grid at the smallest batch, per optimizer.",
)
flags.DEFINE_list(
    "tune_multipliers",
    ["0.333", "1", "3"],
    "Grid of multipliers of the base rate tried at the smallest batch; '1' alone skips the search.",
)
flags.DEFINE_float(
    "warmup_share",
    1 / 320,
    "Warmup share of the steps at the smallest batch (the paper's at its smallest); it grows with the batch.",
)
flags.DEFINE_integer(
    "eval_interval",
    0,
    "Training samples between held-out evaluations, the same for every run; "
    "0: about a twentieth of --sequences, in whole largest batches (so every batch size is evaluated "
    "at the same samples).",
)
flags.DEFINE_integer("eval_sequences", 512, "Held-out sequences per evaluation (the same ones every time).")
flags.DEFINE_float("target_mlm_accuracy", None, "Held-out masked-LM accuracy to reach; default: see --target_at.")
flags.DEFINE_float(
    "target_at",
    0.5,
    "Default target: the lowest of the optimizers' held-out accuracies at the "
    "smallest batch after this share of the budget.",
)
flags.DEFINE_integer("max_micro_batch", 256, "Largest batch run at once; bigger ones accumulate gradients.")
flags.DEFINE_integer("num_layers", 2, "Transformer blocks.")
flags.DEFINE_integer("hidden_size", 128, "Hidden size (heads of 64, feed-forward 4x).")
bench_flags.define(
    seq_length=64,
    max_predictions=10,
    notes={"seq_length": "Used when building the data.", "max_predictions": "Used when building the data."},
)
flags.DEFINE_integer("seed", 12345, "Seed of the weights (the same initial model for every run) and the data order.")


@dataclasses.dataclass
class Run:
    """One training run: its settings, its held-out evaluations (step, samples, seconds, metrics) and whether its
    loss went non-finite."""

    optimizer: str
    batch_size: int
    learning_rate: float
    steps: int
    warmup_steps: int
    accumulation_steps: int
    evaluations: list
    diverged: bool

    def samples_to(self, target: float):
        """Training samples until held-out accuracy first reached `target` (None: not reached)."""
        from kbert.training.evaluation_history import first_reaching

        reached = first_reaching(self.evaluations, target)
        return reached["samples"] if reached else None

    def accuracy_at(self, samples: float) -> float:
        """Held-out accuracy at the last evaluation by `samples` training samples (NaN: none by then)."""
        from kbert.training.evaluation_history import final_accuracy

        return final_accuracy([e for e in self.evaluations if e["samples"] <= samples])


def _data(out: str):
    from kbert.data.prepare_data import DataSettings, PreparedData, prepare_data
    from kbert.data.wordpiece.vocab_file import read_vocabulary

    if FLAGS.data_dir:
        paths = {
            name: os.path.join(FLAGS.data_dir, name) for name in ("train.tfrecord", "heldout.tfrecord", "vocab.txt")
        }
        missing = [p for p in paths.values() if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(
                f"--data_dir={FLAGS.data_dir} lacks {', '.join(missing)}; point it at a demo's "
                "data folder or leave it out to build the data."
            )
        vocab_size = len(read_vocabulary(paths["vocab.txt"]))
        return PreparedData(
            paths["train.tfrecord"],
            paths["heldout.tfrecord"],
            paths["vocab.txt"],
            vocab_size,
            0,
            0,
            text_file="",
            sources_file="",
        )
    return prepare_data(
        DataSettings(seq_length=FLAGS.seq_length, max_predictions=FLAGS.max_predictions, seed=FLAGS.seed),
        os.path.join(out, "data"),
        step_format="[data {}/4]",
    )


def eval_interval() -> int:
    largest = max(int(b) for b in FLAGS.batch_sizes)
    return FLAGS.eval_interval or largest * max(1, round(FLAGS.sequences / 20 / largest))


def _experiment(
    data, optimizer: str, batch_size: int, learning_rate: float, steps: int, warmup: int, accumulation: int, target
):
    from kbert.experiment import load_experiment

    h = FLAGS.hidden_size
    eval_batch = min(64, FLAGS.eval_sequences)
    override = {
        "model": {
            "bert": "bert_tiny",
            "overrides": {
                "vocab_size": data.vocab_size,
                "num_hidden_layers": FLAGS.num_layers,
                "hidden_size": h,
                "num_attention_heads": max(1, h // 64),
                "intermediate_size": 4 * h,
            },
        },
        "data": {
            "train_files": data.train_files,
            "eval_files": data.eval_files,
            "seq_length": FLAGS.seq_length,
            "max_predictions": FLAGS.max_predictions,
        },
        "optimizer": {"type": optimizer, "weight_decay": 0.01},  # epsilon: LAMB's and AdamW's default, 1e-6
        "schedule": {"peak_learning_rate": learning_rate, "warmup_steps": warmup, "power": 0.5},
        "train": {
            "global_batch_size": batch_size,
            "gradient_accumulation_steps": accumulation,
            "total_steps": steps,
            "steps_per_loop": 1,
            "summary_interval": 1,
            "checkpoint_interval": 1,
            "seed": FLAGS.seed,
        },
        # About --eval_sequences held-out sequences, the same ones at every evaluation (read in file order).
        "eval": {
            "global_batch_size": eval_batch,
            "steps": max(1, FLAGS.eval_sequences // eval_batch),
            "interval_samples": eval_interval(),
            "target_mlm_accuracy": target,
        },
    }
    return load_experiment(params_override=json.dumps(override))


def train_run(data, optimizer: str, batch_size: int, learning_rate: float, warmup_share: float, target=None) -> Run:
    """One run of the budget at `batch_size`, evaluated on the sample schedule; stops at `target` if given."""
    import tensorflow as tf

    from kbert.bench.scheduled_training import train_on_schedule
    from kbert.bench.trainer_from_config import trainer_from_config
    from kbert.errors import NonFiniteLossError
    from kbert.experiment import task_of
    from kbert.training.loop import evaluator, schedule_for

    steps = max(1, FLAGS.sequences // batch_size)
    warmup = max(1, round(warmup_share * steps))
    accumulation = max(1, batch_size // FLAGS.max_micro_batch)
    config = _experiment(data, optimizer, batch_size, learning_rate, steps, warmup, accumulation, target)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    task = task_of(config)
    trainer = trainer_from_config(config, strategy, task)
    evaluate = evaluator(config, strategy, task, trainer.model)
    schedule = schedule_for(config, strategy, evaluate, print_fn=lambda *a, **k: None)

    def train_steps(n: int) -> int:
        trainer.train(n)  # raises NonFiniteLossError on a NaN/Inf loss
        return int(trainer.sequences_trained.numpy())

    diverged = False
    try:
        train_on_schedule(train_steps, until_step=steps, steps_per_loop=1, schedule=schedule)
    except NonFiniteLossError:
        diverged = True  # the evaluations before it stand; the rest of the run would be NaN
    run = Run(optimizer, batch_size, learning_rate, steps, warmup, accumulation, schedule.history, diverged)
    last = run.evaluations[-1] if run.evaluations else {"samples": 0, "seconds": 0.0, "masked_lm_accuracy": math.nan}
    print(
        f"{optimizer:>5} batch {batch_size:>5} lr {learning_rate:.3g} ({steps} steps, warmup {warmup}, "
        f"accumulation {accumulation}): held-out accuracy {last['masked_lm_accuracy']:.4f} after "
        f"{last['samples']:,} samples{' (diverged)' if diverged else ''}"
        f"{'' if target is None else ', ' + _reached(run, target)} [{last['seconds']:.0f} s]",
        flush=True,
    )
    return run


def _reached(run: Run, target: float) -> str:
    samples = run.samples_to(target)
    return f"target reached after {samples:,} samples" if samples else "target not reached"


def default_target(tuned: dict[str, Run]) -> float:
    """The lowest of the tuned smallest-batch runs' held-out accuracies after `--target_at` of the budget."""
    return min(run.accuracy_at(FLAGS.target_at * FLAGS.sequences) for run in tuned.values())


def flat_batches(runs: list[Run], target: float) -> dict[str, int | None]:
    """Per optimizer, the largest batch whose samples to target stay within 20% of its smallest batch's."""
    from kbert.bench.large_batch import largest_flat_batch

    return {
        name: largest_flat_batch({r.batch_size: r.samples_to(target) for r in runs if r.optimizer == name})
        for name in dict.fromkeys(r.optimizer for r in runs)
    }


def results_table(runs: list[Run], tuning: dict[str, list[Run]], target: float) -> str:
    from kbert.bench.large_batch import FLAT_TOLERANCE

    rows = [
        f"Target held-out masked-LM accuracy: {target:.4f}, evaluated every {eval_interval():,} samples on "
        f"{FLAGS.eval_sequences} held-out sequences (-: not reached within {FLAGS.sequences:,} samples).",
        "",
        "| optimizer | batch | peak lr | steps | warmup | accum. | samples to target | vs smallest batch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in dict.fromkeys(r.optimizer for r in runs):
        mine = [r for r in runs if r.optimizer == name]
        base = mine[0].samples_to(target)
        for r in mine:
            samples = r.samples_to(target)
            ratio = f"{samples / base:.2f}x" if samples and base else "-"
            rows.append(
                f"| {name} | {r.batch_size} | {r.learning_rate:.3g} | {r.steps} | {r.warmup_steps} "
                f"| {r.accumulation_steps} | {f'{samples:,}' if samples else '-'}"
                f"{' (diverged)' if r.diverged else ''} | {ratio} |"
            )
    rows += ["", f"Largest batch whose samples to target stay within {FLAT_TOLERANCE:.0%} of the smallest batch's:", ""]
    rows += [
        f"- {name}: {batch if batch else '- (the smallest batch did not reach the target)'}"
        for name, batch in flat_batches(runs, target).items()
    ]
    rows += ["", f"Rate search at batch {runs[0].batch_size} (final held-out accuracy by peak lr):", ""]
    for name, candidates in tuning.items():
        rows.append(
            f"- {name}: " + ", ".join(f"{r.learning_rate:.3g} -> {r.accuracy_at(math.inf):.4f}" for r in candidates)
        )
    return "\n".join(rows)


def plot(runs: list[Run], target: float, path: str) -> None:
    """Left: samples to target against batch, the 20% band around each smallest batch's. Right: held-out accuracy
    against samples for every run."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from kbert.bench.large_batch import FLAT_TOLERANCE

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=80)
    batches = sorted({r.batch_size for r in runs})
    styles = dict(zip(batches, ["-", "--", ":", "-."] * len(batches)))
    for name in dict.fromkeys(r.optimizer for r in runs):
        mine = [r for r in runs if r.optimizer == name]
        reached = [(r.batch_size, r.samples_to(target)) for r in mine if r.samples_to(target)]
        (line,) = left.plot([b for b, _ in reached], [s for _, s in reached], marker="o", label=name)
        if mine[0].samples_to(target):
            base = mine[0].samples_to(target)
            left.axhspan(base, base * (1 + FLAT_TOLERANCE), color=line.get_color(), alpha=0.12)
        for r in mine:
            right.plot(
                [e["samples"] for e in r.evaluations],
                [e["masked_lm_accuracy"] for e in r.evaluations],
                styles[r.batch_size],
                color=line.get_color(),
                label=f"{name} {r.batch_size}",
            )
    right.axhline(target, color="k", linewidth=0.8, linestyle=":")
    left.set_xscale("log", base=2)
    left.set_xticks(batches, [str(b) for b in batches])
    left.set_xlabel("global batch size (equal epochs)")
    left.set_ylabel("training samples to target")
    left.set_title(f"shaded: within {FLAT_TOLERANCE:.0%} of the smallest batch", fontsize=9)
    right.set_xlabel("training samples")
    right.set_ylabel("held-out masked-LM accuracy")
    right.set_title(f"dotted: target {target:.4f}", fontsize=9)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if ax is right else 1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(runs: list[Run], tuning: dict[str, list[Run]], target: float, out: str) -> None:
    """Writes results.md, results.json and batch_scaling.png into `out`; prints the table, then the largest flat
    batch of each optimizer, LAMB's against AdamW's last."""
    table = results_table(runs, tuning, target)
    paths = {name: os.path.join(out, name) for name in ("results.md", "results.json", "batch_scaling.png")}
    with open(paths["results.md"], "w") as f:
        f.write(table + "\n")
    with open(paths["results.json"], "w") as f:
        json.dump(
            {
                "target_mlm_accuracy": target,
                "machine": bench_flags.cpu_isa(),
                "runs": [dataclasses.asdict(r) for r in runs],
                "tuning": {k: [dataclasses.asdict(r) for r in v] for k, v in tuning.items()},
                "flags": {
                    k: FLAGS[k].value
                    for k in (
                        "sequences",
                        "batch_sizes",
                        "num_layers",
                        "hidden_size",
                        "seq_length",
                        "warmup_share",
                        "max_micro_batch",
                        "eval_interval",
                        "eval_sequences",
                        "target_at",
                    )
                },
            },
            f,
            indent=2,
        )
    plot(runs, target, paths["batch_scaling.png"])
    print("\n" + table + "\n")
    print(f"wrote {', '.join(paths.values())}")
    flat = flat_batches(runs, target)
    lamb, adamw = flat.get("lamb"), flat.get("adamw")
    print(
        f"largest flat batch, lamb / adamw: {lamb or '-'} / {adamw or '-'}"
        + (
            f" = {lamb / adamw:.2f}x (the claim holds above 1.00x)"
            if lamb and adamw
            else " (an optimizer did not reach the target at the smallest batch, or was not run)"
        )
    )


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

    from kbert.bench.large_batch import scaled_recipe

    # Every run builds a new model, hence new traced functions; TF's "retracing" warnings say nothing here.
    tf.get_logger().setLevel("ERROR")
    os.makedirs(FLAGS.out, exist_ok=True)
    started = time.time()
    print(bench_flags.cpu_isa())
    print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    data = _data(FLAGS.out)
    tuning = {
        name: [
            train_run(data, name, batch_sizes[0], base[name] * float(m), FLAGS.warmup_share)
            for m in FLAGS.tune_multipliers
        ]
        for name in FLAGS.optimizers
    }
    tuned = {
        name: max(runs, key=lambda r: r.accuracy_at(math.inf) if not r.diverged else -1.0)
        for name, runs in tuning.items()
    }
    target = FLAGS.target_mlm_accuracy if FLAGS.target_mlm_accuracy is not None else default_target(tuned)
    print(f"target held-out masked-LM accuracy: {target:.4f}", flush=True)
    runs = []
    for name, best in tuned.items():
        runs.append(best)
        for batch in batch_sizes[1:]:
            scaled = scaled_recipe(batch_sizes[0], best.learning_rate, FLAGS.warmup_share, batch)
            runs.append(train_run(data, name, batch, scaled.learning_rate, scaled.warmup_share, target))
    print(
        f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"{time.time() - started:,.0f} s in all"
    )
    write_report(runs, tuning, target, FLAGS.out)


if __name__ == "__main__":
    app.run(main)
