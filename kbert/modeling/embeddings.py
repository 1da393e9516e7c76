"""Word, position and token-type embeddings followed by LayerNorm and dropout."""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.config import BertConfig
from kbert.modeling.dropout import ReplicaDropout


def truncated_normal(config: BertConfig) -> keras.initializers.Initializer:
    """A new initializer for one weight. Keras 3 fixes an initializer's seed when it is made, so one instance
    shared by two layers gives them the same values (query = key = value; position rows = the first word rows)."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def kernel_initializer(config: BertConfig, name: str) -> keras.initializers.Initializer:
    """A new initializer for one weight, by name: "truncated_normal" is BERT's (`truncated_normal`), any other
    name one of Keras's, such as "glorot_uniform"."""
    return truncated_normal(config) if name == "truncated_normal" else keras.initializers.get(name)


class BertEmbeddings(keras.layers.Layer):
    """`bert/embeddings`: sum of word, position and token-type embeddings, normalised.

    Example:

    >>> emb = BertEmbeddings(BertConfig.load("bert_tiny"))
    >>> emb(ops.zeros((2, 16), "int32"), ops.zeros((2, 16), "int32")).shape
    TensorShape([2, 16, 128])
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.word_embeddings = keras.layers.Embedding(
            config.vocab_size,
            config.hidden_size,
            embeddings_initializer=truncated_normal(config),
            dtype=self.dtype_policy,
            name="word_embeddings",
        )
        self.position_embeddings = keras.layers.Embedding(
            config.max_position_embeddings,
            config.hidden_size,
            embeddings_initializer=truncated_normal(config),
            dtype=self.dtype_policy,
            name="position_embeddings",
        )
        self.token_type_embeddings = keras.layers.Embedding(
            config.type_vocab_size,
            config.hidden_size,
            embeddings_initializer=truncated_normal(config),
            dtype=self.dtype_policy,
            name="token_type_embeddings",
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_eps, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout = ReplicaDropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        for table in (self.word_embeddings, self.position_embeddings, self.token_type_embeddings):
            table.build((None, None))
        self.layer_norm.build((None, None, self.config.hidden_size))

    def call(self, input_ids, segment_ids, positions=None, training=None):
        """`positions` [B, S]: each token's position id (packed rows restart them); None: 0, 1, ... per row."""
        if positions is None:
            table = self.position_embeddings.embeddings[: ops.shape(input_ids)[1]][None]
        else:
            table = ops.take(self.position_embeddings.embeddings, ops.cast(positions, "int32"), axis=0)
        x = (
            self.word_embeddings(input_ids)
            + self.token_type_embeddings(segment_ids)
            + ops.cast(table, self.compute_dtype)
        )
        return self.dropout(self.layer_norm(x), training=training)
