"""The LAMB paper's large-batch claim, as its authors frame it (You et al. 2019, "untuned LAMB" for BERT): a rate
tuned at one batch carries to larger ones by square-root scaling, lr(B) = lr(B0) * sqrt(B / B0), with
"linear-epoch" warmup, a warmup share of the steps proportional to the batch (1/320 of the steps at batch 512,
doubling with each doubling of the batch, to 1/5 at 32K); and the batch can grow without costing more samples to
reach the target. Here: the recipe of each batch, and how far the samples to target stay flat.

Invariant: `scaled_recipe` at the base batch is the base recipe; its rate grows with the square root of the batch
and its warmup share linearly (capped at `MAX_WARMUP_SHARE`); `largest_flat_batch` is the largest batch up to which
every batch reached the target within `tolerance` of the smallest batch's samples.

Example:

>>> scaled_recipe(base_batch=64, base_learning_rate=1e-3, base_warmup_share=1 / 320, batch_size=1024)
BatchRecipe(batch_size=1024, learning_rate=0.004, warmup_share=0.05)
>>> largest_flat_batch({64: 10_000, 256: 11_500, 1024: 13_000, 2048: 11_000})
256
>>> largest_flat_batch({64: 10_000, 256: None, 1024: 12_000}), largest_flat_batch({64: None, 256: 9_000})
(64, None)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

# A warmup longer than half the run would leave the decay too few steps; the paper's largest share is 1/5.
MAX_WARMUP_SHARE = 0.5
# The claim's tolerance: samples to target within 20% of the smallest batch's count as flat.
FLAT_TOLERANCE = 0.2


@dataclasses.dataclass(frozen=True)
class BatchRecipe:
    """The peak rate and warmup share (of the run's optimizer steps) one global batch trains with."""

    batch_size: int
    learning_rate: float
    warmup_share: float


def scaled_recipe(base_batch: int, base_learning_rate: float, base_warmup_share: float, batch_size: int) -> BatchRecipe:
    """The recipe of `batch_size` from the one tuned at `base_batch`: square-root rate, linear warmup share."""
    ratio = batch_size / base_batch
    return BatchRecipe(
        batch_size, base_learning_rate * math.sqrt(ratio), min(base_warmup_share * ratio, MAX_WARMUP_SHARE)
    )


def largest_flat_batch(samples_to_target: Mapping[int, int | None], tolerance: float = FLAT_TOLERANCE) -> int | None:
    """The largest batch such that it and every smaller one reached the target within (1 + tolerance) x the
    smallest batch's samples (None: not reached); None when the smallest batch itself did not reach it."""
    batches = sorted(samples_to_target)
    base = samples_to_target[batches[0]]
    if base is None:
        return None
    largest = batches[0]
    for batch in batches[1:]:
        samples = samples_to_target[batch]
        if samples is None or samples > (1 + tolerance) * base:
            break
        largest = batch
    return largest
