"""LAMB and LARS for Keras 3, their warmup schedule, loss scaling across replicas and trust-ratio telemetry."""

from kbert.optimizers.lamb import LAMB
from kbert.optimizers.lars import LARS
from kbert.optimizers.loss_scale import LossScaleOptimizer
from kbert.optimizers.schedules import PolynomialWarmup
from kbert.optimizers.trust_ratio_callback import TrustRatioCallback, write_trust_ratio_summaries

__all__ = [
    "LAMB",
    "LARS",
    "LossScaleOptimizer",
    "PolynomialWarmup",
    "TrustRatioCallback",
    "write_trust_ratio_summaries",
]
