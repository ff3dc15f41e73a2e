"""The statistics module's methods on small hand-checked inputs: deterministic and fast."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpiec.analysis.stats import (
    Estimate,
    analyse_table,
    fmt_diff,
    fmt_estimate,
    mean_sd,
    mean_t,
    median,
    median_level,
    paired,
    ratio_of_means,
    rounds_to_resolve,
    spearman,
    unpaired,
)
from scipy import stats as sp


def test_median_interval_is_the_order_statistic_one_with_its_exact_level():
    assert median_level(5, 1) == pytest.approx(1 - 2 / 32)  # the range of 5 runs: 93.75 %
    assert median_level(6, 1) == pytest.approx(1 - 2 / 64)
    e = median([10.0, 11.0, 9.5, 10.2, 30.0])
    assert (e.value, e.lo, e.hi, e.n) == (10.2, 9.5, 30.0, 5)
    assert not e.is_ci95 and e.level == pytest.approx(0.9375) and e.method == "range of 5 runs"
    e = median(range(12))  # k = 3: [x_(3), x_(10)], 96.1 %
    assert (e.lo, e.hi) == (2, 9) and e.is_ci95 and e.level == pytest.approx(1 - 2 * sp.binom.cdf(2, 12, 0.5))


def test_two_runs_give_a_range_never_a_95_percent_bracket():
    e = median([3.0, 1.0])
    assert e.level == pytest.approx(0.5) and not e.is_ci95
    assert fmt_estimate(e, ".1f") == "2.0 (range 1.0–3.0)"


def test_one_value_none_and_nothing():
    assert not median([3.0]).has_interval and fmt_estimate(median([3.0]), ".1f") == "3.0"
    assert math.isnan(median([]).value) and math.isnan(median([math.nan, None]).value)
    assert fmt_estimate(Estimate(math.nan), ".1f") == "—"


def test_identical_runs_are_one_deterministic_measurement():
    e = median([4.0] * 5)
    assert e.deterministic and not e.has_interval and fmt_estimate(e, ".1f") == "4.0 det."
    d = paired([5.0, 5.0, 5.0], [2.0, 2.0, 2.0])
    assert d.deterministic and d.significant and fmt_diff(d, ".1f") == "+3.0 det."
    assert fmt_diff(paired([2.0, 2.0], [2.0, 2.0]), ".1f") == "0.0"


def test_paired_difference_is_the_student_t_interval_of_the_round_differences():
    x, b = [10.0, 12.0, 11.0, 13.0], [9.0, 10.5, 10.2, 11.1]
    d = np.subtract(x, b)
    e = paired(x, b)
    half = sp.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert e.value == pytest.approx(d.mean()) and e.lo == pytest.approx(d.mean() - half)
    assert e.is_ci95 and e.significant and e.n == 4


def test_pairing_cancels_round_drift_that_an_unpaired_analysis_cannot():
    drift = np.array([0.0, 20.0, -15.0, 8.0, 30.0])
    base = 100 + drift + np.array([0.1, -0.2, 0.15, 0.0, -0.1])
    slow = 98 + drift + np.array([-0.1, 0.2, 0.0, 0.1, -0.15])
    assert paired(slow, base).significant
    assert not unpaired(slow, base).significant


def test_ratio_on_the_log_scale_and_missing_rounds_dropped():
    e = paired([90.0, 81.0, None], [100.0, 90.0, 50.0], "ratio")
    assert e.n == 2 and e.value == pytest.approx(0.9) and e.null == 1.0
    with pytest.raises(ValueError, match="one per round"):
        paired([1.0], [1.0, 2.0])


def test_a_difference_within_noise_prints_as_not_significant_and_one_round_has_no_interval():
    e = paired([101, 89, 108, 97, 104], [100, 90, 110, 95, 105])
    assert e.is_ci95 and not e.significant and fmt_diff(e, ".1f").startswith("n.s. [")
    one = paired([5.0], [3.0])
    assert not one.has_interval and not one.significant and fmt_diff(one, ".1f") == "+2.0 (n=1)"


def test_analyse_table_pairs_every_variant_with_the_baseline_by_round():
    table = {"none": [100.0, 110.0, 90.0], "a": [80.0, 88.5, 72.2], "b": [101.0, 109.0, None]}
    out = analyse_table(table, "none", "ratio")
    assert out["none"].vs_base is None and out["none"].level.value == 100.0
    assert out["a"].significant and out["a"].vs_base.value == pytest.approx(0.8, rel=0.01)
    assert out["b"].vs_base.n == 2


def test_welch_fieller_spearman_and_the_mean_of_trials():
    w = unpaired([1.0, 2.0, 3.0], [3.0, 4.0, 5.5])
    ref = sp.ttest_ind([1.0, 2.0, 3.0], [3.0, 4.0, 5.5], equal_var=False)
    assert (w.lo < 0 < w.hi) == (ref.pvalue >= 0.05)
    r = ratio_of_means([2.0, 4.1, 6.0, 8.2], [1.0, 2.0, 3.0, 4.0])
    assert r.value == pytest.approx(2.03) and r.lo < r.value < r.hi and r.significant
    assert not spearman(range(5), range(5)).has_interval  # too few points
    rho = spearman(range(12), [1, 3, 2, 4, 5, 7, 6, 8, 9, 11, 10, 12])
    assert rho.is_ci95 and rho.lo < rho.value < rho.hi < 1
    m = mean_t([1.0, 2.0, 3.0])
    assert m.value == 2.0 and m.hi - m.value == pytest.approx(sp.t.ppf(0.975, 2) / math.sqrt(3))
    mean, sd, n = mean_sd([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3) and abs(sd - 1.0) < 1e-12


def test_rounds_to_resolve_grows_as_the_effect_shrinks():
    big = paired([10.0, 12.0, 11.0], [9.0, 10.8, 10.3])
    small = paired([10.0, 12.0, 11.0], [9.8, 11.9, 10.95])
    nb, ns = rounds_to_resolve(big), rounds_to_resolve(small)
    assert nb is not None and ns is not None and nb < ns
    assert rounds_to_resolve(paired([1.0], [1.0])) is None
