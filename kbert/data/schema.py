"""The pretraining TFRecord schema of google-research/bert, shared by writer, reader and inspector."""

from __future__ import annotations

import tensorflow as tf

# v1 name -> v2 name (Model Garden's `use_v2_feature_names`).
V2_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
PREDICTION_INT_FEATURES = ("masked_lm_positions", "masked_lm_ids")
PREDICTION_FLOAT_FEATURES = ("masked_lm_weights",)
LABEL_FEATURES = ("next_sentence_labels",)
ALL_FEATURES = SEQUENCE_FEATURES + PREDICTION_INT_FEATURES + PREDICTION_FLOAT_FEATURES + LABEL_FEATURES


def file_name(name: str, use_v2_feature_names: bool) -> str:
    """The name a feature has inside a TFRecord file."""
    return V2_NAMES.get(name, name) if use_v2_feature_names else name


def feature_spec(
    seq_length: int,
    max_predictions: int,
    use_v2_feature_names: bool = False,
    with_predictions: bool = True,
) -> dict[str, tf.io.FixedLenFeature]:
    """`tf.io.parse_example` spec keyed by the names used in the files.

    `with_predictions=False` describes unmasked records (`--no_masking`), which carry only the sequence features
    and the sentence label.
    """
    spec = {}
    for name in SEQUENCE_FEATURES:
        spec[file_name(name, use_v2_feature_names)] = tf.io.FixedLenFeature([seq_length], tf.int64)
    if with_predictions:
        for name in PREDICTION_INT_FEATURES:
            spec[name] = tf.io.FixedLenFeature([max_predictions], tf.int64)
        for name in PREDICTION_FLOAT_FEATURES:
            spec[name] = tf.io.FixedLenFeature([max_predictions], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec
