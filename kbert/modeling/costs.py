"""What a part costs: its parameters and the matmul FLOPs of its forward pass over one sequence, from its
hyperparameters alone (no layer is built, so no seed is drawn). Parts sum their sublayers' costs
(`TransformerBlock.cost`, `BertEncoder.cost`, `MaskedLMHead.cost`); `kbert.runtime.flops` and the MSLT plan read
them.

Example:

>>> dense_cost(768, 3072, tokens=128)
Cost(parameters=2362368, flops=603979776)
>>> dense_cost(768, 3072, tokens=128) + norm_cost(768)
Cost(parameters=2363904, flops=603979776)
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Cost:
    """`parameters`, and `flops`: multiply-adds x 2 of the forward matmuls (gathers, norms and activations
    excluded, as MFU counts them)."""

    parameters: int = 0
    flops: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.parameters + other.parameters, self.flops + other.flops)


def dense_cost(inputs: int, units: int, tokens: int, use_bias: bool = True) -> Cost:
    """A Dense layer of `units` on `tokens` rows of `inputs` features."""
    return Cost(inputs * units + (units if use_bias else 0), 2 * tokens * inputs * units)


def norm_cost(size: int, use_bias: bool = True) -> Cost:
    """A LayerNormalization over `size` features: its scale, and its offset with `use_bias`."""
    return Cost(size * (2 if use_bias else 1), 0)
