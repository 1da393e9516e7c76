"""`BertConfig`: the fields of Google's `bert_config.json`, validated."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from kbert.errors import ConfigError, MissingFileError
from kbert.modeling.transformer_block import FEED_FORWARDS, NORM_PLACEMENTS

POSITION_EMBEDDINGS = ("absolute", "rotary")
ACTIVATIONS = ("gelu", "gelu_approximate", "gelu_new", "relu", "silu", "swish", "tanh")

# Google's released sizes (A = H / 64, intermediate 4H); `configs/models/*.json` holds the same table as files.
PRESET_SIZES = {
    "bert_tiny": (2, 128),
    "bert_mini": (4, 256),
    "bert_small": (4, 512),
    "bert_medium": (8, 512),
    "bert_base": (12, 768),
    "bert_large": (24, 1024),
}
# ModernBERT's published sizes (arXiv 2412.13663, the Hub's config.json: rotary positions, GeGLU, pre-LayerNorm
# without biases, a global layer every third, 128-token local windows, masked LM only), and one sized for a CPU.
_MODERNBERT = dict(
    vocab_size=50368,
    max_position_embeddings=8192,
    type_vocab_size=0,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    layer_norm_eps=1e-5,
    norm_placement="pre",
    first_block_attention_norm=False,
    feed_forward="gated",
    use_bias=False,
    position_embedding="rotary",
    rope_theta=160000.0,
    local_attention=128,
    local_rope_theta=10000.0,
    global_attn_every_n_layers=3,
    sentence_head=False,
    head_use_bias=False,
)
MODERN_PRESETS = {
    "modernbert_tiny": dict(
        _MODERNBERT,
        num_hidden_layers=6,
        hidden_size=128,
        num_attention_heads=2,
        intermediate_size=192,
        max_position_embeddings=1024,
    ),
    "modernbert_base": dict(
        _MODERNBERT, num_hidden_layers=22, hidden_size=768, num_attention_heads=12, intermediate_size=1152
    ),
    "modernbert_large": dict(
        _MODERNBERT, num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, intermediate_size=2624
    ),
}


def _open(path: str, mode: str = "r"):
    """`open` for a local path; any other file system (gs://, ram://) through tf.io.gfile, imported only then:
    the model runs on every Keras backend, with TensorFlow installed or not. Raises FileNotFoundError for a
    file that is not there, on either."""
    if "://" not in path:
        return open(path, mode, encoding="utf-8")
    import tensorflow as tf

    if "r" in mode and not tf.io.gfile.exists(path):
        raise FileNotFoundError(path)
    return tf.io.gfile.GFile(path, mode)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyperparameters of a BERT model, as in Google's `bert_config.json`.

    Example:

    >>> config = BertConfig.load("bert_tiny")
    >>> config.num_hidden_layers, config.hidden_size
    (2, 128)
    >>> deeper = config.replace(num_hidden_layers=4)
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    # The masked-LM head's transform activation and LayerNorm epsilon where they differ from the encoder's
    # (keras-hub's BertMaskedLM: erf GELU and 1e-5 over a tanh-GELU, 1e-12 backbone); None: the encoder's, as in
    # Google's and Hugging Face's BERT. `to_dict` leaves them out while None, so bert_config.json stays Google's.
    mlm_hidden_act: str | None = None
    mlm_layer_norm_eps: float | None = None
    # The block's parts beyond Google's BERT (`TransformerBlock`); `to_dict` leaves each out at its default, and
    # formats that hold Google's layout only refuse a model that changes one (`require_google_layout`).
    norm_placement: str = "post"  # "pre": x + f(LayerNorm(x)) in each sublayer, a final LayerNorm before the heads
    embedding_layer_norm: bool = True  # whether the embeddings' sum is normalised
    first_block_attention_norm: bool = True  # False: block 0's attention has no norm (pre only; ModernBERT's)
    feed_forward: str = "plain"  # "gated": a GLU (GeGLU with gelu), intermediate_size its gated width
    use_bias: bool = True  # the encoder's projections' biases and its norms' offsets (the heads keep theirs)
    position_embedding: str = "absolute"  # "rotary": no position table; each attention turns q and k (RoPE)
    rope_theta: float = 10000.0  # the rotary base of global layers (ModernBERT: 160000)
    local_attention: int = 0  # > 0: local layers attend where |i - j| <= local_attention // 2 (ModernBERT: 128)
    local_rope_theta: float = 10000.0  # the rotary base of local layers
    global_attn_every_n_layers: int = 1  # layer i is global where i % n == 0, local elsewhere (ModernBERT: 3)
    sentence_head: bool = True  # the pooler and next-sentence head; false: a masked-LM-only model (ModernBERT)
    head_use_bias: bool = True  # the masked-LM head's transform bias and norm offset (ModernBERT: false)

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
            "local_attention",
            "global_attn_every_n_layers",
        ):
            value = getattr(self, name)
            smallest = 0 if name in ("type_vocab_size", "local_attention") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < smallest:
                kind = "a non-negative" if smallest == 0 else "a positive"
                raise ValueError(f"BertConfig.{name} must be {kind} integer, got {value!r}.")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}); BERT uses heads of size 64, e.g. "
                f"num_attention_heads={max(1, self.hidden_size // 64)}."
            )
        for name in ("hidden_act", "mlm_hidden_act"):
            if getattr(self, name) not in ACTIVATIONS + ((None,) if name == "mlm_hidden_act" else ()):
                raise ValueError(
                    f"BertConfig.{name}={getattr(self, name)!r} is not supported; use one of {ACTIVATIONS}."
                )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)!r}.")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(f"BertConfig.norm_placement={self.norm_placement!r}: choose one of {NORM_PLACEMENTS}.")
        if self.feed_forward not in FEED_FORWARDS:
            raise ValueError(f"BertConfig.feed_forward={self.feed_forward!r}: choose one of {FEED_FORWARDS}.")
        if self.position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"BertConfig.position_embedding={self.position_embedding!r}: choose one of {POSITION_EMBEDDINGS}."
            )
        if self.position_embedding == "rotary" and self.head_size % 2:
            raise ValueError(
                f"BertConfig: rotary positions turn pairs of dimensions; head size {self.head_size} is odd."
            )
        if not (self.rope_theta > 0 and self.local_rope_theta > 0):
            raise ValueError("BertConfig.rope_theta and local_rope_theta must be positive.")
        for name in (
            "embedding_layer_norm",
            "first_block_attention_norm",
            "use_bias",
            "sentence_head",
            "head_use_bias",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"BertConfig.{name} must be true or false, got {getattr(self, name)!r}.")
        if not self.first_block_attention_norm and self.norm_placement != "pre":
            raise ValueError(
                "BertConfig.first_block_attention_norm=false needs norm_placement='pre': a post-LayerNorm block "
                "normalises its attention's residual sum."
            )
        if self.initializer_range <= 0 or self.layer_norm_eps <= 0 or (self.mlm_layer_norm_eps or 1) <= 0:
            raise ValueError(
                "BertConfig.initializer_range and layer_norm_eps (and mlm_layer_norm_eps) must be positive."
            )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def head_act(self) -> str:
        """The masked-LM head's transform activation."""
        return self.mlm_hidden_act or self.hidden_act

    @property
    def head_layer_norm_eps(self) -> float:
        """The masked-LM head's LayerNorm epsilon."""
        return self.mlm_layer_norm_eps or self.layer_norm_eps

    def layout_changes(self) -> dict[str, Any]:
        """The part fields set away from Google's BERT (`norm_placement`, ... at their non-default values; no
        token-type table)."""
        changes = {
            name: getattr(self, name) for name, default in _PART_DEFAULTS.items() if getattr(self, name) != default
        }
        return {**changes, "type_vocab_size": 0} if self.type_vocab_size == 0 else changes

    def layer_is_global(self, index: int) -> bool:
        """Whether block `index` attends over the whole row (every `global_attn_every_n_layers`-th from block 0, or
        every block without `local_attention`)."""
        return not self.local_attention or index % self.global_attn_every_n_layers == 0

    def require_google_layout(self, where: str, fix: str) -> None:
        """Raises a one-line ConfigError naming `where` (a format) and `fix` if the model is not Google's BERT
        layout, which that format alone can hold."""
        changes = self.layout_changes()
        if changes:
            raise ConfigError(
                f"{where} holds Google's BERT layout only (post-LayerNorm blocks of plain feed-forwards with biases), "
                f"and this model sets {', '.join(f'{k}={v}' for k, v in changes.items())}: {fix}"
            )

    def replace(self, **changes: Any) -> BertConfig:
        """A copy with some fields changed (e.g. another depth for MSLT)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields, without the masked-LM head's own activation and epsilon while they are the encoder's, nor
        the block-part fields at Google's values: a Google model's dict is its `bert_config.json`."""
        return {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if (v is not None or not k.startswith("mlm_")) and (k not in _PART_DEFAULTS or v != _PART_DEFAULTS[k])
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> BertConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source}: unknown BERT config keys {unknown}; known keys are {sorted(known)}.")
        return cls(**values)

    @classmethod
    def from_json_file(cls, path: str) -> BertConfig:
        """Reads a Google `bert_config.json` (or one written by `to_json_file`), on any TensorFlow file system."""
        try:
            with _open(path) as f:
                values = json.load(f)
        except FileNotFoundError:
            raise MissingFileError(f"BERT config file {path!r} does not exist.") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"BERT config file {path!r} is not valid JSON: {e}") from None
        return cls.from_dict(values, source=path)

    def to_json_file(self, path: str) -> None:
        """Writes the config as a Google `bert_config.json`, on any TensorFlow file system."""
        with _open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")

    @classmethod
    def preset(cls, name: str) -> BertConfig:
        """One of Google's sizes (bert_tiny, bert_mini, bert_small, bert_medium, bert_base, bert_large) or
        ModernBERT's (modernbert_tiny, modernbert_base, modernbert_large)."""
        if name in MODERN_PRESETS:
            return cls(**MODERN_PRESETS[name])
        if name not in PRESET_SIZES:
            raise ValueError(
                f"Unknown BERT preset {name!r}; choose one of {sorted(PRESET_SIZES) + sorted(MODERN_PRESETS)} "
                "or pass the path of a bert_config.json."
            )
        layers, hidden = PRESET_SIZES[name]
        return cls(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64, intermediate_size=4 * hidden
        )

    @classmethod
    def load(cls, name_or_path: str) -> BertConfig:
        """A preset name (`bert_base`) or the path of a `bert_config.json`."""
        if name_or_path in PRESET_SIZES or name_or_path in MODERN_PRESETS:
            return cls.preset(name_or_path)
        if name_or_path.endswith(".json") or os.path.sep in name_or_path:
            return cls.from_json_file(name_or_path)
        return cls.preset(name_or_path)


_PART_DEFAULTS = {
    name: BertConfig.__dataclass_fields__[name].default
    for name in (
        "norm_placement",
        "embedding_layer_norm",
        "first_block_attention_norm",
        "feed_forward",
        "use_bias",
        "position_embedding",
        "rope_theta",
        "local_attention",
        "local_rope_theta",
        "global_attn_every_n_layers",
        "sentence_head",
        "head_use_bias",
    )
}
