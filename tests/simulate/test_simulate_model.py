"""The event engine of ``mpiec simulate``: each strategy's behaviour on the wall clock, checked against
the closed-form figures of simple scenarios (no MPI, milliseconds)."""

from __future__ import annotations

import math

import pytest

from mpiec.simulate.model import BACK_TO_NORMAL_SLOWDOWN, Failure, Policy, simulate

STEP = 0.1
BASE = dict(step_s=STEP, latency_s=0.5, servers=4, trainers=4, global_batch=64, resume_extra_s=0.05)


def ckpt(**kw) -> Policy:
    return Policy(**{**BASE, "name": "ckpt", "kind": "rollback", "interval_steps": 10, "ckpt_stall_s": 0.2,
                     "restore_s": 0.3, **kw})


def test_failure_free_wall_is_steps_plus_checkpoint_stalls():
    p = ckpt()
    out = simulate(p, 100)
    n_ckpt = (100 - 1) // 10  # after steps 10, 20, ..., 90: none after the last step
    assert out.finished and out.failures == 0 and out.checkpoints == n_ckpt
    assert out.wall_s == pytest.approx(100 * STEP + n_ckpt * 0.2)
    assert out.ettr == pytest.approx(1 - n_ckpt * 0.2 / out.wall_s)
    assert out.goodput_ratio == pytest.approx(100 * STEP / out.wall_s)


def test_rollback_reexecutes_the_steps_since_the_checkpoint():
    p = ckpt()
    out = simulate(p, 100, at_steps=[Failure(step=47, servers=(1,))])
    (rec,) = out.recoveries
    assert rec.kind == "rollback" and rec.step == 47 and rec.reexec_steps == 47 - 40
    assert rec.recovery_s == pytest.approx(p.latency_s + p.restore_s)
    assert rec.time_lost_s == pytest.approx(p.latency_s + p.restore_s + p.resume_extra_s + 7 * STEP)
    ff = simulate(p, 100)
    assert out.wall_s == pytest.approx(ff.wall_s + rec.time_lost_s)
    assert out.checkpoints == ff.checkpoints  # the one after step 40 is not taken twice... nor lost


def test_step_failure_fires_once_even_when_the_step_is_executed_again():
    out = simulate(ckpt(), 100, at_steps=[Failure(step=47, servers=(1,))])
    assert out.failures == 1 and out.finished


def test_partial_recovery_loses_the_failed_shards_updates_not_time():
    p = Policy(**{**BASE, "name": "cpr", "kind": "partial", "interval_steps": 10, "ckpt_stall_s": 0.2,
                  "restore_s": 0.3})
    out = simulate(p, 100, at_steps=[Failure(step=47, servers=(2,))])
    (rec,) = out.recoveries
    assert rec.reexec_steps == 0 and rec.kind == "partial"
    assert out.lost_samples == 7 * BASE["global_batch"] // BASE["servers"]  # steps 40-46 of 1 shard in 4
    assert rec.time_lost_s == pytest.approx(p.latency_s + p.restore_s + p.resume_extra_s)
    assert out.goodput_ratio < simulate(p, 100).goodput_ratio


def test_a_timed_failure_loses_the_elapsed_part_of_its_step():
    p = ckpt(interval_steps=None, ckpt_stall_s=0.0)
    at = 4.25  # 42 steps done, a quarter of step 42 elapsed
    out = simulate(p, 100, timed=[Failure(time_s=at, servers=(0,))])
    (rec,) = out.recoveries
    assert rec.step == 42 and rec.reexec_steps == 42  # no checkpoint: back to the start
    assert rec.time_lost_s == pytest.approx(0.05 + p.latency_s + p.restore_s + p.resume_extra_s + 42 * STEP)


def test_a_failure_during_a_checkpoint_write_rolls_back_to_the_previous_one():
    p = ckpt(ckpt_stall_s=1.0)
    # checkpoint after step 20 starts at 20 * 0.1 + 1 stall = 3.0 s and would end at 4.0 s
    out = simulate(p, 100, timed=[Failure(time_s=3.5, servers=(0,))])
    (rec,) = out.recoveries
    assert rec.step == 20 and rec.reexec_steps == 10  # back to the checkpoint after step 10


def test_trainer_only_failure_is_a_peer_copy_and_all_trainers_roll_back():
    p = ckpt(trainer_restore_s=0.02)
    out = simulate(p, 100, at_steps=[Failure(step=47, trainers=1)])
    assert out.recoveries[0].kind == "peer" and out.recoveries[0].reexec_steps == 0
    out = simulate(p, 100, at_steps=[Failure(step=47, trainers=4)])
    assert out.recoveries[0].kind == "rollback"


def test_none_restarts_from_scratch_and_a_cap_stops_a_job_that_never_finishes():
    p = Policy(**{**BASE, "name": "none", "kind": "restart", "resume_extra_s": 0.0})
    out = simulate(p, 100, at_steps=[Failure(step=30, servers=(0,))])
    assert out.finished and out.recoveries[0].reexec_steps == 30
    assert out.wall_s == pytest.approx(130 * STEP + p.latency_s)
    every = [Failure(time_s=t, servers=(0,)) for t in (i * 2.0 for i in range(1, 1000))]
    out = simulate(p, 100, timed=every, cap_s=50.0)  # a failure every 20 steps, 100 needed
    assert not out.finished and out.ettr == 0.0 and out.wall_s >= 50.0


def ecrm(**kw) -> Policy:
    return Policy(**{**BASE, "name": "ecrm", "kind": "rebuild", "overhead_s": 0.01, "sync_restore_s": 0.1,
                     "rebuild_s": 2.1, "rebuild_slowdown": 0.5, "k": 2, "r": 1, **kw})


def test_rebuild_keeps_training_slower_and_counts_the_window_as_the_runtime_does():
    p = ecrm()
    ff = simulate(p, 100)
    assert ff.wall_s == pytest.approx(100 * (STEP + 0.01))
    out = simulate(p, 100, at_steps=[Failure(step=50, servers=(1,))])
    (rec,) = out.recoveries
    window = p.rebuild_s - p.sync_restore_s
    assert rec.kind == "rebuild" and rec.reexec_steps == 0
    assert rec.time_lost_s == pytest.approx(p.latency_s + p.sync_restore_s + p.resume_extra_s + window)
    slow_steps = math.ceil(window / (p.run_step_s * 1.5))
    extra_wall = slow_steps * p.run_step_s * 0.5
    assert out.wall_s == pytest.approx(ff.wall_s + p.latency_s + p.sync_restore_s + p.resume_extra_s
                                       + extra_wall)
    mild = ecrm(rebuild_slowdown=BACK_TO_NORMAL_SLOWDOWN / 2)  # within 95 %: not time lost
    rec = simulate(mild, 100, at_steps=[Failure(step=50, servers=(1,))]).recoveries[0]
    assert rec.time_lost_s == pytest.approx(p.latency_s + p.sync_restore_s + p.resume_extra_s)


@pytest.mark.parametrize(("other", "lost"), [(3, True), (4, False)])
def test_ecrm_loses_the_job_when_a_stripe_loses_more_than_r_members(other, lost):
    # rotated placement, 8 servers, k + r = 3: stripe s on servers s, s+1, s+2 (mod 8), so servers 1
    # and 3 share stripe 1, servers 1 and 4 share none
    p = ecrm(servers=8)
    fails = [Failure(step=50, servers=(1,)), Failure(step=52, servers=(other,))]  # during 1's rebuild
    out = simulate(p, 100, at_steps=fails)
    assert out.unrecoverable == (1 if lost else 0)
    assert out.recoveries[1].kind == ("unrecoverable" if lost else "rebuild")
    assert out.finished


def test_ecrm_failures_after_the_rebuild_are_independent():
    p = ecrm(servers=8)
    out = simulate(p, 200, at_steps=[Failure(step=50, servers=(1,)), Failure(step=150, servers=(2,))])
    assert out.unrecoverable == 0 and [r.kind for r in out.recoveries] == ["rebuild", "rebuild"]


def test_partial_checkpoints_add_their_stall():
    p = Policy(**{**BASE, "name": "cpr-mfu", "kind": "partial", "interval_steps": 20, "ckpt_stall_s": 0.2,
                  "restore_s": 0.3, "partial_every_steps": 5, "partial_stall_s": 0.01})
    out = simulate(p, 100)
    plain = simulate(Policy(**{**BASE, "name": "cpr", "kind": "partial", "interval_steps": 20,
                               "ckpt_stall_s": 0.2, "restore_s": 0.3}), 100)
    n_partial = (100 - 1) // 5
    assert out.wall_s == pytest.approx(plain.wall_s + n_partial * 0.01)


def test_shrink_runs_slower_until_the_node_comes_back():
    """4 servers lose one: a rollback, then 4/3 as long per step for ``grow_back_s``; the missing
    quarter of the throughput counts against the ETTR."""
    base = ckpt()
    shrunk = ckpt(shrink=True, grow_back_s=3.0)
    f = [Failure(time_s=2.55, servers=(1,))]
    a, b = simulate(base, 100, f), simulate(shrunk, 100, f)
    assert [r.kind for r in b.recoveries] == ["rollback"] and b.recoveries[0].time_lost_s == pytest.approx(
        a.recoveries[0].time_lost_s)
    assert b.wall_s - a.wall_s == pytest.approx(3.0 / 4, abs=STEP)  # 3 s at 3/4 speed: ~0.75 s longer
    assert b.shrink_lost_s == pytest.approx(b.wall_s - a.wall_s, abs=STEP)
    assert b.ettr == pytest.approx(1 - (b.time_lost_s + b.stall_s + b.shrink_lost_s) / b.wall_s)


def test_shrink_of_a_trainer_costs_no_copy_and_ecrm_hands_its_rows_over():
    p = ckpt(shrink=True, grow_back_s=1.0, trainer_restore_s=0.4)
    out = simulate(p, 100, [Failure(time_s=2.55, trainers=1)])
    assert out.recoveries[0].kind == "peer" and out.recoveries[0].recovery_s == pytest.approx(0.5)
    assert out.shrink_lost_s == pytest.approx(1.0 / 4, abs=STEP)
    ec = dict(BASE, name="ecrm", kind="rebuild", k=2, r=1, shrink=True, sync_restore_s=0.1, restore_s=0.2)
    server = [Failure(time_s=2.55, servers=(1,))]
    rec = simulate(Policy(**ec), 100, server).recoveries[0]  # the survivors decode: nothing re-executed
    assert (rec.kind, rec.reexec_steps) == ("handover", 0)
    assert rec.recovery_s == pytest.approx(0.5 + 0.1 + 0.2)
    # a trainer lost with the server: the fallback's rollback, or a restart without one
    both = [Failure(time_s=2.55, servers=(1,), trainers=1)]
    assert simulate(Policy(**ec), 100, both).recoveries[0].kind == "restart"
    assert simulate(Policy(**ec, interval_steps=10), 100, both).recoveries[0].kind == "rollback"
    # fewer than k + r = 3 servers left: a restart
    two = [Failure(time_s=2.55, servers=(1, 2))]
    assert simulate(Policy(**{**ec, "r": 2}), 100, two).recoveries[0].kind == "restart"
