"""`BertEncoder`: embeddings, a list of transformer blocks (a final LayerNorm after pre-LayerNorm ones), and the
tanh pooler (`bert/...`): the composition of the parts a `BertConfig` describes."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kbert.modeling.config import BertConfig
from kbert.modeling.costs import Cost, dense_cost, norm_cost
from kbert.modeling.embeddings import BertEmbeddings, kernel_initializer
from kbert.modeling.packing import attention_mask
from kbert.modeling.transformer_block import TransformerBlock
from kbert.modeling.weight_names import WeightName, part_names


def embeddings_config(config: BertConfig) -> dict[str, Any]:
    """The `BertEmbeddings` hyperparameters of `config`."""
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "layer_norm_epsilon": config.layer_norm_eps,
        "dropout_rate": config.hidden_dropout_prob,
        "initializer_range": config.initializer_range,
        "layer_norm": config.embedding_layer_norm,
        "use_bias": config.use_bias,
        "position_table": config.position_embedding == "absolute",
    }


def block_config(config: BertConfig, index: int) -> dict[str, Any]:
    """The `TransformerBlock` hyperparameters of block `index` of `config` (a local or global layer by its index)."""
    is_global = config.layer_is_global(index)
    rope_theta = config.rope_theta if is_global else config.local_rope_theta
    return {
        "hidden_size": config.hidden_size,
        "num_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "activation": config.hidden_act,
        "dropout_rate": config.hidden_dropout_prob,
        "attention_dropout_rate": config.attention_probs_dropout_prob,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "norm_placement": config.norm_placement,
        "attention_norm": index > 0 or config.first_block_attention_norm,
        "feed_forward": config.feed_forward,
        "use_bias": config.use_bias,
        "rope_theta": rope_theta if config.position_embedding == "rotary" else None,
        "window": None if is_global else config.local_attention,
    }


@keras.saving.register_keras_serializable(package="kbert")
class BertEncoder(keras.layers.Layer):
    """The BERT trunk. `blocks` is an indexable list, so a model of another depth can be built and blocks frozen.

    Args:
        config: model hyperparameters.
        stop_gradient_below: if > 0, the hidden state entering block `stop_gradient_below` is wrapped in
            `stop_gradient`, so no gradient is computed for anything below it (MSLT trains only the top blocks
            while the lower ones run forward only).
        dropout_below_cut: with a cut, whether the embeddings and the blocks below it apply dropout in training.
            False runs them as at inference (MSLT's frozen blocks: no dropout masks to draw, and the trained
            blocks see the frozen stack's clean features).
        pooler_initializer: the pooler kernel's initializer, by name (`kernel_initializer`): BERT's truncated
            normal, or "glorot_uniform" as `BertPretrainer` draws it.

    Example:

    ```python
    encoder = BertEncoder(BertConfig.load("bert_tiny"))
    out = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    out["sequence_output"], out["pooled_output"], out["encoder_outputs"][-1]
    ```

    A packed batch (with `positions`, `kbert.modeling.packing`) keeps its sequences apart; its `pooled_output`
    is that of each row's first sequence.
    """

    def __init__(
        self,
        config: BertConfig,
        stop_gradient_below: int = 0,
        dropout_below_cut: bool = True,
        pooler_initializer: str = "truncated_normal",
        **kwargs,
    ):
        kwargs.setdefault("name", "bert")
        super().__init__(**kwargs)
        if not 0 <= stop_gradient_below <= config.num_hidden_layers:
            raise ValueError(
                f"stop_gradient_below={stop_gradient_below} must be in "
                f"[0, num_hidden_layers={config.num_hidden_layers}]."
            )
        self.config = config
        self.stop_gradient_below = stop_gradient_below
        self.dropout_below_cut = dropout_below_cut
        self.pooler_initializer = pooler_initializer
        self.embeddings = BertEmbeddings(**embeddings_config(config), dtype=self.dtype_policy, name="embeddings")
        # One attribute per block, not a list attribute: tf.train.Checkpoint does not see Keras 3's tracked lists.
        for i in range(config.num_hidden_layers):
            block = TransformerBlock(**block_config(config, i), dtype=self.dtype_policy, name=f"layer_{i}")
            setattr(self, f"layer_{i}", block)
        # Pre-LayerNorm blocks leave their sum unnormalised: the heads and the pooler read it normalised.
        self.final_layer_norm = (
            keras.layers.LayerNormalization(
                epsilon=config.layer_norm_eps, center=config.use_bias, dtype=self.dtype_policy, name="final_layer_norm"
            )
            if config.norm_placement == "pre"
            else None
        )
        self.pooler = (
            keras.layers.Dense(
                config.hidden_size,
                activation="tanh",
                kernel_initializer=kernel_initializer(config.initializer_range, pooler_initializer),
                dtype=self.dtype_policy,
                name="pooler",
            )
            if config.sentence_head
            else None
        )
        self.build()

    @property
    def blocks(self) -> list[TransformerBlock]:
        """The transformer blocks, bottom first (`layer_0` ... `layer_{N-1}`)."""
        return [getattr(self, f"layer_{i}") for i in range(self.config.num_hidden_layers)]

    def build(self, input_shape=None):
        self.embeddings.build()
        for block in self.blocks:
            block.build()
        if self.final_layer_norm is not None:
            self.final_layer_norm.build((None, None, self.config.hidden_size))
        if self.pooler is not None:
            self.pooler.build((None, self.config.hidden_size))

    @staticmethod
    def cost(config: BertConfig, seq_length: int) -> dict[str, Cost]:
        """The parts' costs over one sequence: `embeddings`, `blocks` (one per block), `final_norm`, `pooler`
        (on the [CLS] token)."""
        h = config.hidden_size
        return {
            "embeddings": BertEmbeddings.cost(embeddings_config(config)),
            "blocks": [
                TransformerBlock.cost(block_config(config, i), seq_length) for i in range(config.num_hidden_layers)
            ],
            "final_norm": norm_cost(h, config.use_bias) if config.norm_placement == "pre" else Cost(),
            "pooler": dense_cost(h, h, 1) if config.sentence_head else Cost(),
        }

    def weight_names(self) -> list[WeightName]:
        """Every weight's names (`kbert.modeling.weight_names`), as each part declares them."""
        names = self.embeddings.weight_names()
        for i, block in enumerate(self.blocks):
            names += block.weight_names(i)
        if self.final_layer_norm is not None:  # no BERT format has it: the name is kbert's own
            names += part_names(self.final_layer_norm, "bert/encoder/LayerNorm", modernbert="final_norm")
        if self.pooler is None:
            return names
        return names + part_names(self.pooler, "bert/pooler/dense", "pooled_dense", "pooler_transform")

    def call(self, inputs, training=None):
        mask = attention_mask(inputs)
        cut = self.stop_gradient_below
        below_cut = training if self.dropout_below_cut else False
        hidden = self.embeddings(
            inputs["input_ids"],
            inputs["segment_ids"],
            inputs.get("positions"),
            training=training if cut == 0 else below_cut,
        )
        outputs = []
        for i, block in enumerate(self.blocks):
            if i == cut and i > 0:
                hidden = ops.stop_gradient(hidden)
            hidden = block(hidden, mask, inputs.get("positions"), training=training if i >= cut else below_cut)
            outputs.append(hidden)
        if self.final_layer_norm is not None:
            hidden = self.final_layer_norm(hidden)
        encoded = {"sequence_output": hidden, "encoder_outputs": outputs}
        if self.pooler is not None:  # a masked-LM-only model has none
            encoded["pooled_output"] = self.pooler(hidden[:, 0, :])
        return encoded

    def get_config(self):
        return {
            **super().get_config(),
            "config": self.config.to_dict(),
            "stop_gradient_below": self.stop_gradient_below,
            "dropout_below_cut": self.dropout_below_cut,
            "pooler_initializer": self.pooler_initializer,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), **config)
