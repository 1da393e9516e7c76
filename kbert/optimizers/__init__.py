"""LAMB, LARS and AdamW (Keras's, clipped after the all-reduce) for Keras 3, their schedules (polynomial,
warmup-stable-decay, one-cycle), loss scaling across replicas and trust-ratio telemetry."""

from kbert.optimizers.adamw import AdamW
from kbert.optimizers.distributed import DistributedMixin
from kbert.optimizers.lamb import LAMB
from kbert.optimizers.lars import LARS
from kbert.optimizers.loss_scale import LossScaleOptimizer
from kbert.optimizers.schedules import OneCycle, PolynomialWarmup, WarmupStableDecay
from kbert.optimizers.trust_ratio_callback import TrustRatioCallback, write_trust_ratio_summaries

__all__ = [
    "AdamW",
    "DistributedMixin",
    "LAMB",
    "LARS",
    "LossScaleOptimizer",
    "OneCycle",
    "PolynomialWarmup",
    "TrustRatioCallback",
    "WarmupStableDecay",
    "write_trust_ratio_summaries",
]
