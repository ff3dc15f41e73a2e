"""The verdict rule: computed from the figure and the thresholds, noise never makes a claim reproduced."""

from __future__ import annotations

import math

import pytest
from mpiec.analysis.stats import ratio_ci

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
    measured_from,
)

SPEEDUP = Claim("ecrec", "speedup", "recovers faster", "9.8x", "P", Rule("at_least", 5.0, 2.0), "x")
OVERHEAD = Claim("cpr", "ovh", "small overhead", "0.53-0.68 %", "P", Rule("at_most", 1.0, 3.0), " %")


@pytest.mark.parametrize("m, verdict", [
    (Measured(9.0, 7.0, 11.0, 5), REPRODUCED),
    (Measured(9.0, 1.5, 11.0, 5), PARTLY),  # the interval reaches below 'partly': could be no effect
    (Measured(3.0, 2.5, 3.5, 5), PARTLY),
    (Measured(1.2, 1.0, 1.4, 5), NOT_REPRODUCED),
    (Measured(6.0), REPRODUCED),  # one run, no interval: judged on the value
])
def test_at_least(m, verdict):
    f = judge(SPEEDUP, m)
    assert f.verdict == verdict
    assert f.reason and (verdict == REPRODUCED or "not" in f.reason or "but" in f.reason)


@pytest.mark.parametrize("m, verdict", [
    (Measured(0.6, 0.4, 0.9, 5), REPRODUCED),
    (Measured(0.6, 0.4, 3.5, 5), PARTLY),
    (Measured(2.0, 1.5, 2.5, 5), PARTLY),
    (Measured(8.0, 7.0, 9.0, 5), NOT_REPRODUCED),
])
def test_at_most(m, verdict):
    assert judge(OVERHEAD, m).verdict == verdict


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


def test_measured_from_values_and_ratio_interval():
    m = measured_from([1.0, 2.0, 3.0, 4.0, 5.0], how="five runs")
    assert m.value == 3.0 and m.lo <= 3.0 <= m.hi and m.n == 5 and "[" in m.text()
    assert measured_from([]).text() == "—"
    r = ratio_ci([10.0, 10.5, 9.5], [1.0, 1.1, 0.9])
    assert r.value == pytest.approx(10.0) and r.lo < 10.0 < r.hi
