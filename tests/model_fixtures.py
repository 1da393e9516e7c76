"""Fixtures for the model tests on any Keras backend: the tiny config, weights far from their init, a packed batch
and the unpacked sequences it holds, and the outputs the backends are compared on. Imports no TensorFlow."""

from __future__ import annotations

import keras
import numpy as np

from kbert.modeling import BertConfig, BertPretrainer

TINY = BertConfig(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=32,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
SEQ, PREDICTIONS, PER_ROW = 16, 3, 3
SLOTS = PREDICTIONS + PER_ROW - 1  # a packed row's masked-LM slots: kbert.data.schema.packed_predictions
LENGTHS = (5, 7, 4, 6, 9)
GROUPS = ([0, 1, 2], [3, 4])  # 16 and 15 real tokens: one full row, one with a padded tail
CLS, SEP = 2, 3


def randomize(model, seed=0, scale=0.3):
    """Weights far from their init (LayerNorm gains near 1, other weights O(scale)) so every term matters."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        base = 1.0 if v.path.endswith("gamma") else 0.0
        v.assign(base + scale * rng.standard_normal(v.shape).astype(np.float32))


def unpacked(seed=0):
    """Short `[CLS] a [SEP] b [SEP]` sequences of LENGTHS, one a row, each with its own predictions and label."""
    rng = np.random.default_rng(seed)
    n = len(LENGTHS)
    batch = {
        "input_ids": np.zeros((n, SEQ), np.int32),
        "input_mask": np.zeros((n, SEQ), np.int32),
        "segment_ids": np.zeros((n, SEQ), np.int32),
        "masked_lm_positions": np.zeros((n, PREDICTIONS), np.int32),
        "masked_lm_ids": np.zeros((n, PREDICTIONS), np.int32),
        "masked_lm_weights": np.zeros((n, PREDICTIONS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (n, 1)).astype(np.int32),
    }
    for row, length in enumerate(LENGTHS):
        middle = length // 2
        batch["input_ids"][row, :length] = rng.integers(5, TINY.vocab_size, length)
        batch["input_ids"][row, [0, middle, length - 1]] = [CLS, SEP, SEP]
        batch["input_mask"][row, :length] = 1
        batch["segment_ids"][row, middle + 1 : length] = 1
        candidates = [i for i in range(1, length - 1) if i != middle]
        count = min(1 + row % PREDICTIONS, len(candidates))
        batch["masked_lm_positions"][row, :count] = np.sort(rng.choice(candidates, count, replace=False))
        batch["masked_lm_ids"][row, :count] = rng.integers(5, TINY.vocab_size, count)
        batch["masked_lm_weights"][row, :count] = 1.0
    return batch


def packed_slots(batch):
    """(row, slot, source row, token offset, length, first prediction slot, predictions) of every sequence of
    `unpacked`'s `batch` in its packed layout: GROUPS' sequences side by side."""
    for row, group in enumerate(GROUPS):
        offset = predicted = 0
        for slot, source in enumerate(group):
            count = int(batch["masked_lm_weights"][source].sum())
            yield row, slot, source, offset, LENGTHS[source], predicted, count
            offset, predicted = offset + LENGTHS[source], predicted + count


def pack(batch):
    """The packed layout of kbert.data.schema, written out plainly: the block-diagonal mask is the sequence index
    each token carries in `input_mask` (1, 2, ...; 0 = padding), and position ids restart with each sequence."""
    rows = len(GROUPS)
    packed = {
        "input_ids": np.zeros((rows, SEQ), np.int32),
        "input_mask": np.zeros((rows, SEQ), np.int32),
        "segment_ids": np.zeros((rows, SEQ), np.int32),
        "positions": np.zeros((rows, SEQ), np.int32),
        "masked_lm_positions": np.zeros((rows, SLOTS), np.int32),
        "masked_lm_ids": np.zeros((rows, SLOTS), np.int32),
        "masked_lm_weights": np.zeros((rows, SLOTS), np.float32),
        "next_sentence_positions": np.zeros((rows, PER_ROW), np.int32),
        "next_sentence_labels": np.zeros((rows, PER_ROW), np.int32),
        "next_sentence_weights": np.zeros((rows, PER_ROW), np.float32),
    }
    for row, slot, source, offset, length, predicted, count in packed_slots(batch):
        span, where = slice(offset, offset + length), slice(predicted, predicted + count)
        packed["input_ids"][row, span] = batch["input_ids"][source, :length]
        packed["segment_ids"][row, span] = batch["segment_ids"][source, :length]
        packed["input_mask"][row, span] = slot + 1
        packed["positions"][row, span] = np.arange(length)
        packed["masked_lm_positions"][row, where] = batch["masked_lm_positions"][source, :count] + offset
        packed["masked_lm_ids"][row, where] = batch["masked_lm_ids"][source, :count]
        packed["masked_lm_weights"][row, where] = 1.0
        packed["next_sentence_positions"][row, slot] = offset
        packed["next_sentence_labels"][row, slot] = batch["next_sentence_labels"][source, 0]
        packed["next_sentence_weights"][row, slot] = 1.0
    return packed


def inference_outputs(model, batch) -> dict:
    """A `BertPretrainer`'s logits and its encoder's outputs (each layer's, the sequence's, the pooled one where it
    has a pooler) on `batch`, at inference, as NumPy arrays."""
    out = model(batch, training=False)
    encoded = model.encoder(batch, training=False)
    arrays = {
        **{name: out[name] for name in ("mlm_logits", "nsp_logits") if name in out},
        **{name: encoded[name] for name in ("pooled_output", "sequence_output") if name in encoded},
        **{f"layer_{i}": h for i, h in enumerate(encoded["encoder_outputs"])},
    }
    return {name: keras.ops.convert_to_numpy(value) for name, value in arrays.items()}


def to_numpy(x) -> np.ndarray:
    return keras.ops.convert_to_numpy(x)


def tiny_pretrainer() -> BertPretrainer:
    """A `BertPretrainer` of `TINY` with `randomize`d weights."""
    model = BertPretrainer(TINY)
    randomize(model)
    return model
