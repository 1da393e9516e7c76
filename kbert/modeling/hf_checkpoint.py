"""Read and write Hugging Face BERT weights (`model.safetensors`: `bert.encoder.layer.0.attention.self.query.weight`,
...) without torch, through `safetensors.numpy` and tf.io.gfile (gs:// works).

Names are Google's (`google_variable_map`) renamed: `/` becomes `.`, `layer_N` `layer.N`, a kernel `weight`
stored [out, in] (transposed), LayerNorm gamma/beta `weight`/`bias` (the old `gamma`/`beta` names are read too),
`cls/predictions/output_bias` `cls.predictions.bias`. The decoder weight is the word table (tied) and is not
written; where a checkpoint stores it, it must equal the table. A `BertModel` checkpoint has no `bert.` prefix and
no `cls.` heads.

Invariant: `load_hf_checkpoint` assigns nothing unless every encoder weight is there with the model's shape and
nothing unknown is stored; the masked-LM head, the next-sentence head and the pooler may be absent as a whole (a
`BertModel`, a `BertForMaskedLM`): they keep their built weights, and it returns their names.

Example:

```python
model = BertPretrainer(bert_config_from_hf(json.load(open("bert-base-uncased/config.json"))))
fresh = load_hf_checkpoint(model, "bert-base-uncased")      # [] for a BertForPreTraining checkpoint
export_hf_checkpoint(model, "export/hf", "BertForMaskedLM")  # config.json, model.safetensors
```
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.choices import HF_ARCHITECTURES
from kbert.errors import CheckpointMismatchError, ConfigError, MissingFileError
from kbert.modeling.checkpoint_fit import describe_model, mismatch
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.google_checkpoint import GOOGLE_LAYOUT_FIX, google_variable_map
from kbert.modeling.hf_config import hf_config_of
from kbert.modeling.pretrainer import BertPretrainer

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
# The parts a checkpoint may lack as a whole, by the prefix of their names.
OPTIONAL_PARTS = {
    "masked-LM head": "cls.predictions.",
    "next-sentence head": "cls.seq_relationship.",
    "pooler": "bert.pooler.",
}
# What each architecture holds of kbert's model (BertModel's names lose the `bert.` prefix).
_DROPPED = {
    "BertForPreTraining": (),
    "BertForMaskedLM": ("cls.seq_relationship.", "bert.pooler."),
    "BertModel": ("cls.",),
}
_DECODER = "cls.predictions.decoder."
_BUFFERS = ("bert.embeddings.position_ids",)  # a registered buffer older transformers saved
# The safetensors dtypes `safetensors.numpy` reads.
_NUMPY_DTYPES = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"}
_SPECIAL = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}
# Google suffix -> Hugging Face suffix, and whether HF stores the value transposed relative to Google.
_SUFFIXES = (
    ("/kernel", ".weight", True),
    ("/gamma", ".weight", False),
    ("/beta", ".bias", False),
    ("/bias", ".bias", False),
)


def _hf_name(google: str) -> tuple[str, bool]:
    """A Google variable name as Hugging Face names it, and whether HF's layout is the transpose of Google's."""
    if google in _SPECIAL:
        return _SPECIAL[google], False
    name = re.sub(r"layer_(\d+)", r"layer.\1", google)
    for old, new, flip in _SUFFIXES:
        if name.endswith(old):
            return name[: -len(old)].replace("/", ".") + new, flip
    return name.replace("/", ".") + ".weight", False  # the embedding tables


def hf_variable_map(model: BertPretrainer | BertEncoder) -> dict[str, tuple[keras.Variable, bool]]:
    """Hugging Face name (BertForPreTraining's) -> (kbert variable, stored transposed?) for every weight of `model`."""
    names = {}
    for google, (variable, transposed) in google_variable_map(model).items():
        name, flip = _hf_name(google)
        names[name] = (variable, transposed != flip)
    return names


def _canonical(name: str) -> str:
    """A stored name as BertForPreTraining's: the `bert.` prefix a BertModel lacks, LayerNorm weight/bias."""
    if name.startswith(("embeddings.", "encoder.", "pooler.")):
        name = "bert." + name
    return re.sub(r"\.LayerNorm\.gamma$", ".LayerNorm.weight", re.sub(r"\.LayerNorm\.beta$", ".LayerNorm.bias", name))


def _read(path: str, size: int = -1) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read(size) if size >= 0 else f.read()


def weight_files(directory: str) -> list[str]:
    """The safetensors files of a Hugging Face model directory (one, or the shards its index lists).

    Raises:
      MissingFileError: none there (a `pytorch_model.bin` alone is named: kbert reads safetensors only).
    """
    index = os.path.join(directory, INDEX)
    if tf.io.gfile.exists(index):
        shards = sorted(set(json.loads(_read(index))["weight_map"].values()))
        return [os.path.join(directory, shard) for shard in shards]
    path = os.path.join(directory, WEIGHTS)
    if tf.io.gfile.exists(path):
        return [path]
    torch_only = tf.io.gfile.exists(os.path.join(directory, "pytorch_model.bin"))
    raise MissingFileError(
        f"{directory}: no {WEIGHTS}"
        + (
            " (only pytorch_model.bin, which needs torch): convert it once with "
            "transformers (model.save_pretrained(DIR, safe_serialization=True))."
            if torch_only
            else "; give a Hugging Face BERT directory."
        )
    )


def _header(path: str) -> dict[str, tuple[int, ...]]:
    """Name -> shape from a safetensors file's JSON header (its first bytes: the tensors are not read).

    Raises:
      CheckpointMismatchError: a tensor of a type NumPy has not (bfloat16), which `safetensors.numpy` cannot read.
    """
    with tf.io.gfile.GFile(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    entries = {name: entry for name, entry in header.items() if name != "__metadata__"}
    unreadable = sorted({entry["dtype"] for entry in entries.values()} - _NUMPY_DTYPES)
    if unreadable:
        raise CheckpointMismatchError(
            f"{path} holds {', '.join(unreadable)} tensors, which NumPy (and so kbert, "
            "without torch) cannot read: save the model in float32 first "
            "(model.float().save_pretrained(DIR) in transformers)."
        )
    return {name: tuple(entry["shape"]) for name, entry in entries.items()}


def file_shapes(directory: str) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of `directory`'s safetensors files, as stored (headers only)."""
    shapes = {}
    for path in weight_files(directory):
        shapes.update(_header(path))
    return shapes


def file_tensors(directory: str) -> dict[str, np.ndarray]:
    """Name -> value of every tensor of `directory`'s safetensors files, as stored."""
    from safetensors.numpy import load

    tensors = {}
    for path in weight_files(directory):
        tensors.update(load(_read(path)))
    return tensors


def stored_shapes(directory: str) -> dict[str, tuple[int, ...]]:
    """BertForPreTraining name -> shape of every weight stored in `directory` (buffers and the tied decoder
    aside)."""
    shapes = {_canonical(name): shape for name, shape in file_shapes(directory).items()}
    if "cls.predictions.bias" not in shapes and _DECODER + "bias" in shapes:
        shapes["cls.predictions.bias"] = shapes[_DECODER + "bias"]
    return {name: shape for name, shape in shapes.items() if not name.startswith((_DECODER,) + _BUFFERS)}


def _tensors(directory: str) -> dict[str, np.ndarray]:
    tensors = {_canonical(name): value for name, value in file_tensors(directory).items()}
    if "cls.predictions.bias" not in tensors and _DECODER + "bias" in tensors:
        tensors["cls.predictions.bias"] = tensors[_DECODER + "bias"]
    return tensors


def fresh_parts(model: BertPretrainer | BertEncoder, stored: dict[str, tuple[int, ...]]) -> list[str]:
    """The optional parts of `model` (`OPTIONAL_PARTS`) of which `stored` holds no weight at all."""
    expected = hf_variable_map(model)
    return [
        part
        for part, prefix in OPTIONAL_PARTS.items()
        if any(n.startswith(prefix) for n in expected) and not any(n.startswith(prefix) for n in stored)
    ]


def load_hf_checkpoint(model: BertPretrainer | BertEncoder, directory: str) -> list[str]:
    """Loads a Hugging Face BERT directory's safetensors weights into `model` (a `BertEncoder` ignores the
    `cls.` heads); returns the optional parts that were not there and keep their built weights.

    Raises:
      MissingFileError: no safetensors weights in `directory`.
      CheckpointMismatchError: a weight missing, unexpected or of another shape (listed; nothing assigned), or
        a decoder weight that is not the word table.
    """
    model.config.require_google_layout(f"{directory}, a Hugging Face BERT checkpoint,", GOOGLE_LAYOUT_FIX)
    stored = stored_shapes(directory)
    if isinstance(model, BertEncoder):
        stored = {n: s for n, s in stored.items() if not n.startswith("cls.")}
    fresh = fresh_parts(model, stored)
    skipped = tuple(OPTIONAL_PARTS[part] for part in fresh)
    expected = {n: pair for n, pair in hf_variable_map(model).items() if not n.startswith(skipped)}
    shapes = {n: tuple(v.shape)[::-1] if transposed else tuple(v.shape) for n, (v, transposed) in expected.items()}
    c = model.config
    error = mismatch(
        directory,
        shapes,
        stored,
        describe_model(c),
        "leave the model section unset (it comes from the checkpoint's "
        "config.json), or give a BERT checkpoint of this model's sizes.",
    )
    if error:
        raise error
    tensors = _tensors(directory)
    decoder = tensors.get(_DECODER + "weight")
    if decoder is not None and not np.array_equal(decoder, tensors["bert.embeddings.word_embeddings.weight"]):
        raise CheckpointMismatchError(
            f"{directory}: its {_DECODER}weight is not the word-embedding table (untied "
            "output embeddings), which kbert's BERT ties; it cannot be loaded exactly."
        )
    for name, (variable, transposed) in expected.items():
        value = np.asarray(tensors[name], np.float32)
        variable.assign(value.T if transposed else value)
    return fresh


def _architecture_names(model: BertPretrainer, architecture: str) -> dict[str, tuple[keras.Variable, bool]]:
    names = {n: pair for n, pair in hf_variable_map(model).items() if not n.startswith(_DROPPED[architecture])}
    if architecture == "BertModel":
        names = {n[len("bert.") :]: pair for n, pair in names.items()}
    return names


def export_hf_checkpoint(model: BertPretrainer, directory: str, architecture: str = "BertForPreTraining") -> str:
    """Writes `directory/config.json` and `directory/model.safetensors` (float32, torch's layout) of `model` as
    `architecture`: BertForPreTraining (everything), BertForMaskedLM (no pooler, no next-sentence head) or
    BertModel (the encoder and pooler, without the `bert.` prefix). Returns the weights' path.

    Raises:
      ConfigError: an unknown architecture, a model beyond BERT's layout (`BertConfig.require_google_layout`), or
        a masked-LM head whose activation or epsilon is not the encoder's
        (Hugging Face's head computes the encoder's).
    """
    if architecture not in HF_ARCHITECTURES:
        raise ConfigError(f"--hf_architecture={architecture}: choose one of {', '.join(HF_ARCHITECTURES)}.")
    c = model.config
    c.require_google_layout("--format=hf (Hugging Face's BERT classes)", GOOGLE_LAYOUT_FIX)
    if architecture != "BertModel" and (c.head_act, c.head_layer_norm_eps) != (c.hidden_act, c.layer_norm_eps):
        raise ConfigError(
            f"--format=hf: the masked-LM head computes {c.head_act} with epsilon "
            f"{c.head_layer_norm_eps}, but Hugging Face's computes the encoder's ({c.hidden_act}, "
            f"{c.layer_norm_eps}); export --hf_architecture=BertModel (no head), or --format=keras_hub."
        )
    tensors = {}
    for name, (variable, transposed) in _architecture_names(model, architecture).items():
        value = np.asarray(keras.ops.convert_to_numpy(variable), np.float32)
        tensors[name] = np.ascontiguousarray(value.T if transposed else value)
    return write_hf_directory(directory, tensors, hf_config_of(c, architecture))


def write_hf_directory(directory: str, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> str:
    """Writes `directory/model.safetensors` (torch's metadata) and `directory/config.json`, on any TensorFlow file
    system; returns the weights' path."""
    from safetensors.numpy import save

    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, WEIGHTS)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(save(tensors, metadata={"format": "pt"}))  # transformers refuses safetensors without a format
    with tf.io.gfile.GFile(os.path.join(directory, CONFIG), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return path
