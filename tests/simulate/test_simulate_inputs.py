"""``mpiec simulate``'s inputs: failure processes, published rates, traces, cost fits and files, the job
from a config, and the strategies' policies with the suite's interval rules (no MPI, milliseconds)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mpiec.errors import MpiecError
from mpiec.launch.resolve import load_config
from mpiec.simulate.costs import Costs, Linear, RuntimeCosts, StrategyCosts, fit_linear, load_costs
from mpiec.simulate.failures import PUBLISHED, NodeRenewal, Replay, Schedule, trace_arrivals
from mpiec.simulate.job import Job
from mpiec.simulate.policies import build_policy, parity_bytes_per_server_step
from mpiec.strategies.checkpointing import interval_for_pls, young_interval

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


# -- failures -------------------------------------------------------------------------------------

def test_exponential_node_failures_arrive_at_nodes_over_mtbf():
    proc = NodeRenewal(mtbf_node_s=1000.0)
    arrivals = list(itertools.islice(proc.arrivals(50, seed=3), 4000))
    times = np.array([a.time_s for a in arrivals])
    assert np.all(np.diff(times) >= 0) and all(0 <= a.node < 50 for a in arrivals)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(proc.job_mtbf_s(50), rel=0.06)  # 4000 gaps: ~1.6 % std error
    again = list(itertools.islice(proc.arrivals(50, seed=3), 4000))
    assert again == arrivals  # seeded


def test_weibull_lifetimes_keep_the_node_mtbf_as_their_mean():
    proc = NodeRenewal(mtbf_node_s=500.0, shape=0.7)
    life = proc._lifetimes(np.random.default_rng(0), 200_000)
    assert life.mean() == pytest.approx(500.0, rel=0.02)
    assert proc.scale_s == pytest.approx(500.0 / math.gamma(1 + 1 / 0.7))
    with pytest.raises(MpiecError, match="shape"):
        NodeRenewal(100.0, shape=0.0)


def test_replay_sorts_and_drops_nodes_the_job_does_not_use():
    rep = Replay((5.0, 1.0, 3.0), (0, 7, 2))
    got = [(a.time_s, a.node) for a in rep.arrivals(4, seed=0)]
    assert got == [(3.0, 2), (5.0, 0)]
    assert rep.job_mtbf_s(4) == pytest.approx(2.0)
    sched = Schedule(rep, 4, 0)
    assert sched[1].time_s == 5.0 and sched[2] is None


def test_a_trace_replays_onto_the_job_nodes_time_compressed():
    from mpiec.failures.traces import load_trace

    failures = load_trace(TRACES / "small_trace.json")
    rep = trace_arrivals(TRACES / "small_trace.json", nodes=1000, scale=10.0, seed=1, mapping="fold")
    assert len(rep.times_s) == len(failures)
    assert sorted(rep.times_s) == pytest.approx(sorted(f.time_s / 10.0 for f in failures))
    assert all(0 <= n < 1000 for n in rep.nodes)


def test_published_llama3_rate_is_derived_from_the_paper_counts():
    pub = PUBLISHED["llama3"]
    assert (pub.failures, pub.days, pub.gpus, pub.gpus_per_node) == (419, 54.0, 16384, 8)
    assert pub.mtbf_node_h == pytest.approx(54 * 24 * (16384 / 8) / 419)
    assert pub.job_mtbf_h == pytest.approx(54 * 24 / 419)  # about three hours, as the paper says
    assert "2407.21783" in pub.source


# -- costs ---------------------------------------------------------------------------------------

def test_fit_linear_separates_latency_and_rate_given_two_sizes():
    pts = [(b, 0.01 + b / 2e8) for b in (1e6, 1e6, 4e7, 4e7, 9e7)]
    lin = fit_linear(pts)
    assert lin.fit == "linear" and lin.latency_s == pytest.approx(0.01) and lin.rate_Bps == pytest.approx(2e8)
    one = fit_linear([(1e6, 0.02), (1e6, 0.04)])
    assert one.fit == "rate" and one.latency_s == 0 and one.rate_Bps == pytest.approx(2e6 / 0.06)
    assert fit_linear([(0, 1.0)]) is None


def costs(**strategies: StrategyCosts) -> Costs:
    rt = RuntimeCosts(detect_s=0.1, shrink_agree_s=0.2, plan_s=0.01, replace_s=0.05, step_s=0.02, ranks=4,
                      recoveries=3)
    return Costs(rt, strategies)


CKPT = StrategyCosts("ckpt", "rollback", write=Linear(0.01, 1e8), read=Linear(0.0, 5e8))
CPR = StrategyCosts("cpr", "partial", write=Linear(0.01, 1e8), read=Linear(0.0, 5e8))
ECRM = StrategyCosts("ecrm", "rebuild", parity=Linear(0.0, 1e9), unique_fraction=0.5,
                     rebuild=Linear(0.1, 1e8), rebuild_slowdown=0.2, sync_restore_s=0.05)


def test_costs_round_trip_through_json_and_bad_files_name_the_key(tmp_path):
    c = costs(ckpt=CKPT, ecrm=ECRM)
    assert Costs.from_json(c.to_json()) == c
    raw = json.loads(c.to_json())
    raw["runtime"]["detect_s"] = -1
    with pytest.raises(MpiecError, match="runtime.detect_s"):
        Costs.from_json(json.dumps(raw))
    del raw["runtime"]
    with pytest.raises(MpiecError, match="missing key 'runtime'"):
        Costs.from_json(json.dumps(raw))
    bad = tmp_path / "c.json"
    bad.write_text("{")
    with pytest.raises(MpiecError, match=r"costs file .*c.json: not valid JSON"):
        load_costs(bad)


def test_shrink_agree_scales_with_log2_of_the_ranks():
    rt = costs().runtime
    assert rt.latency_s(4) == pytest.approx(0.36)
    assert rt.latency_s(1024) == pytest.approx(0.1 + 0.2 * 10 / 2 + 0.01 + 0.05)
    assert rt.latency_s(1024, scale_agree=False) == pytest.approx(0.36)


# -- job and policies ----------------------------------------------------------------------------

def tiny_job(servers: int = 2) -> Job:
    cfg = load_config(preset="tiny", sets=[f"layout.servers={servers}"], memory=False)
    return Job.from_config(cfg, step_s=0.02)


def test_job_sizes_come_from_the_config():
    cfg = load_config(preset="tiny", memory=False)
    job = tiny_job()
    assert job.rows == sum(cfg.data.cardinalities) and job.row_bytes == 4 * (cfg.model.dim + 1)
    assert job.shard_rows == -(-job.rows // 2) and job.global_batch == cfg.global_batch
    big = job.at_scale(1000, servers_per_node=2)
    assert big.servers == 2000 and big.trainers == 1000 and big.lost_on_node() == (2, 1)
    with pytest.raises(MpiecError, match="no node layout"):
        job.lost_on_node()


def test_checkpoint_intervals_follow_the_suites_rules():
    job = tiny_job().at_scale(100, step_s=0.05)
    mtbf = 3600.0
    p = build_policy("ckpt", costs(ckpt=CKPT), job, mtbf)
    assert p.interval_rule == "young"
    assert p.interval_steps == max(1, round(young_interval(p.ckpt_stall_s, mtbf) / 0.05))
    q = build_policy("cpr", costs(cpr=CPR), job, mtbf, target_pls=0.02)
    assert q.interval_steps == max(1, round(interval_for_pls(0.02, job.servers, mtbf) / 0.05))
    g = build_policy("ckpt", costs(ckpt=CKPT), job, mtbf, interval_steps=7)
    assert (g.interval_steps, g.interval_rule) == (7, "given")


def test_stall_and_restore_scale_with_the_part_a_server_holds():
    small, big = tiny_job(2), tiny_job(4)
    a = build_policy("ckpt", costs(ckpt=CKPT), small, 100.0)
    b = build_policy("ckpt", costs(ckpt=CKPT), big, 100.0)
    assert a.ckpt_stall_s == pytest.approx(CKPT.write.seconds(small.part_bytes))
    assert b.restore_s == pytest.approx(CKPT.read.seconds(big.part_bytes)) and b.restore_s < a.restore_s


def test_ecrm_parity_work_and_rebuild_scale_with_the_shard():
    small, big = tiny_job(2), tiny_job(4)
    a = build_policy("ecrm", costs(ecrm=ECRM), small, 100.0)
    b = build_policy("ecrm", costs(ecrm=ECRM), big, 100.0)
    assert a.overhead_s == pytest.approx(ECRM.parity.seconds(parity_bytes_per_server_step(ECRM, small)))
    assert b.overhead_s == pytest.approx(a.overhead_s * 2 / 4, rel=1e-6)
    fetched = (small.k + small.r) * small.shard_rows * small.row_bytes
    assert a.rebuild_s == pytest.approx(ECRM.rebuild.seconds(fetched))


def test_a_strategy_without_costs_is_refused_naming_the_calibrated_ones():
    with pytest.raises(MpiecError, match=r"no calibrated costs for strategy 'cnr' \(calibrated: ckpt\)"):
        build_policy("cnr", costs(ckpt=CKPT), tiny_job(), 100.0)
    with pytest.raises(MpiecError, match="strategy 'replica' is not modelled: a replica rebuild"):
        build_policy("replica", costs(ckpt=CKPT), tiny_job(), 100.0)
    with pytest.raises(MpiecError, match=r"unknown strategy 'nope' for the simulator \(known: none, ckpt"):
        build_policy("nope", costs(ckpt=CKPT), tiny_job(), 100.0)
    assert build_policy("none", costs(), tiny_job(), 100.0).kind == "restart"


def test_costs_at_another_speed_stretch_cpu_bound_durations_but_not_paced_writes():
    paced = dataclasses.replace(CKPT, write_paced=True)
    c = costs(ckpt=paced, ecrm=ECRM)
    slow = c.at_speed(2.0)
    assert slow.runtime.detect_s == pytest.approx(0.2) and slow.runtime.step_s == c.runtime.step_s
    assert slow.strategies["ckpt"].write == paced.write  # sleep-paced: the bytes set its time
    assert slow.strategies["ckpt"].read.seconds(1e6) == pytest.approx(2 * paced.read.seconds(1e6))
    assert slow.strategies["ecrm"].parity.seconds(1e6) == pytest.approx(2 * ECRM.parity.seconds(1e6))
    assert slow.strategies["ecrm"].rebuild_slowdown == ECRM.rebuild_slowdown  # a ratio
    unpaced = costs(ckpt=CKPT).at_speed(3.0).strategies["ckpt"].write
    assert unpaced.seconds(1e6) == pytest.approx(3 * CKPT.write.seconds(1e6))
    assert c.at_speed(1.0) is c


# -- bad input: one line, exit 2, nothing unbounded ---------------------------------------------

@pytest.mark.parametrize(("mutate", "message"), [
    (lambda raw: raw["runtime"].__setitem__("step_s", "x"), "runtime.step_s must be a number, got 'x'"),
    (lambda raw: raw.__setitem__("strategies", []), "strategies must be a table, got []"),
    (lambda raw: raw["strategies"].__setitem__("ckpt", 3), "strategies.ckpt must be an object, got 3"),
    (lambda raw: raw["strategies"]["ckpt"]["write"].__setitem__("rate_Bps", None),
     "strategies.ckpt.write.rate_Bps must be a number, got None"),
    (lambda raw: raw["runtime"].__setitem__("ranks", 4.5), "runtime.ranks must be an integer, got 4.5"),
    (lambda raw: raw["runtime"].__setitem__("speed_steps", {"tiny": "fast"}),
     "runtime.speed_steps.tiny must be a number"),
    (lambda raw: raw["strategies"]["ckpt"].__setitem__("colour", 1), "unknown key 'strategies.ckpt.colour'"),
    (lambda raw: raw["runtime"].__delitem__("step_s"), "missing key 'runtime.step_s'"),
    (lambda raw: raw.__setitem__("sources", "a.h5"), "sources must be a list"),
    (lambda raw: raw["runtime"].__setitem__("detect_s", 1e300),
     "runtime.detect_s must be a finite number in [0, 1e+15], got 1e+300"),
])
def test_a_mistyped_costs_file_is_one_error_naming_the_key(tmp_path, mutate, message):
    raw = json.loads(costs(ckpt=CKPT).to_json())
    mutate(raw)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(MpiecError) as exc:
        load_costs(path)
    assert str(exc.value).startswith(f"costs file {path}: ") and message in str(exc.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--hours", "1e12"], "--hours must be a number > 0 and <= 1,000,000, got 1e+12"),
    (["--hours", "nan"], "--hours must be a number > 0"),
    (["--nodes", "100000000000"], "--nodes: at most 5,000,000 nodes, got 100,000,000,000"),
    (["--weibull-shape", "1e-6"], "--weibull-shape must be a number in [0.1, 100], got 1e-06"),
    (["--target-pls", "nan"], "--target-pls must be a number > 0 and <= 1, got nan"),
    (["--target-pls", "2"], "--target-pls must be a number > 0 and <= 1"),
    (["--mtbf-node-h", "1e300"], "--mtbf-node-h must be a number > 0 and <= 1,000,000,000"),
    (["--step-time", "1e-300"], "--step-time must be a number >= 1e-06 and <= 86,400"),
    (["--trials", "0"], "--trials must be a whole number in 1..1,000"),
    (["--seed", "-1"], "--seed must be a whole number in 0..2^63 - 1001"),
    (["--global-batch", "0"], "--global-batch must be a whole number in 1.."),
    (["--trainers-per-node", "1000000000000"], "--trainers-per-node must be a whole number in 0..128"),
    (["--r", "0"], "--r must be a whole number in 1..4"),
    # accepted bounds, but about 10^16 simulated events: refused before anything runs
    (["--mtbf-node-h", "1e-9"], "more than the bound of 50,000,000"),
    (["--hours", "1e5", "--nodes", "10000"], "more than the bound of 50,000,000"),
])
def test_absurd_simulate_inputs_are_one_line_and_exit_2(argv, message, capsys):
    from mpiec.simulate.cli import main

    assert main(["--trials", "1", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("mpiec: error: ") and message in err and err.count("\n") == 1, err
    assert out == ""  # refused before the header: nothing ran


def test_the_engine_stops_at_its_event_budget():
    from mpiec.simulate.model import EventBudget, Failure, Policy, simulate

    endless = (Failure(time_s=float(t), servers=(0,)) for t in itertools.count())
    p = Policy("none", "restart", step_s=1.0, latency_s=0.5)
    with pytest.raises(MpiecError, match="passed its bound of 1,000 events"):
        simulate(p, 10**9, endless, budget=EventBudget(1000))
    budget = EventBudget(1000)
    with pytest.raises(MpiecError, match=r"would simulate about 2e\+03 events .* bound of 1,000"):
        budget.check(2000.0, "this sweep")
    assert simulate(p, 5, budget=budget).finished and budget.left == 999  # one stretch of 5 steps


def test_a_weibull_shape_whose_mean_leaves_floating_point_is_refused():
    with pytest.raises(MpiecError, match=r"Weibull shape must be a number in \[0.1, 100\], got 1e-06"):
        NodeRenewal(3600.0, shape=1e-6)
    with pytest.raises(MpiecError, match="Weibull shape"):
        NodeRenewal(3600.0, shape=float("nan"))
    assert NodeRenewal(3600.0, shape=0.1).scale_s > 0


def test_job_size_and_stripe_bounds():
    from mpiec.simulate.job import MAX_NODES

    job = tiny_job()
    assert job.at_scale(MAX_NODES).nodes == MAX_NODES
    with pytest.raises(MpiecError, match="at most 5,000,000 nodes"):
        job.at_scale(MAX_NODES + 1)
    with pytest.raises(MpiecError, match="at most 128 trainers"):
        job.at_scale(8, trainers_per_node=129)
    with pytest.raises(MpiecError, match="k = 1..255 data rows and r = 1..4"):
        job.at_scale(8, r=0)


def test_costs_that_multiply_out_of_floating_point_are_refused_naming_the_strategy():
    slow = dataclasses.replace(CKPT, write=Linear(0.0, 1e-300))  # a rate > 0, but every part takes inf s
    with pytest.raises(MpiecError, match="strategy 'ckpt': its .* comes out as inf"):
        build_policy("ckpt", costs(ckpt=slow), tiny_job(), 3600.0)
    with pytest.raises(MpiecError, match=r"cpr's PLS target must be a number in \(0, 1\], got nan"):
        build_policy("cpr", costs(cpr=CPR), tiny_job(), 3600.0, target_pls=float("nan"))
