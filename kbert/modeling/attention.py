"""Multi-head self-attention, the attention part of a block: query, key and value projections with Google's variable
layout (`attention/self/{query,key,value}`) and the scaled dot product over all heads. Positions enter below it
(BERT's absolute table, in the embeddings) or in it: with `rope_theta`, q and k are turned per head by each token's
position (`kbert.modeling.rotary`). With `window`, a local layer: each token attends to those within window / 2.

Without dropout on the probabilities (inference, or `attention_probs_dropout_prob=0`) it runs through
`keras.ops.dot_product_attention`, which picks cuDNN's flash attention on JAX GPUs; the fused kernels take no
dropout, so training with attention dropout keeps the explicit softmax, as float16 on JAX CPUs does (`_fused`).
Both give the same float32 numbers: scores scaled in float32, Google's additive -10000 mask, softmax in float32.
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.costs import Cost, dense_cost
from kbert.modeling.dropout import ReplicaDropout
from kbert.modeling.embeddings import truncated_normal
from kbert.modeling.rotary import rotate, window_mask
from kbert.modeling.rows import token_rows
from kbert.modeling.weight_names import WeightName, part_names

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


@keras.saving.register_keras_serializable(package="kbert")
class SelfAttention(keras.layers.Layer):
    """Scaled dot-product attention over all heads; softmax runs in float32 under mixed precision.

    Args:
        hidden_size: the width of its input and output.
        num_heads: heads of `hidden_size / num_heads` each.
        dropout_rate: dropout on the attention probabilities in training.
        initializer_range: the standard deviation of the projections' truncated-normal kernels.
        use_bias: whether the projections add a bias.
        rope_theta: with a value, rotary positions of that base on q and k (None: the input carries positions).
        window: with a value, a local layer: a token attends where |i - j| <= window // 2 (None: everywhere).

    Example:

    >>> attn = SelfAttention(hidden_size=128, num_heads=2)
    >>> x = ops.zeros((2, 16, 128))
    >>> attn(x, ops.ones((2, 1, 16), "int32")).shape
    TensorShape([2, 16, 128])
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout_rate: float = 0.0,
        initializer_range: float = 0.02,
        use_bias: bool = True,
        rope_theta: float | None = None,
        window: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.head_size = hidden_size // num_heads
        self.initializer_range, self.use_bias = initializer_range, use_bias
        self.rope_theta, self.window = rope_theta, window

        def dense(name: str) -> keras.layers.Dense:
            return keras.layers.Dense(
                hidden_size,
                use_bias=use_bias,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query, self.key, self.value = dense("query"), dense("key"), dense("value")
        self.dropout = ReplicaDropout(dropout_rate, dtype=self.dtype_policy)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "dropout_rate": self.dropout.rate,
            "initializer_range": self.initializer_range,
            "use_bias": self.use_bias,
            "rope_theta": self.rope_theta,
            "window": self.window,
        }

    @staticmethod
    def cost(hidden_size: int, seq_length: int, use_bias: bool = True, window: int | None = None) -> Cost:
        """The projections, and the scores and context products over `seq_length` tokens, each query against
        min(S, window + 1) keys in a local layer (rotary positions turn vectors: no matmul)."""
        projections = dense_cost(hidden_size, hidden_size, seq_length, use_bias)
        keys = seq_length if window is None else min(seq_length, window + 1)
        return projections + projections + projections + Cost(0, 2 * 2 * seq_length * keys * hidden_size)

    def weight_names(self, google: str, keras_hub: str, model_garden: str, modernbert: str) -> list[WeightName]:
        """Query, key and value under Google's `{google}/self/query`, keras-hub's `query_dense`, Model Garden's
        `query`, and ModernBERT's rows of `{modernbert}.Wqkv` (q, k, v in that order)."""
        h = self.hidden_size
        return [
            name
            for i, part in enumerate(("query", "key", "value"))
            for name in part_names(
                getattr(self, part),
                f"{google}/self/{part}",
                f"{keras_hub}/{part}_dense",
                f"{model_garden}/{part}",
                f"{modernbert}.Wqkv",
                (i * h, (i + 1) * h),
            )
        ]

    def build(self, input_shape=None):
        for dense in (self.query, self.key, self.value):
            dense.build((None, None, self.hidden_size))

    def _heads(self, dense: keras.layers.Dense, rows, batch, seq):
        """`dense` of the [B*S, H] `rows`, split into heads: [B, S, heads, head_size]."""
        return ops.reshape(dense(rows), (batch, seq, self.num_heads, self.head_size))

    def call(self, hidden, attention_mask, positions=None, training=None):
        """`attention_mask`: [B, 1 or S, S], 1 where a query may attend to a key (`kbert.modeling.packing`);
        `positions` [B, S]: each token's position id (packed rows restart them), for rotary positions; None: 0, 1,
        ... per row."""
        batch, seq = ops.shape(hidden)[0], ops.shape(hidden)[1]
        rows = token_rows(hidden)
        q, k, v = (self._heads(dense, rows, batch, seq) for dense in (self.query, self.key, self.value))
        if self.rope_theta is not None:
            if positions is None:
                positions = ops.broadcast_to(ops.arange(seq)[None], (batch, seq))
            q, k = rotate(q, positions, self.rope_theta), rotate(k, positions, self.rope_theta)
        if self.window is not None:  # packed sequences are contiguous: the band within one is that of positions
            attention_mask = attention_mask * window_mask(seq, self.window)
        scale = 1.0 / float(self.head_size) ** 0.5
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
        return ops.reshape(context, (batch, seq, self.hidden_size))
