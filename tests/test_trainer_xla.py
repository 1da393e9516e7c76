"""train.jit_compile=step: the whole replica step in one XLA cluster trains like no XLA, and is refused where TF
cannot compile it."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.errors import ConfigError
from kbert.modeling import BertConfig, BertPretrainer
from kbert.optimizers import LAMB
from kbert.tasks.bert import BertPretrainingTask
from kbert.training.trainer import PretrainingTrainer, whole_step_compiles

BATCH, SEQ, PREDICTIONS = 4, 16, 3
CONFIG = BertConfig.load("bert_tiny").replace(
    vocab_size=40,
    hidden_size=16,
    num_attention_heads=2,
    intermediate_size=32,
    num_hidden_layers=1,
    max_position_embeddings=SEQ,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _batches(context):
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(5, CONFIG.vocab_size, (BATCH, SEQ)).astype(np.int32),
        "input_mask": np.ones((BATCH, SEQ), np.int32),
        "segment_ids": np.repeat([[0] * (SEQ // 2) + [1] * (SEQ // 2)], BATCH, 0).astype(np.int32),
        "masked_lm_positions": np.tile(np.arange(1, PREDICTIONS + 1, dtype=np.int32), (BATCH, 1)),
        "masked_lm_ids": rng.integers(5, CONFIG.vocab_size, (BATCH, PREDICTIONS)).astype(np.int32),
        "masked_lm_weights": np.ones((BATCH, PREDICTIONS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (BATCH, 1)).astype(np.int32),
    }
    return tf.data.Dataset.from_tensor_slices(batch).batch(context.get_per_replica_batch_size(BATCH) // 2).repeat()


def _trainer(strategy, jit_compile):
    with strategy.scope():
        keras.utils.set_random_seed(3)
        model = BertPretrainer(CONFIG)
        optimizer = LAMB(1e-2, weight_decay=0.01, global_clipnorm=0.5)  # clipping is part of the compiled step
        return PretrainingTrainer(
            strategy,
            model,
            optimizer,
            _batches,
            task=BertPretrainingTask(CONFIG),
            global_step=tf.Variable(0, dtype=tf.int64),
            global_batch_size=BATCH,
            accumulation_steps=2,
            jit_compile=jit_compile,
        )


@pytest.mark.slow
def test_the_whole_step_under_xla_trains_like_no_xla():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    trained = {}
    for jit_compile in (False, "step"):
        trainer = _trainer(strategy, jit_compile)
        start = [w.numpy() for w in trainer.model.weights]
        metrics = trainer.train(tf.constant(3))
        trained[jit_compile] = ([w.numpy() for w in trainer.model.weights], metrics["loss"])
        assert int(trainer.global_step.numpy()) == 3
    (plain, plain_loss), (xla, xla_loss) = trained[False], trained["step"]
    np.testing.assert_allclose(xla_loss, plain_loss, rtol=1e-5)
    for a, b in zip(plain, xla):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    assert sum(not np.allclose(s, a) for s, a in zip(start, plain)) > 10  # the LAMB updates moved the weights


def test_whole_step_xla_is_decided_by_the_replicas_devices():
    assert whole_step_compiles(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert whole_step_compiles(tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"]))  # XLA collectives
    assert not whole_step_compiles(tf.distribute.MirroredStrategy(["/cpu:0"]))  # merge_call, which XLA refuses


def test_whole_step_xla_on_mirrored_cpus_is_refused_in_one_line_naming_the_key():
    with pytest.raises(ConfigError) as error:
        _trainer(tf.distribute.MirroredStrategy(["/cpu:0"]), "step")
    message = str(error.value)
    assert message.startswith("train.jit_compile=step:") and "\n" not in message
    assert "train.jit_compile=true" in message
