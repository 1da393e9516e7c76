"""Fixtures for the fine-tuning and export tests: tiny vocabularies, task files written as GLUE lays them out,
and the config of a 2-layer, hidden-32 BERT."""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf
from tfrecord_fixtures import write_vocab

from kbert.runtime.checkpointing import variables_by_path

SEQ_LENGTH = 16
# A 2-layer, hidden-32 BERT; its vocabulary follows data.vocab_file.
TINY_MODEL = {
    "bert": "bert_tiny",
    "overrides": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32},
}
NLI_LABELS = ("contradiction", "entailment", "neutral")


def vocab_file(directory) -> str:
    path = os.path.join(directory, "vocab.txt")
    write_vocab(path)
    return path


def write_tsv(path, header, rows) -> str:
    """`header` None writes no header line (GLUE's CoLA)."""
    lines = (["\t".join(header)] if header else []) + ["\t".join(str(c) for c in row) for row in rows]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def words(rng: np.random.Generator, klass: int, count: int = 4) -> str:
    """Words w{10k}..w{10k+9}: each class has its own, so a tiny model learns the task in a few steps."""
    return " ".join(f"w{10 * klass + int(i)}" for i in rng.integers(0, 10, count))


def write_mnli(root, n_train: int = 48, n_dev: int = 12, seed: int = 0) -> str:
    """GLUE's MNLI/ under `root`: train, dev_matched, dev_mismatched and both test files, GLUE's columns."""
    rng = np.random.default_rng(seed)
    header = ["index", "promptID", "pairID", "genre", "sentence1", "sentence2", "label1", "gold_label"]

    def rows(n):
        labels = rng.integers(0, 3, n)
        return [
            [i, i, f"{i}e", "fiction", words(rng, int(k)), words(rng, int(k)), NLI_LABELS[k], NLI_LABELS[k]]
            for i, k in enumerate(labels)
        ]

    directory = os.path.join(root, "MNLI")
    write_tsv(os.path.join(directory, "train.tsv"), header, rows(n_train))
    for split in ("dev_matched", "dev_mismatched"):
        write_tsv(os.path.join(directory, f"{split}.tsv"), header, rows(n_dev))
    for split in ("test_matched", "test_mismatched"):
        write_tsv(
            os.path.join(directory, f"{split}.tsv"),
            ["index", "sentence1", "sentence2"],
            [[100 + i, words(rng, 5), words(rng, i % 3)] for i in range(5)],
        )
    return str(root)


def write_config(path, **sections) -> str:
    """A fine-tuning YAML for the tiny model (two epochs of batch 8); `sections` update it."""
    import yaml

    config = {
        "model": dict(TINY_MODEL),
        "data": {"seq_length": SEQ_LENGTH},
        "optimizer": {"type": "adamw", "weight_decay": 0.01},
        "schedule": {"peak_learning_rate": 1e-2, "warmup_fraction": 0.1},
        "train": {"epochs": 2, "global_batch_size": 8, "eval_batch_size": 16},
    }
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return str(path)


def kbert_model_dir(directory, pretrainer) -> str:
    """A kbert pretraining model_dir: checkpoints/ckpt-N keyed by variable path, summary.json with the model."""
    tf.train.Checkpoint(model=variables_by_path(pretrainer.weights)).save(str(directory / "checkpoints" / "ckpt"))
    model = {"bert": TINY_MODEL["bert"], "overrides": {**TINY_MODEL["overrides"], "vocab_size": 200}}
    (directory / "summary.json").write_text(json.dumps({"config": {"model": model}}))
    return str(directory)
