"""The 2D forms of BERT's matmuls that TensorFlow's CPU graph fuses: Dense layers on [tokens, H] rows, and the
tied vocabulary logits as one MatMul against the word-embedding table.

On [B, S, H] a Keras Dense layer is Reshape-MatMul-Reshape (tensordot), and the trailing Reshape keeps its BiasAdd
and activation out of grappler's MatMul fusion; on rows it is MatMul + BiasAdd (+ GELU), which oneDNN runs as one
`_FusedMatMul`. A batched einsum against the [V, H] table broadcasts it over the batch: its gradient for the table
is a BatchMatMul that materialises [B, V, H], then a Sum over B.

Example:

>>> rows = token_rows(ops.zeros((2, 16, 32)))
>>> tuple(rows.shape), tuple(tied_logits(rows, ops.zeros((97, 32)), ops.zeros(97)).shape)
((32, 32), (32, 97))
"""

from __future__ import annotations

from keras import ops


def token_rows(x):
    """[B, S, H] -> [B*S, H] (a Reshape, no copy)."""
    return ops.reshape(x, (-1, ops.shape(x)[-1]))


def tied_logits(rows, table, bias):
    """Float32 logits [N, V] of `rows` [N, H] against the tied word-embedding `table` [V, H], plus the float32 `bias`
    [V]: one MatMul with the table transposed in place (grappler folds the transpose into it), whose table gradient
    is one MatMul too; in float32 the bias joins the forward MatMul's fusion."""
    return ops.add(ops.cast(ops.matmul(rows, ops.transpose(table)), "float32"), bias)
