"""Fixtures for the training tests: tiny pretraining TFRecords and a tiny experiment YAML."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from kbert.data import schema

VOCAB_SIZE = 64
SEQ_LENGTH = 16
MAX_PREDICTIONS = 4


def _example(rng: np.random.Generator) -> bytes:
    length = int(rng.integers(6, SEQ_LENGTH + 1))
    ids = np.zeros(SEQ_LENGTH, np.int64)
    ids[:length] = rng.integers(5, VOCAB_SIZE, length)
    mask = (np.arange(SEQ_LENGTH) < length).astype(np.int64)
    segments = ((np.arange(SEQ_LENGTH) >= length // 2) & (mask > 0)).astype(np.int64)
    count = int(rng.integers(1, MAX_PREDICTIONS + 1))
    positions = np.zeros(MAX_PREDICTIONS, np.int64)
    positions[:count] = np.sort(rng.choice(np.arange(1, length), count, replace=False))
    labels = np.zeros(MAX_PREDICTIONS, np.int64)
    labels[:count] = rng.integers(5, VOCAB_SIZE, count)
    weights = np.zeros(MAX_PREDICTIONS, np.float32)
    weights[:count] = 1.0
    values = {"input_ids": ids, "input_mask": mask, "segment_ids": segments, "masked_lm_positions": positions,
              "masked_lm_ids": labels, "masked_lm_weights": weights,
              "next_sentence_labels": np.array([rng.integers(0, 2)], np.int64)}
    spec = schema.feature_spec(SEQ_LENGTH, MAX_PREDICTIONS)
    feature = {}
    for name, value in values.items():
        if spec[name].dtype == tf.float32:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shards(directory: str, prefix: str, shards: int, records_per_shard: int, seed: int = 0) -> str:
    """Writes `shards` TFRecord files of random instances; returns their glob."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    for shard in range(shards):
        with tf.io.TFRecordWriter(os.path.join(directory, f"{prefix}-{shard:03d}.tfrecord")) as writer:
            for _ in range(records_per_shard):
                writer.write(_example(rng))
    return os.path.join(directory, f"{prefix}-*.tfrecord")


def write_config(path: str, train_files: str, eval_files: str = "", **sections) -> str:
    """A YAML experiment for a 2-layer, hidden-32 BERT on the fixture records; `sections` update it."""
    import yaml

    config = {
        "model": {"bert": "bert_tiny", "overrides": {
            "vocab_size": VOCAB_SIZE, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
            "num_hidden_layers": 2, "max_position_embeddings": 32}},
        "data": {"train_files": train_files, "eval_files": eval_files, "seq_length": SEQ_LENGTH,
                 "max_predictions": MAX_PREDICTIONS},
        "optimizer": {"type": "lamb", "weight_decay": 0.01},
        "schedule": {"peak_learning_rate": 1e-2, "warmup_steps": 2, "power": 0.5},
        "train": {"global_batch_size": 8, "total_steps": 6, "steps_per_loop": 2, "checkpoint_interval": 2,
                  "summary_interval": 2, "max_checkpoints": 3, "deterministic": True},
        "eval": {"global_batch_size": 8},
    }
    for section, values in sections.items():
        config[section].update(values)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path
