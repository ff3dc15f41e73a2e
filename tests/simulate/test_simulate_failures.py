"""``mpiec simulate``'s failure models: lifetime laws with the node MTBF as their mean, lemon nodes,
repair times, correlated bursts, the published rates, and the failure flags with their one-line
errors (no MPI, well under a second each)."""

from __future__ import annotations

import argparse
import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mpiec.errors import MpiecError
from mpiec.simulate.failure_args import add_failure_arguments, check_failure_arguments, failure_process
from mpiec.simulate.failures import HOUR_S, PUBLISHED, Arrival, NodeRenewal, Replay, Schedule

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def until(proc: NodeRenewal, nodes: int, seed: int, horizon_s: float) -> list[Arrival]:
    return list(itertools.takewhile(lambda a: a.time_s <= horizon_s, proc.arrivals(nodes, seed)))


# -- lifetime laws -------------------------------------------------------------------------------

@pytest.mark.parametrize(("proc", "median"), [
    (NodeRenewal(500.0), 500.0 * math.log(2)),
    (NodeRenewal(500.0, shape=0.7), 500.0 / math.gamma(1 + 1 / 0.7) * math.log(2) ** (1 / 0.7)),
    (NodeRenewal(500.0, shape=2.0, law="weibull"), 500.0 / math.gamma(1.5) * math.log(2) ** 0.5),
    (NodeRenewal(500.0, law="lognormal", sigma=1.0), 500.0 * math.exp(-0.5)),
    (NodeRenewal(500.0, law="lognormal", sigma=0.3), 500.0 * math.exp(-0.045)),
])
def test_every_law_keeps_the_node_mtbf_as_its_mean_and_has_its_own_shape(proc, median):
    life = proc._lifetimes(np.random.default_rng(0), 200_000)
    assert life.mean() == pytest.approx(500.0, rel=0.02)  # std error <= 0.3 % at sigma 1
    assert np.median(life) == pytest.approx(median, rel=0.02)  # the law, not only its mean


def test_a_lognormal_job_fails_at_the_rate_its_mean_says():
    proc = NodeRenewal(1000.0, law="lognormal", sigma=0.8)
    arrivals = until(proc, 20, seed=4, horizon_s=200_000.0)
    # renewal theorem: 20 nodes x 200 lifetimes each, less the start-up (every node new at 0)
    assert len(arrivals) == pytest.approx(200_000.0 / proc.job_mtbf_s(20), rel=0.04)
    assert proc.job_mtbf_s(20) == pytest.approx(50.0)
    assert "lognormal sigma 0.8" in proc.describe()


def test_laws_and_parameters_out_of_bounds_are_refused():
    with pytest.raises(MpiecError, match=r"lognormal sigma must be a number in \[0.1, 4\], got 9.0"):
        NodeRenewal(100.0, law="lognormal", sigma=9.0)
    with pytest.raises(MpiecError, match="a Weibull shape .0.7. needs the weibull lifetime law, not log"):
        NodeRenewal(100.0, shape=0.7, law="lognormal")
    with pytest.raises(MpiecError, match="lemon fraction must be a number in"):
        NodeRenewal(100.0, lemon_fraction=float("nan"))
    with pytest.raises(MpiecError, match="burst size must be a whole number of nodes in 2..256, got 1"):
        NodeRenewal(100.0, burst_p=0.5, burst_size=1)
    with pytest.raises(MpiecError, match="repair time must be a number of seconds >= 0"):
        NodeRenewal(100.0, repair_s=math.inf)
    assert NodeRenewal(100.0, shape=0.7).law == "weibull" and NodeRenewal(100.0).law == "exponential"


# -- determinism ---------------------------------------------------------------------------------

FULL = NodeRenewal(1000.0, shape=0.8, lemon_fraction=0.1, lemon_factor=4.0, repair_s=30.0, burst_p=0.2,
                   burst_size=4)


def test_every_option_on_the_arrivals_are_seeded_ordered_and_on_the_job_nodes():
    first = list(itertools.islice(FULL.arrivals(40, seed=7), 3000))
    assert list(itertools.islice(FULL.arrivals(40, seed=7), 3000)) == first
    assert list(itertools.islice(FULL.arrivals(40, seed=8), 3000)) != first
    times = np.array([a.time_s for a in first])
    assert np.all(np.diff(times) >= 0)
    assert all(0 <= n < 40 for a in first for n in a.nodes)
    sched = Schedule(FULL, 40, 7)  # every strategy of a trial replays exactly these
    assert [sched[i] for i in range(3000)] == first


def test_without_the_new_options_the_arrivals_are_those_of_before():
    # repair times draw from their own stream: with a spare standing in, times and nodes are unchanged
    plain = list(itertools.islice(NodeRenewal(1000.0, shape=0.7).arrivals(30, seed=2), 500))
    repaired = list(itertools.islice(NodeRenewal(1000.0, shape=0.7, repair_s=50.0).arrivals(30, seed=2), 500))
    assert [(a.time_s, a.node) for a in repaired] == [(a.time_s, a.node) for a in plain]
    assert all(a.also == () and a.repair_s == 0.0 for a in plain)
    assert all(a.repair_s > 0 for a in repaired) and len({a.repair_s for a in repaired}) > 400  # exponential
    assert Arrival(1.0, 2) == Arrival(1.0, 2, (), 0.0)  # the two-field construction still works


# -- lemon nodes ---------------------------------------------------------------------------------

def test_lemon_nodes_fail_factor_times_as_often_and_the_job_mtbf_counts_them():
    proc = NodeRenewal(1000.0, lemon_fraction=0.1, lemon_factor=5.0)
    nodes, horizon = 200, 100_000.0  # 100 lifetimes per ordinary node, 500 per lemon
    lemons = proc.lemons(nodes, seed=3)
    assert len(lemons) == 20 and proc.lemons(nodes, seed=3) == lemons and proc.lemons(nodes, seed=4) != lemons
    arrivals = until(proc, nodes, seed=3, horizon_s=horizon)
    per_node = Counter(a.node for a in arrivals)
    lemon_mean = np.mean([per_node[n] for n in lemons])
    other_mean = np.mean([per_node[n] for n in range(nodes) if n not in lemons])
    assert lemon_mean / other_mean == pytest.approx(5.0, rel=0.1)
    # 1 / (180 / 1000 + 20 x 5 / 1000) = 1000 / 280 s, not 1000 / 200
    assert proc.job_mtbf_s(nodes) == pytest.approx(1000.0 / 280.0)
    assert len(arrivals) == pytest.approx(horizon / proc.job_mtbf_s(nodes), rel=0.03)
    assert proc.start_events(nodes) == (nodes + 20) // 5


def test_lemon_rates_hold_for_a_weibull_fleet_too():
    proc = NodeRenewal(1000.0, shape=1.5, lemon_fraction=0.25, lemon_factor=3.0)
    arrivals = until(proc, 40, seed=1, horizon_s=200_000.0)
    assert proc.job_mtbf_s(40) == pytest.approx(1000.0 / (30 + 10 * 3))
    assert len(arrivals) == pytest.approx(200_000.0 / proc.job_mtbf_s(40), rel=0.03)


# -- repairs -------------------------------------------------------------------------------------

def test_a_repair_that_holds_the_slot_delays_that_nodes_next_failure_by_exactly_the_repair():
    spare = NodeRenewal(100.0, repair_s=40.0, repair_law="fixed")
    held = NodeRenewal(100.0, repair_s=40.0, repair_law="fixed", repair_holds_slot=True)
    # one node: the same lifetimes in the same order, each gap 40 s longer when the slot waits
    gaps_spare = np.diff([a.time_s for a in itertools.islice(spare.arrivals(1, seed=5), 200)])
    gaps_held = np.diff([a.time_s for a in itertools.islice(held.arrivals(1, seed=5), 200)])
    assert gaps_held == pytest.approx(gaps_spare + 40.0)
    assert (gaps_spare < 40.0).any()  # with a spare a node can fail again within its repair time
    assert all(a.repair_s == 40.0 for a in itertools.islice(held.arrivals(1, seed=5), 10))


def test_the_job_mtbf_counts_the_repair_when_the_slot_waits_for_it():
    held = NodeRenewal(100.0, repair_s=50.0, repair_holds_slot=True)
    assert held.job_mtbf_s(10) == pytest.approx(15.0)  # 10 nodes, one failure per 150 s each
    arrivals = until(held, 10, seed=2, horizon_s=150_000.0)
    assert len(arrivals) == pytest.approx(150_000.0 / 15.0, rel=0.03)
    per_node: dict[int, float] = {}
    for a in arrivals:  # every node's next failure comes after its repair ended
        assert a.time_s >= per_node.get(a.node, 0.0)
        per_node[a.node] = a.time_s + a.repair_s
    assert NodeRenewal(100.0, repair_s=50.0).job_mtbf_s(10) == pytest.approx(10.0)  # a spare stands in


# -- correlated bursts ---------------------------------------------------------------------------

def test_bursts_take_down_distinct_other_nodes_at_the_given_rate():
    proc = NodeRenewal(1000.0, burst_p=0.3, burst_size=5)
    arrivals = list(itertools.islice(proc.arrivals(50, seed=9), 4000))
    bursts = [a for a in arrivals if a.also]
    assert len(bursts) / len(arrivals) == pytest.approx(0.3, abs=0.03)
    for a in bursts:
        assert len(a.also) == 4 and len(set(a.also)) == 4 and a.node not in a.also
        assert list(a.also) == sorted(a.also) and all(0 <= n < 50 for n in a.also)
    assert len({a.also for a in bursts}) > 0.9 * len(bursts)  # drawn, not a fixed neighbourhood
    assert np.all(np.diff([a.time_s for a in arrivals]) >= 0)


def test_a_burst_larger_than_the_job_takes_every_other_node():
    arrivals = list(itertools.islice(NodeRenewal(100.0, burst_p=1.0, burst_size=8).arrivals(3, seed=0), 20))
    assert all(sorted(a.nodes) == [0, 1, 2] for a in arrivals)
    assert list(itertools.islice(NodeRenewal(100.0, burst_p=1.0).arrivals(1, seed=0), 3))[2].also == ()


def test_nodes_a_burst_took_down_start_a_fresh_lifetime():
    # two nodes, every failure takes both: both restart, the next failure is the shorter of two fresh
    # Weibull(5) lifetimes, mean MTBF x 2^(-1/5) = 871 s. Were the other node's old lifetime kept, the
    # two renewal processes would interleave: a failure every 500 s.
    proc = NodeRenewal(1000.0, shape=5.0, burst_p=1.0, burst_size=2)
    arrivals = list(itertools.islice(proc.arrivals(2, seed=1), 2000))
    gaps = np.diff([a.time_s for a in arrivals])
    assert gaps.mean() == pytest.approx(1000.0 * 2 ** -0.2, rel=0.02)
    assert all(a.also == (1 - a.node,) for a in arrivals)


# -- published figures ---------------------------------------------------------------------------

def test_published_rates_are_derived_from_their_counts():
    llama = PUBLISHED["llama3"]
    assert llama.mtbf_node_h == pytest.approx(54 * 24 * 2048 / 419) and llama.nodes == 2048
    hbd = PUBLISHED["infinitehbd"]
    assert (hbd.failures, hbd.days, hbd.nodes) == (584, 348.0, 400)
    assert hbd.mtbf_node_h == pytest.approx(348 * 24 * 400 / 584)  # 5,721 h, 238 days
    assert "7aacdc8" in hbd.source and "400 servers" in hbd.derivation()


# -- the flags -----------------------------------------------------------------------------------

def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_failure_arguments(p.add_argument_group("failures"))
    p.add_argument("--seed", type=int, default=0)  # the CLI's own flag
    return p.parse_args(list(argv))


def test_the_flags_build_the_process_they_name():
    assert failure_process(parse(), 8) == NodeRenewal(PUBLISHED["llama3"].mtbf_node_h * HOUR_S)
    assert failure_process(parse("--weibull-shape", "0.7"), 8) == NodeRenewal(
        PUBLISHED["llama3"].mtbf_node_h * HOUR_S, 0.7)
    proc = failure_process(parse("--published", "infinitehbd", "--lifetime", "lognormal",
                                 "--lognormal-sigma", "1.5", "--lemon-fraction", "0.05", "--repair-h", "2",
                                 "--repair-law", "fixed", "--repair-holds-slot", "--burst-p", "0.057"), 8)
    assert proc == NodeRenewal(PUBLISHED["infinitehbd"].mtbf_node_h * HOUR_S, law="lognormal", sigma=1.5,
                               lemon_fraction=0.05, lemon_factor=6.5, repair_s=7200.0, repair_law="fixed",
                               repair_holds_slot=True, burst_p=0.057, burst_size=3)
    assert failure_process(parse("--failures-at", "1,2.5"), 8) == Replay((3600.0, 9000.0))


def test_a_trace_carries_its_repair_times_scaled_like_its_times():
    from mpiec.failures.traces import load_trace

    rep = failure_process(parse("--trace", str(TRACES / "small_trace.json"), "--trace-scale", "10",
                                "--trace-mapping", "fold"), 1000)
    repairs = sorted((f.repair_s or 0.0) / 10 for f in load_trace(TRACES / "small_trace.json"))
    assert sorted(a.repair_s for a in rep.arrivals(1000, 0)) == pytest.approx(repairs)
    assert max(repairs) == pytest.approx(15120.0)


def test_help_names_every_flag_with_its_default_and_source(capsys):
    p = argparse.ArgumentParser()
    add_failure_arguments(p)
    text = " ".join(p.format_help().split())
    for flag in ("--published", "--mtbf-node-h", "--weibull-shape", "--lifetime", "--lognormal-sigma",
                 "--lemon-fraction", "--lemon-factor", "--repair-h", "--repair-law", "--repair-holds-slot",
                 "--burst-p", "--burst-size", "--trace", "--trace-scale", "--trace-mapping", "--failures-at"):
        assert flag in text
    assert "6,335 h" in text and "5,721 h" in text and "InfiniteHBD" in text and "assumption" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--mtbf-node-h", "1e300"], "--mtbf-node-h must be a number > 0 and <= 1,000,000,000, got 1e+300"),
    (["--mtbf-node-h", "-3"], "--mtbf-node-h must be a number > 0"),
    (["--weibull-shape", "1e-6"], "--weibull-shape must be a number in [0.1, 100], got 1e-06"),
    (["--trace-scale", "0"], "--trace-scale must be a number > 0, got 0"),
    (["--mtbf-node-h", "100", "--published", "llama3"], "give one failure source"),
    (["--failures-at", "1,x"], "--failures-at must be hours separated by commas, got '1,x'"),
    (["--lifetime", "lognormal", "--lognormal-sigma", "0.01"],
     "--lognormal-sigma must be a number >= 0.1 and <= 4, got 0.01"),
    (["--lognormal-sigma", "1"], "--lognormal-sigma needs --lifetime lognormal"),
    (["--lifetime", "exponential", "--weibull-shape", "0.7"],
     "--weibull-shape 0.7 is a Weibull lifetime: it does not go with --lifetime exponential"),
    (["--lemon-fraction", "1.5"], "--lemon-fraction must be a number >= 0 and <= 1, got 1.5"),
    (["--lemon-fraction", "nan"], "--lemon-fraction must be a number >= 0 and <= 1, got nan"),
    (["--lemon-fraction", "0.1", "--lemon-factor", "0.5"],
     "--lemon-factor must be a number >= 1 and <= 1000, got 0.5"),
    (["--lemon-factor", "3"], "--lemon-factor needs --lemon-fraction > 0"),
    (["--repair-h", "-1"], "--repair-h must be a number >= 0 and <= 1,000,000, got -1"),
    (["--repair-h", "inf"], "--repair-h must be a number >= 0 and <= 1,000,000, got inf"),
    (["--repair-law", "fixed"], "--repair-law needs --repair-h > 0"),
    (["--repair-holds-slot"], "--repair-holds-slot needs --repair-h > 0"),
    (["--burst-p", "2"], "--burst-p must be a number >= 0 and <= 1, got 2"),
    (["--burst-p", "0.1", "--burst-size", "1"], "--burst-size must be a whole number in 2..256, got 1"),
    (["--burst-p", "0.1", "--burst-size", "100000"],
     "--burst-size must be a whole number in 2..256, got 100,000"),
    (["--burst-size", "4"], "--burst-size needs --burst-p > 0"),
    (["--trace", "t.json", "--burst-p", "0.1"],
     "--burst-p shapes node lifetimes (--published, --mtbf-node-h): it does not apply to --trace"),
    (["--failures-at", "1", "--lifetime", "weibull"], "--lifetime shapes node lifetimes"),
])
def test_a_bad_failure_flag_is_one_line_naming_it(argv, message):
    args = parse(*argv)
    with pytest.raises(MpiecError) as exc:
        failure_process(args, 8)
    assert message in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    if "--failures-at must" not in message:  # parsed when the process is built, not before
        with pytest.raises(MpiecError):
            check_failure_arguments(args)
