"""Read and write google-research/bert TF1 checkpoints (`bert/encoder/layer_0/attention/self/query/kernel`, ...).

The files are TensorFlow's format: reading and writing them imports TensorFlow, the name map does not.
"""

from __future__ import annotations

import os
import re

import keras
import numpy as np

from kbert.errors import CheckpointMismatchError, MissingFileError
from kbert.modeling.checkpoint_fit import describe_model, mismatch
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.pretrainer import BertPretrainer

# What to do instead when a model's layout is beyond what BERT's formats hold.
GOOGLE_LAYOUT_FIX = (
    "kbert's training checkpoints (model_dir/checkpoints/ckpt-N) hold it: fine-tune from one, or export it with "
    "--format=tf_hub (a model with a pooler) or --format=hf (a model of ModernBERT's composition)."
)
# Entries a pretraining checkpoint may carry besides weights: optimizer slots and counters.
_NOT_WEIGHTS = re.compile(
    r"(^|/)(adam_[mv]|Momentum|lamb_[mv]|ExponentialMovingAverage)$|^global_step$|"
    r"^_CHECKPOINTABLE_OBJECT_GRAPH$|^good_steps$|^current_loss_scale$"
)


def google_variable_map(model: BertPretrainer | BertEncoder) -> dict[str, tuple[keras.Variable, bool]]:
    """Google checkpoint name -> (kbert variable, stored transposed?) for every weight of `model`, as its parts
    declare them (`model.weight_names()`)."""
    return {name.google: (name.variable, name.transposed) for name in model.weight_names()}


def _stored_shape(variable: keras.Variable, transposed: bool) -> tuple:
    shape = tuple(variable.shape)
    return shape[::-1] if transposed else shape


def load_google_checkpoint(model: BertPretrainer | BertEncoder, path: str, strict: bool = True) -> dict:
    """Loads a google-research/bert checkpoint (no optimizer slots needed) into `model`.

    Args:
        model: a `BertPretrainer` (loads `bert/` and `cls/`) or a `BertEncoder` (loads `bert/`, ignores `cls/`).
        path: checkpoint prefix (`.../bert_model.ckpt`) or a directory with a `checkpoint` file.
        strict: if True, any missing or unexpected variable is an error. Wrong shapes are always an error.

    Returns:
        `{"loaded": [...], "missing": [...], "unexpected": [...]}` (Google names).

    Raises:
        CheckpointMismatchError: listing every missing, unexpected and wrong-shape variable at once; nothing
            is assigned in that case.

    Example:

    ```python
    model = BertPretrainer(BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json"))
    load_google_checkpoint(model, "uncased_L-12_H-768_A-12/bert_model.ckpt")
    ```
    """
    import tensorflow as tf

    model.config.require_google_layout(f"{path!r}, a google-research/bert checkpoint,", GOOGLE_LAYOUT_FIX)
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.NotFoundError, ValueError) as e:
        raise MissingFileError(
            f"No TF checkpoint at {path!r} (give the prefix, e.g. .../bert_model.ckpt, "
            f"or a directory with a 'checkpoint' file): {e}"
        ) from None
    stored = reader.get_variable_to_shape_map()
    expected = google_variable_map(model)
    if not any(name.startswith("bert/") for name in stored):
        raise CheckpointMismatchError(
            f"{path!r} has no google-research/bert variables (bert/...). If it is a kbert training checkpoint, "
            "restore it with tf.train.Checkpoint (the pretraining script's init_checkpoint does both)."
        )
    ignored_prefixes = ("cls/",) if isinstance(model, BertEncoder) else ()
    shapes = {n: _stored_shape(v, t) for n, (v, t) in expected.items()}
    weights = {
        n: shape for n, shape in stored.items() if not _NOT_WEIGHTS.search(n) and not n.startswith(ignored_prefixes)
    }
    missing = sorted(n for n in shapes if n not in stored)
    unexpected = sorted(n for n in weights if n not in shapes)
    if not strict:  # only shapes must agree on the names both have
        shapes = {n: shape for n, shape in shapes.items() if n in weights}
        weights = {n: shape for n, shape in weights.items() if n in shapes}
    c = model.config
    error = mismatch(
        path,
        shapes,
        weights,
        describe_model(c),
        "check that bert_config.json matches the checkpoint (strict=False loads a partial match).",
    )
    if error:
        raise error
    loaded = []
    for name, (variable, transposed) in expected.items():
        if name in stored:
            value = reader.get_tensor(name)
            variable.assign(np.transpose(value) if transposed else value)
            loaded.append(name)
    return {"loaded": loaded, "missing": missing, "unexpected": unexpected}


def export_google_checkpoint(model: BertPretrainer | BertEncoder, path: str) -> str:
    """Writes `model`'s weights under Google's TF1 names at prefix `path` (on any TensorFlow file system), plus
    `bert_config.json` beside it.

    The result loads with google-research/bert, Model Garden's converters and `load_google_checkpoint`.

    Raises:
        ConfigError: the model is not Google's BERT layout (`BertConfig.require_google_layout`).

    Example:

    ```python
    export_google_checkpoint(model, "export/bert_model.ckpt")
    # -> 'export/bert_model.ckpt'
    ```
    """
    import tensorflow as tf

    from kbert.checkpoint_index import write_checkpoint_index

    model.config.require_google_layout("Google's TF1 checkpoint format", GOOGLE_LAYOUT_FIX)
    directory = os.path.dirname(path) or "."
    tf.io.gfile.makedirs(directory)
    names, tensors = [], []
    for name, (variable, transposed) in sorted(google_variable_map(model).items()):
        value = keras.ops.convert_to_numpy(variable).astype(np.float32)  # a variable of any Keras backend
        names.append(name)
        tensors.append(value.T if transposed else value)
    tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    write_checkpoint_index(directory, [path])
    model.config.to_json_file(os.path.join(directory, "bert_config.json"))
    return path
