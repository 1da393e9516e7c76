"""Pretraining records made with a Hugging Face tokenizer.json (--tokenizer), and the WordPiece path (--vocab_file)
unchanged by it.

The tokenizers are trained here, on generated text: byte-level BPE with ModernBERT's special tokens ([CLS] [SEP]
[MASK] [PAD] [UNK]) and with RoBERTa's (<s> </s> <mask> <pad> <unk>). Nothing is downloaded.
"""

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.instances import InstanceConfig
from kbert.data.wordpiece.vocab_file import SPECIAL_TOKENS

# A WordPiece corpus: words w0..w39, some with a `##s` piece, and a character no piece covers ([UNK]).
WORDPIECE_VOCAB = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(40)] + ["##s", "."]


def _wordpiece_corpus(path):
    rng = np.random.default_rng(3)
    docs = []
    for _ in range(30):
        sentences = []
        for _ in range(int(rng.integers(2, 9))):
            count = int(rng.integers(2, 12))
            words = [f"w{int(rng.integers(40))}" + ("s" if rng.random() < 0.3 else "") for _ in range(count)]
            if rng.random() < 0.1:
                words.append("\u00a7")
            sentences.append(" ".join(words) + ".")
        docs.append("\n".join(sentences))
    path.write_text("\n\n".join(docs) + "\n")
    return str(path)


def _records(paths):
    return [bytes(r.numpy()) for p in paths for r in tf.data.TFRecordDataset(str(p))]


# The SHA-256 of the records of `test_wordpiece_records_are_unchanged`'s runs, as kbert wrote them before
# --tokenizer (commit fd1d803).
WORDPIECE_DIGESTS = {
    "nsp": "92f19f90f0a78d123332b7c4e0717aad7cacd0e327c06bd50c23a812271f6f31",
    "mlm": "18ac0dacdb465ee87f61180922c545823cbad5a70f7ab55adc1724a9c798093c",
}


@pytest.mark.parametrize("objective", ["nsp", "mlm"])
def test_wordpiece_records_are_unchanged(tmp_path, objective):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(WORDPIECE_VOCAB) + "\n")
    corpus = _wordpiece_corpus(tmp_path / "corpus.txt")
    outputs = [tmp_path / f"out-{i}.tfrecord" for i in range(2)]
    config = InstanceConfig(
        max_seq_length=32, max_predictions_per_seq=6, dupe_factor=2, do_whole_word_mask=True, objective=objective
    )
    create_pretraining_data([corpus], [str(o) for o in outputs], str(vocab), True, config, unit_bytes=700)
    digest = hashlib.sha256(b"".join(_records(outputs))).hexdigest()
    assert digest == WORDPIECE_DIGESTS[objective]
