"""GLUE's metrics in NumPy float64: accuracy, F1, Matthews correlation, Pearson and Spearman correlation.

Invariant: every metric is computed from the whole evaluation set at once (never averaged over batches), in float64,
the way GLUE's scorer and scikit-learn/scipy compute it; a degenerate case (no positive predictions, a constant
series) gives 0.0, as scikit-learn does, instead of NaN.

Example:

>>> compute_metrics(("f1", "accuracy"), labels=np.array([1, 0, 1]), predictions=np.array([1, 1, 1]))
{'f1': 0.8, 'accuracy': 0.6666666666666666}
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    return float(np.mean(labels == predictions)) if len(labels) else 0.0


def _confusion(labels: np.ndarray, predictions: np.ndarray) -> tuple[float, float, float, float]:
    """(true positives, false positives, false negatives, true negatives) of class 1 against the rest."""
    positive, predicted = labels == 1, predictions == 1
    return (float(np.sum(positive & predicted)), float(np.sum(~positive & predicted)),
            float(np.sum(positive & ~predicted)), float(np.sum(~positive & ~predicted)))


def f1(labels: np.ndarray, predictions: np.ndarray) -> float:
    """F1 of class 1 (MRPC's "equivalent", QQP's "duplicate"): 2TP / (2TP + FP + FN)."""
    tp, fp, fn, _ = _confusion(labels, predictions)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews_corr(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Binary Matthews correlation (CoLA): (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))."""
    tp, fp, fn, tn = _confusion(labels, predictions)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(labels: np.ndarray, predictions: np.ndarray) -> float:
    x = np.asarray(labels, np.float64) - np.mean(labels, dtype=np.float64)
    y = np.asarray(predictions, np.float64) - np.mean(predictions, dtype=np.float64)
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / denominator) if denominator else 0.0


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank (scipy.stats.rankdata's default)."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    # Each run of equal values gets the mean of the positions it spans.
    starts = np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]])
    run_id = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    last = np.concatenate([first[1:], [len(values)]]) - 1
    ranks = np.empty(len(values), np.float64)
    ranks[order] = (first[run_id] + last[run_id]) / 2.0 + 1.0
    return ranks


def spearman(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Pearson correlation of the ranks (ties averaged)."""
    return pearson(_ranks(labels), _ranks(predictions))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_corr": matthews_corr,
    "pearson": pearson,
    "spearman": spearman,
}


def compute_metrics(names: Sequence[str], labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """`{name: value}` for each metric name in `names` (keys of `METRICS`), in that order."""
    return {name: METRICS[name](np.asarray(labels), np.asarray(predictions)) for name in names}
