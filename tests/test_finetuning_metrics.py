"""GLUE's metrics against values worked out by hand, in float64, and the GLUE submission file."""

import numpy as np
import pytest

from kbert.finetuning.metrics import compute_metrics, matthews_corr, pearson, spearman
from kbert.finetuning.predictions import write_submission

LABELS = np.array([1, 1, 1, 0, 0, 0, 1, 0])
PREDICTIONS = np.array([1, 1, 0, 0, 0, 1, 1, 1])  # TP 3, FN 1, TN 2, FP 2


def test_classification_metrics_by_hand():
    metrics = compute_metrics(("accuracy", "f1", "matthews_corr"), LABELS, PREDICTIONS)
    assert metrics["accuracy"] == 5 / 8
    assert metrics["f1"] == 2 * 3 / (2 * 3 + 2 + 1)
    assert metrics["matthews_corr"] == pytest.approx((3 * 2 - 2 * 1) / np.sqrt(5 * 4 * 4 * 3), abs=1e-15)
    assert list(metrics) == ["accuracy", "f1", "matthews_corr"]  # the first one picks the best epoch


def test_degenerate_cases_are_zero_not_nan():
    all_zero = np.zeros(4, int)
    assert compute_metrics(("f1", "matthews_corr"), np.array([1, 0, 1, 0]), all_zero) == {
        "f1": 0.0,
        "matthews_corr": 0.0,
    }
    assert pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])) == 0.0
    assert spearman(np.array([5.0, 5.0]), np.array([1.0, 2.0])) == 0.0
    names = ("accuracy", "f1", "matthews_corr", "pearson", "spearman")
    assert compute_metrics(names, np.array([]), np.array([])) == dict.fromkeys(names, 0.0)  # empty eval set
    assert compute_metrics(names, np.array([1]), np.array([1])) == {
        "accuracy": 1.0,
        "f1": 1.0,
        "matthews_corr": 0.0,
        "pearson": 0.0,
        "spearman": 0.0,
    }


def test_pearson_and_spearman_with_ties_by_hand():
    x = np.array([1.0, 2.0, 2.0, 4.0])
    y = np.array([1.0, 3.0, 2.0, 8.0])
    # Pearson: deviations x (-1.25, -0.25, -0.25, 1.75), y (-2.5, -0.5, -1.5, 4.5).
    sxy, sxx, syy = 3.125 + 0.125 + 0.375 + 7.875, 1.5625 + 0.0625 + 0.0625 + 3.0625, 6.25 + 0.25 + 2.25 + 20.25
    assert pearson(x, y) == pytest.approx(sxy / np.sqrt(sxx * syy), abs=1e-15)
    # Ranks with the tie averaged: x (1, 2.5, 2.5, 4), y (1, 3, 2, 4)
    # -> deviations (-1.5, 0, 0, 1.5), (-1.5, .5, -.5, 1.5).
    assert spearman(x, y) == pytest.approx(4.5 / np.sqrt(4.5 * 5.0), abs=1e-15)
    assert spearman(x, x**3) == pytest.approx(1.0, abs=1e-15)


def test_matthews_is_symmetric_in_the_classes():
    assert matthews_corr(LABELS, PREDICTIONS) == pytest.approx(matthews_corr(1 - LABELS, 1 - PREDICTIONS))


def test_submission_files(tmp_path):
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    path = write_submission(
        str(tmp_path / "p" / "MNLI-m.tsv"), ["7", "9"], logits, ("contradiction", "entailment", "neutral")
    )
    assert open(path).read() == "index\tprediction\n7\tentailment\n9\tcontradiction\n"
    path = write_submission(str(tmp_path / "STS-B.tsv"), ["0"], np.array([[3.25]]), None)
    assert open(path).read() == "index\tprediction\n0\t3.25\n"
