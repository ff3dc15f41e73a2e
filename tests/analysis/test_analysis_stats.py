"""Medians with intervals, overheads between groups, significance: deterministic and fast."""

from __future__ import annotations

import math

import numpy as np
from mpiec.analysis.stats import Estimate, diff_ci, fmt_diff, fmt_estimate, mean_sd, median_ci, overhead_ci


def test_median_interval_contains_the_median_and_is_reproducible():
    x = [10.0, 11.0, 9.5, 10.2, 30.0]
    e = median_ci(x)
    assert e.value == 10.2 and e.n == 5 and e.lo <= 10.2 <= e.hi
    assert e == median_ci(x)  # fixed seed
    assert 9.5 <= e.lo and e.hi <= 30.0


def test_one_value_has_no_interval_and_nothing_gives_nan():
    assert not median_ci([3.0]).has_interval and median_ci([3.0]).value == 3.0
    assert math.isnan(median_ci([]).value) and math.isnan(median_ci([math.nan, None]).value)
    assert fmt_estimate(median_ci([3.0]), ".1f") == "3.0" and fmt_estimate(Estimate(math.nan), ".1f") == "—"


def test_overhead_of_a_clearly_slower_group_is_significant():
    rng = np.random.default_rng(0)
    base = 100 + rng.normal(0, 1, 5)
    slow = 80 + rng.normal(0, 1, 5)
    e = overhead_ci(slow, base)
    assert 15 < e.value < 25 and e.significant and e.lo > 0
    assert fmt_diff(e, ".1f").startswith("+") and "[" in fmt_diff(e, ".1f")


def test_a_difference_within_noise_is_printed_as_not_significant():
    base = [100, 90, 110, 95, 105]
    same = [101, 89, 108, 97, 104]
    e = overhead_ci(same, base)
    assert e.has_interval and not e.significant and e.lo < 0 < e.hi
    text = fmt_diff(e, ".1f")
    assert text.startswith("n.s. [") and not text.startswith(("+", "-"))


def test_diff_and_mean_sd():
    e = diff_ci([5, 6, 7], [1, 2, 3])
    assert e.value == 4 and e.significant
    mean, sd, n = mean_sd([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3) and abs(sd - 1.0) < 1e-12
    assert math.isnan(mean_sd([1.0])[1])
