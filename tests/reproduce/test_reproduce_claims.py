"""The verdict rule: computed from the figure and the thresholds, noise never makes a claim reproduced:
only a real 95 % interval or a deterministic figure can make a claim reproduced."""

from __future__ import annotations

import math

import pytest
from mpiec.analysis.stats import Estimate

from mpiec.reproduce.claims import (
    CALIBRATED,
    CANNOT,
    DEPENDS,
    INCONCLUSIVE,
    NOT_JUDGED,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    VERDICTS,
    Assumption,
    Band,
    Claim,
    Measured,
    Rule,
    check,
    judge,
    measured,
    measured_from,
)
from mpiec.reproduce.experiment import Gate, Realized

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
    with pytest.raises(ValueError):
        Claim("x", "k", "t", "1", "M", Rule("at_least", 1, 0))  # M (mpiec) only for a check
    with pytest.raises(ValueError):
        Rule("at_least", 1.0, 0.5, null=0.6)  # the no-effect figure past 'partly'
    assert check("x", "k", "t", "1", Rule("at_least", 1, 0)).check
    assert set(VERDICTS) == {REPRODUCED, PARTLY, INCONCLUSIVE, NOT_REPRODUCED, DEPENDS, CALIBRATED, CANNOT,
                             NOT_JUDGED}
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


# -- the second edition's verdicts (issue 37) ----------------------------------------------------------
CHANCE = Claim("cnr", "order", "ordered as Fig. 14", "ordered", "S",
               Rule("at_least", 0.8, 0.6, why="0.5 is chance", null=0.5))


@pytest.mark.parametrize("m, verdict", [
    (Measured(0.63, 0.55, 0.7, 20, **CI), PARTLY),  # past partly, the interval clear of chance
    (Measured(0.63, 0.5, 0.7, 20, **CI), INCONCLUSIVE),  # the interval reaches chance
    (Measured(0.71, 0.08, 1.0, 12, **CI), INCONCLUSIVE),
    (Measured(0.9, 0.45, 0.99, 20, **CI), INCONCLUSIVE),  # past 'reproduced' but the interval holds chance
    (Measured(0.9, 0.85, 0.95, 20, **CI), REPRODUCED),
    (Measured(0.7, n=3, level=0.75, lo=0.6, hi=0.8), INCONCLUSIVE),  # no 95 % interval: cannot exclude chance
    (Measured(0.7, n=4, deterministic=True), PARTLY),  # deterministic: the figure itself is past chance
    (Measured(0.55, 0.52, 0.58, 20, **CI), NOT_REPRODUCED),  # not even past 'partly'
])
def test_partly_needs_the_interval_clear_of_the_null(m, verdict):
    f = judge(CHANCE, m)
    assert f.verdict == verdict, f.reason
    if verdict == INCONCLUSIVE:
        assert "no effect" in f.reason


ON_PAR = Claim("cpr", "quality", "on par with full recovery", "on par", "P",
               Rule("at_most", 0.001, 0.002, why="0.002 is the margin", equivalence=True))


@pytest.mark.parametrize("m, verdict", [
    (Measured(0.0005, -0.0005, 0.0015, 8, **CI), REPRODUCED),  # the interval inside the margin
    (Measured(0.0005, -0.001, 0.004, 8, **CI), INCONCLUSIVE),  # could be 0.004 worse: not shown on par
    (Measured(0.0015, 0.001, 0.0019, 8, **CI), PARTLY),
    (Measured(0.0005, n=1), INCONCLUSIVE),  # one run: absence of evidence is not evidence of parity
    (Measured(0.0005, 0.0, 0.001, 3, level=0.75, method="range of 3 runs"), INCONCLUSIVE),
    (Measured(0.0, n=3, deterministic=True), REPRODUCED),
    (Measured(0.005, 0.004, 0.006, 8, **CI), NOT_REPRODUCED),
])
def test_an_on_par_claim_needs_its_interval_inside_the_margin(m, verdict):
    f = judge(ON_PAR, m)
    assert f.verdict == verdict, f.reason
    if verdict == INCONCLUSIVE:
        assert "margin" in f.reason
    assert "equivalence margin 0.002" in ON_PAR.rule.text()


def test_an_equivalence_rule_has_no_null():
    with pytest.raises(ValueError, match="margin"):
        Rule("at_most", 0.001, 0.002, null=0.01, equivalence=True)


def test_without_a_null_the_rule_is_the_first_editions():
    """A claim with no no-effect figure keeps the old branches (a noisy figure w/o interval: partly)."""
    assert judge(SPEEDUP, Measured(6.0, n=1)).verdict == PARTLY
    assert SPEEDUP.rule.null is None and "no effect" not in SPEEDUP.rule.short("x")
    assert "no effect: 0.5" in CHANCE.rule.short() and "Why: 0.5 is chance" in CHANCE.rule.text()


def test_calibrated_comes_first_and_keeps_the_figure():
    f = judge(OVERHEAD, Measured(0.6, 0.4, 0.9, 8, **CI), calibrated="SAVE_OVER_MTBF chosen for 8.4 %",
              limit="a fleet statistic", gate=Gate(disturbed="busy"))
    assert f.verdict == CALIBRATED and f.shown == CALIBRATED
    assert "SAVE_OVER_MTBF" in f.reason and "0.6 %" in f.reason


def test_a_gate_stops_the_verdict_and_says_why():
    good = Measured(9.0, 7.0, 11.0, 8, **CI)
    off = Realized.factor("save time / MTBF", 0.0035, 0.12, 2.0, "Young's optimum is flat within 2x")
    f = judge(SPEEDUP, good, gate=Gate((off,)))
    assert f.verdict == NOT_JUDGED and f.shown.startswith("not judged: regime not realized (save time / MTBF")
    assert "flat within 2x" in f.shown and "9x" in f.reason
    f = judge(SPEEDUP, good, gate=Gate((off,), disturbed="other processes took 40 % of the CPU"))
    assert f.shown == "not judged: disturbed" and "40 %" in f.reason
    ok = Realized.factor("save time / MTBF", 0.0035, 0.004, 2.0, "why")
    assert ok.ok and not Realized("x", 1.0, math.nan, 0.5, 2.0, "why").ok
    f = judge(SPEEDUP, good, gate=Gate((ok,)) + Gate())
    assert f.verdict == REPRODUCED and f.gate.checks == (ok,)
    assert judge(SPEEDUP, good, limit="fleet").verdict == CANNOT


def test_disturbance_reads_the_runs_cpu_share():
    from types import SimpleNamespace

    from mpiec.reproduce.experiment import disturbance

    runs = [SimpleNamespace(summary={"other_cpu_share": x}) for x in (0.05, 0.3, 0.4)]
    assert "30 %" in disturbance(runs)
    assert disturbance(runs[:1]) == "" and disturbance([SimpleNamespace(summary={})]) == ""
    assert Gate.of((), runs).disturbed and not Gate.of((), runs[:1]).disturbed


STORE = Assumption("bw", "storage bandwidth", 80.0, 40.0, 160.0, "S3 single stream 40-160 MB/s", " MB/s")


def test_a_band_that_changes_the_verdict_gives_depends_and_where():
    """Reduction = 1 − ecrm / ckpt where ckpt's overhead scales as 1 / bandwidth."""
    def at(bw: float) -> Measured:
        ckpt = 14.3 * 80.0 / bw
        return Measured(100 * (1 - 5.0 / ckpt), n=3, deterministic=True)

    f = judge(Claim("ecrec", "ovh", "lower overhead", "66 %", "P", Rule("at_least", 33.0, 0.0)),
              at(80.0), bands=[Band(STORE, at)])
    assert f.verdict == DEPENDS and f.shown.startswith("depends on storage bandwidth: reproduced below ")
    assert f.shown.endswith("partly above")
    x = float(f.shown.split("below ")[1].split(" MB/s")[0])
    assert 100 * (1 - 5.0 / (14.3 * 80 / x)) == pytest.approx(33.0, abs=0.1)  # where the figure meets 33 %
    assert {e[0] for e in f.ends} == {"bw"} and [e[1] for e in f.ends] == [40.0, 160.0]


def test_a_band_that_holds_keeps_the_verdict_and_says_so():
    f = judge(SPEEDUP, Measured(9.0, n=3, deterministic=True),
              bands=[Band(STORE, lambda bw: Measured(9.0 * bw / 80.0 + 3, n=3, deterministic=True))])
    assert f.verdict == REPRODUCED and f.label == "" and "Holds across the band" in f.reason


def test_a_band_of_two_runs_only_reports_its_ends():
    runs = {40.0: Measured(1.0, n=2, deterministic=True), 160.0: Measured(9.0, n=2, deterministic=True)}
    f = judge(SPEEDUP, Measured(6.0, n=2, deterministic=True),
              bands=[Band(STORE, runs.__getitem__, exact_ends_only=True)])
    assert f.verdict == DEPENDS
    assert f.shown == ("depends on storage bandwidth: not reproduced at 40 MB/s, reproduced at 80 MB/s, "
                       "reproduced at 160 MB/s")
    with pytest.raises(ValueError):
        Assumption("x", "x", 1.0, 2.0, 3.0, "s")


def test_not_reproduced_needs_its_interval_short_of_partly_too():
    """Issue 37: the quick and the full reproduction flipped between 'not reproduced' and 'partly' or
    'inconclusive' on figures near a threshold. A figure short of 'partly' is 'not reproduced' only if
    its evidence says so: deterministic, a 95 % interval short of 'partly', or (no interval) every
    run short of it; otherwise the smaller effect is not ruled out: inconclusive."""
    rule = Rule("at_least", 0.5, 0.2, why="test", null=0.0)
    claim = Claim("p", "rho", "a trend", "ρ ≥ 0.5", "S", rule)
    ci = Estimate(0.12, -0.28, 0.48, 27, 0.95, "Fisher z")
    assert judge(claim, measured(ci)).verdict == INCONCLUSIVE  # reaches past 0.2
    short = Estimate(0.0, -0.15, 0.15, 60, 0.95, "Fisher z")
    assert judge(claim, measured(short)).verdict == NOT_REPRODUCED
    assert judge(claim, Measured(0.1, n=3, deterministic=True)).verdict == NOT_REPRODUCED
    spread = Estimate(0.1, 0.05, 0.3, 3, 0.75, "range")  # one run past 0.2
    assert judge(claim, measured(spread)).verdict == INCONCLUSIVE
    below = Estimate(0.1, 0.05, 0.15, 3, 0.75, "range")  # every run short of 0.2
    assert judge(claim, measured(below)).verdict == NOT_REPRODUCED
    few = Measured(0.1, n=6, method="6 points: too few for an interval")
    assert judge(claim, few).verdict == INCONCLUSIVE
