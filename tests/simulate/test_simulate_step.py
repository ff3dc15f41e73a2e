"""The simulator's cluster model: the step's critical path with overlap, scaling, dedicated layouts,
storage shared by the job, cnr's chain sizes, rescheduling, and trials until the interval is narrow
(no MPI, milliseconds)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mpiec.errors import MpiecError
from mpiec.launch.resolve import load_config
from mpiec.reproduce.papers import PAPERS
from mpiec.simulate.access import changed_fraction, distinct_rows
from mpiec.simulate.checkpoint_io import storage_model, transfer_s
from mpiec.simulate.costs import Costs, Linear, RuntimeCosts, StepCosts, StrategyCosts
from mpiec.simulate.diffs import chain_ratios, quantized_ratio
from mpiec.simulate.failures import Arrival, NodeRenewal, Schedule
from mpiec.simulate.job import Job
from mpiec.simulate.model import Failure, simulate
from mpiec.simulate.papers import Burst, preset
from mpiec.simulate.policies import Setup, build_policy, parity_bytes_per_server_step, step_model
from mpiec.simulate.scale import Trials, _failures, format_table, half_width, sweep
from mpiec.simulate.step import Hardware, step_times
from mpiec.storage.model import PROFILES

STEP = StepCosts(trainer=Linear(0.001, 1e9), server=Linear(0.0002, 5e8))
CKPT = StrategyCosts("ckpt", "rollback", write=Linear(0.01, 1e8), read=Linear(0.02, 1e8))
ECRM = StrategyCosts("ecrm", "rebuild", parity=Linear(0.0005, 1e8), parity_cpu=Linear(0.0002, 2e8),
                     unique_fraction=0.3, rebuild=Linear(0.1, 5e7), rebuild_slowdown=1.5)
CNR = StrategyCosts("cnr", "rollback", write=Linear(0.01, 1e8), read=Linear(0.02, 1e8), unique_fraction=0.3)


def costs(**strategies: StrategyCosts) -> Costs:
    rt = RuntimeCosts(detect_s=0.05, shrink_agree_s=0.1, plan_s=0.01, replace_s=0.2, step_s=0.05, ranks=4,
                      recoveries=1)
    return Costs(rt, strategies, step=STEP)


def job(servers: int = 4) -> Job:
    cfg = load_config(preset="laptop", strategy="none", sets=[f"layout.servers={servers}"], memory=False)
    return Job.from_config(cfg, 0.05)


# -- the step's critical path ---------------------------------------------------------------------

def test_a_step_is_trainer_then_server_then_wire_and_protection_hides_in_the_window():
    j = job()
    t = step_times(STEP, j, Hardware(), protection_cpu_s=0.0)
    work = j.global_batch / j.trainers * j.trainer_work_per_sample
    assert t.trainer_s == pytest.approx(STEP.trainer.seconds(work))
    assert t.server_s == pytest.approx(STEP.server.seconds(j.lookups_per_step / j.servers * j.row_bytes))
    assert t.step_s == pytest.approx(t.trainer_s + t.server_s + t.comm_s) and t.exposed_s == 0.0
    small = step_times(STEP, j, Hardware(), protection_cpu_s=0.5 * t.window_s)
    assert small.exposed_s == 0.0 and small.run_step_s == pytest.approx(t.step_s)  # fits the idle window
    big = step_times(STEP, j, Hardware(), protection_cpu_s=3 * t.window_s)
    assert big.exposed_s == pytest.approx(big.protection_s - big.window_s)  # only the excess shows
    assert big.run_step_s == pytest.approx(big.server_s + big.protection_s)  # the server is the bottleneck
    shared = step_times(STEP, j, Hardware(overlap=False), protection_cpu_s=0.5 * t.window_s)
    assert shared.exposed_s == pytest.approx(shared.protection_s) and shared.exposed_s > 0  # all of it


def test_speed_hardware_and_threads_scale_their_terms():
    j = job()
    base = step_times(STEP, j, Hardware(), protection_cpu_s=0.01)
    fast = step_times(STEP, j, Hardware(trainer_speedup=4, server_threads=2), protection_cpu_s=0.01)
    assert fast.trainer_s == pytest.approx(base.trainer_s / 4)
    assert fast.server_s == pytest.approx(base.server_s / 2)
    slow = step_times(STEP, j, Hardware(speed=3.0), protection_cpu_s=0.01)
    assert slow.step_s == pytest.approx(3 * base.step_s)
    assert slow.protection_s == pytest.approx(3 * base.protection_s)
    with pytest.raises(MpiecError, match="server_threads"):
        Hardware(server_threads=0)


def test_ecrm_overhead_comes_from_the_step_model_not_the_critical_path_fit():
    j = job()
    c = costs(ecrm=ECRM)
    measured = build_policy("ecrm", c, j, 3600.0)  # a measured run's replay: the critical-path fit
    assert measured.overhead_s == pytest.approx(ECRM.parity.seconds(parity_bytes_per_server_step(ECRM, j)))
    hw = Hardware(overlap=True)
    modelled = build_policy("ecrm", c, j, 3600.0, setup=Setup(hardware=hw))
    times = step_model(c, ECRM, j, hw)
    assert modelled.step_s == pytest.approx(times.step_s)
    assert modelled.overhead_s == pytest.approx(times.exposed_s)
    shared = build_policy("ecrm", c, j, 3600.0, setup=Setup(hardware=Hardware(overlap=False)))
    assert shared.overhead_s > modelled.overhead_s
    assert shared.overhead_s == pytest.approx(step_model(c, ECRM, j, Hardware(overlap=False)).protection_s)


def test_strong_scaling_keeps_the_global_batch_weak_the_batch_per_trainer():
    j = job()
    strong = j.at_scale(100)
    weak = j.at_scale(100, scaling="weak")
    assert strong.global_batch == j.global_batch
    assert weak.global_batch == j.batch_per_trainer * 100
    c = costs(ecrm=ECRM)
    hw = Hardware()
    # strong: each server's share of the parity shrinks as 1/N, and so does each trainer's compute
    a, b = step_model(c, ECRM, j.at_scale(10), hw), step_model(c, ECRM, j.at_scale(1000), hw)
    assert b.trainer_s < a.trainer_s and b.protection_s < a.protection_s
    # weak: the per-rank work stays
    wa, wb = step_model(c, ECRM, j.at_scale(10, scaling="weak"), hw), step_model(
        c, ECRM, j.at_scale(1000, scaling="weak"), hw)
    assert wb.trainer_s == pytest.approx(wa.trainer_s)
    with pytest.raises(MpiecError, match="scaling"):
        j.at_scale(10, scaling="elastic")


def test_a_dedicated_layout_maps_nodes_to_servers_then_trainers():
    d = job().with_ranks(5, 15)
    assert (d.nodes, d.servers, d.trainers) == (20, 5, 15)
    assert d.lost_with(3) == ((3,), 0) and d.lost_with(5) == ((), 1)
    co = job().at_scale(8, servers_per_node=2)
    assert co.lost_with(1) == ((1, 9), 1)  # a node's servers sit `nodes` apart
    fails = list(_failures(Schedule(Burst((10.0,), 3, 5), 20, 0), d))
    assert len(fails) == 1 and len(set(fails[0].servers)) == 3 and all(s < 5 for s in fails[0].servers)


# -- storage --------------------------------------------------------------------------------------

def test_writes_share_the_aggregate_and_a_partial_restore_reads_alone():
    pfs = PROFILES["pfs-node"]  # 1000 MB/s per rank, 2000 MB/s for the job, 1 ms
    part = 1e9
    assert transfer_s(pfs, part, 1) == pytest.approx(0.001 + 1.0)
    assert transfer_s(pfs, part, 10) == pytest.approx(0.001 + 5.0)  # 10 GB through 2 GB/s
    assert transfer_s(pfs, part, 10, write=False) >= transfer_s(pfs, part, 2, write=False)
    j = job(4)
    rollback = build_policy("ckpt", costs(ckpt=CKPT), j, 3600.0, setup=Setup(storage=pfs))
    partial = build_policy("cpr", costs(cpr=dataclasses.replace(CKPT, name="cpr", kind="partial")), j, 3600.0,
                           setup=Setup(storage=pfs))
    assert rollback.ckpt_stall_s == pytest.approx(transfer_s(pfs, j.part_bytes, 4, extra_bytes=j.dense_bytes))
    both = (4 * j.part_bytes + j.dense_bytes) / 2e9
    assert rollback.ckpt_stall_s == pytest.approx(0.001 + max(both, max(j.part_bytes, j.dense_bytes) / 1e9))
    assert rollback.restore_s == pytest.approx(transfer_s(pfs, j.part_bytes, 4, write=False))
    assert partial.restore_s == pytest.approx(transfer_s(pfs, j.part_bytes, 1, write=False))


def test_storage_flags_override_a_profile_and_bad_figures_are_one_line():
    m = storage_model("pfs-node", aggregate_gbps=10.0, node_gbps=0.5, latency_ms=2.0)
    assert (m.aggregate_mb_s, m.write_mb_s, m.read_mb_s, m.latency_s) == (10_000.0, 500.0, 500.0, 0.002)
    assert storage_model("calibrated") is None and storage_model(None) is None
    assert storage_model(None, aggregate_gbps=1.0).aggregate_mb_s == 1000.0
    for bad, flag in (({"aggregate_gbps": -1.0}, "--storage-gbps"),
                      ({"latency_ms": math.nan}, "--storage-latency")):
        with pytest.raises(MpiecError, match=flag):
            storage_model("pfs-node", **bad)
    with pytest.raises(MpiecError, match="--storage-profile"):
        storage_model("tape")


def test_a_fixed_interval_in_seconds_and_rescheduling():
    j = job()
    p = build_policy("ckpt", costs(ckpt=CKPT), j, 3600.0, setup=Setup(interval_s=60.0))
    assert p.interval_steps == round(60.0 / p.run_step_s) and "60 s" in p.interval_rule
    spare = build_policy("ckpt", costs(ckpt=CKPT), j, 3600.0)
    resched = build_policy("ckpt", costs(ckpt=CKPT), j, 3600.0, setup=Setup(reschedule_s=600.0))
    assert resched.latency_s == pytest.approx(spare.latency_s - 0.2 + 600.0)  # replace 0.2 s -> 600 s


# -- cnr's chain ----------------------------------------------------------------------------------

def test_rows_changed_grow_with_the_interval_towards_all():
    j = job()
    a, b = changed_fraction(j, 1), changed_fraction(j, 100)
    assert 0 < a < b <= 1 and changed_fraction(j, 0) == 0
    assert changed_fraction(j, 1, ratio=2.0) == pytest.approx(2 * a)
    assert changed_fraction(j, 10**9) == pytest.approx(1.0)


def test_the_access_model_counts_the_distinct_ids_the_synthetic_data_draws():
    """The model against the suite's own generator: the distinct ids of one step's batch."""
    from mpiec.data.factory import make_source

    cfg = load_config(preset="laptop", strategy="none", memory=False)
    j = Job.from_config(cfg, 0.05)
    for steps in (1, 8):
        batch = make_source(cfg).batch(0, j.global_batch * steps)
        bounds = batch.bounds
        drawn = sum(len(np.unique(batch.ids[:, bounds[t]:bounds[t + 1]])) for t in range(batch.n_tables))
        assert drawn == pytest.approx(distinct_rows(j, steps), rel=0.03), steps


def test_chain_policies_trade_writes_for_restores():
    j = dataclasses.replace(job(), steps=10_000)
    one, one_r = chain_ratios(j, 0.01, 50, "one-shot", 32)
    con, con_r = chain_ratios(j, 0.01, 50, "consecutive", 32)
    inter, inter_r = chain_ratios(j, 0.01, 50, "intermittent", 32)
    assert con < one  # consecutive diffs hold one interval's rows
    assert con_r > one_r  # ... and a restore reads every diff since the baseline
    assert inter <= one  # a new baseline when the diffs since grow too large
    assert 0 < inter_r <= one_r
    q, q_r = chain_ratios(j, 0.01, 50, "one-shot", 4)
    assert q == pytest.approx(one * quantized_ratio(j, 4)) and quantized_ratio(j, 4) < 0.5
    with pytest.raises(ValueError, match="diff policy"):
        chain_ratios(j, 0.01, 50, "sometimes", 32)


def test_cnr_prices_its_chain_from_the_rows_changed():
    j = job()
    c = costs(cnr=CNR)
    sparse = build_policy("cnr", c, j, 3600.0, setup=Setup(interval_s=1.0, diff="consecutive"))
    dense = build_policy("cnr", c, j, 3600.0, setup=Setup(interval_s=60.0, diff="consecutive"))
    assert sparse.ckpt_bytes < dense.ckpt_bytes  # fewer rows change in a shorter interval
    quant = build_policy("cnr", c, j, 3600.0, setup=Setup(interval_s=60.0, diff="consecutive", bits=4))
    assert quant.ckpt_bytes < dense.ckpt_bytes


# -- log, cpr-mfu ---------------------------------------------------------------------------------

def test_log_replays_the_steps_since_its_checkpoint_and_loses_nothing():
    log = StrategyCosts("log", "replay", write=Linear(0.01, 1e8), read=Linear(0.02, 1e8),
                        replay=Linear(0.05, 100.0))  # 0.05 s + 10 ms per step replayed
    p = build_policy("log", costs(log=log), job(), 3600.0, interval_steps=100)
    assert p.kind == "replay" and p.replay_s_per_step == pytest.approx(0.01)
    out = simulate(p, 300, at_steps=[Failure(step=150, servers=(1,))])
    rec = out.recoveries[0]
    assert rec.kind == "replay" and rec.reexec_steps == 0 and out.lost_samples == 0
    assert rec.recovery_s == pytest.approx(p.latency_s + p.restore_s + 50 * 0.01)


def test_partial_checkpoints_keep_their_share_of_the_lost_updates():
    cpr = dataclasses.replace(CKPT, name="cpr", kind="partial")
    mfu = dataclasses.replace(CKPT, name="cpr-mfu", kind="partial", partial_coverage=0.75)
    j = job()
    a = simulate(build_policy("cpr", costs(cpr=cpr), j, 3600.0, interval_steps=100), 300,
                 at_steps=[Failure(step=150, servers=(1,))])
    b = simulate(build_policy("cpr-mfu", costs(**{"cpr-mfu": mfu}), j, 3600.0, interval_steps=100), 300,
                 at_steps=[Failure(step=150, servers=(1,))])
    assert a.lost_samples > 0 and b.lost_samples == pytest.approx(a.lost_samples * 0.25, rel=1e-3)


# -- trials ---------------------------------------------------------------------------------------

def test_trials_run_until_the_ettr_interval_is_narrow():
    j = dataclasses.replace(job(), steps=2000, step_s=0.05)
    c = costs(ckpt=CKPT)
    rare = NodeRenewal(mtbf_node_s=1e9)  # no failure: every trial alike, the minimum settles it
    rows = sweep(c, j, [4], ["ckpt"], rare, Trials(3, 50, 0.05))
    assert rows[0].trials == 3 and rows[0].ci["ettr"] == 0.0
    often = NodeRenewal(mtbf_node_s=60.0)
    wide = sweep(c, j, [4], ["ckpt"], often, Trials(3, 3, 0.0001))[0]
    narrow = sweep(c, j, [4], ["ckpt"], often, Trials(3, 400, 0.0001))[0]
    assert wide.trials == 3 and narrow.trials > wide.trials
    assert narrow.ci["ettr"] < wide.ci["ettr"]


def test_trials_alike_print_one_figure_and_others_a_student_t_interval():
    # the half-width is stats.mean_t's: t(0.975, 2) = 4.303 for 3 trials, not a normal 1.96
    mean, half = half_width([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.3027 * 1.0 / math.sqrt(3), rel=1e-4)
    assert half_width([0.5, 0.5, 0.5]) == (0.5, 0.0) and math.isnan(half_width([0.5])[1])
    j = dataclasses.replace(job(), steps=2000, step_s=0.05)
    rows = sweep(costs(ckpt=CKPT), j, [4], ["ckpt"], NodeRenewal(mtbf_node_s=1e9), Trials(3, 3, 0.05))
    table = format_table(rows)
    # no failure: every trial alike, one figure (no "± 0" posing as an interval of width 0)
    assert "det." in table and "± 0" not in table


def test_a_repair_that_holds_the_slot_delays_the_recovery():
    j = job().at_scale(4)
    sched = Schedule(_Given([Arrival(10.0, 1, repair_s=30.0)]), 4, 0)
    held = next(_failures(sched, j, hold_repair=True))
    free = next(_failures(sched, j, hold_repair=False))
    assert held.wait_s == 30.0 and free.wait_s == 0.0
    p = build_policy("ckpt", costs(ckpt=CKPT), j, 3600.0, interval_steps=50)
    a = simulate(p, 500, [held])
    b = simulate(p, 500, [free])
    assert a.wall_s == pytest.approx(b.wall_s + 30.0)


class _Given:
    def __init__(self, arrivals: list[Arrival]) -> None:
        self.list = arrivals

    def arrivals(self, nodes: int, seed: int):
        return iter(self.list)


# -- papers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", sorted(PAPERS))
def test_a_paper_preset_loads_its_model_and_lists_every_input(key):
    paper = preset(key)
    cfg = load_config(preset=paper.preset, sets=list(paper.sets), memory=False)
    j = Job.from_config(cfg, 0.1).with_ranks(paper.servers, paper.trainers)
    assert j.servers == paper.servers and j.rows > 0
    text = "; ".join(paper.inputs())
    assert all(s in text for s in paper.sets) and paper.assumed and paper.calibrated
    assert any(v.strategy != "none" for v in paper.variants)


def test_ecrec_preset_is_the_papers_table():
    cfg = load_config(preset="mlperf-dlrmv2", sets=list(preset("ecrec").sets), memory=False)
    assert sum(cfg.data.cardinalities) == 197_767_405 and cfg.model.dim == 128
    assert cfg.training.batch_size == 2048 and cfg.training.optimizer == "sgd"


def test_a_checkpoint_interrupted_by_a_partial_recovery_does_not_stop_the_schedule():
    """A failure during the stall of the checkpoint due at step 100: the survivors of a partial
    recovery go on from step 100; the next checkpoint is the schedule's (200), not never."""
    cpr = dataclasses.replace(CKPT, name="cpr", kind="partial", write=Linear(5.0, 1e12))
    p = build_policy("cpr", costs(cpr=cpr), job(), 3600.0, interval_steps=100)
    t100 = 100 * p.run_step_s
    out = simulate(p, 1000, [Failure(time_s=t100 + 1.0, servers=(1,))])
    assert out.recoveries[0].step == 100
    assert out.checkpoints == 8  # 200, 300, ..., 900 (100 was interrupted, 1000 is the end)


def test_a_rebuild_on_dedicated_cores_is_paced_into_the_idle_window():
    j = job()
    c = costs(ecrm=ECRM)
    hw = Hardware()
    p = build_policy("ecrm", c, j, 3600.0, setup=Setup(hardware=hw))
    t = step_model(c, ECRM, j, hw)
    cpu = ECRM.rebuild.seconds((j.k + j.r) * j.shard_rows * j.row_bytes)
    assert p.rebuild_slowdown == 0.0
    assert p.rebuild_s == pytest.approx(math.ceil(cpu / (t.window_s - t.protection_s)) * t.run_step_s)
    shared = build_policy("ecrm", c, j, 3600.0, setup=Setup(hardware=Hardware(overlap=False)))
    assert shared.rebuild_slowdown == ECRM.rebuild_slowdown and shared.rebuild_s == pytest.approx(cpu)


def test_the_rebuild_pacing_uses_the_rebuilding_ranks_cpu_when_measured():
    j = job()
    fast = dataclasses.replace(ECRM, rebuild_cpu=Linear(0.0, 1e9))  # 1 GB/s of CPU, paced wall 50 MB/s
    c = costs(ecrm=fast)
    hw = Hardware()
    p = build_policy("ecrm", c, j, 3600.0, setup=Setup(hardware=hw))
    t = step_model(c, fast, j, hw)
    cpu = (j.k + j.r) * j.shard_rows * j.row_bytes / 1e9
    assert p.rebuild_s == pytest.approx(math.ceil(cpu / (t.window_s - t.protection_s)) * t.run_step_s)


def test_one_registry_of_papers_names_both_studies_views():
    """Each paper of ``mpiec.reproduce.papers.PAPERS`` has its reproduction and its simulate preset, under
    the same key and on the same regime figures; both CLIs offer exactly its keys."""
    from mpiec.reproduce import PAPERS as REPRODUCED
    from mpiec.reproduce import paper
    from mpiec.reproduce.cli import build_parser as reproduce_parser
    from mpiec.simulate.cli import build_parser as simulate_parser

    assert REPRODUCED is PAPERS
    for key, entry in PAPERS.items():
        assert entry.key == key and preset(key).key == key and paper(key).name == key
    choices = {a.dest: a.choices for a in reproduce_parser()._actions}
    assert list(choices["paper"]) == [*PAPERS, "all"]
    sim = {a.dest: a.choices for a in simulate_parser()._actions}
    assert sorted(sim["paper"]) == sorted(PAPERS)
