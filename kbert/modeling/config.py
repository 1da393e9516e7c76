"""`BertConfig`: the fields of Google's `bert_config.json`, validated."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from kbert.errors import ConfigError, MissingFileError
from kbert.modeling.transformer_block import FEED_FORWARDS, NORM_PLACEMENTS

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

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}.")
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
        for name in ("embedding_layer_norm", "first_block_attention_norm", "use_bias"):
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
        """The block-part fields set away from Google's BERT (`norm_placement`, ... at their non-default values)."""
        return {name: getattr(self, name) for name, default in _PART_DEFAULTS.items() if getattr(self, name) != default}

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
        """One of Google's sizes: bert_tiny, bert_mini, bert_small, bert_medium, bert_base, bert_large."""
        if name not in PRESET_SIZES:
            raise ValueError(
                f"Unknown BERT preset {name!r}; choose one of {sorted(PRESET_SIZES)} "
                "or pass the path of a bert_config.json."
            )
        layers, hidden = PRESET_SIZES[name]
        return cls(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64, intermediate_size=4 * hidden
        )

    @classmethod
    def load(cls, name_or_path: str) -> BertConfig:
        """A preset name (`bert_base`) or the path of a `bert_config.json`."""
        if name_or_path in PRESET_SIZES:
            return cls.preset(name_or_path)
        if name_or_path.endswith(".json") or os.path.sep in name_or_path:
            return cls.from_json_file(name_or_path)
        return cls.preset(name_or_path)


_PART_DEFAULTS = {
    name: BertConfig.__dataclass_fields__[name].default
    for name in ("norm_placement", "embedding_layer_norm", "first_block_attention_norm", "feed_forward", "use_bias")
}
