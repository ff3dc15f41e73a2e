"""``mpiec reproduce ecrec``: the findings logic on fake figures and fake result files (no MPI), and
one smoke run of the paper's experiments under mpiexec."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mpiec.reproduce import ecrec
from mpiec.reproduce.claims import CANNOT, DEPENDS, NOT_JUDGED, NOT_REPRODUCED, PARTLY, REPRODUCED, VERDICTS
from mpiec.reproduce.experiment import SCALES, Machine, RunSet, run_experiment
from mpiec.results import TIMELINE_DTYPE, ResultWriter, read_result

KEYS = [c.key for c in ecrec.CLAIMS]
TWO_CORES = Machine(2, "test cpu", 8.0, 0.0, "3.11", "host")
MANY_CORES = Machine(64, "test cpu", 8.0, 0.0, "3.11", "host")


def verdicts(findings):
    assert [f.claim.key for f in findings] == KEYS
    for f in findings:
        assert f.verdict in VERDICTS
        assert f.verdict == REPRODUCED or f.reason, f.claim.key
    return {f.claim.key: f.verdict for f in findings}


# -- the verdict logic on figures ------------------------------------------------------------------
#: Ckpt's stall / interval as planned (the storage model's), so that the overhead claims are judged
REALIZED = {30: [100 * ecrec.RATIO30] * 3, 60: [100 * ecrec.RATIO60] * 3}


def paper_losses(ckpt_s, ecrm_rebuild_s, drop=0.1):
    """(round, loss) lists of Ckpt-30 and ECRM k=4 recoveries in paper seconds, one a round."""
    ck = [(i, ecrec.CkptLoss(257.0, redo, 5.0)) for i, redo in enumerate(ckpt_s)]
    ec = [(i, ecrec.EcrmLoss(2.0, rb, drop)) for i, rb in enumerate(ecrm_rebuild_s)]
    return ck, ec


def good(shared: bool = True) -> ecrec.Figures:
    """Figures that support every claim."""
    path = "bound" if shared else "tp"
    ck, ec = paper_losses([900.0, 800.0, 1000.0], [80.0, 85.0, 75.0])
    low = [5.0, 6.0, 4.0, 5.5, 4.5, 5.0]  # ECRM's overhead, 6 rounds: a median's 95 % interval exists
    return ecrec.Figures(
        shared=shared, n_ranks=9 if shared else 1,
        reduction={(30, path): [64.0, 60.0, 70.0], (60, path): [30.0, 28.0, 35.0]},
        recovery={"ckpt30": [2.0, 2.2, 1.8], "k4": [0.2, 0.21, 0.19]}, ckpt_paper=ck, ecrm_paper=ec,
        ecrm_bound={4: low}, ecrm_tp_ovh={4: low}, ckpt_ovh=REALIZED, rebuild_in_run=[True] * 3,
        # levels (medians over runs) with 6 runs: their order-statistic 95 % interval exists
        drop=[9.0, 10.0, 11.0, 9.5, 10.5, 10.0], k_growth={"cpu": [0.1, -0.2, 0.3], "tp": [0.5, -0.3, 0.2]},
        memory={2: [0.5, 0.5], 4: [0.25, 0.25]}, memory_r={2: 1, 4: 1},
        sum_drift=[3e-7, 5e-7, 2e-7, 4e-7, 3e-7, 6e-7], sum_lossless=[False, False],
        exact_lossless={ecrec.EXACT[0]: True, ecrec.EXACT[1]: True})


def bad(shared: bool = True) -> ecrec.Figures:
    """Figures against every claim."""
    path = "bound" if shared else "tp"
    ck, ec = paper_losses([100.0, 110.0, 90.0], [2000.0, 2100.0, 1900.0], drop=0.6)
    high = [60.0, 55.0, 65.0]
    return ecrec.Figures(
        shared=shared, n_ranks=9,
        reduction={(30, path): [-50.0, -40.0, -60.0], (60, path): [-90.0, -80.0, -100.0]},
        recovery={"ckpt30": [0.5, 0.55, 0.45], "k4": [1.0, 1.1, 0.9]}, ckpt_paper=ck, ecrm_paper=ec,
        ecrm_bound={4: high}, ecrm_tp_ovh={4: high}, ckpt_ovh=REALIZED, rebuild_in_run=[True] * 3,
        drop=[60.0, 55.0, 65.0], k_growth={"cpu": [20.0, 25.0, 30.0], "tp": [10.0, 12.0, 9.0]},
        memory={4: [0.4, 0.4]}, memory_r={4: 1},
        sum_drift=[0.0, 0.0], exact_lossless={ecrec.EXACT[0]: False, ecrec.EXACT[1]: False})


def finding(findings, key):
    return next(f for f in findings if f.claim.key == key)


def test_every_claim_gets_a_finding_without_any_run():
    for shared in (True, False):
        got = verdicts(ecrec.judge_all(ecrec.Figures(shared=shared)))
        # a claim gated on a planned ratio that nothing realized is not judged; the others: no figure
        assert set(got.values()) <= {CANNOT, NOT_JUDGED}
        assert got["recovery"] == NOT_JUDGED and got["k-growth"] == CANNOT


@pytest.mark.parametrize("shared", [True, False])
def test_figures_past_the_thresholds_reproduce_every_claim(shared):
    assert set(verdicts(ecrec.judge_all(good(shared))).values()) == {REPRODUCED}


@pytest.mark.parametrize("shared", [True, False])
def test_figures_against_the_claims_are_not_reproduced(shared):
    """No limit that applies only when a figure fails: the drop is judged on shared cores too."""
    assert set(verdicts(ecrec.judge_all(bad(shared))).values()) == {NOT_REPRODUCED}


def test_overhead_is_judged_on_the_cpu_bound_where_ranks_share_cores():
    f = good(shared=True)
    f.reduction[(30, "tp")] = [-200.0, -150.0, -180.0]  # the throughput figure is inflated: not judged
    fd = ecrec.judge_all(f)[0]
    assert fd.verdict == REPRODUCED and "share" in fd.reason and "bound" in fd.reason
    f.shared = False
    assert ecrec.judge_all(f)[0].verdict == NOT_REPRODUCED


def test_recovery_ratio_without_rounds_is_the_ratio_of_the_geometric_means():
    f = ecrec.Figures(recovery={"ckpt30": [3.0, 3.0, 3.0], "k4": [1.0, 1.0, 1.0]},
                      recovery_rounds={"ckpt30": [0, 0, 1], "k4": [0, 1, 2]})
    e, how = ecrec.recovery_ratio(f)
    assert e.value == pytest.approx(3.0) and "Welch" in how
    fd = finding(ecrec.judge_all(f), "recovery")  # the seconds here alone are not judged
    assert fd.verdict in (CANNOT, NOT_JUDGED) and not fd.measured.known
    assert fd.extra["ratio_of_seconds_here"].startswith("3")


def test_recovery_ratio_is_paired_by_round():
    """The round's drift (ckpt 2, 4, 8 s) is shared by ECRM's run of the same round (1, 2, 4 s): paired,
    the ratio is 2 in every round, one figure; unpaired, the drift would widen it past any verdict."""
    f = ecrec.Figures(recovery={"ckpt30": [2.0, 4.0, 8.0], "k4": [4.0, 2.0, 1.0]},
                      recovery_rounds={"ckpt30": [0, 1, 2], "k4": [2, 1, 0]})
    e, how = ecrec.recovery_ratio(f)
    assert e.value == pytest.approx(2.0) and e.deterministic and e.n == 3 and "paired" in how
    f.recovery["k4"] = [4.4, 2.0, 0.9]  # noisy: a Student-t interval over the 3 rounds
    e, _ = ecrec.recovery_ratio(f)
    assert e.is_ci95 and e.method.startswith("paired t") and e.lo < 2.0 < e.hi < 3.0
    f.recovery_rounds["k4"] = [0, 1]  # a value without its round: nothing to pair by
    e, how = ecrec.recovery_ratio(f)
    assert "Welch" in how and e.hi > 10.0


def test_memory_is_the_worst_deviation_from_r_over_k():
    f = ecrec.Figures(memory={2: [0.5], 4: [0.26]}, memory_r={2: 1, 4: 1})
    fd = finding(ecrec.judge_all(f), "parity-memory")
    assert fd.measured.value == pytest.approx(4.0) and fd.verdict == REPRODUCED


def test_exact_codes_half_lossless_is_partly():
    f = ecrec.Figures(exact_lossless={ecrec.EXACT[0]: True, ecrec.EXACT[1]: False})
    fd = finding(ecrec.judge_all(f), "exact-lossless")
    assert fd.measured.value == 50.0 and fd.verdict == PARTLY and "differs" in fd.reason


# -- the figures from result files -----------------------------------------------------------------
def write(path, variant, rnd, summary, kill=None, layout=None):
    """A small result file of ``variant`` in round ``rnd`` (the bench's ``-r<i>`` name)."""
    strategy = variant.split(":")[0]
    cfg = {"strategy": {"name": strategy}, "seed": 1, "output": {"name": path.stem},
           "layout": layout or {"trainers": 2, "servers": 5, "spares": 1, "parity_ranks": 0},
           "data": {"cardinalities": [1000] * 26}, "model": {"dim": 16}, "training": {"batch_size": 64},
           "failures": {"kill": [kill] if kill else []}}
    w = ResultWriter(path, {"config": cfg, "strategy": strategy, "seed": 1, "variant": variant,
                            "failure_mode": "ulfm", "ulfm": True, "n_ranks": 9})
    tl = np.zeros(40, TIMELINE_DTYPE)
    tl["step"] = np.arange(40)
    tl["dt"] = 0.01
    tl["t_end"] = np.cumsum(tl["dt"])
    tl["samples"] = 64
    w.add_steps(tl)
    if kill:
        w.add_event(10, 0.1, "kill", rank=3, role="server", role_index=1, detail=kill)
        if strategy == "ecrm":  # its background rebuild, over well before the last step
            w.add_event(11, 0.11, "rebuild_start", rank=3, role="server", role_index=1)
            w.add_event(14, 0.14, "rebuild_end", rank=3, role="server", role_index=1)
    w.close({"lost": False, "param_checksum": "c0ffee", **summary})
    return read_result(path)


def fake_runs(tmp_path, stall=0.1, stretch=1.0):
    """Three interleaved rounds of the main bench and the codes bench. ``stretch``: a run that many times
    longer (the interval, the reload and the redone steps with it; the rebuild is CPU: the same)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    exps = {e.key: e for e in ecrec.PAPER.experiments(SCALES["quick"])}
    (c30, i30), (c60, i60) = ecrec.ckpt_variants(exps["main"]).values()
    main, codes = [], []
    kill = "server:1@step=10"

    def rec(**kw):
        return {"recoveries": 1, "recovery_breakdown": json.dumps([{"kill": 0.1, "recovery_s": 0.1,
                                                                   "time_lost_s": 0.5, **kw}])}

    # the rebuild: 5 ms after the resume, steps 11-14 trained at 90 % of the twin's pace
    ecrm_rec = {**rec(repair_s=0.005, repair_steps=[11, 14], repair_throughput_ratio=0.9),
                "recovery_latency_s": 0.1}
    for i in range(3):
        def w(v, summary, kill=None, i=i):
            name = f"{v.replace(':', '_')}-{'kill' if kill else 'ff'}-r{i}.h5"
            return write(tmp_path / name, v, i, summary, kill)

        main.append(w("none", {"throughput_sps": 1000.0, "server_cpu_s_per_step": 1e-3,
                               "trainer_cpu_s_per_step": 10e-3}))
        main.append(w(c30, {"throughput_sps": 870.0, "checkpoints": 3, "checkpoint_critical_s": 3 * stall,
                            "checkpoint_interval_s": i30}))
        main.append(w(c60, {"throughput_sps": 930.0, "checkpoints": 1, "checkpoint_critical_s": 0.1,
                            "checkpoint_interval_s": i60}))
        for k, cpu in ((2, 1.5e-3), (4, 1.6e-3)):
            main.append(w(ecrec.ECRM[k], {"throughput_sps": 800.0, "server_cpu_s_per_step": cpu,
                                          "parity_memory_bytes": 1000 // k, "shard_memory_bytes": 1000,
                                          "k": k, "r": 1}))
            main.append(w(ecrec.ECRM[k], {**ecrm_rec, "time_lost_s": 0.1, "unprotected_s": 0.25, "k": k,
                                          "r": 1, "sum_drift_max_rel": 0.0 if k == 4 else 4e-7,
                                          "param_checksum": "beef"}, kill))
        # Ckpt-30: 0.7 s real (detection, restart), the reload and the redo compressed with the interval
        restore, redo = 0.1 * stretch, (1.0 + 0.5 * i) * stretch  # the reload: 13 % of I30, as planned
        main.append(w(c30, {**rec(restore_s=restore, reexec_s=redo), "time_lost_s": 0.7 + restore + redo,
                            "checkpoint_interval_s": i30 * stretch}, kill))
    for v in ecrec.EXACT:
        codes.append(write(tmp_path / f"{v.replace(':', '_')}.h5", v, 0, {**rec(), "time_lost_s": 0.1}, kill))
    return {"main": RunSet(exps["main"], tmp_path, main), "codes": RunSet(exps["codes"], tmp_path, codes)}


def test_recovery_metrics_do_not_change_with_the_run_length(tmp_path):
    """A run 4 times longer (its interval, reload and redone steps 4 times longer, the rebuild the same
    CPU) gives the same recovery figures in the paper's seconds; only the seconds here change."""
    a = ecrec.extract(fake_runs(tmp_path / "a"), shared=True)
    b = ecrec.extract(fake_runs(tmp_path / "b", stretch=4.0), shared=True)
    assert len(a.ckpt_paper) == len(a.ecrm_paper) == 3
    for what in ("recovery", "lost"):
        ea, eb = ecrec.paper_ratio(a, what)[0], ecrec.paper_ratio(b, what)[0]
        assert (ea.value, ea.lo, ea.hi) == pytest.approx((eb.value, eb.lo, eb.hi)) and ea.value > 1
    assert a.drop == b.drop == pytest.approx([10.0] * 3)
    fa, fb = ecrec.judge_all(a), ecrec.judge_all(b)
    for key in ("recovery", "rebuild-drop", "without-pause"):
        ma, mb = finding(fa, key).measured, finding(fb, key).measured
        assert (ma.value, ma.lo, ma.hi) == pytest.approx((mb.value, mb.lo, mb.hi), nan_ok=True), key
    # the ratio of the seconds measured here is the figure the run length set
    assert ecrec.recovery_ratio(b)[0].value > 2 * ecrec.recovery_ratio(a)[0].value


def test_a_rebuild_still_running_at_the_runs_end_is_not_judged():
    f = good()
    f.rebuild_in_run = [True, False, True]  # one run ended mid-rebuild: its pace is the run's end
    got = {fd.claim.key: fd for fd in ecrec.judge_all(f)}
    for key in ("recovery", "rebuild-drop", "without-pause"):
        assert got[key].verdict == NOT_JUDGED and "rebuild ended before the last step" in got[key].shown


def test_recovery_in_paper_seconds_scales_back_what_is_compressed():
    ck = ecrec.ckpt_loss({"restore_s": 0.5, "reexec_s": 1.0}, interval_s=3.0, lost_s=2.0)
    assert ck == ecrec.CkptLoss(0.5 * 600, 1.0 * 600, 0.5)  # 1800 s / 3 s; the 0.5 s left is real time
    # the reload scales with the storage's bandwidth, the rest does not
    assert ck.total(ecrec.STORAGE.nominal * 2) == pytest.approx(150 + 600 + 0.5)
    shard = ecrec.ECREC.shard_bytes
    ec = ecrec.ecrm_loss(pause_s=1.0, repair_s=2.0, shard_bytes=shard / 1000, k=4, drop=0.1)
    assert ec.rebuild_s == pytest.approx(2000.0) and ec.recovery_s == pytest.approx(2001.0)
    assert ec.lost_s == pytest.approx(1.0 + 200.0)
    # its CPU carried the same way: the rebuild at full speed on a core of its own, shown beside
    assert ecrec.ecrm_loss(1.0, 2.0, shard / 1000, 4, 0.1, cpu_s=0.5).full_speed_s == pytest.approx(500.0)
    # a fast rebuild is floored by k shards through the paper's network
    fast = ecrec.ecrm_loss(1.0, 1e-6, shard / 1000, 4, 0.1)
    assert fast.rebuild_s == pytest.approx(4 * shard / (ecrec.ECREC.network_gbps * 1e9 / 8))


@pytest.fixture
def no_simulator(monkeypatch):
    """Findings without running the simulator (its own test below): the unit tests stay fast."""
    monkeypatch.setattr(ecrec, "simulated", lambda: {})


def test_figures_are_extracted_per_round_from_result_files(tmp_path, no_simulator):
    runs = fake_runs(tmp_path)
    f = ecrec.extract(runs, shared=True)
    x, t = 0.6, 10.0  # ECRM k=4's extra server CPU per step, a trainer's, ms
    ckpt30 = 100 * 0.1 / float(ecrec.ckpt_variants(runs["main"].experiment)[30][1])
    assert f.n_ranks == 9 and f.ckpt_ovh[30] == pytest.approx([ckpt30] * 3)
    assert f.ecrm_bound[4] == pytest.approx([100 * x / (t + x)] * 3)
    assert f.reduction[(30, "bound")] == pytest.approx([100 * (1 - 100 * x / (t + x) / ckpt30)] * 3)
    assert f.ecrm_tp_ovh[4] == pytest.approx([20.0] * 3)
    assert f.k_growth["cpu"] == pytest.approx([1.0] * 3)  # 0.1 ms of a 10 ms step
    assert f.recovery["ckpt30"] == pytest.approx([1.8, 2.3, 2.8]) and f.recovery["k4"] == [0.25] * 3
    # in the paper's seconds: the reload and the redo × 1800 s / I30, the rest (0.7 s) kept
    scale = ecrec.CKPT30_S / float(ecrec.ckpt_variants(runs["main"].experiment)[30][1])
    assert [i for i, _ in f.ckpt_paper] == [0, 1, 2]
    assert f.ckpt_paper[1][1].reload_s == pytest.approx(0.1 * scale)
    assert f.ckpt_paper[1][1].redo_s == pytest.approx(1.5 * scale)
    assert f.ckpt_paper[1][1].rest_s == pytest.approx(0.7)
    shard = 26 * 1000 * 16 * 4 / 5  # the fake table's rows, dim 16, fp32, over 5 servers
    ec = f.ecrm_paper[0][1]
    assert ec.pause_s == 0.1 and ec.drop == pytest.approx(0.1)
    assert ec.rebuild_s == pytest.approx(0.005 * ecrec.ECREC.shard_bytes / shard)
    assert f.recovery_rounds["ckpt30"] == [0, 1, 2] and f.recovery_rounds["k4"] == [0, 1, 2]
    assert f.memory == {2: [0.5] * 3, 4: [0.25] * 3}
    assert f.sum_drift == [4e-7] * 3  # k = 4 on 5 servers leaves no intact stripe: its 0 is no measurement
    assert f.sum_lossless == [False] * 6
    assert f.exact_lossless == {v: True for v in ecrec.EXACT}
    found = {fd.claim.key: fd for fd in ecrec.PAPER.findings(runs, SCALES["quick"], TWO_CORES)}
    got = verdicts(found.values())
    # reproduced at the assumed 80 MB/s, not at 500: Ckpt-30's write time / interval is 2.3 % there
    assert got["overhead-ckpt30"] == DEPENDS and "reproduced below" in found["overhead-ckpt30"].shown
    assert [v for key, _, v, _ in found["overhead-ckpt30"].ends if key == "storage-mb-s"] == \
        [REPRODUCED, NOT_REPRODUCED]
    assert got["exact-lossless"] == REPRODUCED and got["k-growth"] == REPRODUCED
    assert got["recovery"] == REPRODUCED and "Holds across the band" in found["recovery"].reason
    # with a core per rank the throughput figure is judged: ECRM 20 % against Ckpt-30's ~13 %
    dedicated = verdicts(ecrec.PAPER.findings(runs, SCALES["quick"], MANY_CORES))
    assert dedicated["overhead-ckpt30"] == NOT_REPRODUCED


def test_a_checkpoint_overrunning_the_storage_model_is_judged_at_the_papers_ratio(tmp_path):
    f = ecrec.extract(fake_runs(tmp_path, stall=0.3), shared=True)  # 40 % where the model gives 14.3 %
    bound = 100 * 0.6 / 10.6
    assert f.ckpt_ovh[30][0] > 100 * ecrec.RATIO30
    assert f.reduction[(30, "bound")] == pytest.approx([100 * (1 - bound / (100 * ecrec.RATIO30))] * 3)


def test_regime_and_experiments_keep_the_ratios():
    for name, scale in SCALES.items():
        s = ecrec.setup(scale)
        exps = ecrec.PAPER.experiments(scale)
        assert exps and all(e.steps == s.steps for e in exps)
        assert s.kill_step == round(0.2 * s.steps)
        slowest = max(s.part_bytes, s.dense_bytes)  # every part is written at once: the slowest is the stall
        assert slowest / (s.write_mb_s * 1e6) / s.i30 == pytest.approx(ecrec.RATIO30)
        regime = ecrec.PAPER.regime(scale)
        rows = {r.quantity: r for r in regime.rows}
        assert rows["checkpoint write time / interval, Ckpt-30"].kept
        assert rows["recovery time (both sides)"].kept  # paper seconds on both sides
        assert "rebuild_budget = 0.1" in rows["rebuild"].here  # the strategy's default, fixed before the run
        deciding = next(r for q, r in rows.items() if q.startswith("a server's parity work per step"))
        assert deciding.kept is False and "B/FLOP" in deciding.here
        n_runs = sum(e.n_runs for e in exps)
        assert n_runs <= (2 if name == "smoke" else 60)
    assert math.isclose(ecrec.RATIO30, 2 * ecrec.RATIO60)


def test_reproduce_and_simulate_read_one_storage_assumption():
    """One assumption per quantity: simulate --paper ecrec's storage is the regime source's, as the
    reproduction's."""
    from mpiec.reproduce.papers import ECREC
    from mpiec.simulate.papers import preset

    flags = preset("ecrec").flags
    assert flags["node_storage_gbps"] * 1e3 == ECREC.storage.nominal == ecrec.STORAGE.nominal
    per_server = ECREC.ckpt_bytes / ECREC.servers
    assert ecrec.PAPER_WRITE_S == pytest.approx(per_server / (ECREC.storage.nominal * 1e6))
    assert ECREC.storage.low <= ECREC.storage.nominal <= ECREC.storage.high
    assert "EBS" in ECREC.storage.high_source and ECREC.storage.text() in "; ".join(preset("ecrec").assumed)


def test_the_deciding_ratio_scales_with_workers_and_dim_not_with_the_batch():
    mlps = (ecrec.PAPER_BOTTOM, ecrec.PAPER_TOP)
    r = ecrec.parity_work_ratio(2, 64, 26, 16, 5, *mlps)
    assert r == pytest.approx(ecrec.parity_work_ratio(2, 2048, 26, 16, 5, *mlps))
    assert ecrec.parity_work_ratio(4, 64, 26, 16, 5, *mlps) == pytest.approx(2 * r)
    assert ecrec.PAPER_PARITY_RATIO / r > 10  # the paper's parity per trainer FLOP is far above this run's


def test_the_simulators_figure_is_shown_beside_with_whether_it_agrees_in_direction():
    found = ecrec.judge_all(good())
    sim = {"overhead-ckpt30": 100.0, "rebuild-drop": 40.0, "recovery": 12.0}
    got = {f.claim.key: f for f in ecrec.with_simulated(found, sim)}
    assert got["overhead-ckpt30"].extra["simulate_agrees"] is True and "the runs' direction" in \
        got["overhead-ckpt30"].reason
    drop = got["rebuild-drop"]  # 10 % measured, 40 % simulated: past the claim's 25 % the other way
    assert drop.extra["simulate_agrees"] is False and ecrec.SIM_WHY["rebuild-drop"] in drop.reason
    assert drop.verdict == REPRODUCED  # the simulator's figure is shown, it judges nothing
    assert "simulated" not in got["k-growth"].extra  # a check of mpiec, not the paper's: no simulator figure


@pytest.mark.slow
def test_simulate_gives_a_figure_for_every_claim_it_can_set_beside():
    sim = ecrec.simulated_figures()
    assert set(sim) == set(ecrec.SIM_WHY) and all(math.isfinite(v) or v == math.inf for v in sim.values())


def test_plots_are_written_from_fake_runs(tmp_path):
    pytest.importorskip("matplotlib")
    runs = fake_runs(tmp_path / "runs")
    paths = ecrec.PAPER.plots(runs, tmp_path / "fig")
    assert {p.name for p in paths} == {"ecrec-recovery.png", "ecrec-overhead.png"}


# -- a real smoke run --------------------------------------------------------------------------------
@pytest.mark.mpirun
@pytest.mark.kill
@pytest.mark.timeout(600)  # the first user of smoke_reproduction runs it (tests/conftest.py)
def test_smoke_runs_give_a_finding_per_claim(smoke_reproduction):
    scale = SCALES["smoke"]
    runs = {}
    for exp in ecrec.PAPER.experiments(scale):  # the session's smoke runs, read back
        runs[exp.key] = run_experiment(exp, smoke_reproduction.out / "ecrec" / exp.key, reuse=True)
        assert runs[exp.key].reused, smoke_reproduction.stdout + smoke_reproduction.stderr
        assert runs[exp.key].results and not runs[exp.key].problems, runs[exp.key].problems
    got = verdicts(ecrec.PAPER.findings(runs, scale, Machine.here()))
    assert got["parity-memory"] == REPRODUCED  # exact by construction whatever the load
    fd = {f.claim.key: f for f in ecrec.PAPER.findings(runs, scale, Machine.here())}
    assert fd["recovery"].measured.known


def test_a_file_that_counts_its_drift_checks_says_whether_the_drift_was_measured():
    class R:
        def __init__(self, summary):
            self.summary, self.config = summary, {"layout": {"servers": 5}}

    assert not ecrec._drift_measured(R({"k": 4, "r": 1, "sum_drift_checks": 0}))
    assert ecrec._drift_measured(R({"k": 4, "r": 1, "sum_drift_checks": 3}))  # verified: measured
    assert ecrec._drift_measured(R({"k": 2, "r": 1}))  # older files: the stripe width decides
    assert not ecrec._drift_measured(R({"k": 4, "r": 1}))
