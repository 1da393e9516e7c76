"""Distributed pretraining: its config sections, the task seam, input, replica step, loop and reporting.

Knows no model and no MSLT stage: the engine (`engine.py`) runs any list of stages (`stage.py`, `phases.py`), each
with its task (`task.py`: the model and its objective; `kbert.tasks` has BERT's); `kbert.mslt` makes an MSLT plan's
stages, and `kbert.experiment` composes and runs them.
"""

from kbert.config import load_config
from kbert.runtime.preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionWatcher
from kbert.runtime.strategy import make_strategy
from kbert.training.config import PretrainingConfig
from kbert.training.engine import PretrainingRun
from kbert.training.loop import build_optimizer, evaluate, make_trainer, train
from kbert.training.stage import TrainingStage
from kbert.training.task import PretrainingTask
from kbert.training.trainer import PretrainingTrainer

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "PreemptionWatcher",
    "PretrainingConfig",
    "PretrainingRun",
    "PretrainingTask",
    "PretrainingTrainer",
    "TrainingStage",
    "build_optimizer",
    "evaluate",
    "load_config",
    "make_strategy",
    "make_trainer",
    "train",
]
