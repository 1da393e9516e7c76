"""Packed rows: several sequences in one row, kept apart (Krell et al. 2021; `kbert.data.schema`).

A packed batch carries `positions` (position ids restarting with each sequence) and an `input_mask` that holds
each token's sequence index (1, 2, ...; 0 = padding). Invariant: every output at a real token of a packed row
equals the output of its sequence alone in an unpacked row: a token attends only to tokens of its own sequence,
and sees the position ids it would have alone.

Example:

>>> from keras import ops
>>> attention_mask({"input_mask": ops.convert_to_tensor([[1, 1, 2, 0]]), "positions": None}).shape
TensorShape([1, 4, 4])
"""

from __future__ import annotations

from collections.abc import Mapping

from keras import ops


def is_packed(inputs: Mapping) -> bool:
    """Whether a batch dict holds packed rows (it has per-token `positions`)."""
    return "positions" in inputs


def attention_mask(inputs: Mapping):
    """1 where a query token may attend to a key token: [B, 1, S] (real keys) for unpacked rows, [B, S, S] (keys
    of the query's own sequence) for packed ones. int32: Keras casts float arguments to a layer's compute dtype."""
    index = inputs["input_mask"]
    if not is_packed(inputs):
        return ops.cast(ops.greater(index, 0), "int32")[:, None, :]
    same = ops.equal(index[:, :, None], index[:, None, :]) & ops.greater(index[:, None, :], 0)
    return ops.cast(same, "int32")


def gather_tokens(sequence_output, token_positions):
    """[B, S, H] hidden states at `token_positions` [B, K] -> [B, K, H] (each packed sequence's [CLS])."""
    return ops.take_along_axis(sequence_output, ops.cast(token_positions, "int32")[:, :, None], axis=1)
