"""Distributed BERT pretraining: its config sections, input, replica step, loop and reporting.

Knows no MSLT stage: the engine (`engine.py`) runs any list of stages (`stage.py`, `phases.py`); `kbert.mslt`
makes an MSLT plan's, and `kbert.experiment` runs them.
"""

from kbert.config import load_config
from kbert.runtime.preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionWatcher
from kbert.runtime.strategy import make_strategy
from kbert.training.config import PretrainingConfig
from kbert.training.engine import PretrainingRun
from kbert.training.loop import build_model, build_optimizer, evaluate, make_trainer, train
from kbert.training.stage import TrainingStage
from kbert.training.trainer import PretrainingTrainer

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "PreemptionWatcher",
    "PretrainingConfig",
    "PretrainingRun",
    "PretrainingTrainer",
    "TrainingStage",
    "build_model",
    "build_optimizer",
    "evaluate",
    "load_config",
    "make_strategy",
    "make_trainer",
    "train",
]
