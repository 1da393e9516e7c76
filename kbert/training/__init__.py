"""Distributed BERT pretraining: its config sections, input, replica step, loop and reporting.

Knows no MSLT stage: `kbert.mslt` composes this loop, and `kbert.experiment` runs either.
"""

from kbert.config import load_config
from kbert.training.config import PretrainingConfig
from kbert.training.loop import build_model, build_optimizer, evaluate, make_trainer, pretrain, train
from kbert.runtime.preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionWatcher
from kbert.runtime.strategy import make_strategy
from kbert.training.trainer import PretrainingTrainer

__all__ = ["PREEMPTED_EXIT_CODE", "Preempted", "PreemptionWatcher", "PretrainingConfig", "PretrainingTrainer",
           "build_model", "build_optimizer", "evaluate", "load_config", "make_strategy", "make_trainer", "pretrain",
           "train"]
