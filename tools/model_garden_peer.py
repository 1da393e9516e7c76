"""The two training steps benchmarks put side by side: Model Garden's BERT pretraining (tf_keras `MaskedLMTask`)
and kbert's bare `BertPretrainer` step, plus the synthetic batch they share (their FLOPs: kbert.training.flops).

Not part of kbert: `tools/bench_*.py` import it to run the peer beside kbert in one process.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from official.nlp.configs import bert as mg_bert
from official.nlp.configs import encoders as mg_encoders
from official.nlp.data import pretrain_dataloader
from official.nlp.tasks import masked_lm

from kbert.data import schema
from kbert.modeling import BertConfig, BertPretrainer
from kbert.training.bare_step import bare_train_step

def model_garden_task(config: BertConfig) -> masked_lm.MaskedLMTask:
    encoder = mg_encoders.EncoderConfig(type="bert", bert=mg_encoders.BertEncoderConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads, intermediate_size=config.intermediate_size,
        hidden_activation=config.hidden_act, dropout_rate=config.hidden_dropout_prob,
        attention_dropout_rate=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        initializer_range=config.initializer_range))
    model_config = mg_bert.PretrainerConfig(encoder=encoder, cls_heads=[mg_bert.ClsHeadConfig(
        inner_dim=config.hidden_size, num_classes=2, dropout_rate=config.hidden_dropout_prob,
        name="next_sentence")])
    data = pretrain_dataloader.BertPretrainDataConfig(use_next_sentence_label=True)
    return masked_lm.MaskedLMTask(masked_lm.MaskedLMConfig(model=model_config, train_data=data))


def model_garden_batch(batch: dict) -> dict:
    return {schema.file_name(k, use_v2_feature_names=True): v for k, v in batch.items()}


def model_garden_train_step(config: BertConfig, learning_rate: float = 1e-4, jit_compile: bool = False):
    """(step function over a kbert batch dict, model) using Model Garden's own `MaskedLMTask.train_step`."""
    task = model_garden_task(config)
    model = task.build_model()
    metrics = task.build_metrics()
    optimizer = tf_keras.optimizers.Adam(learning_rate)

    @tf.function(jit_compile=jit_compile)
    def step(batch):
        return task.train_step(model_garden_batch(batch), model, optimizer, metrics)["loss"]

    return step, model


def kbert_train_step(config: BertConfig, jit_compile: bool = False, policy: str = "float32"):
    """kbert's `BertPretrainer` trained with Keras Adam in one tf.function: forward, backward, update."""
    return bare_train_step(BertPretrainer(config, dtype=policy), keras.optimizers.Adam(1e-4), jit_compile)


def synthetic_batch(config: BertConfig, batch_size: int, seq_length: int, max_predictions: int, seed: int = 0):
    """A full-length batch of random ids in kbert's batch layout (int32, weights float32)."""
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_length), max_predictions, replace=False)
                                  for _ in range(batch_size)]), axis=1)
    return {
        "input_ids": tf.constant(rng.integers(1000, config.vocab_size, (batch_size, seq_length)), tf.int32),
        "input_mask": tf.ones((batch_size, seq_length), tf.int32),
        "segment_ids": tf.constant(np.repeat([[0] * (seq_length // 2) + [1] * (seq_length - seq_length // 2)],
                                             batch_size, 0), tf.int32),
        "masked_lm_positions": tf.constant(positions, tf.int32),
        "masked_lm_ids": tf.constant(rng.integers(1000, config.vocab_size, (batch_size, max_predictions)), tf.int32),
        "masked_lm_weights": tf.ones((batch_size, max_predictions), tf.float32),
        "next_sentence_labels": tf.constant(rng.integers(0, 2, (batch_size, 1)), tf.int32),
    }
