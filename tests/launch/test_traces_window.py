"""The default trace replay: a window of the trace where the kills a run can take fall evenly, and
mpiec bench printing the scale it chose and the node -> slot map (no MPI, milliseconds)."""

from __future__ import annotations

import pytest
from test_bench_plan import bench_args  # the bench's own argument parser, as the CLI builds it

from mpiec.errors import MpiecError
from mpiec.failures.traces import (
    DAY_S,
    TraceFailure,
    trace_kill_plans,
    trace_kills,
    trace_node_map,
    trace_window,
)
from mpiec.launch.bench import Bench

TARGETS = ["server:0", "server:1", "trainer:0", "trainer:1"]


def bursty(days: int = 60) -> list[TraceFailure]:
    """A trace that opens with a burst (3 nodes at once, as the real InfiniteHBD trace's first day
    has 2), then one failure a day on rotating nodes."""
    burst = [TraceFailure(f"b{i}", 0.0, "", None) for i in range(3)]
    calm = [TraceFailure(f"n{d % 7}", d * DAY_S, "", None) for d in range(1, days)]
    return burst + calm


def times(plans: list[str]) -> list[float]:
    return [float(p.split("time=")[1]) for p in plans]


def test_the_window_spreads_the_kills_evenly_at_the_traces_own_rate():
    failures = bursty()
    start, length = trace_window(failures, TARGETS, kills=3, seed=1)
    n = len({(f.time_s, trace_node_map(failures, TARGETS, seed=1)[f.node]) for f in failures})
    assert length == pytest.approx(3 * failures[-1].time_s / (n - 1))  # 3 mean inter-arrival times
    assert start >= DAY_S  # not the burst at day 0
    plans = trace_kill_plans(failures, TARGETS, scale=length / 16.0, seed=1, start_s=2.0, horizon_s=18.0,
                             max_kills=3, from_s=start)
    t = times(plans)
    assert len(t) == 3 and t[0] == 2.0 and min(b - a for a, b in zip(t, t[1:], strict=False)) > 4.0


def test_the_window_is_seeded_deterministic_and_bounded():
    failures = bursty()
    window = trace_window(failures, TARGETS, kills=3, seed=4)
    assert window == trace_window(list(reversed(failures)), TARGETS, kills=3, seed=4)
    # more kills than the trace holds: the whole trace, still a finite window
    start, length = trace_window(failures, TARGETS, kills=10**6, seed=0)
    assert start == 0.0 and 0 < length < float("inf")
    # one failure, or all at one instant: replayed at the start
    assert trace_window(failures[:3], TARGETS, kills=3, seed=0) == (0.0, 1.0)
    with pytest.raises(MpiecError, match="kills must be a whole number >= 1"):
        trace_window(failures, TARGETS, kills=0, seed=0)


def test_the_window_starts_at_the_first_failure_of_its_instant():
    """Replaying from a window's start replays every failure at that instant, so a window may not
    start at the second of two simultaneous failures and score as if the first were not there."""
    failures = [TraceFailure("x", 0.0, "", None), TraceFailure("y", 0.0, "", None),
                TraceFailure("x", 1000.0, "", None), TraceFailure("y", 2000.0, "", None)]
    targets = ["server:0", "server:1"]
    assert len(set(trace_node_map(failures, targets, seed=0).values())) == 2
    assert trace_window(failures, targets, kills=2, seed=0) == (1000.0, pytest.approx(4000 / 3))
    kills = trace_kills(failures, targets, scale=1.0, seed=0, from_s=0.0, min_gap_s=0)
    assert [k.time_s for k in kills] == [0.0, 0.0, 1000.0, 2000.0]


def test_kills_carry_their_trace_failure_and_describe_it_on_one_line():
    failures = [TraceFailure("node\n7", 2 * DAY_S, "GPU", None), TraceFailure("x", 0.0, "", None)]
    failures.sort(key=lambda f: f.time_s)
    (k, last) = trace_kills(failures, ["server:0", "server:1"], scale=DAY_S, seed=0, min_gap_s=0)
    assert k.failure.node == "x" and k.describe() == f"{k.plan} <- trace node x (day 0.00)"
    assert "\n" not in last.describe() and "(day 2.00, GPU)" in last.describe()


def write_json_trace(path, failures: list[TraceFailure]) -> str:
    import json

    path.write_text(json.dumps([{"node_id": f.node, "event_time": f.time_s / DAY_S,
                                 "event_type": "fault_start"} for f in failures]))
    return str(path)


def test_bench_spreads_the_trace_kills_and_prints_scale_and_map(tmp_path, capsys):
    """Before: the whole trace was squeezed into the run, and --max-kills 3 took the opening burst:
    three kills at 10 % of the run, one recovery."""
    trace = write_json_trace(tmp_path / "t.json", bursty())
    bench = Bench(bench_args("--strategies", "ckpt", "--trace", trace, "--max-kills", "3"))
    bench.failure_free_s = 20.0
    t = times(bench.kill_plan(bench.first))
    assert len(t) == 3 and 2.0 <= t[0] and t[-1] <= 18.0
    assert min(b - a for a, b in zip(t, t[1:], strict=False)) > 2.0  # three separate recoveries
    out = capsys.readouterr().out
    assert "scale " in out and "trace s per run s (the window of trace days" in out
    assert "trace nodes -> slots (fold, seed 1): 10 of 10 nodes mapped, per slot: server:0 " in out
    assert out.count(" <- trace node ") == 3


def test_bench_takes_the_mapping_rule_and_a_given_scale(tmp_path, capsys):
    trace = write_json_trace(tmp_path / "t.json", bursty())
    bench = Bench(bench_args("--strategies", "ckpt", "--trace", trace, "--trace-mapping", "sample"))
    bench.failure_free_s = 20.0
    bench.kill_plan(bench.first)
    assert "(sample, seed 1): 4 of 10 nodes mapped" in capsys.readouterr().out
    bench = Bench(bench_args("--strategies", "ckpt", "--trace", trace, "--trace-scale", "86400"))
    bench.failure_free_s = 20.0
    t = times(bench.kill_plan(bench.first))
    assert t[0] == 2.0 and "given (--trace-scale), from the trace's first failure" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench_args("--trace", trace, "--trace-mapping", "round-robin")
