"""One encoder block (`bert/encoder/layer_N`), composed of parts: self-attention, a feed-forward of two projections
(plain, or gated: a GLU), norms placed after each sublayer's residual sum (BERT's post-LayerNorm) or before each
sublayer (pre-LayerNorm), and biases on or off.

Every part keeps Google's variable layout (`attention/{query,key,value}`, `attention_output`,
`attention_layer_norm`, `intermediate`, `output`, `output_layer_norm`), so checkpoints and the weight-decay
exclusions, which match variable paths, read the same for every composition.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kbert.modeling.activations import get_activation
from kbert.modeling.attention import SelfAttention
from kbert.modeling.costs import Cost, dense_cost, norm_cost
from kbert.modeling.dropout import ReplicaDropout
from kbert.modeling.embeddings import truncated_normal
from kbert.modeling.rows import token_rows
from kbert.modeling.weight_names import WeightName, part_names

NORM_PLACEMENTS = ("post", "pre")
FEED_FORWARDS = ("plain", "gated")


@keras.saving.register_keras_serializable(package="kbert")
class GatedDense(keras.layers.Dense):
    """A GLU's input projection: one Dense of `2 * units`, whose first half, activated, gates the second:
    `activation(x W_a) * (x W_g)` (GeGLU with GELU). The kernel is [inputs, 2 * units], input half first, as
    ModernBERT's `Wi`.

    Example:

    >>> GatedDense(3, "gelu")(ops.ones((2, 4))).shape
    TensorShape([2, 3])
    """

    def __init__(self, units: int, activation: str = "gelu", **kwargs):
        super().__init__(2 * units, **kwargs)
        self.gated_units, self.gate_activation = units, activation

    def call(self, inputs):
        projected, gate = ops.split(super().call(inputs), 2, axis=-1)
        return get_activation(self.gate_activation)(projected) * gate

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.gated_units)

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.gated_units, "activation": self.gate_activation}


@keras.saving.register_keras_serializable(package="kbert")
class TransformerBlock(keras.layers.Layer):
    """Self-attention and feed-forward sublayers with residuals: `LayerNorm(x + dropout(f(x)))` each (`post`), or
    `x + dropout(f(LayerNorm(x)))` (`pre`).

    Args:
        hidden_size, num_heads, intermediate_size: the widths (heads of `hidden_size / num_heads`; the
            feed-forward's inner width, the gated half's with `feed_forward="gated"`).
        activation: the feed-forward's activation, by Google's `hidden_act` names (`kbert.modeling.activations`).
        dropout_rate: dropout on each sublayer's output in training; `attention_dropout_rate` on the attention
            probabilities.
        layer_norm_epsilon: the norms' epsilon.
        initializer_range: the projections' truncated-normal standard deviation.
        norm_placement: `post` (BERT) or `pre`.
        attention_norm: with `pre`, whether the attention sublayer has its norm (ModernBERT's first block has none:
            the embeddings' norm precedes it).
        feed_forward: `plain` (`output(activation(intermediate(x)))`) or `gated` (`output(GatedDense(x))`).
        use_bias: whether the projections add biases and the norms an offset.
        rope_theta, window: the attention's rotary base and local window (`SelfAttention`); None: absolute
            positions from the embeddings, global attention.

    Example:

    >>> block = TransformerBlock(hidden_size=128, num_heads=2, intermediate_size=512, name="layer_0")
    >>> block(keras.ops.zeros((2, 16, 128)), keras.ops.ones((2, 1, 16), "int32")).shape
    TensorShape([2, 16, 128])
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        activation: str = "gelu",
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        norm_placement: str = "post",
        attention_norm: bool = True,
        feed_forward: str = "plain",
        use_bias: bool = True,
        rope_theta: float | None = None,
        window: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if norm_placement not in NORM_PLACEMENTS or feed_forward not in FEED_FORWARDS:
            raise ValueError(
                f"norm_placement={norm_placement!r}, feed_forward={feed_forward!r}: "
                f"choose norm_placement from {NORM_PLACEMENTS} and feed_forward from {FEED_FORWARDS}."
            )
        if not attention_norm and norm_placement != "pre":
            raise ValueError("attention_norm=False needs norm_placement='pre' (post-LayerNorm normalises the sum).")
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.activation, self.layer_norm_epsilon = activation, layer_norm_epsilon
        self.initializer_range, self.norm_placement = initializer_range, norm_placement
        self.feed_forward, self.use_bias = feed_forward, use_bias

        def dense(units: int, name: str, **kwargs) -> keras.layers.Dense:
            return keras.layers.Dense(
                units,
                use_bias=use_bias,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy,
                name=name,
                **kwargs,
            )

        def norm(name: str) -> keras.layers.LayerNormalization:
            return keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, center=use_bias, dtype=self.dtype_policy, name=name
            )

        self.attention = SelfAttention(
            hidden_size,
            num_heads,
            attention_dropout_rate,
            initializer_range,
            use_bias,
            rope_theta,
            window,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention_output = dense(hidden_size, "attention_output")
        self.attention_layer_norm = norm("attention_layer_norm") if attention_norm else None
        if feed_forward == "gated":
            self.intermediate = GatedDense(
                intermediate_size,
                activation,
                use_bias=use_bias,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy,
                name="intermediate",
            )
        else:
            self.intermediate = dense(intermediate_size, "intermediate", activation=get_activation(activation))
        self.output_dense = dense(hidden_size, "output")
        self.output_layer_norm = norm("output_layer_norm")
        self.dropout = ReplicaDropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        hidden = (None, None, self.hidden_size)
        self.attention.build(hidden)
        self.attention_output.build(hidden)
        if self.attention_layer_norm is not None:
            self.attention_layer_norm.build(hidden)
        self.intermediate.build(hidden)
        self.output_dense.build((None, None, self.intermediate_size))
        self.output_layer_norm.build(hidden)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.attention.num_heads,
            "intermediate_size": self.intermediate_size,
            "activation": self.activation,
            "dropout_rate": self.dropout.rate,
            "attention_dropout_rate": self.attention.dropout.rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "initializer_range": self.initializer_range,
            "norm_placement": self.norm_placement,
            "attention_norm": self.attention_layer_norm is not None,
            "feed_forward": self.feed_forward,
            "use_bias": self.use_bias,
            "rope_theta": self.attention.rope_theta,
            "window": self.attention.window,
        }

    @staticmethod
    def cost(config: dict[str, Any], seq_length: int) -> Cost:
        """The parts' costs for a block of `config` (its `get_config` keys; the defaults where absent)."""
        h, i = config["hidden_size"], config["intermediate_size"]
        bias = config.get("use_bias", True)
        inner = 2 * i if config.get("feed_forward", "plain") == "gated" else i
        norms = 2 if config.get("attention_norm", True) else 1
        total = SelfAttention.cost(h, seq_length, bias, config.get("window")) + dense_cost(h, h, seq_length, bias)
        total += dense_cost(h, inner, seq_length, bias) + dense_cost(i, h, seq_length, bias)
        for _ in range(norms):
            total += norm_cost(h, bias)
        return total

    def weight_names(self, index: int) -> list[WeightName]:
        """Each part's names, as block `index` of Google's `bert/encoder`, keras-hub's `transformer_layer_{index}`,
        Model Garden's `transformer/layer_{index}` and ModernBERT's `layers.{index}`."""
        google, hub, garden = f"bert/encoder/layer_{index}", f"transformer_layer_{index}", f"transformer/layer_{index}"
        modern = f"layers.{index}"
        attention = f"{hub}/_self_attention_layer"
        parts = [
            (
                self.attention_output,
                "attention/output/dense",
                f"{attention}/output_dense",
                "self_attention/attention_output",
                "attn.Wo",
            ),
            (
                self.attention_layer_norm,
                "attention/output/LayerNorm",
                f"{hub}/_self_attention_layer_norm",
                "self_attention_layer_norm",
                "attn_norm",
            ),
            (
                self.intermediate,
                "intermediate/dense",
                f"{hub}/_feedforward_intermediate_dense",
                "intermediate",
                "mlp.Wi",
            ),
            (self.output_dense, "output/dense", f"{hub}/_feedforward_output_dense", "output", "mlp.Wo"),
            (
                self.output_layer_norm,
                "output/LayerNorm",
                f"{hub}/_feedforward_layer_norm",
                "output_layer_norm",
                "mlp_norm",
            ),
        ]
        names = self.attention.weight_names(
            f"{google}/attention", attention, f"{garden}/self_attention", f"{modern}.attn"
        )
        for layer, google_name, hub_name, garden_name, modern_name in parts:
            if layer is not None:
                names += part_names(
                    layer, f"{google}/{google_name}", hub_name, f"{garden}/{garden_name}", f"{modern}.{modern_name}"
                )
        return names

    def _attend(self, hidden, attention_mask, positions, training):
        """The attention sublayer's output on token rows (before dropout and the residual)."""
        attended = self.attention(hidden, attention_mask, positions, training=training)
        return self.attention_output(token_rows(attended))

    def call(self, hidden, attention_mask, positions=None, training=None):
        """`positions` [B, S]: each token's position id, for rotary positions (`SelfAttention`)."""
        # Dense sublayers on [B*S, H] token rows fuse with their bias and GELU (kbert.modeling.rows); the rest is
        # per token.
        rows = token_rows(hidden)
        if self.norm_placement == "post":
            attended = self._attend(hidden, attention_mask, positions, training)
            rows = self.attention_layer_norm(rows + self.dropout(attended, training=training))
            ffn = self.output_dense(self.intermediate(rows))
            rows = self.output_layer_norm(rows + self.dropout(ffn, training=training))
        else:
            normed = self.attention_layer_norm(rows) if self.attention_layer_norm is not None else rows
            attended = self._attend(ops.reshape(normed, ops.shape(hidden)), attention_mask, positions, training)
            rows = rows + self.dropout(attended, training=training)
            ffn = self.output_dense(self.intermediate(self.output_layer_norm(rows)))
            rows = rows + self.dropout(ffn, training=training)
        return ops.reshape(rows, ops.shape(hidden))
