"""Pretraining data: TFRecord schema, validation, dynamic masking and the tf.data input pipeline.

The names below are imported on first use, so that the data tools that need no TensorFlow (kbert-build-vocab
on local files) can import their modules of this package without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names, for static readers (type checkers, the docs' API reference)
    from kbert.data.pipeline import pretraining_dataset
    from kbert.data.validation import RecordLayout, first_layout

_EXPORTS = {
    "pretraining_dataset": "kbert.data.pipeline",
    "RecordLayout": "kbert.data.validation",
    "first_layout": "kbert.data.validation",
}
__all__ = ["pretraining_dataset", "RecordLayout", "first_layout"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
