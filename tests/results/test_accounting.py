"""The monitor's accounting: timeline union, placement-independent checksum, recovery breakdown."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpiec.layout import RowPlacement
from mpiec.results import TIMELINE_DTYPE
from mpiec.results.accounting import (
    cpu_per_step,
    efficiency,
    final_samples,
    layout_throughput,
    merge_timelines,
    param_checksum,
    recovery_breakdown,
    stall_losses,
    unique_steps,
)


def records(steps, epoch, t0=0.0, dt=0.01):
    tl = np.zeros(len(steps), TIMELINE_DTYPE)
    tl["step"], tl["epoch"], tl["dt"] = steps, epoch, dt
    tl["t_end"] = t0 + dt * np.arange(1, len(steps) + 1)
    tl["samples"] = 10
    return tl


def test_union_marks_reexecuted_steps_once_per_epoch():
    a = records(range(0, 10), 0)  # trainer 0 before the failure
    b = records(range(0, 10), 0)  # trainer 1: the same steps
    c = records(range(6, 12), 1, t0=1.0)  # after a rollback to step 5
    tl = merge_timelines([a, b, c])
    assert len(tl) == 16 and unique_steps(tl) == 12
    assert list(tl["reexec"]).count(True) == 4  # steps 6..9 of epoch 1
    assert np.all(np.diff(tl["t_end"]) >= 0)


def test_checksum_does_not_depend_on_the_placement():
    rng = np.random.default_rng(0)
    total, width = 101, 5
    rows = rng.standard_normal((total, width)).astype(np.float32)
    dense = (rng.standard_normal(7).astype(np.float32), np.zeros(7, np.float32))
    sums = set()
    for servers in (1, 2, 3, 4):
        place = RowPlacement(total, servers)
        shards = [(place.rows_of(s), rows[place.rows_of(s)]) for s in range(servers)]
        sums.add(param_checksum(dense, shards, total))
    assert len(sums) == 1 and len(sums.pop()) == 64
    flipped = rows.copy()
    flipped[50, 2] += 1e-3
    assert param_checksum(dense, [(np.arange(total), flipped)], total) != \
        param_checksum(dense, [(np.arange(total), rows)], total)
    assert param_checksum(dense, [(np.arange(total - 1), rows[:-1])], total) == ""  # a row missing


def test_breakdown_splits_a_recovery_into_phases():
    tl = np.concatenate([records(range(20), 0), records(range(20, 30), 1, t0=2.0)])
    ranks = [[{"epoch": 1, "detect": 1.10, "shrink": 1.12, "agree": 1.15, "plan": 1.16, "replaced": 1.20,
               "restored": 1.25}],
             [{"epoch": 1, "detect": 1.05, "shrink": 1.12, "agree": 1.17, "replaced": 1.22,
               "restored": 1.30}]]
    (b,) = recovery_breakdown(ranks, kill_times=[1.0], timeline=tl)
    assert abs(b["detection_s"] - 0.05) < 1e-9 and abs(b["shrink_agree_s"] - 0.12) < 1e-9
    assert abs(b["recovery_s"] - 0.30) < 1e-9 and b["replace_s"] > 0 and b["restore_s"] > 0


def test_time_lost_counts_the_rolled_back_steps_executed_again():
    before = records(range(10), 0)  # steps 0..9, then a kill at 0.1 s and a rollback to step 4
    after = merge_timelines([before, records(range(5, 15), 1, t0=0.5)])
    ranks = [[{"epoch": 1, "detect": 0.12, "agree": 0.13, "plan": 0.13, "replaced": 0.2, "restored": 0.5}]]
    (b,) = recovery_breakdown(ranks, kill_times=[0.1], timeline=after)
    # steps 5..9 ran twice: all five re-executions are lost, on top of kill -> resume
    assert b["reexec_s"] == pytest.approx(0.05)
    assert b["time_lost_s"] == pytest.approx(0.4 + 0.05) and b["degraded_s"] == pytest.approx(0.0)
    assert b["window_steps"] == [5, 9] and b["unprotected_s"] == pytest.approx(0.4)
    assert math.isnan(b["repair_throughput_ratio"])  # the repair ended with the recovery


def paced(n, dt=0.01, noise=0.0, seed=0, stall_at=None, stall=0.0, eval_every=0, eval_s=0.0):
    """``n`` steps of one epoch at ``dt`` (± gaussian ``noise``), a stall added to one step, an
    evaluation of ``eval_s`` after every ``eval_every``-th step (in the next step's interval)."""
    rng = np.random.default_rng(seed)
    dts = np.maximum(1e-4, dt + noise * rng.standard_normal(n))
    if stall_at is not None:
        dts[stall_at] += stall
    gaps = np.zeros(n)
    evals = set()
    if eval_every:
        evals = {s for s in range(n) if (s + 1) % eval_every == 0}
        for s in evals:
            if s + 1 < n:
                gaps[s + 1] = eval_s
    tl = np.zeros(n, TIMELINE_DTYPE)
    tl["step"], tl["dt"], tl["samples"] = np.arange(n), dts, 10
    tl["t_end"] = np.cumsum(dts + gaps)
    return tl, evals


def stall_event(tl, step, seconds=0.5):
    return (step, float(tl["t_end"][step - 1]) + 1e-4, "stall", 3, "server", 0, f"{seconds:.6f}")


def test_a_known_stall_is_recovered_exactly():
    tl, _ = paced(100, stall_at=40, stall=0.5)
    (s,) = stall_losses(tl, [stall_event(tl, 40)])
    assert s["step"] == 40 and s["stall_s"] == 0.5
    assert s["time_lost_s"] == pytest.approx(0.5) and s["window_steps"] == [40, 40]


def test_an_evaluation_in_the_window_is_not_time_lost():
    tl, evals = paced(100, stall_at=40, stall=0.5, eval_every=20, eval_s=0.05)  # step 39 is evaluated
    (s,) = stall_losses(tl, [stall_event(tl, 40)], eval_steps=evals)
    assert s["time_lost_s"] == pytest.approx(0.5)
    (c,) = stall_losses(tl, [stall_event(tl, 40)], eval_steps=evals, step_extra={40: 0.1})
    assert c["time_lost_s"] == pytest.approx(0.4)  # a checkpoint's stall there is protection cost


def test_noise_around_the_median_barely_moves_the_stall_and_does_not_bias_it():
    errors = []
    for seed in range(200):
        tl, _ = paced(100, dt=0.01, noise=0.002, seed=seed, stall_at=40, stall=0.5)
        (s,) = stall_losses(tl, [stall_event(tl, 40)])
        errors.append(s["time_lost_s"] - 0.5)
    errors = np.array(errors)
    assert np.abs(errors).max() < 0.05 * 0.5  # far inside the 10 % acceptance
    assert abs(errors.mean()) < 0.002  # the signed sum: no upward drift from clipping noise at 0


def test_a_background_rebuild_counts_its_slower_steps_and_reports_its_throughput():
    before, _ = paced(50)  # steps 0..49 end at 0.5 s; kill at 0.5, resume at 0.8
    during = np.zeros(20, TIMELINE_DTYPE)  # the rebuild: 20 steps at 80 % of the rate
    during["step"], during["dt"], during["samples"], during["epoch"] = np.arange(50, 70), 0.0125, 10, 1
    during["t_end"] = 0.8 + 0.0125 * np.arange(1, 21)
    after = np.zeros(30, TIMELINE_DTYPE)
    after["step"], after["dt"], after["samples"], after["epoch"] = np.arange(70, 100), 0.01, 10, 1
    after["t_end"] = during["t_end"][-1] + 0.01 * np.arange(1, 31)
    tl = merge_timelines([before, during, after])
    ranks = [[{"epoch": 1, "detect": 0.55, "agree": 0.6, "plan": 0.6, "replaced": 0.7, "restored": 0.8}]]
    events = [(50, 0.8, "rebuild_start", 3, "server", 1, ""),
              (50, float(during["t_end"][-1]), "rebuild_end", 3, "server", 1, "")]
    (b,) = recovery_breakdown(ranks, kill_times=[float(before["t_end"][-1])], timeline=tl, events=events)
    assert b["recovery_s"] == pytest.approx(0.3) and b["reexec_s"] == 0
    assert b["time_lost_s"] == pytest.approx(0.3 + 20 * 0.0025)  # the pause + the slower steps
    assert b["degraded_s"] == pytest.approx(20 * 0.0025) and b["window_steps"] == [50, 69]
    assert b["repair_throughput_ratio"] == pytest.approx(0.8) and b["repair_steps"] == [50, 69]
    assert b["unprotected_s"] == pytest.approx(0.55) and b["repair_s"] == pytest.approx(0.25)


def test_noise_does_not_move_a_recovery_much():
    got = []
    for seed in range(50):
        tl, _ = paced(100, noise=0.002, seed=seed)
        cut = tl["t_end"][49]
        tl["t_end"][50:] += 0.3  # a 0.3 s recovery after step 49 (kill at its end)
        tl["epoch"][50:] = 1
        ranks = [[{"epoch": 1, "detect": cut + 0.05, "agree": cut + 0.1, "replaced": cut + 0.2,
                   "restored": cut + 0.3}]]
        (b,) = recovery_breakdown(ranks, kill_times=[float(cut)], timeline=tl)
        got.append(b["time_lost_s"])
    got = np.array(got)
    # the recovery's own steps' noise (a window of a step or two) moves it by a few ms at most
    assert np.abs(got - 0.3).max() < 0.02 and abs(got.mean() - 0.3) < 0.003


def test_efficiency_of_a_run_with_time_lost_and_lost_samples():
    tl = records(range(100), 0)  # 1 s of wall time, 1000 samples
    eff = efficiency(tl, time_lost_s=0.2, stall_s=0.05, lost_samples=100, lost=False)
    assert abs(eff["ettr"] - 0.75) < 1e-9 and abs(eff["goodput_sps"] - 900.0) < 1e-6
    assert efficiency(tl, 0.0, 0.0, 0, lost=True)["goodput_sps"] == 0.0
    again = merge_timelines([tl, records(range(50, 60), 1, t0=1.0)])
    assert final_samples(again) == 1000  # re-executed steps count once


def test_cpu_per_step_pools_the_ranks_of_a_role_over_the_steps_they_ran():
    def report(role, cpu, steps, apply=None):
        return {"info": {"role": role, "cpu_s": cpu, "steps_run": steps},
                "role": {} if apply is None else {"apply_cpu_s": apply}}

    reports = [report("monitor", 9.0, 0), report("trainer", 4.0, 100), report("trainer", 6.0, 100),
               report("server", 1.0, 100, apply=0.25), report("server", 2.0, 50, apply=0.5),  # promoted late
               report("spare", 3.0, 0)]
    out = cpu_per_step(reports)
    assert out == {"trainer_cpu_s_per_step": 10.0 / 200, "server_cpu_s_per_step": 3.0 / 150,
                   "server_apply_cpu_s_per_step": 0.75 / 150}
    assert cpu_per_step([report("monitor", 1.0, 0)]) == {}  # no step executed: no figure, no division by 0



def test_layout_throughput_compares_each_layout_with_the_first():
    """4 servers at 10 ms a step, 3 at 20 ms, 4 again at 12.5 ms: ratios 0.5 and 0.8 (the first
    steps of each stretch, a recovery's, are left out); no change, no keys."""
    tl = np.zeros(60, TIMELINE_DTYPE)
    tl["trainers"] = 2
    tl["servers"] = [4] * 20 + [3] * 20 + [4] * 20
    tl["dt"] = [0.01] * 20 + [9.0, 9.0] + [0.02] * 18 + [9.0, 9.0] + [0.0125] * 18
    out = layout_throughput(tl)
    assert out["throughput_shrunk_ratio"] == pytest.approx(0.5)
    assert out["throughput_regrown_ratio"] == pytest.approx(0.8)
    assert math.isnan(layout_throughput(tl[:40])["throughput_regrown_ratio"])
    assert layout_throughput(tl[:20]) == {}
