"""The pretraining experiment: its root config, loading it, and running it as a plain or an MSLT run.

This module sits above `kbert.training` (the loop, which knows no stages) and `kbert.mslt` (the stage runner,
which composes the loop): `kbert-pretrain` loads an experiment here and runs it.

Example:

```python
config = load_experiment(["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=50")
summary = run(config, "/tmp/run", make_strategy("auto"), mode="train_and_eval")
summary["train"]["loss"], summary["eval"]["masked_lm_accuracy"]
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Optional, Sequence

import keras
import tensorflow as tf

from kbert.choices import MODES
from kbert.errors import ConfigError
from kbert.mslt.plan import MsltConfig
from kbert.mslt.runner import plan_for, run_stages
from kbert.config import load_config
from kbert.data import first_layout
from kbert.training.config import PretrainingConfig, check_batch_sizes
from kbert.runtime.lease import Lease
from kbert.training.loop import evaluate, pretrain
from kbert.runtime.preemption import PreemptionWatcher
from kbert.training.reporting import eval_line, write_summary_json


@dataclasses.dataclass
class ExperimentConfig(PretrainingConfig):
    """Everything `kbert-pretrain` needs besides the model dir and the strategy."""

    # Multi-stage layerwise training (kbert.mslt); None trains the whole model at once.
    mslt: Optional[MsltConfig] = None

    def check(self) -> None:
        super().check()
        if self.mslt is not None:
            plan_for(self)  # a bad plan fails here, before anything is built


def load_experiment(config_files: Sequence[str] = (), params_override: str = "") -> ExperimentConfig:
    """Defaults, then each YAML file in order, then `params_override`; validated, the MSLT plan included.

    Raises:
      ConfigError: an unknown key (named, with the file or flag), a bad value, or an unreadable file.
      PlanError: a bad `mslt` section (a ConfigError too).
    """
    return load_config(ExperimentConfig, config_files, params_override)


def _set_up_session(config: ExperimentConfig) -> None:
    """Op determinism (`train.deterministic`), the seed and the precision policy, before anything is built."""
    if config.train.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.train.seed)
    keras.mixed_precision.set_global_policy(config.train.mixed_precision)


def _lease(model_dir: str, strategy: tf.distribute.Strategy, mode: str,
           print_fn) -> contextlib.AbstractContextManager:
    """The model_dir's lease for a run that trains (the chief holds it for the job); evaluating needs none."""
    if mode == "eval" or not strategy.extended.should_checkpoint:
        return contextlib.nullcontext()
    return Lease.take(model_dir, print_fn)


def train_data(config: ExperimentConfig) -> dict[str, str]:
    """What the training records held: their layout (unpacked, packed, MLM-only) and the objective that ran."""
    layout = first_layout(config.data.train_files, "data.train_files")
    return {"layout": layout.describe(),
            "objective": "masked LM + sentence head" if layout.sentence_labels else "masked LM only"}


def run(config: ExperimentConfig, model_dir: str, strategy: tf.distribute.Strategy, mode: str = "train",
        print_fn=print) -> dict[str, Any]:
    """Trains (a plain run, or the MSLT stages not finished yet) and/or evaluates as `mode` says; writes
    `model_dir/summary.json` (chief only) and returns it."""
    if mode not in MODES:
        raise ConfigError(f"--mode={mode}: choose one of {', '.join(MODES)}.")
    check_batch_sizes(config, strategy.num_replicas_in_sync)
    _set_up_session(config)
    tf.io.gfile.makedirs(model_dir)
    started = time.time()
    summary: dict[str, Any] = {"mode": mode, "strategy": type(strategy).__name__,
                               "replicas": strategy.num_replicas_in_sync, "config": config.as_dict()}
    with _lease(model_dir, strategy, mode, print_fn), PreemptionWatcher(strategy) as preemption:
        if config.mslt is None:
            model, results = pretrain(config, model_dir, strategy, mode, preemption, print_fn)
        else:
            model, results = run_stages(config, plan_for(config), model_dir, strategy, mode, preemption, print_fn)
    summary.update(results)
    if mode != "eval":
        summary["train_data"] = train_data(config)
    if mode in ("eval", "train_and_eval"):
        summary["eval"] = evaluate(config, strategy, model)
        print_fn(eval_line(summary["eval"]), flush=True)
    summary["wall_seconds"] = time.time() - started
    if strategy.extended.should_checkpoint:
        write_summary_json(model_dir, summary)
    return summary
