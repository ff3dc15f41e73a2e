"""The verdict rule: computed from the figure and the thresholds, noise never makes a claim reproduced:
only a real 95 % interval or a deterministic figure can make a claim reproduced."""

from __future__ import annotations

import math

import pytest

from mpiec.reproduce.claims import (
    CANNOT,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    VERDICTS,
    Claim,
    Measured,
    Rule,
    judge,
    measured,
    measured_from,
)

SPEEDUP = Claim("ecrec", "speedup", "recovers faster", "9.8x", "P", Rule("at_least", 5.0, 2.0), "x")
OVERHEAD = Claim("cpr", "ovh", "small overhead", "0.53-0.68 %", "P", Rule("at_most", 1.0, 3.0), " %")


CI = {"level": 0.95, "method": "paired t (ratio)"}  # a real 95 % interval


@pytest.mark.parametrize("m, verdict", [
    (Measured(9.0, 7.0, 11.0, 8, **CI), REPRODUCED),
    (Measured(9.0, 1.5, 11.0, 8, **CI), PARTLY),  # the interval reaches below 'partly': could be no effect
    (Measured(3.0, 2.5, 3.5, 8, **CI), PARTLY),
    (Measured(1.2, 1.0, 1.4, 8, **CI), NOT_REPRODUCED),
    (Measured(9.0, 7.0, 11.0, 3, level=0.75, method="range of 3 runs"), PARTLY),  # a range is no 95 %
    (Measured(9.0, 7.0, 11.0, 5), PARTLY),  # an interval of unknown level is not a 95 % one
    (Measured(6.0, n=1), PARTLY),  # one run, no interval: at most partly
    (Measured(6.0, n=3, deterministic=True), REPRODUCED),  # the same in every run: one measurement
    (Measured(1.0, n=3, deterministic=True), NOT_REPRODUCED),
])
def test_at_least(m, verdict):
    f = judge(SPEEDUP, m)
    assert f.verdict == verdict
    assert f.reason and (verdict == REPRODUCED or "not" in f.reason or "but" in f.reason)


@pytest.mark.parametrize("m, verdict", [
    (Measured(0.6, 0.4, 0.9, 8, **CI), REPRODUCED),
    (Measured(0.6, 0.4, 3.5, 8, **CI), PARTLY),
    (Measured(2.0, 1.5, 2.5, 8, **CI), PARTLY),
    (Measured(8.0, 7.0, 9.0, 8, **CI), NOT_REPRODUCED),
    (Measured(0.6, 0.4, 0.9, 4, level=0.875), PARTLY),
    (Measured(8.0, 7.0, 9.0, 4, level=0.875), NOT_REPRODUCED),  # the figure alone can still refute
])
def test_at_most(m, verdict):
    assert judge(OVERHEAD, m).verdict == verdict


def test_too_few_runs_for_a_95_interval_is_at_most_partly_and_says_why():
    f = judge(SPEEDUP, measured_from([9.0, 10.0, 11.0], how="three runs"))
    assert f.verdict == PARTLY
    assert "n = 3: too few runs for a 95 % interval" in f.reason and "75%" in f.reason
    f = judge(SPEEDUP, measured_from([9.0]))
    assert f.verdict == PARTLY and "one run" in f.reason
    # six runs give the order-statistic 95 % interval of the median: the claim can be reproduced
    f = judge(SPEEDUP, measured_from([8.0, 9.0, 9.5, 10.0, 10.5, 11.0]))
    assert f.measured.is_ci95 and f.verdict == REPRODUCED
    # the same figure in every run is deterministic: reproduced on its value
    f = judge(SPEEDUP, measured_from([6.0, 6.0, 6.0]))
    assert f.measured.deterministic and f.verdict == REPRODUCED and "deterministic" in f.reason


def test_a_limit_of_the_machine_is_its_own_verdict_and_keeps_the_bound():
    f = judge(OVERHEAD, Measured(0.2, 0.1, 0.3, 3), limit="ranks share 2 cores")
    assert f.verdict == CANNOT
    assert "ranks share 2 cores" in f.reason and "0.2" in f.reason


def test_an_unknown_figure_cannot_be_judged_and_says_why():
    f = judge(SPEEDUP, Measured(math.nan, how="every ckpt failure run crashed"))
    assert f.verdict == CANNOT and "crashed" in f.reason


def test_rules_and_tags_are_checked():
    with pytest.raises(ValueError):
        Rule("at_least", 1.0, 2.0)  # 'reproduced' laxer than 'partly'
    with pytest.raises(ValueError):
        Rule("at_most", 3.0, 1.0)
    with pytest.raises(ValueError):
        Claim("x", "k", "t", "1", "Q", Rule("at_least", 1, 0))
    assert set(VERDICTS) == {REPRODUCED, PARTLY, NOT_REPRODUCED, CANNOT}
    assert "≥ 5" in SPEEDUP.rule.text("x") and "≤ 1" in OVERHEAD.rule.text(" %")


def test_measured_carries_the_estimate_and_prints_what_its_bracket_is():
    from mpiec.analysis.stats import paired

    m = measured_from([1.0, 2.0, 3.0, 4.0, 5.0], how="five runs")
    assert m.value == 3.0 and (m.lo, m.hi) == (1.0, 5.0) and m.n == 5
    assert m.level == pytest.approx(0.9375) and not m.is_ci95 and "range" in m.method
    assert m.text("x") == "3x (range 1–5) (n=5)"
    six = measured_from([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert six.is_ci95 and six.text() == "3.5 [1, 6] (n=6)"
    assert measured_from([2.0, 2.0]).text(" %") == "2 % det. (n=2)"
    assert measured_from([]).text() == "—" and measured_from([7.0]).text() == "7 (n=1)"
    r = measured(paired([10.0, 10.5, 9.5], [1.0, 1.1, 0.9], "ratio"), "paired by round")
    assert r.value == pytest.approx(10.0, rel=0.01) and r.lo < r.value < r.hi and r.is_ci95
    assert r.method.startswith("paired t") and r.text("x").startswith("10x [")


def test_no_interval_is_computed_in_the_reproduction():
    """Issue 35: every interval and test comes from ``mpiec.analysis.stats``; the reproduction keeps no
    bootstrap, quantile or critical value of its own."""
    from pathlib import Path

    import mpiec.reproduce

    forbidden = ("quantile(", "percentile(", "default_rng", "random.", ".ppf(", "t_quantile", "1.96")
    for path in Path(mpiec.reproduce.__file__).parent.glob("*.py"):
        code = path.read_text(encoding="utf-8")
        assert not [w for w in forbidden if w in code], path.name
