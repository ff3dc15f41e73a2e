"""Evaluation metrics on held-out predictions: exact AUC, log loss, accuracy.

Owns the metric definitions the result files report. Invariants: ``auc`` is the exact
Mann–Whitney statistic with average ranks for ties (O(n log n)), equal to the
fraction of (positive, negative) pairs ordered correctly, ties counting 1/2; it is
``nan`` when a class is missing. All functions accept any real dtype and compute in
float64.
"""

from __future__ import annotations

import numpy as np

__all__ = ["auc", "logloss", "accuracy"]


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (exact, average ranks for tied scores)."""
    y = np.asarray(labels).reshape(-1) > 0.5
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.shape != s.shape:
        raise ValueError(f"auc: {y.size} labels but {s.size} scores")
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    # average rank (1-based) of each group of tied scores
    boundary = np.empty(ss.size, dtype=bool)
    boundary[0] = True
    np.not_equal(ss[1:], ss[:-1], out=boundary[1:])
    group = np.cumsum(boundary) - 1
    starts = np.flatnonzero(boundary)
    ends = np.append(starts[1:], ss.size)
    avg_rank = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = avg_rank[group]
    r_pos = float(ranks[y[order]].sum())
    return (r_pos - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def logloss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy, probabilities clipped to ``[eps, 1 - eps]``."""
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    p = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), eps, 1.0 - eps)
    if y.shape != p.shape:
        raise ValueError(f"logloss: {y.size} labels but {p.size} probabilities")
    if y.size == 0:
        return float("nan")
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def accuracy(labels: np.ndarray, probs: np.ndarray, threshold: float = 0.5) -> float:
    """Fraction of samples whose thresholded prediction (``p > threshold``) equals the label."""
    y = np.asarray(labels).reshape(-1) > 0.5
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    if y.shape != p.shape:
        raise ValueError(f"accuracy: {y.size} labels but {p.size} probabilities")
    if y.size == 0:
        return float("nan")
    return float(np.mean((p > threshold) == y))
