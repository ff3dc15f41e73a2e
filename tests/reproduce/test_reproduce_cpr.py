"""``mpiec reproduce cpr``: the findings logic on fake result objects (no MPI, milliseconds), the plan
of each scale, and one smoke run of the paper's experiments under mpiexec."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mpiec.reproduce import cpr
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
)
from mpiec.reproduce.experiment import SCALES, Experiment, Machine, RunSet, run_experiment
from mpiec.results import CHECKPOINTS_DTYPE, EVENTS_DTYPE, TIMELINE_DTYPE

KEYS = [c.key for c in cpr.CLAIMS]
TWO_CORES = Machine(2, "test cpu", 8.0, 0.0, "3.11", "host")
QUICK = cpr.plan_of(SCALES["quick"])
REF_AUC = 0.75


@dataclass
class Fake:
    """What the findings read of a ``RunResult``: strategy, config, summary, timeline, checkpoints, events."""

    strategy: str
    config: dict[str, Any]
    summary: dict[str, Any]
    timeline: np.ndarray
    checkpoints: np.ndarray = field(default_factory=lambda: np.zeros(0, CHECKPOINTS_DTYPE))
    events: np.ndarray = field(default_factory=lambda: np.zeros(0, EVENTS_DTYPE))
    name: str = "fake"


def fake(strategy: str, *, overhead_pct: float = 0.0, loss: float = 0.0, pls: float = 0.0,
         failure: bool = True, nbytes: float = 1e6, resched_s: float = 0.1, wall: float = 10.0,
         checkpoints: list[tuple[str, float, float]] | None = None, target: float | None = None,
         other_cpu: float = 0.0) -> Fake:
    """A run whose checkpoint-related overhead is ``overhead_pct`` (after ``resched_s`` of rescheduling
    over one recovery), whose final AUC is ``REF_AUC - loss``."""
    tl = np.zeros(100, TIMELINE_DTYPE)
    tl["step"] = np.arange(100)
    tl["dt"] = wall / 100
    tl["t_end"] = np.cumsum(tl["dt"])
    related = overhead_pct / 100 * (wall - resched_s)
    rec = {"detection_s": resched_s / 2, "shrink_agree_s": resched_s / 2, "plan_s": 0.0, "replace_s": 0.0,
           "restore_s": 0.0}
    summary = {"final_auc": REF_AUC - loss, "throughput_sps": 1000.0, "lost": False, "pls": pls,
               "checkpoint_bytes": nbytes, "recoveries": 1 if failure else 0,
               "recovery_breakdown": json.dumps([rec] if failure else []),
               "checkpoint_critical_s": related / 2, "stall_time_lost_s": 0.0,
               "time_lost_s": related / 2 + (resched_s if failure else 0),
               "unproductive_s": related + (resched_s if failure else 0), "other_cpu_share": other_cpu}
    ck = np.zeros(len(checkpoints or []), CHECKPOINTS_DTYPE)
    for i, (kind, b, s) in enumerate(checkpoints or []):
        ck[i]["step"], ck[i]["kind"], ck[i]["bytes"] = 10 * i, kind, b
        ck[i]["seconds"] = ck[i]["stall_s"] = s
    kill = ["server:1@step=50"] if failure else []
    config: dict[str, Any] = {"failures": {"kill": kill, "mtbf_steps": 50.0}}
    if target is not None:  # a sweep run: its per-server target (the plan's PLS / servers per event)
        config["strategy"] = {"name": "cpr", "params": {"target_pls": target / QUICK.per_event}}
    return Fake(strategy, config, summary, tl, ck)


def runset(key: str, results: list[Fake]) -> RunSet:
    exp = Experiment(key, key, tuple(sorted({r.strategy for r in results})) or ("none",))
    return RunSet(exp, Path(key), results=list(results))


def baseline() -> RunSet:
    return runset("baseline", [fake("none", failure=False, resched_s=0.0)])


def rounds(ov: dict[str, list[float]], loss: dict[str, list[float]] | None = None,
           nbytes: dict[str, float] | None = None) -> dict[str, RunSet]:
    """Recovery rounds with the given overheads (and AUC losses) per strategy."""
    n = len(next(iter(ov.values())))
    out = {}
    for i in range(n):
        rs = [fake(s, overhead_pct=v[i], loss=(loss or {}).get(s, [0.0] * n)[i], pls=0.02 + 0.01 * i,
                   nbytes=(nbytes or {}).get(s, 1e6),
                   checkpoints=[("full", 7e5, 0.012)] + ([("mfu", 2e5, 0.02)] if s != "ckpt" else []))
              for s, v in ov.items()]
        out[f"recovery-r{i}"] = runset(f"recovery-r{i}", rs)
    return out


def verdicts(findings) -> dict[str, str]:
    assert [f.claim.key for f in findings] == KEYS
    for f in findings:
        assert f.verdict in VERDICTS
        assert f.verdict == REPRODUCED or f.reason, f.claim.key
        for v in f.extra.values():
            assert isinstance(v, str | int | float | bool)
    return {f.claim.key: f.verdict for f in findings}


def findings(runs: dict[str, RunSet]) -> dict[str, str]:
    return verdicts(cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES))


# -- every claim, whatever ran -------------------------------------------------------------------------
def test_every_claim_gets_a_finding_without_any_run():
    assert findings({}) == {k: DESIGN.get(k, CANNOT) for k in KEYS}


def test_every_claim_gets_a_finding_with_the_baseline_only():
    assert findings({"baseline": baseline()}) == {k: DESIGN.get(k, CANNOT) for k in KEYS}


# -- the verdicts follow the figures -------------------------------------------------------------------
# six rounds: a level (a median over the rounds) has its 95 % interval from 6 runs
# ckpt near Young's prediction at the fakes' save cost (0.012 s over 50 steps of 0.1 s: sqrt(2 · 0.24 %) =
# 6.93 %); MFU/SSU far enough below it that the reduction holds across the save cost's band
PAPER_LIKE = {"ckpt": [6.5, 7.0, 7.5, 6.8, 7.2, 7.0], "cpr": [0.9, 1.0, 1.1, 0.95, 1.05, 1.0],
              "cpr-mfu": [0.3, 0.3, 0.35, 0.32, 0.3, 0.35], "cpr-ssu": [0.25, 0.3, 0.3, 0.28, 0.25, 0.3]}
#: What the design gives whatever the figures: the fleet's statistics, and the two calibrated figures.
DESIGN = {"full-recovery-average": CANNOT, "full-recovery-p90": CANNOT, "full-recovery-overhead": CALIBRATED,
          "partial-removes": CALIBRATED}
PAPER_LOSS = {"ckpt": [0.0] * 6, "cpr": [0.0008, 0.0007, 0.0009, 0.00075, 0.00085, 0.0008],
              "cpr-mfu": [0.0003, 0.0002, 0.0003, 0.00025, 0.0003, 0.0002],
              "cpr-ssu": [0.0004, 0.0003, 0.0002, 0.0003, 0.00035, 0.00025]}


def test_figures_like_the_papers_reproduce_every_claim():
    runs = {"baseline": baseline(), **rounds(PAPER_LIKE, PAPER_LOSS)}
    # a sweep wide enough for ρ's 95 % interval to clear 0.5 (13 points with the rounds' 6)
    sweep = [fake("cpr", pls=p, loss=p / 20) for p in (0.01, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6)]
    runs["pls-sweep"] = runset("pls-sweep", sweep)
    got = findings(runs)
    assert got == {k: DESIGN.get(k, REPRODUCED) for k in KEYS}


def test_three_rounds_are_too_few_for_a_level_to_be_reproduced():
    """The same figures over 3 rounds: the medians (full recovery's overhead, partial recovery's AUC
    loss) have only the range of 3 runs, which holds the median with 75 %: at most partly, and an
    "on par" claim (the AUC loss within its margin) inconclusive; the paired comparisons (the shares
    removed) have their Student-t interval from 2 rounds."""
    three = {k: v[:3] for k, v in PAPER_LIKE.items()}
    runs = {"baseline": baseline(), **rounds(three, {k: v[:3] for k, v in PAPER_LOSS.items()})}
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    for key, verdict in (("full-recovery-young", PARTLY), ("partial-accuracy", INCONCLUSIVE)):
        assert f[key].verdict == verdict and "n = 3: too few runs for a 95 % interval" in f[key].reason
        assert "(range" in f[key].measured.text()
    assert f["mfu-overhead"].verdict == REPRODUCED and f["mfu-overhead"].measured.is_ci95
    assert "paired" in f["mfu-overhead"].measured.how


def test_figures_against_the_paper_are_not_reproduced():
    ov = {"ckpt": [60.0, 61.0, 59.0], "cpr": [60.0, 61.0, 59.0], "cpr-mfu": [70.0, 72.0, 71.0],
          "cpr-ssu": [65.0, 66.0, 64.0]}
    loss = {"ckpt": [0.0] * 3, "cpr": [0.01, 0.011, 0.012], "cpr-mfu": [0.02, 0.021, 0.022],
            "cpr-ssu": [0.015, 0.016, 0.017]}
    runs = {"baseline": baseline(), **rounds(ov, loss)}
    # the loss falls as the PLS grows (one pair swapped: ρ near -0.9, not -1, so it has an interval):
    # 'not reproduced' needs the interval short of 'partly' too (10 points: the rounds' 3 and 7 here)
    sweep = (0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.5)
    runs["pls-sweep"] = runset("pls-sweep", [fake("cpr", pls=p, loss=0.01 - i / 1000)
                                             for i, p in enumerate(sweep)])
    got = findings(runs)
    assert {k: v for k, v in got.items() if k not in DESIGN} == {k: NOT_REPRODUCED for k in KEYS
                                                                 if k not in DESIGN}
    assert {k: got[k] for k in DESIGN} == DESIGN


def test_full_recovery_is_judged_against_young_at_the_realized_save_cost():
    """Issue 37: the 8.2–8.5 % follows from the calibrated save cost (not a test); what is judged is the
    measured overhead over Young's prediction at the save cost the run realized (6.93 % in the fakes)."""
    young = 100 * math.sqrt(2 * 0.012 / (50 * 0.1))
    for ov, verdict in (([6.0, 7.0, 8.0, 7.0, 6.5, 7.5], REPRODUCED),
                        ([9.0, 9.5, 10.0, 9.2, 9.8, 9.5], PARTLY),  # 1.37x the prediction
                        ([20.0, 22.0, 24.0, 21.0, 23.0, 22.0], NOT_REPRODUCED),  # 13 % would once pass
                        ([6.0, 7.0, 8.0], PARTLY)):  # 3 rounds: the range of 3 runs, no 95 % interval
        runs = {"baseline": baseline(), **rounds({"ckpt": ov})}
        f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
        assert f["full-recovery-young"].verdict == verdict, (ov, f["full-recovery-young"].reason)
        assert f["full-recovery-young"].measured.value == pytest.approx(np.median(ov) / young)
        assert "Young's" in f["full-recovery-young"].reason
        cal = f["full-recovery-overhead"]
        assert cal.verdict == CALIBRATED and "SAVE_OVER_MTBF" in cal.reason and "rescheduling" in cal.reason
        assert cal.measured.value == pytest.approx(np.median(ov))  # the judged figure itself, in %
        assert f["full-recovery-average"].verdict == CANNOT and "fleet" in f["full-recovery-average"].reason


def test_a_run_that_did_not_realize_its_save_cost_is_not_judged():
    """Issue 37: at smoke scale on a loaded host the realized save cost was 36x the assumed one."""
    runs = {"baseline": baseline(), **rounds(PAPER_LIKE, PAPER_LOSS)}
    runs["pls-sweep"] = runset("pls-sweep", [fake("cpr", pls=0.01, loss=0.0001)])
    for rs in runs.values():
        for r in rs.results:
            if r.strategy == "ckpt":
                r.checkpoints["seconds"] *= 36
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    judged = [k for k in KEYS if k not in DESIGN]
    assert {f[k].verdict for k in judged} == {NOT_JUDGED}
    assert f["mfu-overhead"].shown.startswith("not judged: regime not realized (save time / MTBF")
    assert {f[k].verdict for k in DESIGN} == set(DESIGN.values())  # the design's verdicts come first


def test_a_disturbed_bench_is_not_judged():
    runs = {"baseline": baseline(), **rounds(PAPER_LIKE, PAPER_LOSS)}
    for rs in runs.values():
        for r in rs.results:
            r.summary["other_cpu_share"] = 0.4
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    assert f["mfu-overhead"].shown == "not judged: disturbed" and "40 %" in f["mfu-overhead"].reason


def test_mfu_overhead_is_judged_over_the_save_costs_band():
    """A reduction that holds at the assumed save cost but not at the band's ends (at the low end ckpt's
    overhead shrinks as the square root and the variant's fixed costs do not; at the high end the
    variant's stall grows linearly, ckpt's as the square root) depends on it."""
    ov = {"ckpt": PAPER_LIKE["ckpt"], "cpr-mfu": [0.6, 0.6, 0.65, 0.62, 0.6, 0.63]}
    f = {x.claim.key: x for x in cpr.PAPER.findings({"baseline": baseline(), **rounds(ov)}, SCALES["quick"],
                                                     TWO_CORES)}["mfu-overhead"]
    assert f.verdict == DEPENDS and {e[0] for e in f.ends} == {"save-over-mtbf"}
    # not monotonic over the band: the three points are listed
    assert f.shown == "depends on save time / MTBF: partly at 0.1 %, reproduced at 0.35 %, partly at 1 %"


def test_partial_accuracy_is_judged_at_the_pls_bands_ends_from_the_sweep():
    runs = {"baseline": baseline(), **rounds(PAPER_LIKE, PAPER_LOSS)}
    runs["pls-sweep"] = runset("pls-sweep", [fake("cpr", pls=0.01, loss=0.0002, target=0.01),
                                             fake("cpr", pls=0.1, loss=0.003, target=0.1)])
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}["partial-accuracy"]
    assert f.verdict == DEPENDS
    # the sweep has one run at each end: no interval, so neither "on par" (at 0.01) nor its opposite
    # (at 0.1, one run past the margin) is shown there
    assert f.shown == ("depends on PLS target: inconclusive at 0.01, reproduced at 0.05, "
                       "inconclusive at 0.1")


def test_pls_vs_loss_needs_its_interval_clear_of_zero():
    runs = {"baseline": baseline(), **rounds({"cpr": [1.0] * 3}, {"cpr": [0.0004, 0.0006, 0.0005]})}
    sweep = [(0.01, 0.003), (0.1, 0.0001), (0.15, 0.004), (0.2, 0.0002), (0.3, 0.006), (0.4, 0.009),
             (0.6, 0.012)]  # ρ = 0.56 over 10 points, its interval reaching below 0
    runs["pls-sweep"] = runset("pls-sweep", [fake("cpr", pls=p, loss=x) for p, x in sweep])
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}["pls-vs-loss"]
    assert f.measured.is_ci95 and f.measured.value >= 0.5 and f.measured.lo <= 0
    assert f.verdict == INCONCLUSIVE and "no effect" in f.reason


def test_the_share_partial_recovery_removes_is_calibrated_and_shown():
    runs = {"baseline": baseline(), **rounds({"ckpt": [10.0, 10.0, 10.0], "cpr": [2.0, 2.2, 1.8]})}
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    assert f["partial-removes"].verdict == CALIBRATED and "TARGET_PLS" in f["partial-removes"].reason
    # 1 − the geometric mean of the per-round ratios (paired by round), still shown
    gm = math.exp(np.mean(np.log([0.2, 0.22, 0.18])))
    assert f["partial-removes"].measured.value == pytest.approx(100 * (1 - gm))
    assert f["partial-removes"].measured.is_ci95


def test_mfu_accuracy_cannot_be_measured_when_plain_cpr_lost_nothing():
    ov = {"ckpt": [10.0] * 3, "cpr": [1.0] * 3, "cpr-mfu": [1.0] * 3}
    loss = {"ckpt": [0.0] * 3, "cpr": [0.0, 0.00005, -0.0001], "cpr-mfu": [0.001] * 3}
    got = findings({"baseline": baseline(), **rounds(ov, loss)})
    assert got["mfu-accuracy"] == CANNOT
    assert got["ssu-accuracy"] == CANNOT  # no cpr-ssu runs at all


def test_a_loss_below_the_perturbations_noise_cannot_tell_the_variants_apart():
    ov = {"ckpt": [10.0] * 3, "cpr": [1.0] * 3, "cpr-mfu": [1.0] * 3, "cpr-ssu": [1.0] * 3}
    loss = {"ckpt": [0.0] * 3, "cpr": [0.0003] * 3, "cpr-mfu": [0.0001] * 3, "cpr-ssu": [0.0005] * 3}
    runs = {"baseline": baseline(), **rounds(ov, loss)}
    sweep = [fake("cpr", pls=0.003, loss=0.0006), fake("cpr", pls=0.3, loss=0.004)]
    runs["pls-sweep"] = runset("pls-sweep", sweep)
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    for key in ("mfu-accuracy", "ssu-accuracy"):
        assert f[key].verdict == CANNOT and "noise" in f[key].reason
        assert f[key].measured.known  # the figure is still shown


def test_mfu_accuracy_shows_the_bytes_ratio():
    ov = {"ckpt": [10.0] * 3, "cpr": [1.0] * 3, "cpr-mfu": [1.0] * 3}
    loss = {"ckpt": [0.0] * 3, "cpr": [0.002] * 3, "cpr-mfu": [0.001] * 3}
    runs = {"baseline": baseline(), **rounds(ov, loss, {"cpr": 2e6, "cpr-mfu": 1.8e6})}
    f = {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    assert f["mfu-accuracy"].measured.value == pytest.approx(50.0)
    assert f["mfu-accuracy"].extra["bytes_ratio"] == pytest.approx(0.9)
    assert "cpr-mfu wrote 0.90" in f["mfu-accuracy"].reason


def test_lost_runs_are_left_out():
    runs = {"baseline": baseline(), **rounds({"ckpt": [10.0] * 3, "cpr": [1.0] * 3})}
    for rs in runs.values():
        for r in rs.results:
            if r.strategy == "cpr":
                r.summary["lost"] = True
    got = findings(runs)
    assert got["partial-accuracy"] == CANNOT and got["pls-vs-loss"] == CANNOT


# -- the pieces --------------------------------------------------------------------------------------
def test_overhead_takes_rescheduling_out():
    r = fake("ckpt", overhead_pct=10.0, resched_s=0.5)
    o = cpr.overhead(r)
    assert o["pct"] == pytest.approx(10.0)
    assert o["rescheduling"] == pytest.approx(0.5)
    assert o["wall"] == pytest.approx(10.0)


def test_the_storage_model_bound_replaces_the_measured_stall():
    r = fake("ckpt", overhead_pct=10.0, resched_s=0.0, checkpoints=[("full", 7e5, 0.05)] * 4)
    r.checkpoints["rows"] = 8000
    assert math.isnan(cpr.model_stall(r))  # no modelled bandwidth in the config
    r.config.update({"storage": {"write_mb_s": 44.0}, "layout": {"servers": 8}, "model": {"dim": 8},
                     "training": {"optimizer": "adagrad"}})
    # 4 checkpoints of 1000 rows a server, 44 B a row, at 44 MB/s: 1 ms each
    assert cpr.model_stall(r) == pytest.approx(0.004)
    o = cpr.overhead(r)
    assert o["pct_model"] < o["pct"]


def test_pls_against_the_loss_has_an_interval_only_from_ten_points():
    """Spearman's ρ from ``analysis.stats``: its Fisher-z interval needs 10 points; fewer show ρ alone
    (labelled), which cannot make the claim reproduced."""
    def finding(sweep: list[tuple[float, float]]) -> Any:
        runs = {"baseline": baseline(), **rounds({"cpr": [1.0] * 3}, {"cpr": [0.0004, 0.0006, 0.0005]})}
        runs["pls-sweep"] = runset("pls-sweep", [fake("cpr", pls=p, loss=x) for p, x in sweep])
        return {x.claim.key: x for x in cpr.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}["pls-vs-loss"]

    few = finding([(0.1, 0.002), (0.5, 0.01)])  # 5 points, in rank order but one pair
    assert few.measured.n == 5 and not few.measured.has_interval and "too few" in few.measured.method
    assert few.verdict == INCONCLUSIVE and "n = 5: no 95 % interval" in few.reason
    ten = finding([(0.01, 0.0001), (0.1, 0.002), (0.15, 0.004), (0.2, 0.003), (0.3, 0.006), (0.4, 0.009),
                   (0.6, 0.012)])
    assert ten.measured.n == 10 and ten.measured.is_ci95 and ten.measured.lo < ten.measured.value < 1
    assert "Fisher z" in ten.measured.how


# -- the plan ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["smoke", "quick", "full"])
def test_every_scale_plans_valid_benches(name, tmp_path):
    from mpiec.launch.bench import Bench

    scale = SCALES[name]
    exps = cpr.PAPER.experiments(scale)
    assert len({e.key for e in exps}) == len(exps)
    p = cpr.plan_of(scale)
    for e in exps:
        Bench(e.args(tmp_path / e.key))  # every variant's config validates before any run
        for k in e.kills:
            assert int(k.rsplit("=", 1)[1]) < p.steps
        assert len(e.kills) <= p.spares
    if name == "smoke":
        assert sum(e.n_runs for e in exps) <= 3
    regime = cpr.PAPER.regime(scale)
    assert regime.summary and len(regime.rows) >= 8


def test_the_regime_keeps_the_papers_ratios():
    p = QUICK
    assert p.per_event / p.servers == pytest.approx(cpr.PAPER_PER_FAILURE / cpr.PAPER_SERVERS, abs=0.05)
    # CPR's interval per MTBF: 8 · PLS here against the paper's 9 · PLS
    assert p.cpr_interval / p.mtbf_steps == pytest.approx(2 * cpr.PAPER_SERVERS * cpr.TARGET_PLS
                                                          / cpr.PAPER_PER_FAILURE, rel=0.15)
    assert cpr.save_s(p) / (p.mtbf_steps * cpr.STEP_S) == pytest.approx(cpr.SAVE_OVER_MTBF)
    shifts = [cpr.shift_of(p, i) for i in range(p.rounds)]
    assert shifts[0] == 0 and len(set(shifts)) == p.rounds


# -- one smoke run under mpiexec ---------------------------------------------------------------------
@pytest.mark.mpirun
@pytest.mark.kill  # two servers die in each smoke run
@pytest.mark.timeout(600)  # the first user of smoke_reproduction runs it (tests/conftest.py)
def test_smoke_runs_and_every_claim_gets_a_finding(smoke_reproduction, tmp_path):
    scale = SCALES["smoke"]
    runs = {e.key: run_experiment(e, smoke_reproduction.out / "cpr" / e.key, reuse=True)  # read back
            for e in cpr.PAPER.experiments(scale)}
    for rs in runs.values():
        assert rs.reused and not rs.problems, rs.problems or smoke_reproduction.stdout
    assert {r.strategy for r in runs["recovery-r0"].results} == {"ckpt", "cpr"}
    got = verdicts(cpr.PAPER.findings(runs, scale, Machine.here()))
    assert got["full-recovery-overhead"] == CALIBRATED
    assert got["full-recovery-young"] != CANNOT  # the ckpt run and the reference were read back
    figs = cpr.PAPER.plots(runs, tmp_path / "figures")
    assert all(p.is_file() for p in figs)


def test_pls_vs_loss_has_enough_points_for_its_interval_at_quick_and_full():
    """The rounds' cpr runs and the sweep's: at least ``SPEARMAN_MIN_N``, so the quick and the full
    reproduction judge the same kind of figure (6 points at quick had no interval)."""
    from mpiec.analysis.stats import SPEARMAN_MIN_N

    for name in ("quick", "full"):
        plan = cpr.plan_of(SCALES[name])
        assert plan.rounds + len(plan.sweep) >= SPEARMAN_MIN_N, name
