"""Distributed BERT pretraining: experiment config, strategies, the training loop, checkpoints, reporting."""

from kbert.training.config import ConfigError, ExperimentConfig, load_experiment
from kbert.training.loop import build_model, build_optimizer, evaluate, run_experiment, train
from kbert.training.strategy import StrategyError, make_strategy
from kbert.training.trainer import PretrainingTrainer

__all__ = ["ConfigError", "ExperimentConfig", "PretrainingTrainer", "StrategyError", "build_model",
           "build_optimizer", "evaluate", "load_experiment", "make_strategy", "run_experiment", "train"]
