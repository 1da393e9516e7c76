"""Pretraining heads: masked LM (`cls/predictions`) and next sentence (`cls/seq_relationship`)."""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.activations import get_activation
from kbert.modeling.config import BertConfig
from kbert.modeling.costs import Cost, dense_cost, norm_cost
from kbert.modeling.embeddings import kernel_initializer, truncated_normal
from kbert.modeling.rows import tied_logits, token_rows
from kbert.modeling.weight_names import WeightName, part_names


def head_transform(
    config: BertConfig, dtype_policy: keras.DTypePolicy, dense_name: str, norm_name: str
) -> tuple[keras.layers.Dense, keras.layers.LayerNormalization]:
    """A head's dense (the config's `head_act`) and LayerNorm (`head_layer_norm_eps`), biases with `head_use_bias`:
    the masked-LM head's transform, and ModernBERT's classifier head's."""
    dense = keras.layers.Dense(
        config.hidden_size,
        use_bias=config.head_use_bias,
        activation=get_activation(config.head_act),
        kernel_initializer=truncated_normal(config.initializer_range),
        dtype=dtype_policy,
        name=dense_name,
    )
    norm = keras.layers.LayerNormalization(
        epsilon=config.head_layer_norm_eps, center=config.head_use_bias, dtype=dtype_policy, name=norm_name
    )
    return dense, norm


class MaskedLMHead(keras.layers.Layer):
    """Dense + activation + LayerNorm (the config's `head_act`, `head_layer_norm_eps`; biases with
    `head_use_bias`), then logits against the tied word-embedding table plus `output_bias`.

    Only the hidden states at `masked_lm_positions` are transformed, so the vocabulary matmul costs
    [B, P, V] instead of [B, S, V].

    Example:

    ```python
    head = MaskedLMHead(config)
    table = encoder.embeddings.word_embeddings.embeddings
    logits = head(sequence_output, masked_lm_positions, table)  # [B, P, vocab_size], float32
    ```
    """

    def __init__(self, config: BertConfig, **kwargs):
        # Without autocast, `output_bias` stays float32 so the logits are biased at full precision.
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.config = config
        self.transform, self.layer_norm = head_transform(config, self.dtype_policy, "transform", "layer_norm")
        self.build()

    def build(self, input_shape=None):
        hidden = (None, None, self.config.hidden_size)
        self.transform.build(hidden)
        self.layer_norm.build(hidden)
        self.output_bias = self.add_weight(shape=(self.config.vocab_size,), initializer="zeros", name="output_bias")

    @staticmethod
    def cost(config: BertConfig, predictions: int) -> Cost:
        """The transform, its norm, the bias and the tied logits (the table is the embeddings') of `predictions`
        tokens."""
        h, v, bias = config.hidden_size, config.vocab_size, config.head_use_bias
        return dense_cost(h, h, predictions, bias) + norm_cost(h, bias) + Cost(v, 2 * predictions * h * v)

    def weight_names(self) -> list[WeightName]:
        head = "task/masked_lm_head"
        return [
            *part_names(
                self.transform,
                "cls/predictions/transform/dense",
                f"{head}/_intermediate_dense",
                "bert/cls/predictions/transform/dense",
                "head.dense",
            ),
            *part_names(
                self.layer_norm,
                "cls/predictions/transform/LayerNorm",
                f"{head}/_intermediate_layer_norm",
                "bert/cls/predictions/transform/LayerNorm",
                "head.norm",
            ),
            WeightName(
                self.output_bias,
                "cls/predictions/output_bias",
                f"{head}/_bias",
                "bert/cls/predictions/output_bias/bias",
                modernbert="decoder.bias",
            ),
        ]

    def call(self, sequence_output, masked_lm_positions, embedding_table):
        gathered = ops.take_along_axis(sequence_output, ops.cast(masked_lm_positions, "int32")[:, :, None], axis=1)
        # On token rows, as the blocks' Dense layers (rows.py: what the CPU graph fuses).
        hidden = self.layer_norm(self.transform(token_rows(gathered)))
        logits = tied_logits(hidden, ops.cast(embedding_table, self.compute_dtype), self.output_bias)
        return ops.reshape(logits, (*ops.shape(gathered)[:2], self.config.vocab_size))


# Model Garden's sentence head (`ClassificationHead`: tanh layer and classifier) draws glorot-uniform kernels, about
# 3-4x BERT's truncated normal at H256, where Google's draws the pooler and classifier at 0.02. With 0.02, kbert's
# 8-layer H256 run of seed 1 stayed on the unigram plateau; with glorot it left it at 3,200 samples, Model
# Garden's at 3,840 (docs/results/time_to_accuracy.md, "The sentence head").
SENTENCE_HEAD_INITIALIZER = "glorot_uniform"


class NextSentenceHead(keras.layers.Layer):
    """Two-way classifier on the pooled [CLS] output, its kernel drawn by `SENTENCE_HEAD_INITIALIZER`; logits in
    float32."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.dense = keras.layers.Dense(
            2,
            kernel_initializer=kernel_initializer(config.initializer_range, SENTENCE_HEAD_INITIALIZER),
            dtype=self.dtype_policy,
            name="seq_relationship",
        )
        self.build()

    def build(self, input_shape=None):
        self.dense.build((None, self.config.hidden_size))

    @staticmethod
    def cost(config: BertConfig) -> Cost:
        """The classifier on one [CLS] token, in a model of `config` (nothing where it has no sentence head)."""
        return dense_cost(config.hidden_size, 2, 1) if config.sentence_head else Cost()

    def weight_names(self) -> list[WeightName]:
        """Google stores the kernel as [2, hidden], its transpose; keras-hub's BERT has no such head."""
        return [
            WeightName(
                self.dense.kernel, "cls/seq_relationship/output_weights", "", "bert/next_sentence/logits/kernel", True
            ),
            WeightName(self.dense.bias, "cls/seq_relationship/output_bias", "", "bert/next_sentence/logits/bias"),
        ]

    def call(self, pooled_output):
        return ops.cast(self.dense(pooled_output), "float32")
