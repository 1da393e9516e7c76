"""The demo's downstream step: each encoder fine-tuned on the package task (`task.py`), once per seed.

Every run is a `kbert-finetune` process on a YAML config written into the output folder, one config per encoder
with the seed given on the command line, so any run can be repeated by hand with the printed command. The
pretrained encoders start from their pretraining `model_dir` (kbert-finetune finds the newest checkpoint, or
MSLT's last stage export, and the model config that came with it); the random-init one is built from the same
model section as the pretraining runs. A run's score is the eval accuracy of its best epoch, as `kbert-finetune`
keeps it.

Example:

```python
configs = write_configs(task, "data/vocab.txt", 64, model, {"full": "runs/full", "random": ""}, settings, "configs")
scores = finetune_all(configs, settings, "runs/finetune", "logs", print)  # [DownstreamScores("full", ...), ...]
```
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
from typing import Any, Callable, Mapping

import yaml

from kbert.demo.processes import run_logged
from kbert.demo.report import DownstreamScores
from kbert.finetuning.package_task import TaskFiles
from kbert.finetuning.recipe import Recipe, finetune_config
from kbert.finetuning.subprocess_run import finetune_command, read_summary, score

# Only kbert-finetune's error line is echoed; the demo prints one line of its own per run.
_ECHO = re.compile(r"^kbert-finetune: ")


@dataclasses.dataclass
class FinetuneSettings:
    """The fine-tuning recipe, the same for every encoder; seeds are 1..`seeds`; `parallel` runs at a time."""

    seeds: int = 3
    # Two at a time: a run's start (importing TensorFlow, tracing the model) is single-threaded and takes most of
    # its time at demo size, so two runs share two cores well.
    parallel: int = 2
    epochs: int = 3
    learning_rate: float = 1e-3
    batch_size: int = 32


def write_configs(task: TaskFiles, vocab_file: str, seq_length: int, model: Mapping[str, Any],
                  encoders: Mapping[str, str], settings: FinetuneSettings, directory: str) -> dict[str, str]:
    """Writes `finetune_<encoder>.yaml` per encoder (name -> pretraining model_dir, "" for random init) and returns
    their paths. `model` is the pretraining configs' model section: a random-init encoder is built from it."""
    recipe = Recipe(task.finetune_task(), vocab_file, seq_length, settings.epochs, settings.learning_rate,
                    settings.batch_size)
    paths = {}
    for encoder, init_checkpoint in encoders.items():
        paths[encoder] = os.path.join(directory, f"finetune_{encoder}.yaml")
        with open(paths[encoder], "w") as f:
            yaml.safe_dump(finetune_config(recipe, init_checkpoint, None if init_checkpoint else model), f,
                           sort_keys=False)
    return paths


def finetune_all(configs: Mapping[str, str], settings: FinetuneSettings, runs_dir: str, logs_dir: str,
                 print_fn: Callable[..., None]) -> list[DownstreamScores]:
    """Fine-tunes every encoder of `configs` once per seed, in `runs_dir/<encoder>/seed_<S>`, `settings.parallel`
    runs at a time; returns their scores in `configs`' order.

    Raises RuntimeError naming the log of a run that failed.
    """
    seeds = list(range(1, settings.seeds + 1))
    runs = [(encoder, config_file, seed) for encoder, config_file in configs.items() for seed in seeds]
    with concurrent.futures.ThreadPoolExecutor(settings.parallel) as pool:
        scores = iter(pool.map(lambda run: _finetune(*run, runs_dir, logs_dir, print_fn), runs))  # in `runs` order
        return [DownstreamScores(encoder, seeds, [next(scores) for _ in seeds]) for encoder in configs]


def _finetune(encoder: str, config_file: str, seed: int, runs_dir: str, logs_dir: str, print_fn) -> float:
    model_dir = os.path.join(runs_dir, encoder, f"seed_{seed}")
    command = finetune_command(config_file, model_dir, f"--params_override=train.seed={seed}")
    print_fn("      $ kbert-finetune " + " ".join(command[3:]))
    run_logged(command, os.path.join(logs_dir, f"finetune_{encoder}_seed_{seed}.log"), _ECHO, print_fn,
               f"kbert-finetune of the {encoder} encoder, seed {seed},")
    summary = read_summary(model_dir)
    accuracy = score(summary)
    print_fn(f"      {encoder}, seed {seed}: eval accuracy {accuracy:.1f}% (best of {len(summary['epochs'])} epochs: "
             f"{summary['best_epoch']}), {summary['wall_seconds']:.0f} s")
    return accuracy
