"""The pretraining TFRecord schema of google-research/bert, shared by writer, reader and inspector, and its two
kbert variants.

- Unpacked (Google's): one sequence a row; `next_sentence_labels` [1].
- Packed (`kbert-pack-pretraining-data`, after Habana's packed TFRecords): up to K sequences a row, kept apart.
  `input_mask` holds each token's sequence index (1..K, 0 = padding), `positions` the position ids (restarting
  at 0 with each sequence), `next_sentence_positions` / `next_sentence_labels` / `next_sentence_weights` [K] each
  sequence's [CLS] index, its label and 1 (0 for an empty slot); the masked-LM features have
  `packed_predictions(P, K)` = P + K - 1 slots.
- MLM-only (`kbert-create-pretraining-data --objective=mlm`): rows of consecutive sentences, no
  `next_sentence_labels`; the loop runs no sentence head on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

# v1 name -> v2 name (Model Garden's `use_v2_feature_names`).
V2_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
PREDICTION_INT_FEATURES = ("masked_lm_positions", "masked_lm_ids")
PREDICTION_FLOAT_FEATURES = ("masked_lm_weights",)
LABEL_FEATURES = ("next_sentence_labels",)
PACKED_SEQUENCE_FEATURES = ("positions",)
PACKED_INT_FEATURES = ("next_sentence_positions",)
PACKED_FLOAT_FEATURES = ("next_sentence_weights",)
ALL_FEATURES = (
    SEQUENCE_FEATURES
    + PACKED_SEQUENCE_FEATURES
    + PREDICTION_INT_FEATURES
    + PREDICTION_FLOAT_FEATURES
    + LABEL_FEATURES
    + PACKED_INT_FEATURES
    + PACKED_FLOAT_FEATURES
)
FLOAT_FEATURES = PREDICTION_FLOAT_FEATURES + PACKED_FLOAT_FEATURES


def packed_predictions(max_predictions: int, sequences_per_row: int) -> int:
    """Masked-LM slots of a packed row: the sequences' predictions, at most `max_predictions` each, fit when their
    lengths add up to one row (`round(0.15 * length)` rounds up by under one per sequence)."""
    return max_predictions + sequences_per_row - 1


def file_name(name: str, use_v2_feature_names: bool) -> str:
    """The name a feature has inside a TFRecord file."""
    return V2_NAMES.get(name, name) if use_v2_feature_names else name


def feature_spec(
    seq_length: int,
    max_predictions: int,
    use_v2_feature_names: bool = False,
    with_predictions: bool = True,
    sequences_per_row: int | None = None,
    with_sentence_labels: bool = True,
) -> dict[str, tf.io.FixedLenFeature]:
    """`tf.io.parse_example` spec keyed by the names used in the files.

    `with_predictions=False` describes unmasked records (`--no_masking`), which carry only the sequence features
    and the sentence label; `sequences_per_row` (K) packed records, whose `max_predictions` is the unpacked one
    (the spec has `packed_predictions` slots); `with_sentence_labels=False` MLM-only records.
    """
    import tensorflow as tf  # only here: the writers use the schema's names without TensorFlow

    spec = {}
    packed = sequences_per_row is not None
    for name in SEQUENCE_FEATURES + (PACKED_SEQUENCE_FEATURES if packed else ()):
        spec[file_name(name, use_v2_feature_names)] = tf.io.FixedLenFeature([seq_length], tf.int64)
    if with_predictions:
        slots = packed_predictions(max_predictions, sequences_per_row) if packed else max_predictions
        for name in PREDICTION_INT_FEATURES:
            spec[name] = tf.io.FixedLenFeature([slots], tf.int64)
        for name in PREDICTION_FLOAT_FEATURES:
            spec[name] = tf.io.FixedLenFeature([slots], tf.float32)
    if with_sentence_labels:
        spec["next_sentence_labels"] = tf.io.FixedLenFeature([sequences_per_row or 1], tf.int64)
    if packed:
        spec["next_sentence_positions"] = tf.io.FixedLenFeature([sequences_per_row], tf.int64)
        spec["next_sentence_weights"] = tf.io.FixedLenFeature([sequences_per_row], tf.float32)
    return spec
