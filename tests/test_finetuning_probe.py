"""kbert.finetuning.probe: frozen features and a cross-validated logistic regression, the same score every time;
seeded random encoders; a pretraining run's own encoder."""

import numpy as np
from finetuning_fixtures import SEQ_LENGTH, TINY_MODEL, kbert_model_dir, vocab_file, words

from kbert.finetuning import probe
from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.examples import Examples
from kbert.modeling import BertPretrainer
from kbert.runtime.sections import ModelConfig

MODEL = {"bert": TINY_MODEL["bert"], "overrides": {**TINY_MODEL["overrides"], "vocab_size": 200}}


def _examples(seed: int, count: int, classes: int = 3) -> Examples:
    """Texts of `classes` classes, each written in its own ten words."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, count)
    return Examples("task.tsv", [words(rng, int(k), 6) for k in labels], None, labels)


def _weights(encoder):
    return [w.numpy() for w in encoder.weights]


def test_the_probe_reads_class_words_off_random_features_and_repeats_its_score(tmp_path):
    tokenizer = PairEncoder(vocab_file(tmp_path), SEQ_LENGTH)
    train, evaluation = _examples(0, 60), _examples(1, 30)
    encoder = probe.random_encoder(MODEL, seed=1)
    score = probe.probe_accuracy(encoder, tokenizer, train, evaluation)
    # Disjoint word sets per class: a bag of words separates them, so even random features do.
    assert score == 100.0
    assert probe.probe_accuracy(encoder, tokenizer, train, evaluation) == score
    features = probe.mean_features(encoder, tokenizer, evaluation)
    assert features.shape == (30, 32) and features.dtype == np.float64

    # Seeds: the same one builds the same weights, another other weights.
    assert all(np.array_equal(a, b) for a, b in zip(_weights(encoder), _weights(probe.random_encoder(MODEL, 1))))
    assert not np.array_equal(_weights(encoder)[0], _weights(probe.random_encoder(MODEL, 2))[0])


def test_a_label_the_features_cannot_see_scores_chance(tmp_path):
    tokenizer = PairEncoder(vocab_file(tmp_path), SEQ_LENGTH)
    train, evaluation = _examples(0, 80, classes=1), _examples(1, 200, classes=1)
    # Labels drawn apart from the texts: nothing to read off, so the eval accuracy stays near one half.
    for examples, seed in ((train, 2), (evaluation, 3)):
        examples.labels = np.random.default_rng(seed).integers(0, 2, len(examples))
    assert 35.0 <= probe.probe_accuracy(probe.random_encoder(MODEL, 1), tokenizer, train, evaluation) <= 65.0


def test_pretrained_encoder_is_the_runs_encoder(tmp_path):
    config = ModelConfig()
    config.override(MODEL)
    pretrainer = BertPretrainer(config.bert_config())
    loaded = probe.pretrained_encoder(kbert_model_dir(tmp_path / "pretrain", pretrainer))
    assert all(np.array_equal(a, b) for a, b in zip(_weights(loaded), _weights(pretrainer.encoder)))
