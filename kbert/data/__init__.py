"""Pretraining data: TFRecord schema, validation, dynamic masking and the tf.data input pipeline."""

from kbert.data.pipeline import pretraining_dataset
from kbert.data.validation import RecordLayout, first_layout

__all__ = ["RecordLayout", "first_layout", "pretraining_dataset"]
