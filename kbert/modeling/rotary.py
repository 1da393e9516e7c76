"""Rotary position embeddings (RoPE, Su et al. 2021) in the rotate-half convention of GPT-NeoX, Llama and
ModernBERT: each head's query and key vectors turn by angles proportional to the token's position, so their dot
product depends on the positions' difference alone.

Example:

>>> from keras import ops
>>> x = ops.ones((1, 3, 2, 4))                      # [batch, tokens, heads, head_size]
>>> rotated = rotate(x, ops.convert_to_tensor([[0, 1, 2]]), theta=10000.0)
>>> tuple(rotated.shape), bool(ops.all(rotated[0, 0] == x[0, 0]))   # position 0 is not turned
((1, 3, 2, 4), True)
"""

from __future__ import annotations

import numpy as np
from keras import ops


def inverse_frequencies(head_size: int, theta: float) -> np.ndarray:
    """theta^(-2i/d) for i < d/2: the angle per position of each pair of the head's dimensions."""
    return 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size)


def rotate(x, positions, theta: float):
    """`x` [B, S, heads, d] turned by each token's position id `positions` [B, S]: x·cos + rotate_half(x)·sin,
    rotate_half([a, b]) = [-b, a], the angles in float32 and the result in `x`'s dtype."""
    half = x.shape[-1] // 2
    frequencies = ops.convert_to_tensor(inverse_frequencies(x.shape[-1], theta).astype(np.float32))
    angles = ops.cast(positions, "float32")[:, :, None] * frequencies  # [B, S, d/2]
    angles = ops.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [B, S, 1, d]
    x32 = ops.cast(x, "float32")
    turned = ops.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return ops.cast(x32 * ops.cos(angles) + turned * ops.sin(angles), x.dtype)


def window_mask(seq_length, window: int):
    """[1, S, S]: 1 where |query - key| <= window // 2 (a local layer's band; ModernBERT's `local_attention`)."""
    index = ops.arange(seq_length)
    distance = ops.abs(index[:, None] - index[None, :])
    return ops.cast(distance <= window // 2, "int32")[None]
