"""The monitor's accounting: timeline union, placement-independent checksum, recovery breakdown."""

from __future__ import annotations

import numpy as np

from mpiec.layout import RowPlacement
from mpiec.results import TIMELINE_DTYPE
from mpiec.roles.accounting import (
    cpu_per_step,
    efficiency,
    final_samples,
    merge_timelines,
    param_checksum,
    recovery_breakdown,
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
    # steps 5..9 ran twice: the first re-execution (back at the normal rate) is inside kill -> back,
    # the other four are added
    assert abs(b["reexec_s"] - 0.04) < 1e-9
    assert abs(b["time_lost_s"] - (0.41 + b["reexec_s"])) < 1e-9  # kill -> first normal step + redo


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

