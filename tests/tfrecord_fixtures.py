"""Test fixtures: a tiny BERT-style vocabulary and pretraining TFRecords written with kbert's `example_proto`."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from kbert.data.tfrecord_writer import example_proto
from kbert.data.wordpiece.vocab_file import BERT_SPECIAL_IDS, SPECIAL_TOKENS, reserved_tokens

PAD, UNK, CLS, SEP, MASK = (BERT_SPECIAL_IDS[t] for t in SPECIAL_TOKENS)
FIRST_WORD = len(reserved_tokens("bert"))


def write_vocab(path: str, num_words: int = 60, num_pieces: int = 36) -> list[str]:
    """bert-base-uncased's layout: [PAD] 0, [unused*], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then words."""
    vocab = reserved_tokens("bert") + [f"w{i}" for i in range(num_words)] + [f"##p{i}" for i in range(num_pieces)]
    with open(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    return vocab


def make_instance(rng: np.random.Generator, seq_length: int, vocab_size: int, min_len: int = 6) -> dict:
    """One unmasked instance `[CLS] A [SEP] B [SEP]` with ids from [FIRST_WORD, vocab_size)."""
    total = int(rng.integers(min_len, seq_length + 1))
    body = total - 3
    len_a = int(rng.integers(1, body))
    ids = rng.integers(FIRST_WORD, vocab_size, size=body).tolist()
    tokens = [CLS] + ids[:len_a] + [SEP] + ids[len_a:] + [SEP]
    segments = [0] * (len_a + 2) + [1] * (body - len_a + 1)
    pad = seq_length - len(tokens)
    return {
        "input_ids": tokens + [PAD] * pad,
        "input_mask": [1] * len(tokens) + [0] * pad,
        "segment_ids": segments + [0] * pad,
        "next_sentence_labels": [int(rng.integers(0, 2))],
    }


def mask_instance(rng: np.random.Generator, instance: dict, max_predictions: int, masked_lm_prob: float = 0.15) -> dict:
    """Google-style static masking: `masked_lm_prob` of non-special tokens to [MASK], positions ascending, 0-padded."""
    ids = list(instance["input_ids"])
    candidates = [i for i, t in enumerate(ids) if t not in (PAD, CLS, SEP)]
    n = min(max_predictions, max(1, round(len(candidates) * masked_lm_prob)))
    positions = sorted(rng.choice(candidates, size=n, replace=False).tolist())
    labels = [ids[p] for p in positions]
    for p in positions:
        ids[p] = MASK
    pad = max_predictions - n
    return dict(
        instance,
        input_ids=ids,
        masked_lm_positions=positions + [0] * pad,
        masked_lm_ids=labels + [0] * pad,
        masked_lm_weights=[1.0] * n + [0.0] * pad,
    )


def make_instances(
    n: int, seq_length: int, max_predictions: int | None, vocab_size: int, seed: int = 0, masked_lm_prob: float = 0.15
) -> list:
    """`n` instances, masked unless `max_predictions` is None."""
    rng = np.random.default_rng(seed)
    instances = [make_instance(rng, seq_length, vocab_size) for _ in range(n)]
    if max_predictions is None:
        return instances
    return [mask_instance(rng, inst, max_predictions, masked_lm_prob) for inst in instances]


def write_records(path: str, instances: list, v2: bool = False, gzip_compressed: bool = False) -> str:
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip_compressed else "")
    with tf.io.TFRecordWriter(os.fspath(path), options) as writer:
        for instance in instances:
            writer.write(example_proto(instance, v2))
    return os.fspath(path)
