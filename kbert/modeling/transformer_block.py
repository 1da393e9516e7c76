"""One post-LayerNorm BERT encoder layer (`bert/encoder/layer_N`)."""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.activations import get_activation
from kbert.modeling.attention import BertSelfAttention
from kbert.modeling.config import BertConfig
from kbert.modeling.dropout import ReplicaDropout
from kbert.modeling.embeddings import truncated_normal
from kbert.modeling.rows import token_rows


class TransformerBlock(keras.layers.Layer):
    """Self-attention and feed-forward sublayers, each `LayerNorm(x + dropout(f(x)))`.

    Example:

    >>> block = TransformerBlock(BertConfig.load("bert_tiny"), name="layer_0")
    >>> block(keras.ops.zeros((2, 16, 128)), keras.ops.ones((2, 1, 16), "int32")).shape
    TensorShape([2, 16, 128])
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config

        def dense(units: int, name: str, **kwargs) -> keras.layers.Dense:
            return keras.layers.Dense(
                units, kernel_initializer=truncated_normal(config), dtype=self.dtype_policy, name=name, **kwargs
            )

        norm = dict(epsilon=config.layer_norm_eps, dtype=self.dtype_policy)
        self.attention = BertSelfAttention(config, dtype=self.dtype_policy, name="attention")
        self.attention_output = dense(config.hidden_size, "attention_output")
        self.attention_layer_norm = keras.layers.LayerNormalization(name="attention_layer_norm", **norm)
        self.intermediate = dense(
            config.intermediate_size, "intermediate", activation=get_activation(config.hidden_act)
        )
        self.output_dense = dense(config.hidden_size, "output")
        self.output_layer_norm = keras.layers.LayerNormalization(name="output_layer_norm", **norm)
        self.dropout = ReplicaDropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        hidden = (None, None, self.config.hidden_size)
        self.attention.build(hidden)
        self.attention_output.build(hidden)
        self.attention_layer_norm.build(hidden)
        self.intermediate.build(hidden)
        self.output_dense.build((None, None, self.config.intermediate_size))
        self.output_layer_norm.build(hidden)

    def call(self, hidden, attention_mask, training=None):
        # Dense sublayers on [B*S, H] token rows fuse with their bias and GELU (kbert.modeling.rows); the rest is
        # per token.
        rows = token_rows(hidden)
        attended = self.attention_output(token_rows(self.attention(hidden, attention_mask, training=training)))
        rows = self.attention_layer_norm(rows + self.dropout(attended, training=training))
        ffn = self.output_dense(self.intermediate(rows))
        rows = self.output_layer_norm(rows + self.dropout(ffn, training=training))
        return ops.reshape(rows, ops.shape(hidden))
