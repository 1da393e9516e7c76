"""`BertEncoder`: embeddings, a list of transformer blocks, and the tanh pooler (`bert/...`)."""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling.config import BertConfig
from kbert.modeling.embeddings import BertEmbeddings, kernel_initializer
from kbert.modeling.packing import attention_mask
from kbert.modeling.transformer_block import TransformerBlock


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
        self.embeddings = BertEmbeddings(config, dtype=self.dtype_policy, name="embeddings")
        # One attribute per block, not a list attribute: tf.train.Checkpoint does not see Keras 3's tracked lists.
        for i in range(config.num_hidden_layers):
            setattr(self, f"layer_{i}", TransformerBlock(config, dtype=self.dtype_policy, name=f"layer_{i}"))
        self.pooler = keras.layers.Dense(
            config.hidden_size,
            activation="tanh",
            kernel_initializer=kernel_initializer(config, pooler_initializer),
            dtype=self.dtype_policy,
            name="pooler",
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
        self.pooler.build((None, self.config.hidden_size))

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
            hidden = block(hidden, mask, training=training if i >= cut else below_cut)
            outputs.append(hidden)
        return {
            "sequence_output": hidden,
            "pooled_output": self.pooler(hidden[:, 0, :]),
            "encoder_outputs": outputs,
        }

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
