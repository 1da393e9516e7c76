"""Pretraining data: TFRecord schema, validation, dynamic masking and the tf.data input pipeline."""

from kbert.data.pipeline import pretraining_dataset

__all__ = ["pretraining_dataset"]
