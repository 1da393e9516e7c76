"""MSLT vs full training of the same BERT on the same data for the same number of steps, side by side in one run.

    python tools/bench_mslt.py --corpus=runs/demo-.../data/train.txt --work_dir=/tmp/kbert_bench_mslt [--workers=2]

Learns a WordPiece vocabulary of `--vocab_size` pieces from the training text (8,000 by default, so the MLM
output costs about the same share of a step as BERT-base's 30,522 x 768 head does at 12 x 768 layers; with
bert-base's vocabulary a 128-wide model would spend a quarter of its step in the head, which no stage shrinks),
makes pretraining TFRecords (95% of the documents train, 5% held out) with kbert's create_pretraining_data,
then runs `kbert-pretrain` twice, one after the other (or at the same time with --concurrent): full training
of all layers, and MSLT (stages of `--stages` layers, each training its new layers, then all layers for
`--final_share` of the steps). With `--workers=N` (N > 1) both run again on a MultiWorkerMirroredStrategy
cluster of N kbert-pretrain processes on localhost (kbert/bench/localhost_cluster.py), same data, steps and global
batch. Afterwards every checkpoint of every run is evaluated on the held-out records (not counted in the wall
times); a checkpoint's time is its file's time since its run started. Then the one-process encoders and a random
init are fine-tuned `--downstream_seeds` times each with kbert-finetune (kbert/finetuning/seed_scores.py) on a task made
offline: with `--downstream_sources` (the demo's data/sources.txt beside its data/docstrings.txt as --corpus),
which package a docstring comes from (kbert/finetuning/package_task.py); otherwise do two sentences come from the
same document (kbert/finetuning/coherence_task.py), made from the same split. Prints one table per process count
(wall time, held-out MLM accuracy at equal steps and at equal wall time, downstream accuracy as mean ± std over the
seeds), writes a PNG of held-out MLM loss against wall time, and prints the speedups (full wall time / MSLT wall
time at equal steps) last.
"""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402
from absl import app, flags  # noqa: E402

from kbert.bench import localhost_cluster  # noqa: E402
from kbert.bench.bare_step import bare_train_step  # noqa: E402
from kbert.data import pretraining_dataset  # noqa: E402
from kbert.data.create_pretraining_data import create_pretraining_data  # noqa: E402
from kbert.data.instances import InstanceConfig  # noqa: E402
from kbert.data.text_corpus import read_documents  # noqa: E402
from kbert.data.wordpiece.vocab_file import load_vocabulary  # noqa: E402
from kbert.data.wordpiece.vocab_learning import learn_vocabulary, write_vocabulary  # noqa: E402
from kbert.experiment import load_experiment  # noqa: E402
from kbert.finetuning.coherence_task import COLUMNS, write_task  # noqa: E402
from kbert.finetuning.package_task import TaskSettings, build_package_task  # noqa: E402
from kbert.finetuning.recipe import Recipe  # noqa: E402
from kbert.finetuning.seed_scores import finetune_seeds, format_scores  # noqa: E402
from kbert.modeling import BertConfig, BertPretrainer  # noqa: E402
from kbert.mslt import grow  # noqa: E402
from kbert.mslt.stages import plan_for  # noqa: E402
from kbert.optimizers import LAMB  # noqa: E402
from kbert.runtime.checkpointing import load_init_checkpoint  # noqa: E402
from kbert.runtime.strategy import make_strategy  # noqa: E402
from kbert.tasks.bert import BertPretrainingTask  # noqa: E402
from kbert.training.config import PretrainingConfig  # noqa: E402
from kbert.training.loop import evaluate  # noqa: E402

bench_flags.define(
    "vocab_file",
    required=("corpus",),
    work_dir="/tmp/kbert_bench_mslt",
    seq_length=64,
    max_predictions=10,
    batch_size=32,
    notes={
        "vocab_file": "Not given: one of --vocab_size is learned from --corpus.",
        "work_dir": "Both runs' model dirs and the plot go there too.",
    },
)
flags.DEFINE_integer("vocab_size", 8000, "Size of the vocabulary learned when --vocab_file is not given.")
flags.DEFINE_integer("num_layers", 12, "Depth of the model.")
flags.DEFINE_integer("hidden_size", 128, "Width (heads of 64, intermediate 4x).")
flags.DEFINE_integer("total_steps", 1500, "Optimizer steps of each run.")
flags.DEFINE_list("stages", ["3", "6", "9", "12"], "MSLT growth stages' depths.")
flags.DEFINE_enum("embeddings", "train", ["freeze_after_first_stage", "train"], "MSLT's mslt.embeddings policy.")
flags.DEFINE_float("final_share", 0.2, "Share of the steps in MSLT's all-layer stage.")
flags.DEFINE_float(
    "final_rate_scale",
    1.0,
    "Peak rate of MSLT's all-layer stage, as a multiple of the growth "
    "stages' (the library's default is 0.1; docs/results/mslt.md compares the two at this benchmark's "
    "stage lengths).",
)
flags.DEFINE_bool("frozen_dropout", False, "MSLT's mslt.frozen_dropout: dropout in the frozen blocks.")
flags.DEFINE_float("peak_learning_rate", 5e-3, "LAMB peak rate (both runs).")
flags.DEFINE_integer("checkpoint_every", 100, "Steps between the checkpoints that are evaluated.")
flags.DEFINE_integer("eval_batches", 32, "Held-out batches of 64 sequences per evaluated checkpoint.")
flags.DEFINE_bool(
    "concurrent",
    False,
    "Run both trainings at the same time (fairer on a machine others load "
    "too; the run that finishes first leaves the other the whole machine, which favours full training).",
)
flags.DEFINE_string("mixed_precision", "float32", "Precision policy of both runs.")
flags.DEFINE_integer("step_cost_rounds", 5, "Alternating timed rounds of each model's training step (0: skip).")
flags.DEFINE_integer(
    "workers",
    1,
    "Above 1: also run both trainings on a MultiWorkerMirroredStrategy cluster of "
    "this many kbert-pretrain processes on localhost (same data, steps and global batch) and print "
    "their table beside the one-process one.",
)
flags.DEFINE_integer(
    "downstream_seeds",
    3,
    "Fine-tuning runs of the one-process encoders and of a random init on "
    "the downstream task; 0 skips the downstream step.",
)
flags.DEFINE_string(
    "downstream_sources",
    "",
    "The package of each --corpus document, one a line (the demo's "
    "data/sources.txt, with its data/docstrings.txt as --corpus): the downstream task is then the "
    "demo's which-package task; empty: the same-document task (kbert/finetuning/coherence_task.py).",
)
flags.DEFINE_integer("downstream_train_pairs", 2000, "Training pairs of the same-document task (from the train text).")
flags.DEFINE_integer("downstream_eval_pairs", 1000, "Eval pairs of the same-document task (from the held-out text).")
flags.DEFINE_integer("downstream_epochs", 3, "Fine-tuning epochs.")
flags.DEFINE_float(
    "downstream_learning_rate",
    3e-4,
    "Fine-tuning peak rate (AdamW). At this scale BERT's 2e-5 to "
    "1e-4 learn nothing in 3 epochs, and the demo's 1e-3 leaves some seeds of the 12-layer model at "
    "chance.",
)
flags.DEFINE_bool(
    "downstream_only",
    False,
    "Reuse the pretraining runs and results.json an earlier run left in "
    "--work_dir (same flags) and run only the downstream step, e.g. with another fine-tuning recipe.",
)
flags.DEFINE_string("plot", "", "PNG path; default WORK_DIR/mslt_vs_full.png.")
FLAGS = flags.FLAGS
# Training files: enough for --workers up to this many (each worker's input pipeline reads whole files).
TRAIN_SHARDS = 8
flags.register_validator(
    "workers",
    lambda n: 1 <= n <= TRAIN_SHARDS,
    f"--workers: give 1 to {TRAIN_SHARDS} (the training data has {TRAIN_SHARDS} files).",
)


def shard_names(work_dir: str, name: str) -> list[str]:
    """The TFRecord files of split `name`: one for the held-out split (read in this process), `TRAIN_SHARDS` for
    training, since every worker of a multi-worker run reads files of its own."""
    count = TRAIN_SHARDS if name == "train" else 1
    return [os.path.join(work_dir, f"{name}-{i:03d}-of-{count:03d}.tfrecord") for i in range(count)]


def make_data(work_dir: str) -> tuple[str, str, str]:
    """Held-out split by document, the vocabulary, then TFRecords (reused if already there); returns the train and
    eval file globs and the vocabulary."""
    shards = {name: shard_names(work_dir, name) for name in ("train", "eval")}
    train_records, eval_records = (os.path.join(work_dir, f"{name}-*.tfrecord") for name in shards)
    vocab_file = FLAGS.vocab_file or os.path.join(work_dir, f"vocab_{FLAGS.vocab_size}.txt")
    if all(os.path.exists(f) for f in [*shards["train"], *shards["eval"], vocab_file]):
        return train_records, eval_records, vocab_file
    documents = list(read_documents([FLAGS.corpus]))
    held_out = max(1, len(documents) // 20)
    texts = {"train": documents[:-held_out], "eval": documents[-held_out:]}
    settings = InstanceConfig(
        max_seq_length=FLAGS.seq_length, max_predictions_per_seq=FLAGS.max_predictions, dupe_factor=1
    )
    for name, docs in texts.items():
        with open(os.path.join(work_dir, f"{name}.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(d) for d in docs) + "\n")
    if not FLAGS.vocab_file:
        tokens, _ = learn_vocabulary([os.path.join(work_dir, "train.txt")], FLAGS.vocab_size)
        write_vocabulary(tokens, vocab_file)
    for name, docs in texts.items():
        summary = create_pretraining_data(
            [os.path.join(work_dir, f"{name}.txt")], shards[name], vocab_file, True, settings
        )
        print(f"{name}: {summary.instances} instances from {len(docs)} documents", flush=True)
    return train_records, eval_records, vocab_file


def experiment(train_records: str, eval_records: str, vocab_size: int, mslt: bool) -> dict:
    steps, every = FLAGS.total_steps, FLAGS.checkpoint_every
    hidden = FLAGS.hidden_size
    config = {
        "model": {
            "bert": "bert_base",
            "overrides": {
                "num_hidden_layers": FLAGS.num_layers,
                "hidden_size": hidden,
                "num_attention_heads": max(1, hidden // 64),
                "intermediate_size": 4 * hidden,
                "max_position_embeddings": max(128, FLAGS.seq_length),
                "vocab_size": vocab_size,
            },
        },
        "data": {
            "train_files": train_records,
            "eval_files": eval_records,
            "seq_length": FLAGS.seq_length,
            "max_predictions": FLAGS.max_predictions,
        },
        "optimizer": {"type": "lamb", "weight_decay": 0.01},
        "schedule": {"peak_learning_rate": FLAGS.peak_learning_rate, "warmup_steps": steps // 10, "power": 0.5},
        "train": {
            "global_batch_size": FLAGS.batch_size,
            "total_steps": steps,
            "steps_per_loop": every,
            "checkpoint_interval": every,
            "summary_interval": every,
            "max_checkpoints": 1000,
            "mixed_precision": FLAGS.mixed_precision,
        },
        "eval": {"global_batch_size": 64},
    }
    if mslt:
        depths = [int(d) for d in FLAGS.stages]
        final = int(round(steps * FLAGS.final_share))
        per_stage, extra = divmod(steps - final, len(depths))
        config["mslt"] = {
            "stages": [
                {"num_layers": d, "steps": per_stage + (extra if i == len(depths) - 1 else 0)}
                for i, d in enumerate(depths)
            ],
            "final_stage": {"steps": final, "learning_rate": FLAGS.peak_learning_rate * FLAGS.final_rate_scale},
            "embeddings": FLAGS.embeddings,
            "frozen_dropout": FLAGS.frozen_dropout,
        }
    return config


def pretrain_command(config_file: str, model_dir: str, workers: int) -> list[str]:
    """kbert-pretrain on the CPU: one device, or one worker of a `workers`-process cluster."""
    strategy = "multi_worker_mirrored" if workers > 1 else "one_device"
    return [
        sys.executable,
        "-m",
        "kbert.run_pretraining",
        f"--config_file={config_file}",
        f"--model_dir={model_dir}",
        f"--strategy={strategy}",
        "--mode=train",
        "--device=cpu",
    ]


def start(name: str, config: dict, workers: int, work_dir: str) -> tuple[list[subprocess.Popen], str, float]:
    """Writes `config`, empties the run's model_dir and starts its `workers` processes (worker 0's log is
    NAME.log, worker I's NAME.worker_I.log); returns the processes, worker 0's log and the start time."""
    model_dir = os.path.join(work_dir, name)
    config_file = os.path.join(work_dir, f"{name}.yaml")
    with open(config_file, "w") as f:
        yaml.safe_dump(config, f)
    subprocess.run(["rm", "-rf", model_dir], check=True)
    logs = [os.path.join(work_dir, f"{name}.log" if i == 0 else f"{name}.worker_{i}.log") for i in range(workers)]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    tf_configs = localhost_cluster.tf_configs(localhost_cluster.free_ports(workers)) if workers > 1 else [""]
    started = time.time()
    return (
        localhost_cluster.launch(pretrain_command(config_file, model_dir, workers), tf_configs, env, logs),
        logs[0],
        started,
    )


def run(configs: dict[str, dict], workers: int, work_dir: str) -> dict[str, tuple[float, float]]:
    """Runs kbert-pretrain once per config on `workers` processes, the configs at the same time (`--concurrent`,
    so load from other users of the machine hits both) or one after the other; returns each run's start and wall
    seconds (until its last process exits)."""
    started, timings = {}, {}
    for name, config in configs.items():
        started[name] = start(name, config, workers, work_dir)
        if not FLAGS.concurrent:
            _wait(name, started[name], timings)
    for name, process in started.items():
        if name not in timings:
            _wait(name, process, timings)
    return timings


def _wait(name: str, process: tuple, timings: dict) -> None:
    popens, log, start_time = process
    codes = localhost_cluster.wait_all(popens)
    if any(codes):
        raise RuntimeError(f"The {name} run failed (exit {codes}); see {log}.")
    timings[name] = (start_time, time.time() - start_time)
    print(f"{name}: {FLAGS.total_steps} steps in {timings[name][1]:.1f} s (log {log})", flush=True)


def curve(
    model_dir: str, start: float, bert: BertConfig, held_out: PretrainingConfig, strategy: tf.distribute.Strategy
) -> list[dict]:
    """Held-out metrics of every checkpoint under `model_dir` (`kbert.training.loop.evaluate` of the `held_out`
    config's eval section), with its step and its time since `start`."""
    points = []
    # An MSLT run's stages.json says which stage (and depth) saved each checkpoint; a plain run has none.
    stages_file = os.path.join(model_dir, "stages.json")
    stages = []
    if os.path.exists(stages_file):
        with open(stages_file) as f:
            stages = json.load(f)
    # Training checkpoints only: checkpoints/input/ holds each worker's input position under the same names.
    for index in glob.glob(os.path.join(model_dir, "checkpoints", "ckpt-*.index")):
        prefix = index[: -len(".index")]
        step = int(prefix.rsplit("-", 1)[1])
        stage = next((s for s in stages if s["start_step"] < step <= s["end_step"]), None)
        layers = stage["num_layers"] if stage else FLAGS.num_layers
        with strategy.scope():
            model = BertPretrainer(bert.replace(num_hidden_layers=layers))
        load_init_checkpoint(model, prefix)
        metrics = evaluate(held_out, strategy, BertPretrainingTask(bert), model)
        points.append(
            {
                "step": step,
                "seconds": os.path.getmtime(index) - start,
                "layers": layers,
                "stage": stage["stage"] if stage else None,
                **metrics,
            }
        )
    return sorted(points, key=lambda p: p["step"])


def at_time(points: list[dict], seconds: float) -> dict:
    """The last checkpoint written by `seconds`."""
    earlier = [p for p in points if p["seconds"] <= seconds]
    return (
        earlier[-1]
        if earlier
        else {"step": 0, "seconds": 0.0, "masked_lm_accuracy": float("nan"), "masked_lm_loss": float("nan")}
    )


def steady_seconds(points: list[dict]) -> float:
    """Training time without graph building: each stage's steps at the pace between its later checkpoints (its
    first loop also traces and optimises the stage's graph)."""
    total = 0.0
    for stage in sorted({p["stage"] for p in points}, key=lambda s: s or 0):
        segment = [p for p in points if p["stage"] == stage]
        if len(segment) < 2:
            return float("nan")
        start_step = points[points.index(segment[0]) - 1]["step"] if points.index(segment[0]) else 0
        pace = (segment[-1]["seconds"] - segment[0]["seconds"]) / (segment[-1]["step"] - segment[0]["step"])
        total += pace * (segment[-1]["step"] - start_step)
    return total


def step_costs(work_dir: str, train_records: str) -> dict[str, float]:
    """Seconds per training step (forward, backward, LAMB) of the full model and of each MSLT stage's model, on one
    batch in this process: no input pipeline, checkpoints or graph building, and alternating rounds, so the load
    of other users hits every model alike."""
    plan = plan_for(load_experiment([os.path.join(work_dir, "mslt.yaml")]))
    batch = next(
        iter(
            pretraining_dataset(
                train_records, FLAGS.seq_length, FLAGS.max_predictions, FLAGS.batch_size, is_training=False
            )
        )
    )
    models = {"full": BertPretrainer(plan.bert)}
    models.update({f"stage_{s.number}": grow(plan.bert, s, frozen_dropout=plan.frozen_dropout) for s in plan.stages})
    task = BertPretrainingTask(plan.bert)
    steps = {name: bare_train_step(model, LAMB(1e-3), task) for name, model in models.items()}
    for step in steps.values():
        float(step(batch))  # builds the graph
    seconds = {name: [] for name in steps}
    for _ in range(FLAGS.step_cost_rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(3):
                loss = step(batch)
            float(loss)
            seconds[name].append((time.perf_counter() - start) / 3)
    costs = {name: float(np.median(values)) for name, values in seconds.items()}
    costs["mslt_mean"] = sum(s.steps * costs[f"stage_{s.number}"] for s in plan.stages) / plan.total_steps
    return costs


def plot(curves: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, points in curves.items():
        axis.plot(
            [p["seconds"] for p in points], [p["masked_lm_loss"] for p in points], marker="o", markersize=3, label=name
        )
    axis.set_xlabel("wall time (s)")
    axis.set_ylabel("held-out masked-LM loss")
    axis.set_title(
        f"{FLAGS.num_layers}-layer BERT (H{FLAGS.hidden_size}), {FLAGS.total_steps} steps, "
        f"batch {FLAGS.batch_size} x seq {FLAGS.seq_length}"
    )
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run_names(workers: int) -> tuple[str, str]:
    """The full and MSLT runs' names (and model dirs under --work_dir) at `workers` processes."""
    suffix = f"_{workers}w" if workers > 1 else ""
    return f"full{suffix}", f"mslt{suffix}"


def downstream_task(work_dir: str) -> dict:
    """kbert-finetune's task section of the downstream task, its files written under `work_dir/downstream`: the
    package task when --downstream_sources names the corpus' packages, else the same-document task made from the
    bench's own train and held-out documents."""
    directory = os.path.join(work_dir, "downstream")
    if FLAGS.downstream_sources:
        return build_package_task(FLAGS.corpus, FLAGS.downstream_sources, directory, TaskSettings()).finetune_task()
    train_file, eval_file = write_task(
        list(read_documents([os.path.join(work_dir, "train.txt")])),
        list(read_documents([os.path.join(work_dir, "eval.txt")])),
        directory,
        FLAGS.downstream_train_pairs,
        FLAGS.downstream_eval_pairs,
    )
    return {"name": "jsonl", "train_file": train_file, "eval_file": eval_file, **COLUMNS}


def downstream(
    task: dict, work_dir: str, vocab_file: str, runs: list[str], random_model: dict
) -> dict[str, list[float]]:
    """Fine-tunes every run's encoder, and a random init, on `task` once per seed; returns each one's eval
    accuracies (%)."""
    recipe = Recipe(task, vocab_file, FLAGS.seq_length, FLAGS.downstream_epochs, FLAGS.downstream_learning_rate)
    seeds = range(1, FLAGS.downstream_seeds + 1)
    inits = {**{name: (os.path.join(work_dir, name), {}) for name in runs}, "random init": ("", random_model)}
    scores = {}
    for name, (checkpoint, model) in inits.items():
        scores[name] = finetune_seeds(
            recipe, checkpoint, model, seeds, os.path.join(work_dir, "finetune", name.replace(" ", "_"))
        )
        print(
            f"downstream {name}: {format_scores(scores[name])} ({', '.join(f'{s:.1f}' for s in scores[name])})",
            flush=True,
        )
    return scores


def table(title: str, names: tuple[str, str], timings: dict, curves: dict, scores: dict) -> None:
    """Full against MSLT at equal steps (and at MSLT's wall time), with the downstream scores when measured."""
    full, mslt = (curves[n][-1] for n in names)
    same_time = at_time(curves[names[0]], mslt["seconds"])
    steady = [steady_seconds(curves[n]) for n in names]

    def row(label: str, values: list[str], note: str = "") -> None:
        print(f"{label:<38}{values[0]:>12}{values[1]:>12}{'   ' + note if note else ''}")

    row(title, ["full", "mslt"])
    row("wall time (s)", [f"{timings[n][1]:.1f}" for n in names])
    row("held-out MLM accuracy, equal steps", [f"{p['masked_lm_accuracy']:.4f}" for p in (full, mslt)])
    row("held-out MLM loss, equal steps", [f"{p['masked_lm_loss']:.4f}" for p in (full, mslt)])
    row(
        "held-out MLM accuracy, equal time",
        [f"{p['masked_lm_accuracy']:.4f}" for p in (same_time, mslt)],
        f"(full at step {same_time['step']} when MSLT ended, {mslt['seconds']:.0f} s)",
    )
    row(
        "training time w/o graph building (s)",
        [f"{s:.1f}" for s in steady],
        f"(steady-state speedup {steady[0] / steady[1]:.2f}x)",
    )
    if names[0] in scores:
        gap = statistics.fmean(scores[names[1]]) - statistics.fmean(scores[names[0]])
        row(
            f"downstream accuracy (%), {FLAGS.downstream_seeds} seeds",
            [format_scores(scores[n]) for n in names],
            f"(random init {format_scores(scores['random init'])}; MSLT - full {gap:+.1f} points)",
        )
    print(f"{'speedup at equal steps (full / MSLT wall)':<38}{timings[names[0]][1] / timings[names[1]][1]:>11.2f}x")


def save_results(results: dict) -> None:
    with open(os.path.join(FLAGS.work_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)


def pretrain_and_evaluate(
    groups: dict[int, tuple[str, str]], train_records: str, eval_records: str, vocab_size: int
) -> dict:
    """Runs every pretraining of `groups`, evaluates all their checkpoints and plots them; returns the results."""
    configs, timings = {}, {}
    for workers, (full, mslt) in groups.items():
        pair = {
            full: experiment(train_records, eval_records, vocab_size, False),
            mslt: experiment(train_records, eval_records, vocab_size, True),
        }
        configs.update(pair)
        timings.update(run(pair, workers, FLAGS.work_dir))
    bert = BertConfig.load("bert_base").replace(**configs["full"]["model"]["overrides"])
    # The first --eval_batches batches of 64 held-out sequences, the same ones for every checkpoint.
    held_out = load_experiment([os.path.join(FLAGS.work_dir, "full.yaml")], f"eval.steps={FLAGS.eval_batches}")
    strategy = make_strategy("one_device")
    # Each checkpoint is a new model, hence a new traced evaluation: TF's retracing warnings say nothing here.
    tf.get_logger().setLevel("ERROR")
    curves = {
        name: curve(os.path.join(FLAGS.work_dir, name), timings[name][0], bert, held_out, strategy) for name in configs
    }
    plot(curves, plot_path())
    batches = math.ceil(curves["full"][-1]["sequences"] / held_out.eval.global_batch_size)
    return {"timings": timings, "curves": curves, "configs": configs, "held_out_batches": batches, "downstream": {}}


def earlier_results(groups: dict[int, tuple[str, str]]) -> dict:
    """--downstream_only: the pretraining results an earlier run of this bench left in --work_dir."""
    path = os.path.join(FLAGS.work_dir, "results.json")
    if not os.path.exists(path):
        raise app.UsageError(f"--downstream_only needs {path} from an earlier run of this bench in --work_dir.")
    with open(path) as f:
        results = json.load(f)
    missing = [name for names in groups.values() for name in names if name not in results["timings"]]
    if missing:
        raise app.UsageError(f"{path} holds no {', '.join(missing)} run; give the --workers of the earlier run.")
    return results


def plot_path() -> str:
    return FLAGS.plot or os.path.join(FLAGS.work_dir, "mslt_vs_full.png")


def main(argv):
    del argv
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    train_records, eval_records, vocab_file = make_data(FLAGS.work_dir)
    vocab_size = len(load_vocabulary(vocab_file))
    # Made before any training, so a --downstream_sources that does not fit --corpus fails in seconds.
    task = downstream_task(FLAGS.work_dir) if FLAGS.downstream_seeds else None
    groups = {1: run_names(1), **({FLAGS.workers: run_names(FLAGS.workers)} if FLAGS.workers > 1 else {})}
    results = (
        earlier_results(groups)
        if FLAGS.downstream_only
        else pretrain_and_evaluate(groups, train_records, eval_records, vocab_size)
    )
    save_results(results)  # the pretraining figures survive a failed or interrupted downstream step
    timings, curves = results["timings"], results["curves"]
    # The one-process encoders only: an N-process run trains the same model on the same data and steps, and
    # its table compares MLM accuracy; each encoder fine-tuned costs --downstream_seeds more runs.
    scores = (
        downstream(
            task,
            FLAGS.work_dir,
            vocab_file,
            list(groups[1]),
            {"bert": "bert_base", "overrides": results["configs"]["full"]["model"]["overrides"]},
        )
        if task
        else {}
    )
    save_results({**results, "downstream": scores})

    print(
        f"\n{FLAGS.num_layers} layers, hidden {FLAGS.hidden_size}, vocabulary {vocab_size}, seq "
        f"{FLAGS.seq_length}, batch {FLAGS.batch_size}, {FLAGS.total_steps} steps, {FLAGS.mixed_precision}, "
        f"MSLT stages {','.join(FLAGS.stages)} + all layers for {FLAGS.final_share:.0%} at "
        f"{FLAGS.final_rate_scale:g}x the rate, embeddings {FLAGS.embeddings}, frozen blocks "
        f"{'with' if FLAGS.frozen_dropout else 'without'} dropout; {results['held_out_batches']} held-out batches "
        f"of 64; {'concurrent' if FLAGS.concurrent else 'sequential'} runs"
    )
    for workers, names in groups.items():
        table(f"{workers} process{'es' if workers > 1 else ''}", names, timings, curves, scores)
    if FLAGS.step_cost_rounds:
        costs = step_costs(FLAGS.work_dir, train_records)
        stages = ", ".join(f"{k} {v:.3f}" for k, v in costs.items() if k.startswith("stage_"))
        print(
            f"{'step cost, interleaved (s/step)':<38}{costs['full']:>12.3f}{costs['mslt_mean']:>12.3f}   "
            f"({stages}; compute-only speedup {costs['full'] / costs['mslt_mean']:.2f}x)"
        )
    print(f"plot: {plot_path()}")
    print(
        "speedup at equal steps (full wall / MSLT wall): "
        + ", ".join(
            f"{workers} process{'es' if workers > 1 else ''} {timings[f][1] / timings[m][1]:.2f}x"
            for workers, (f, m) in groups.items()
        )
    )


if __name__ == "__main__":
    app.run(main)
