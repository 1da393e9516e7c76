"""Word, position and token-type embeddings followed by LayerNorm and dropout."""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.config import BertConfig
from kbert.modeling.dropout import ReplicaDropout


def truncated_normal(config: BertConfig) -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


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
        init = truncated_normal(config)
        self.word_embeddings = keras.layers.Embedding(
            config.vocab_size, config.hidden_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="word_embeddings")
        self.position_embeddings = keras.layers.Embedding(
            config.max_position_embeddings, config.hidden_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="position_embeddings")
        self.token_type_embeddings = keras.layers.Embedding(
            config.type_vocab_size, config.hidden_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="token_type_embeddings")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_eps, dtype=self.dtype_policy, name="layer_norm")
        self.dropout = ReplicaDropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        for table in (self.word_embeddings, self.position_embeddings, self.token_type_embeddings):
            table.build((None, None))
        self.layer_norm.build((None, None, self.config.hidden_size))

    def call(self, input_ids, segment_ids, training=None):
        seq_length = ops.shape(input_ids)[1]
        positions = self.position_embeddings.embeddings[:seq_length]
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(segment_ids)
             + ops.cast(positions, self.compute_dtype)[None])
        return self.dropout(self.layer_norm(x), training=training)
