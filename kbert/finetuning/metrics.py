"""GLUE's metrics in float64 through scikit-learn and scipy: accuracy, F1, Matthews correlation, Pearson, Spearman.

Invariant: every metric is computed from the whole evaluation set at once (never averaged over batches), in float64,
the way GLUE's scorer does; F1 and Matthews correlation score class 1 against the rest (MRPC's "equivalent", QQP's
"duplicate", CoLA's "acceptable"). Where a metric is undefined it is 0.0, never NaN or an error, so an epoch can
always be compared with the best so far: an empty evaluation set, no positive prediction (F1), a constant column of
the confusion matrix (Matthews), fewer than two points or a constant series (Pearson, Spearman).

Example:

>>> compute_metrics(("f1", "accuracy"), labels=np.array([1, 0, 1]), predictions=np.array([1, 1, 1]))
{'f1': 0.8, 'accuracy': 0.6666666666666666}
>>> pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0]))  # scipy would say NaN
0.0
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import scipy.stats
import sklearn.metrics

Metric = Callable[[np.ndarray, np.ndarray], float]


def _zero_when_empty(metric: Metric) -> Metric:
    """`metric`, giving 0.0 on an empty evaluation set (scikit-learn raises there)."""

    @functools.wraps(metric)
    def guarded(labels: np.ndarray, predictions: np.ndarray) -> float:
        return float(metric(labels, predictions)) if len(labels) else 0.0

    return guarded


@_zero_when_empty
def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    return sklearn.metrics.accuracy_score(labels, predictions)


@_zero_when_empty
def f1(labels: np.ndarray, predictions: np.ndarray) -> float:
    """F1 of class 1 against the rest, 2TP / (2TP + FP + FN)."""
    return sklearn.metrics.f1_score(labels == 1, predictions == 1, zero_division=0.0)


@_zero_when_empty
def matthews_corr(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Binary Matthews correlation of class 1 against the rest (scikit-learn's own degenerate value is 0.0)."""
    with warnings.catch_warnings():
        # One class throughout is a degenerate case the invariant scores 0.0, not a mistake worth a warning.
        warnings.filterwarnings("ignore", "A single label was found", UserWarning)
        # Binarised, so a multi-class task keeps the binary score rather than scikit-learn's multi-class one.
        return sklearn.metrics.matthews_corrcoef(labels == 1, predictions == 1)


def _correlation(statistic: Callable, labels: np.ndarray, predictions: np.ndarray) -> float:
    """`statistic(labels, predictions).statistic` in float64, or 0.0 where it is undefined (scipy: NaN or an error)."""
    labels, predictions = np.asarray(labels, np.float64), np.asarray(predictions, np.float64)
    if len(labels) < 2 or np.ptp(labels) == 0 or np.ptp(predictions) == 0:
        return 0.0
    return float(statistic(labels, predictions).statistic)


def pearson(labels: np.ndarray, predictions: np.ndarray) -> float:
    return _correlation(scipy.stats.pearsonr, labels, predictions)


def spearman(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Pearson correlation of the ranks, ties given their average rank."""
    return _correlation(scipy.stats.spearmanr, labels, predictions)


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_corr": matthews_corr,
    "pearson": pearson,
    "spearman": spearman,
}


def compute_metrics(names: Sequence[str], labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """`{name: value}` for each metric name in `names` (keys of `METRICS`), in that order."""
    return {name: METRICS[name](np.asarray(labels), np.asarray(predictions)) for name in names}
