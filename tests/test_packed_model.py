"""Packed rows keep their sequences apart: the model's outputs, the loss and one training step on packed rows equal
those on the same sequences unpacked (the equality that rules out cross-contamination)."""

import numpy as np
import pytest
import tensorflow as tf

from kbert.data import schema
from kbert.data.dynamic_masking import DynamicMasker
from kbert.modeling import BertConfig, BertPretrainer, pretraining_loss_terms, pretraining_metrics
from kbert.optimizers import LAMB
from kbert.training.trainer import PretrainingTrainer

TINY = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SEQ, PREDICTIONS, PER_ROW = 16, 3, 3
LENGTHS = (5, 7, 4, 6, 9)
GROUPS = ([0, 1, 2], [3, 4])  # 16 and 15 real tokens: one full row, one with a padded tail
CLS, SEP = 2, 3

pytestmark = pytest.mark.usefixtures("float32_policy")


def _unpacked(seed=0):
    """Short `[CLS] a [SEP] b [SEP]` sequences of LENGTHS, each with its own predictions and label."""
    rng = np.random.default_rng(seed)
    n = len(LENGTHS)
    batch = {"input_ids": np.zeros((n, SEQ), np.int32), "input_mask": np.zeros((n, SEQ), np.int32),
             "segment_ids": np.zeros((n, SEQ), np.int32),
             "masked_lm_positions": np.zeros((n, PREDICTIONS), np.int32),
             "masked_lm_ids": np.zeros((n, PREDICTIONS), np.int32),
             "masked_lm_weights": np.zeros((n, PREDICTIONS), np.float32),
             "next_sentence_labels": rng.integers(0, 2, (n, 1)).astype(np.int32)}
    for row, length in enumerate(LENGTHS):
        middle = length // 2
        batch["input_ids"][row, :length] = rng.integers(5, TINY.vocab_size, length)
        batch["input_ids"][row, [0, middle, length - 1]] = [CLS, SEP, SEP]
        batch["input_mask"][row, :length] = 1
        batch["segment_ids"][row, middle + 1:length] = 1
        candidates = [i for i in range(1, length - 1) if i != middle]
        count = min(1 + row % PREDICTIONS, len(candidates))
        batch["masked_lm_positions"][row, :count] = np.sort(rng.choice(candidates, count, replace=False))
        batch["masked_lm_ids"][row, :count] = rng.integers(5, TINY.vocab_size, count)
        batch["masked_lm_weights"][row, :count] = 1.0
    return batch


def _pack(batch):
    """The packed layout of kbert.data.schema, written out plainly: GROUPS' sequences side by side."""
    rows, slots = len(GROUPS), schema.packed_predictions(PREDICTIONS, PER_ROW)
    packed = {"input_ids": np.zeros((rows, SEQ), np.int32), "input_mask": np.zeros((rows, SEQ), np.int32),
              "segment_ids": np.zeros((rows, SEQ), np.int32), "positions": np.zeros((rows, SEQ), np.int32),
              "masked_lm_positions": np.zeros((rows, slots), np.int32),
              "masked_lm_ids": np.zeros((rows, slots), np.int32),
              "masked_lm_weights": np.zeros((rows, slots), np.float32),
              "next_sentence_positions": np.zeros((rows, PER_ROW), np.int32),
              "next_sentence_labels": np.zeros((rows, PER_ROW), np.int32),
              "next_sentence_weights": np.zeros((rows, PER_ROW), np.float32)}
    for row, group in enumerate(GROUPS):
        offset = predicted = 0
        for slot, source in enumerate(group):
            length = LENGTHS[source]
            span = slice(offset, offset + length)
            packed["input_ids"][row, span] = batch["input_ids"][source, :length]
            packed["segment_ids"][row, span] = batch["segment_ids"][source, :length]
            packed["input_mask"][row, span] = slot + 1
            packed["positions"][row, span] = np.arange(length)
            count = int(batch["masked_lm_weights"][source].sum())
            where = slice(predicted, predicted + count)
            packed["masked_lm_positions"][row, where] = batch["masked_lm_positions"][source, :count] + offset
            packed["masked_lm_ids"][row, where] = batch["masked_lm_ids"][source, :count]
            packed["masked_lm_weights"][row, where] = 1.0
            packed["next_sentence_positions"][row, slot] = offset
            packed["next_sentence_labels"][row, slot] = batch["next_sentence_labels"][source, 0]
            packed["next_sentence_weights"][row, slot] = 1.0
            offset, predicted = offset + length, predicted + count
    return packed


def _model(seed=3):
    tf.keras.utils.set_random_seed(seed)
    return BertPretrainer(TINY)


def test_packed_rows_give_each_sequence_its_unpacked_outputs():
    model, batch = _model(), _unpacked()
    alone, packed = model(batch), model(_pack(batch))
    for row, group in enumerate(GROUPS):
        predicted = 0
        for slot, source in enumerate(group):
            count = int(batch["masked_lm_weights"][source].sum())
            np.testing.assert_allclose(packed["mlm_logits"][row, predicted:predicted + count],
                                       alone["mlm_logits"][source, :count], atol=1e-5, rtol=0)
            np.testing.assert_allclose(packed["nsp_logits"][row, slot], alone["nsp_logits"][source], atol=1e-5,
                                       rtol=0)
            predicted += count


def test_packed_loss_terms_and_metrics_equal_the_unpacked_ones():
    model, batch = _model(), _unpacked()
    packed_batch = _pack(batch)
    alone = pretraining_loss_terms(batch, model(batch))
    packed = pretraining_loss_terms(packed_batch, model(packed_batch))
    for name, value in alone.items():
        np.testing.assert_allclose(float(packed[name]), float(value), rtol=2e-6, atol=1e-6, err_msg=name)
    assert float(packed["sequence_count"]) == len(LENGTHS)
    for name, value in pretraining_metrics(alone).items():
        np.testing.assert_allclose(float(pretraining_metrics(packed)[name]), float(value), rtol=2e-6, err_msg=name)


def _one_step(batch, rows):
    model = _model()
    trainer = PretrainingTrainer(tf.distribute.get_strategy(), model, LAMB(1e-2),
                                 lambda context: tf.data.Dataset.from_tensors(batch).repeat(),
                                 global_step=tf.Variable(0, dtype=tf.int64), global_batch_size=rows)
    metrics = trainer.train(tf.constant(1))
    return {v.path: v.numpy() for v in model.weights}, metrics


def test_one_training_step_on_packed_rows_gives_the_unpacked_weights():
    batch = _unpacked()
    alone, alone_metrics = _one_step(batch, len(LENGTHS))
    packed, packed_metrics = _one_step(_pack(batch), len(GROUPS))
    assert alone.keys() == packed.keys()
    for path, value in alone.items():
        np.testing.assert_allclose(packed[path], value, atol=2e-6, rtol=0, err_msg=path)
    np.testing.assert_allclose(packed_metrics["loss"], alone_metrics["loss"], rtol=2e-6)


def test_an_mlm_only_batch_runs_no_sentence_head():
    model, batch = _model(), _unpacked()
    del batch["next_sentence_labels"]
    outputs = model(batch)
    assert set(outputs) == {"mlm_logits"}
    terms = pretraining_loss_terms(batch, outputs)
    assert float(terms["nsp_count"]) == 0 and float(terms["sequence_count"]) == len(LENGTHS)
    metrics = pretraining_metrics(terms)
    assert float(metrics["loss"]) == pytest.approx(float(metrics["masked_lm_loss"]))


def test_dynamic_masking_of_packed_rows_stays_on_real_tokens_within_the_slots():
    packed = _pack(_unpacked())
    unmasked = {k: tf.constant(v) for k, v in packed.items() if not k.startswith("masked_lm")}
    slots = schema.packed_predictions(PREDICTIONS, PER_ROW)
    masker = DynamicMasker(TINY.vocab_size, slots, unmaskable_ids=[0, CLS, SEP], selection_rate=0.5)
    for seed in range(5):
        tf.random.set_seed(seed)
        out = masker(unmasked)
        weights = out["masked_lm_weights"].numpy()
        assert weights.shape == (len(GROUPS), slots)
        for row in range(len(GROUPS)):
            chosen = out["masked_lm_positions"].numpy()[row][weights[row] > 0]
            assert np.all(packed["input_mask"][row, chosen] > 0)  # never padding
            assert not np.isin(packed["input_ids"][row, chosen], [CLS, SEP]).any()  # never a boundary token
            np.testing.assert_array_equal(out["masked_lm_ids"].numpy()[row][weights[row] > 0],
                                          packed["input_ids"][row, chosen])
