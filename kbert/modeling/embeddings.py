"""Word, position and token-type embeddings followed by LayerNorm (optional) and dropout; the initializers every
part draws its kernels with."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kbert.modeling.costs import Cost, norm_cost
from kbert.modeling.dropout import ReplicaDropout
from kbert.modeling.weight_names import WeightName, part_names


def truncated_normal(initializer_range: float) -> keras.initializers.Initializer:
    """A new initializer for one weight. Keras 3 fixes an initializer's seed when it is made, so one instance
    shared by two layers gives them the same values (query = key = value; position rows = the first word rows)."""
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


def kernel_initializer(initializer_range: float, name: str) -> keras.initializers.Initializer:
    """A new initializer for one weight, by name: "truncated_normal" is BERT's (`truncated_normal`), any other
    name one of Keras's, such as "glorot_uniform"."""
    return truncated_normal(initializer_range) if name == "truncated_normal" else keras.initializers.get(name)


@keras.saving.register_keras_serializable(package="kbert")
class BertEmbeddings(keras.layers.Layer):
    """`bert/embeddings`: sum of word, position and token-type embeddings, normalised (with `layer_norm`).

    Args:
        vocab_size, hidden_size, max_position_embeddings, type_vocab_size: the three tables' sizes; no token-type
            table with `type_vocab_size=0` (ModernBERT has no segments).
        position_table: whether positions are a learned table added here (BERT's); False where the attention
            carries them (rotary positions).
        layer_norm_epsilon: the LayerNorm's epsilon.
        dropout_rate: dropout on the sum in training.
        initializer_range: the tables' truncated-normal standard deviation.
        layer_norm: whether the sum is normalised (BERT's and ModernBERT's are; a pre-LayerNorm encoder may leave
            it to the first block's norm).
        use_bias: whether the LayerNorm has an offset (beta).

    Example:

    >>> emb = BertEmbeddings(vocab_size=100, hidden_size=128, max_position_embeddings=64, type_vocab_size=2)
    >>> emb(ops.zeros((2, 16), "int32"), ops.zeros((2, 16), "int32")).shape
    TensorShape([2, 16, 128])
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_position_embeddings: int,
        type_vocab_size: int,
        layer_norm_epsilon: float = 1e-12,
        dropout_rate: float = 0.0,
        initializer_range: float = 0.02,
        layer_norm: bool = True,
        use_bias: bool = True,
        position_table: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size, self.layer_norm_epsilon = hidden_size, layer_norm_epsilon
        self.initializer_range, self.use_bias = initializer_range, use_bias
        self.max_position_embeddings, self.type_vocab_size = max_position_embeddings, type_vocab_size

        def table(rows: int, name: str) -> keras.layers.Embedding:
            return keras.layers.Embedding(
                rows,
                hidden_size,
                embeddings_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy,
                name=name,
            )

        self.word_embeddings = table(vocab_size, "word_embeddings")
        self.position_embeddings = table(max_position_embeddings, "position_embeddings") if position_table else None
        self.token_type_embeddings = table(type_vocab_size, "token_type_embeddings") if type_vocab_size else None
        self.layer_norm = (
            keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, center=use_bias, dtype=self.dtype_policy, name="layer_norm"
            )
            if layer_norm
            else None
        )
        self.dropout = ReplicaDropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        for table in self._tables():
            table.build((None, None))
        if self.layer_norm is not None:
            self.layer_norm.build((None, None, self.hidden_size))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "vocab_size": self.word_embeddings.input_dim,
            "hidden_size": self.hidden_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "dropout_rate": self.dropout.rate,
            "initializer_range": self.initializer_range,
            "layer_norm": self.layer_norm is not None,
            "use_bias": self.use_bias,
            "position_table": self.position_embeddings is not None,
        }

    def _tables(self) -> list[keras.layers.Embedding]:
        tables = (self.word_embeddings, self.position_embeddings, self.token_type_embeddings)
        return [table for table in tables if table is not None]

    @staticmethod
    def cost(config: dict[str, Any]) -> Cost:
        """The three tables and the norm of embeddings of `config` (its `get_config` keys; the defaults where
        absent); gathers do no matmul."""
        positions = config["max_position_embeddings"] if config.get("position_table", True) else 0
        rows = config["vocab_size"] + positions + config["type_vocab_size"]
        tables = Cost(rows * config["hidden_size"], 0)
        norm = config.get("layer_norm", True)
        return tables + (norm_cost(config["hidden_size"], config.get("use_bias", True)) if norm else Cost())

    def weight_names(self) -> list[WeightName]:
        tables = [
            (self.word_embeddings, "word_embeddings", "token_embedding/embeddings", "word_embeddings/embeddings"),
            (
                self.token_type_embeddings,
                "token_type_embeddings",
                "segment_embedding/embeddings",
                "type_embeddings/embeddings",
            ),
            (
                self.position_embeddings,
                "position_embeddings",
                "position_embedding/position_embeddings",
                "position_embedding/embeddings",
            ),
        ]
        names = [
            WeightName(
                table.embeddings,
                f"bert/embeddings/{google}",
                keras_hub,
                model_garden,
                modernbert="embeddings.tok_embeddings.weight" if google == "word_embeddings" else "",
            )
            for table, google, keras_hub, model_garden in tables
            if table is not None
        ]
        if self.layer_norm is None:
            return names
        return names + part_names(
            self.layer_norm,
            "bert/embeddings/LayerNorm",
            "embeddings_layer_norm",
            "embeddings/layer_norm",
            "embeddings.norm",
        )

    def call(self, input_ids, segment_ids, positions=None, training=None):
        """`positions` [B, S]: each token's position id (packed rows restart them); None: 0, 1, ... per row."""
        x = self.word_embeddings(input_ids)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(segment_ids)
        if self.position_embeddings is not None:
            if positions is None:
                table = self.position_embeddings.embeddings[: ops.shape(input_ids)[1]][None]
            else:
                table = ops.take(self.position_embeddings.embeddings, ops.cast(positions, "int32"), axis=0)
            x = x + ops.cast(table, self.compute_dtype)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return self.dropout(x, training=training)
