"""The demo's downstream step: how well each encoder does on the package task (`kbert.finetuning.package_task`), by
a frozen-encoder probe and, when asked, by fine-tuning.

The probe (`kbert.finetuning.probe`, in this process) is the demo's measure of pretraining: the LAMB and MSLT
encoders have one score each (the probe is deterministic), the random-init encoder one per seed 1..`random_seeds`.
Fine-tuning (`FinetuneSettings.seeds` > 0) runs `kbert-finetune` once per encoder and seed, each a child process on
a YAML config written into the output folder (one per encoder, the seed on the command line), so any run can be
repeated by hand with the printed command; a run's score is the eval accuracy of its best epoch.

Example:

```python
encoders = {"full": "runs/full", "mslt": "runs/mslt", "random": ""}
scores = probe_all(task, "data/vocab.txt", 64, model, encoders, random_seeds=5, print_fn=print)
configs = write_configs(task, "data/vocab.txt", 64, model, encoders, settings, "configs")
scores += finetune_all(configs, settings, "runs/finetune", "logs", print)
```
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from kbert.demo.processes import run_logged
from kbert.demo.report import FINETUNE, PROBE, DownstreamScores
from kbert.finetuning import probe
from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.package_task import TaskFiles
from kbert.finetuning.recipe import Recipe, finetune_config
from kbert.finetuning.subprocess_run import finetune_command, read_summary, score

# Only kbert-finetune's error line is echoed; the demo prints one line of its own per run.
_ECHO = re.compile(r"^kbert-finetune: ")


@dataclasses.dataclass
class FinetuneSettings:
    """The fine-tuning recipe, the same for every encoder; seeds are 1..`seeds` (0: no fine-tuning); `parallel`
    runs at a time.

    A low peak rate over enough epochs that random init converges too (the task has 856 training texts, 27 steps
    an epoch): at 1e-3 for 3 epochs random init's seeds spread from 49% to 75%, and at 3e-4 for 10 it was still
    rising at the last epoch, 59.6-70.7% against 84-87% for the pretrained encoders; at 30 epochs it reached
    83.2-85.6% (docs/demo.md).
    """

    seeds: int = 0
    # Two at a time: a run's start (importing TensorFlow, tracing the model) is single-threaded and takes most of
    # its time at demo size, so two runs share two cores well.
    parallel: int = 2
    epochs: int = 30
    learning_rate: float = 3e-4
    batch_size: int = 32


def probe_all(
    task: TaskFiles,
    vocab_file: str,
    seq_length: int,
    model: Mapping[str, Any],
    encoders: Mapping[str, str],
    random_seeds: int,
    print_fn: Callable[..., None],
) -> list[DownstreamScores]:
    """The probe's score of every encoder of `encoders` (name -> pretraining model_dir, "" for random init, scored
    once per seed 1..`random_seeds` from `model`, the pretraining configs' model section), in `encoders`' order."""
    data = task.examples()
    train, evaluation = data.train, data.evals["eval"]
    tokenizer = PairEncoder(vocab_file, seq_length)
    results = []
    for name, model_dir in encoders.items():
        seeds = [] if model_dir else list(range(1, random_seeds + 1))
        built = [probe.pretrained_encoder(model_dir)] if model_dir else [probe.random_encoder(model, s) for s in seeds]
        scores = DownstreamScores(
            name, PROBE, seeds, [probe.probe_accuracy(e, tokenizer, train, evaluation) for e in built]
        )
        print_fn(f"      {name}: probe accuracy {scores}" + (f" (seeds {seeds[0]}-{seeds[-1]})" if seeds else ""))
        results.append(scores)
    return results


def write_configs(
    task: TaskFiles,
    vocab_file: str,
    seq_length: int,
    model: Mapping[str, Any],
    encoders: Mapping[str, str],
    settings: FinetuneSettings,
    directory: str,
) -> dict[str, str]:
    """Writes `finetune_<encoder>.yaml` per encoder (name -> pretraining model_dir, "" for random init) and returns
    their paths. `model` is the pretraining configs' model section: a random-init encoder is built from it."""
    recipe = Recipe(
        task.finetune_task(), vocab_file, seq_length, settings.epochs, settings.learning_rate, settings.batch_size
    )
    paths = {}
    for encoder, init_checkpoint in encoders.items():
        paths[encoder] = os.path.join(directory, f"finetune_{encoder}.yaml")
        with open(paths[encoder], "w") as f:
            yaml.safe_dump(
                finetune_config(recipe, init_checkpoint, None if init_checkpoint else model), f, sort_keys=False
            )
    return paths


def finetune_all(
    configs: Mapping[str, str], settings: FinetuneSettings, runs_dir: str, logs_dir: str, print_fn: Callable[..., None]
) -> list[DownstreamScores]:
    """Fine-tunes every encoder of `configs` once per seed, in `runs_dir/<encoder>/seed_<S>`, `settings.parallel`
    runs at a time; returns their scores in `configs`' order.

    Raises RuntimeError naming the log of a run that failed.
    """
    seeds = list(range(1, settings.seeds + 1))
    runs = [(encoder, config_file, seed) for encoder, config_file in configs.items() for seed in seeds]
    with concurrent.futures.ThreadPoolExecutor(settings.parallel) as pool:
        scores = iter(pool.map(lambda run: _finetune(*run, runs_dir, logs_dir, print_fn), runs))  # in `runs` order
        return [DownstreamScores(encoder, FINETUNE, seeds, [next(scores) for _ in seeds]) for encoder in configs]


def _finetune(encoder: str, config_file: str, seed: int, runs_dir: str, logs_dir: str, print_fn) -> float:
    model_dir = os.path.join(runs_dir, encoder, f"seed_{seed}")
    command = finetune_command(config_file, model_dir, f"--params_override=train.seed={seed}")
    print_fn("      $ kbert-finetune " + " ".join(command[3:]))
    run_logged(
        command,
        os.path.join(logs_dir, f"finetune_{encoder}_seed_{seed}.log"),
        _ECHO,
        print_fn,
        f"kbert-finetune of the {encoder} encoder, seed {seed},",
    )
    summary = read_summary(model_dir)
    accuracy = score(summary)
    print_fn(
        f"      {encoder}, seed {seed}: eval accuracy {accuracy:.1f}% (best of {len(summary['epochs'])} epochs: "
        f"{summary['best_epoch']}), {summary['wall_seconds']:.0f} s"
    )
    return accuracy
