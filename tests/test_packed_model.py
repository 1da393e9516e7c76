"""Packed rows keep their sequences apart: the model's outputs, the loss and one training step on packed rows equal
those on the same sequences unpacked (the equality that rules out cross-contamination).

Runs on the Keras backend KERAS_BACKEND selects (tools/test.sh runs it under TensorFlow and JAX); the custom training
loop and dynamic masking are TensorFlow's (tf.distribute, tf.data) and skip elsewhere."""

import keras
import numpy as np
import pytest
from model_fixtures import CLS, GROUPS, LENGTHS, PER_ROW, PREDICTIONS, SEP, SLOTS, TINY, pack, packed_slots, unpacked

from kbert.modeling import BertPretrainer, pretraining_loss_terms, pretraining_metrics
from kbert.optimizers import LAMB

pytestmark = pytest.mark.usefixtures("float32_policy")


def tensorflow_only(what):
    return pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason=f"TensorFlow only: {what}")


def _model(seed=3):
    keras.utils.set_random_seed(seed)
    return BertPretrainer(TINY)


def test_packed_rows_give_each_sequence_its_unpacked_outputs():
    model, batch = _model(), unpacked()
    alone, packed = model(batch), model(pack(batch))
    for row, slot, source, _, _, predicted, count in packed_slots(batch):
        np.testing.assert_allclose(
            packed["mlm_logits"][row, predicted : predicted + count],
            alone["mlm_logits"][source, :count],
            atol=1e-5,
            rtol=0,
        )
        np.testing.assert_allclose(packed["nsp_logits"][row, slot], alone["nsp_logits"][source], atol=1e-5, rtol=0)


def test_packed_loss_terms_and_metrics_equal_the_unpacked_ones():
    model, batch = _model(), unpacked()
    packed_batch = pack(batch)
    alone = pretraining_loss_terms(batch, model(batch))
    packed = pretraining_loss_terms(packed_batch, model(packed_batch))
    for name, value in alone.items():
        np.testing.assert_allclose(float(packed[name]), float(value), rtol=2e-6, atol=1e-6, err_msg=name)
    assert float(packed["sequence_count"]) == len(LENGTHS)
    for name, value in pretraining_metrics(alone).items():
        np.testing.assert_allclose(float(pretraining_metrics(packed)[name]), float(value), rtol=2e-6, err_msg=name)


def _one_step(batch, rows):
    import tensorflow as tf

    from kbert.tasks.bert import BertPretrainingTask
    from kbert.training.trainer import PretrainingTrainer

    model = _model()
    trainer = PretrainingTrainer(
        tf.distribute.get_strategy(),
        model,
        LAMB(1e-2),
        lambda context: tf.data.Dataset.from_tensors(batch).repeat(),
        task=BertPretrainingTask(model.config),
        global_step=tf.Variable(0, dtype=tf.int64),
        global_batch_size=rows,
    )
    metrics = trainer.train(tf.constant(1))
    return {v.path: v.numpy() for v in model.weights}, metrics


@tensorflow_only("kbert.training's loop runs in tf.distribute")
def test_one_training_step_on_packed_rows_gives_the_unpacked_weights():
    batch = unpacked()
    alone, alone_metrics = _one_step(batch, len(LENGTHS))
    packed, packed_metrics = _one_step(pack(batch), len(GROUPS))
    assert alone.keys() == packed.keys()
    for path, value in alone.items():
        np.testing.assert_allclose(packed[path], value, atol=2e-6, rtol=0, err_msg=path)
    np.testing.assert_allclose(packed_metrics["loss"], alone_metrics["loss"], rtol=2e-6)


def _one_fit_step(batch):
    model = _model()
    model.compile(optimizer=LAMB(1e-2))
    history = model.fit(batch, batch_size=len(batch["input_ids"]), epochs=1, shuffle=False, verbose=0).history
    return {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}, history["loss"][0]


@pytest.mark.slow
def test_one_fit_step_on_packed_rows_gives_the_unpacked_weights():
    """`model.fit` (the step every Keras backend runs) on the whole batch at once: one LAMB step."""
    batch = unpacked()
    alone, alone_loss = _one_fit_step(batch)
    packed, packed_loss = _one_fit_step(pack(batch))
    assert alone.keys() == packed.keys()
    for path, value in alone.items():
        np.testing.assert_allclose(packed[path], value, atol=2e-6, rtol=0, err_msg=path)
    np.testing.assert_allclose(packed_loss, alone_loss, rtol=2e-6)


def test_an_mlm_only_batch_runs_no_sentence_head():
    model, batch = _model(), unpacked()
    del batch["next_sentence_labels"]
    outputs = model(batch)
    assert set(outputs) == {"mlm_logits"}
    terms = pretraining_loss_terms(batch, outputs)
    assert float(terms["nsp_count"]) == 0 and float(terms["sequence_count"]) == len(LENGTHS)
    metrics = pretraining_metrics(terms)
    assert float(metrics["loss"]) == pytest.approx(float(metrics["masked_lm_loss"]))


@tensorflow_only("dynamic masking runs in tf.data")
def test_dynamic_masking_of_packed_rows_stays_on_real_tokens_within_the_slots():
    import tensorflow as tf

    from kbert.data import schema
    from kbert.data.dynamic_masking import DynamicMasker

    packed = pack(unpacked())
    unmasked = {k: tf.constant(v) for k, v in packed.items() if not k.startswith("masked_lm")}
    slots = schema.packed_predictions(PREDICTIONS, PER_ROW)
    assert slots == SLOTS  # the layout model_fixtures.pack writes
    masker = DynamicMasker(TINY.vocab_size, slots, unmaskable_ids=[0, CLS, SEP], selection_rate=0.5)
    for seed in range(5):
        out = masker(unmasked, seed=tf.constant([seed, 0], tf.int64))
        weights = out["masked_lm_weights"].numpy()
        assert weights.shape == (len(GROUPS), slots)
        for row in range(len(GROUPS)):
            chosen = out["masked_lm_positions"].numpy()[row][weights[row] > 0]
            assert np.all(packed["input_mask"][row, chosen] > 0)  # never padding
            assert not np.isin(packed["input_ids"][row, chosen], [CLS, SEP]).any()  # never a boundary token
            np.testing.assert_array_equal(
                out["masked_lm_ids"].numpy()[row][weights[row] > 0], packed["input_ids"][row, chosen]
            )
