"""Multi-head self-attention with Google's variable layout (`attention/self/{query,key,value}`).

Without dropout on the probabilities (inference, or `attention_probs_dropout_prob=0`) it runs through
`keras.ops.dot_product_attention`, which picks cuDNN's flash attention on JAX GPUs; the fused kernels take no
dropout, so training with attention dropout keeps the explicit softmax, as float16 on JAX CPUs does (`_fused`).
Both give the same float32 numbers: scores scaled in float32, Google's additive -10000 mask, softmax in float32.
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.config import BertConfig
from kbert.modeling.dropout import ReplicaDropout
from kbert.modeling.embeddings import truncated_normal
from kbert.modeling.rows import token_rows

# Google adds -10000 to masked scores; in float32 exp() of it is exactly 0 after max-subtraction.
_MASK_VALUE = -10000.0


def _flash_attention():
    """Keras's setting (`keras.config.disable_flash_attention()` turns it off; by default Keras chooses: cuDNN flash
    attention on JAX GPUs), and False on TPUs: Keras 3.15's Splash path drops `bias` and reads only the first
    example's mask, so a padded batch would attend to its padding."""
    if keras.backend.backend() == "jax":
        import jax

        if jax.devices()[0].platform == "tpu":
            return False
    return keras.config.is_flash_attention_enabled()


def _fused(compute_dtype: str) -> bool:
    """Whether `ops.dot_product_attention` can run: not in float16 on JAX CPUs. There jax.nn.dot_product_attention
    asks XLA for float16 products summed in float32, which XLA:CPU refuses when the step is compiled (JAX falls back
    only in eager mode), so `predict` and `fit` under mixed_float16 would fail."""
    if keras.backend.backend() != "jax" or compute_dtype != "float16":
        return True
    import jax

    return jax.devices()[0].platform != "cpu"


class BertSelfAttention(keras.layers.Layer):
    """Scaled dot-product attention over all heads; softmax runs in float32 under mixed precision.

    Example:

    >>> attn = BertSelfAttention(BertConfig.load("bert_tiny"))
    >>> x = ops.zeros((2, 16, 128))
    >>> attn(x, ops.ones((2, 1, 16), "int32")).shape
    TensorShape([2, 16, 128])
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config

        def dense(name: str) -> keras.layers.Dense:
            return keras.layers.Dense(
                config.hidden_size, kernel_initializer=truncated_normal(config), dtype=self.dtype_policy, name=name
            )

        self.query, self.key, self.value = dense("query"), dense("key"), dense("value")
        self.dropout = ReplicaDropout(config.attention_probs_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        for dense in (self.query, self.key, self.value):
            dense.build((None, None, self.config.hidden_size))

    def _heads(self, dense: keras.layers.Dense, rows, batch, seq):
        """`dense` of the [B*S, H] `rows`, split into heads: [B, S, heads, head_size]."""
        return ops.reshape(dense(rows), (batch, seq, self.config.num_attention_heads, self.config.head_size))

    def call(self, hidden, attention_mask, training=None):
        """`attention_mask`: [B, 1 or S, S], 1 where a query may attend to a key (`kbert.modeling.packing`)."""
        batch, seq = ops.shape(hidden)[0], ops.shape(hidden)[1]
        rows = token_rows(hidden)
        q, k, v = (self._heads(dense, rows, batch, seq) for dense in (self.query, self.key, self.value))
        scale = 1.0 / float(self.config.head_size) ** 0.5
        bias = (1.0 - ops.cast(attention_mask, "float32"))[:, None, :, :] * _MASK_VALUE
        if (training and self.dropout.rate > 0) or not _fused(self.compute_dtype):
            scores = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q, k), "float32") * scale
            probs = ops.softmax(scores + bias, axis=-1)
            probs = self.dropout(ops.cast(probs, self.compute_dtype), training=training)
            context = ops.einsum("bhqk,bkhd->bqhd", probs, v)
        else:
            if keras.backend.backend() == "jax":  # cuDNN takes a bias of [B, 1, S, S] only, not [B, 1, 1, S]
                bias = ops.broadcast_to(bias, (batch, 1, seq, seq))
            context = ops.dot_product_attention(q, k, v, bias=bias, scale=scale, flash_attention=_flash_attention())
        return ops.reshape(context, (batch, seq, self.config.hidden_size))
