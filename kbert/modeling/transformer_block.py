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
        dense = dict(kernel_initializer=truncated_normal(config), dtype=self.dtype_policy)
        norm = dict(epsilon=config.layer_norm_eps, dtype=self.dtype_policy)
        self.attention = BertSelfAttention(config, dtype=self.dtype_policy, name="attention")
        self.attention_output = keras.layers.Dense(config.hidden_size, name="attention_output", **dense)
        self.attention_layer_norm = keras.layers.LayerNormalization(name="attention_layer_norm", **norm)
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, activation=get_activation(config.hidden_act), name="intermediate", **dense)
        self.output_dense = keras.layers.Dense(config.hidden_size, name="output", **dense)
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
