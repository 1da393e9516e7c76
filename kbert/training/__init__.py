"""Distributed BERT pretraining: config sections, strategies, the training loop, checkpoints, preemption, reporting.

Knows no MSLT stage: `kbert.mslt` composes this loop, and `kbert.experiment` runs either.
"""

from kbert.training.config import PretrainingConfig, load_config
from kbert.training.loop import build_model, build_optimizer, evaluate, make_trainer, pretrain, train
from kbert.training.preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionWatcher
from kbert.training.strategy import make_strategy
from kbert.training.trainer import PretrainingTrainer

__all__ = ["PREEMPTED_EXIT_CODE", "Preempted", "PreemptionWatcher", "PretrainingConfig", "PretrainingTrainer",
           "build_model", "build_optimizer", "evaluate", "load_config", "make_strategy", "make_trainer", "pretrain",
           "train"]
