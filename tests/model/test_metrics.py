"""metrics.py: exact AUC against brute force (with ties), logloss, accuracy."""

import math

import numpy as np
import pytest

from mpiec.model.metrics import accuracy, auc, logloss


def _brute_auc(y, s):
    pos, neg = s[y > 0.5], s[y <= 0.5]
    d = pos[:, None] - neg[None, :]
    return ((d > 0).sum() + 0.5 * (d == 0).sum()) / (pos.size * neg.size)


@pytest.mark.parametrize("seed", range(8))
def test_auc_matches_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(np.float32)
    y[0], y[1] = 0, 1
    s = rng.integers(0, 6, n).astype(np.float64)  # heavy ties
    if seed % 2:
        s = s + rng.random(n)  # no ties
    assert auc(y, s) == pytest.approx(_brute_auc(y, s), abs=1e-12)


def test_auc_edge_cases():
    assert auc([0, 1], [0.2, 0.8]) == 1.0
    assert auc([0, 1], [0.8, 0.2]) == 0.0
    assert auc([0, 1, 0, 1], [0.5] * 4) == 0.5
    assert math.isnan(auc([1, 1], [0.1, 0.2]))
    with pytest.raises(ValueError):
        auc([0, 1], [0.1])


def test_logloss_and_accuracy():
    y = np.array([1, 0, 1, 0], np.float32)
    p = np.array([0.9, 0.2, 0.4, 0.5], np.float32)
    ref = -np.mean(np.log([0.9, 0.8, 0.4, 0.5]))
    assert logloss(y, p) == pytest.approx(ref, rel=1e-6)
    assert logloss([1], [0.0]) == pytest.approx(-math.log(1e-7))  # clipped, finite
    assert accuracy(y, p) == 0.75  # 0.5 is not > 0.5: predicted 0 (right); 0.4 wrong
    assert accuracy(y, p, threshold=0.3) == 0.75  # now 0.5 is wrong
