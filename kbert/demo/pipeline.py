"""The demo pipeline: text -> vocabulary -> TFRecords -> LAMB pretraining and MSLT -> both encoders and random-init
ones measured on a downstream task -> table, plots and a last line saying whether pretraining beat random init.

Data steps and the frozen-encoder probe run in this process through kbert's library; the pretraining runs are
`kbert-pretrain` processes and the fine-tuning runs (when asked for) `kbert-finetune` processes, started on YAML
configs written into the output folder, so each can be rerun by hand with the printed command. The downstream task
(which standard-library package a docstring comes from) needs the docstring corpus: with the user's own text, the
demo stops after pretraining.

Example:

```python
result = run_demo(DemoSettings(out="/tmp/demo", steps=300))
print(result.table)
```
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from kbert.data.corpus_fingerprint import fingerprint
from kbert.data.prepare_data import DataSettings, PreparedData, prepare_data
from kbert.demo import downstream, history, report
from kbert.demo.processes import run_logged
from kbert.demo.verdict import Verdict, verdict
from kbert.finetuning.package_task import TaskFiles, TaskSettings, build_package_task

# What of kbert-pretrain's output the demo echoes (all of it goes to the log): progress, eval, the MSLT plan, errors.
_PROGRESS_LINE = re.compile(r"^(step |eval |MSLT|stage |Resumed|\s+\d+\s+\d+\s|kbert-pretrain: )")


@dataclasses.dataclass
class DemoSettings(DataSettings):
    """What the demo builds and trains; on 2 idle Xeon cores (AVX-512, AMX) the defaults take 18-20 min (docs/demo.md).

    The records are MLM-only rows of consecutive text: docstrings are short, and sentence pairs of them left half
    of each row padding. MSLT grows the model from half its depth to all of it in two stages of 40% of `steps`
    each, then trains every layer for the rest, at a tenth of the peak rate. `task`, `probe_seeds` (random-init
    encoders the probe scores) and `finetune` shape the downstream step.
    """

    out: str = "runs/demo"
    objective: str = "mlm"
    dupe_factor: int = 5
    steps: int = 4500
    num_layers: int = 4
    hidden_size: int = 128
    num_attention_heads: int = 2
    # No dropout: a few thousand steps over a megabyte of text underfit, and dropout slowed the held-out MLM
    # accuracy's rise (docs/demo.md).
    dropout: float = 0.0
    batch_size: int = 32
    learning_rate: float = 5e-3
    task: TaskSettings = dataclasses.field(default_factory=lambda: TaskSettings(num_classes=8))
    probe_seeds: int = 5
    finetune: downstream.FinetuneSettings = dataclasses.field(default_factory=downstream.FinetuneSettings)


@dataclasses.dataclass
class DemoResult:
    """The runs, the downstream scores and the verdict on the probe's (empty and None for the user's own text),
    their table, and the files written."""

    runs: list[report.RunResult]
    downstream: list[report.DownstreamScores]
    verdict: Verdict | None
    table: str
    paths: dict[str, str]


def run_demo(settings: DemoSettings, print_fn: Callable[..., None] = print) -> DemoResult:
    """Runs the whole demo into `settings.out`, which must be absent or empty (an earlier run is never touched).

    Raises:
      ValueError / FileNotFoundError: bad settings or text, before any training.
      RuntimeError: a `kbert-pretrain` run failed; the message names its log.
    """
    _check_settings(settings)
    out = os.path.abspath(settings.out)
    paths = {name: os.path.join(out, name) for name in ("data", "configs", "runs", "logs")}
    for path in paths.values():
        os.makedirs(path, exist_ok=True)
    started = time.time()

    prepared = prepare_data(settings, paths["data"], print_fn, step_format=STEP)
    configs = _write_configs(
        settings, paths["configs"], prepared, eval_batch_size=min(settings.batch_size, prepared.heldout_instances)
    )
    runs = []
    for number, name in ((5, "full"), (6, "mslt")):
        label = "pretraining a tiny BERT with LAMB" if name == "full" else "MSLT on the same data and steps"
        print_fn(f"{STEP.format(number)} {label}")
        runs.append(_pretrain(name, configs[name], paths["runs"], paths["logs"], settings, print_fn))
    task, scores = _downstream(settings, prepared, configs["model"], paths, print_fn)
    outcome = verdict(runs, [s for s in scores if s.measure == report.PROBE]) if scores else None

    table = report.results_table(runs, scores)
    files_written = _write_results(out, prepared, runs, task, scores, outcome, table)
    paths.update(files_written)
    print_fn("\n" + table + "\n")
    print_fn(f"Done in {time.time() - started:,.0f} s. Everything is under {out}:")
    for name in ("data", "configs", "runs", "logs", *files_written):
        print_fn(f"  {name:<13} {paths[name]}")
    if outcome:
        print_fn(outcome.line)  # the last line, whatever it says
    return DemoResult(runs, scores, outcome, table, paths)


STEP = "[{}/7]"


def _downstream(
    settings: DemoSettings, prepared: PreparedData, model: dict[str, Any], paths: dict[str, str], print_fn
) -> tuple[TaskFiles | None, list[report.DownstreamScores]]:
    """Step 7: builds the package task and measures the LAMB, MSLT and random-init encoders on it: the probe, then
    fine-tuning when `settings.finetune.seeds` asks for it."""
    if not prepared.sources_file:
        print_fn(f"{STEP.format(7)} skipped: the downstream task is built from the docstring corpus, not your text")
        return None, []
    print_fn(f"{STEP.format(7)} downstream: which standard-library package does a docstring come from?")
    task = build_package_task(
        prepared.text_file, prepared.sources_file, os.path.join(paths["data"], "task"), settings.task
    )
    print_fn(
        f"      {len(task.labels)} packages ({', '.join(task.labels)}): {task.train_examples:,} train and "
        f"{task.eval_examples:,} eval docstrings -> {os.path.dirname(task.train_file)}"
    )
    encoders = {
        "full": os.path.join(paths["runs"], "full"),
        "mslt": os.path.join(paths["runs"], "mslt"),
        report.RANDOM_INIT: "",
    }
    print_fn("      a frozen-encoder probe: logistic regression on each encoder's mean final-layer features")
    scores = downstream.probe_all(
        task, prepared.vocab_file, settings.seq_length, model, encoders, settings.probe_seeds, print_fn
    )
    if settings.finetune.seeds:
        configs = downstream.write_configs(
            task, prepared.vocab_file, settings.seq_length, model, encoders, settings.finetune, paths["configs"]
        )
        scores += downstream.finetune_all(
            configs, settings.finetune, os.path.join(paths["runs"], "finetune"), paths["logs"], print_fn
        )
    return task, scores


def _write_results(
    out: str,
    prepared: PreparedData,
    runs: list[report.RunResult],
    task: TaskFiles | None,
    scores: list[report.DownstreamScores],
    outcome: Verdict | None,
    table: str,
) -> dict[str, str]:
    """results.md, results.json and the plots (downstream.png only with downstream scores); returns their paths."""
    files = [
        ("table", "results.md"),
        ("results", "results.json"),
        ("loss_vs_step", "loss_vs_step.png"),
        ("loss_vs_time", "loss_vs_time.png"),
    ] + ([("downstream", "downstream.png")] if scores else [])
    written = {name: os.path.join(out, file) for name, file in files}
    with open(written["table"], "w") as f:
        f.write(table + "\n")
    results = {
        "corpus": dataclasses.asdict(fingerprint(prepared.text_file)),
        "pretraining": [dataclasses.asdict(run) for run in runs],
        "downstream": {
            "task": dataclasses.asdict(task) if task else None,
            "encoders": [dataclasses.asdict(s) for s in scores],
            "verdict": dataclasses.asdict(outcome) if outcome else None,
        },
    }
    with open(written["results"], "w") as f:
        json.dump(results, f, indent=2)
    report.plot_losses(runs, written["loss_vs_step"], written["loss_vs_time"])
    if scores:
        report.plot_downstream(scores, written["downstream"])
    return written


def _check_settings(settings: DemoSettings) -> None:
    if os.path.isdir(settings.out) and os.listdir(settings.out):
        raise FileExistsError(f"--out={settings.out} is not empty; give a new folder (an earlier run is kept).")
    if settings.steps < 3:
        raise ValueError(f"--steps={settings.steps}: MSLT needs at least 3 steps (two growth stages and a final one).")
    if settings.num_layers < 2 or settings.num_layers % 2:
        raise ValueError(f"num_layers={settings.num_layers}: MSLT grows from half the depth; use an even number >= 2.")


def _loop_length(steps: int) -> int:
    return max(1, steps // 30)


def mslt_stage_steps(steps: int) -> tuple[int, int, int]:
    """Steps of the two growth stages and the final all-layer stage: about 40/40/20, in whole loops."""
    loop = _loop_length(steps)
    growth = max(loop, (2 * steps // 5) // loop * loop)
    return growth, growth, steps - 2 * growth


def _write_configs(
    settings: DemoSettings, directory: str, prepared: PreparedData, eval_batch_size: int
) -> dict[str, Any]:
    """Writes full.yaml and mslt.yaml; returns their paths and, under "model", their model section."""
    loop = _loop_length(settings.steps)
    h = settings.hidden_size
    base = {
        "model": {
            "bert": "bert_tiny",
            "overrides": {
                "vocab_size": prepared.vocab_size,
                "num_hidden_layers": settings.num_layers,
                "hidden_size": h,
                "num_attention_heads": settings.num_attention_heads,
                "intermediate_size": 4 * h,
                "hidden_dropout_prob": settings.dropout,
                "attention_probs_dropout_prob": settings.dropout,
            },
        },
        "data": {
            "train_files": prepared.train_files,
            "eval_files": prepared.eval_files,
            "seq_length": settings.seq_length,
            "max_predictions": settings.max_predictions,
        },
        "optimizer": {"type": "lamb", "weight_decay": 0.01, "lamb": {"epsilon": 1e-6}},
        "schedule": {
            "peak_learning_rate": settings.learning_rate,
            "warmup_steps": max(1, settings.steps // 10),
            "power": 0.5,
        },
        "train": {
            "global_batch_size": settings.batch_size,
            "total_steps": settings.steps,
            "steps_per_loop": loop,
            "summary_interval": loop,
            "checkpoint_interval": settings.steps // loop * loop,
            "max_checkpoints": 1,
            "seed": settings.seed,
        },
        "eval": {"global_batch_size": eval_batch_size, "steps": -1},
    }
    first, second, final = mslt_stage_steps(settings.steps)
    mslt = dict(
        base,
        mslt={
            "mode": "mslt",
            "new_layer_init": "copy",
            "stages": [
                {"num_layers": settings.num_layers // 2, "steps": first},
                {"num_layers": settings.num_layers, "steps": second},
            ],
            "final_stage": {"steps": final},
        },
    )
    paths: dict[str, Any] = {"model": base["model"]}
    for name, config in (("full", base), ("mslt", mslt)):
        paths[name] = os.path.join(directory, f"{name}.yaml")
        with open(paths[name], "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
    return paths


def _pretrain(
    name: str, config_file: str, runs_dir: str, logs_dir: str, settings: DemoSettings, print_fn
) -> report.RunResult:
    model_dir = os.path.join(runs_dir, name)
    log = os.path.join(logs_dir, f"{name}.log")
    command = [
        sys.executable,
        "-m",
        "kbert.run_pretraining",
        f"--config_file={config_file}",
        f"--model_dir={model_dir}",
        "--mode=train_and_eval",
    ]
    print_fn("      $ kbert-pretrain " + " ".join(command[3:]))
    run_logged(command, log, _PROGRESS_LINE, print_fn, f"kbert-pretrain for the {name} run")
    summary_path = os.path.join(model_dir, "summary.json")
    with open(summary_path) as f:
        summary = json.load(f)
    # Times count from the start of the run proper (summary.json is written when it ends), not the interpreter's.
    run_started = os.path.getmtime(summary_path) - summary["wall_seconds"]
    first, second, _ = mslt_stage_steps(settings.steps)
    return report.RunResult(
        name,
        history.read_loss_curve(model_dir, run_started),
        summary["wall_seconds"],
        summary["eval"],
        [first, first + second] if name == "mslt" else [],
    )
