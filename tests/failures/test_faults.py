"""Kill plans: the syntax of docs/running.md "Kill plans", validated against the layout; random plans
reproducible."""

import threading
import time
from unittest.mock import patch

import pytest

from mpiec.errors import KillPlanError
from mpiec.failures.faults import Kill, KillSwitch, parse_kill_plans
from mpiec.launch.resolve import load_config


@pytest.fixture
def cfg():
    cfg = load_config("tiny", sets=["training.steps=100"])
    cfg.layout.parity_ranks = 2  # as an erasure-coded strategy with r = 2 would allow
    return cfg


def test_fixed_plans(cfg):
    kills = parse_kill_plans(["server:1@step=30", "trainer:0@time=12.5;parity:1@step=40"], cfg)
    assert kills == [Kill("server", 1, step=30), Kill("trainer", 0, time=12.5), Kill("parity", 1, step=40)]


def test_an_end_plan_kills_after_training_and_needs_real_failures(cfg):
    (kill,) = parse_kill_plans(["node:1@end"], cfg)
    assert kill == Kill("node", 1, at_end=True) and str(kill) == "node:1@end"
    assert kill.step is None and kill.time is None
    with pytest.raises(KillPlanError, match="server:9 does not exist"):
        parse_kill_plans(["server:9@end"], cfg)
    with pytest.raises(KillPlanError, match="malformed kill plan 'server:1@end=3'.*ROLE:INDEX@end"):
        parse_kill_plans(["server:1@end=3"], cfg)
    cfg.failures.mode = "emulated"
    with pytest.raises(KillPlanError, match="@end needs real failures"):
        parse_kill_plans(["server:1@end"], cfg)


def test_random_plan_is_a_function_of_its_seed(cfg):
    a = parse_kill_plans(["random:mtbf=60s,seed=7"], cfg)
    b = parse_kill_plans(["random:mtbf=1m,seed=7"], cfg)
    c = parse_kill_plans(["random:mtbf=60s,seed=8"], cfg)
    assert a == b and a != c
    assert all(k.role in ("server", "trainer") for k in a)
    times = [k.time for k in a]
    assert times == sorted(times) and 10 < sum(times[i + 1] - times[i] for i in range(10)) / 10 < 300


@pytest.mark.parametrize("plan, needle", [
    ("server:1@stp=3", "malformed kill plan"),
    ("monitor:0@step=3", "malformed kill plan"),
    ("server:5@step=3", "server:5 does not exist"),
    ("server:1@step=1000", "not before the last step"),
    ("server:1@step=2.5", "step must be a whole number"),
    ("server:1@step=3+", "time into the step after '+'"),
    ("server:1@step=3+soon", "time into the step after '+'"),
    ("server:1@step=3+-1ms", "time into the step after '+'"),
    ("server:1@step=+5ms", "step must be a whole number"),
    ("random:seed=3", "random plans need mtbf"),
    ("random:mtbf=fast", "not a duration"),
    ("random:mtbf=10s,color=red", "unknown option 'color'"),
    ("random:mtbf=10s,targets=monitor", "unknown target role"),
])
def test_malformed_plans(cfg, plan, needle):
    with pytest.raises(KillPlanError) as info:
        parse_kill_plans([plan], cfg)
    assert needle in str(info.value)


@pytest.mark.parametrize("plan, needle", [
    ("trainer:0@time=1e", "time must be a number of seconds"),
    ("trainer:0@time=.", "time must be a number of seconds"),
    ("trainer:0@time=+", "time must be a number of seconds"),
    ("trainer:0@time=1..2", "time must be a number of seconds"),
    ("trainer:0@time=-1", "time must be a number of seconds"),
    ("trainer:0@time=1e999", "time must be a number of seconds"),
    ("trainer:0@time=inf", "time must be a number of seconds"),
    ("server:1@step=\u00b2", "step must be a whole number"),
    ("server:1@step=" + "9" * 5000, "not before the last step"),
    ("server:" + "9" * 5000 + "@step=1", "does not exist"),
    ("server:1@step=3\nserver:0@step=4", "malformed kill plan 'server:1@step=3\\nserver:0@step=4'"),
    ("random:mtbf=.", "not a duration"),
    ("random:mtbf=e", "not a duration"),
    ("random:mtbf=0s", "duration must be > 0"),
    ("random:mtbf=5s,seed=-1", "seed must be a whole number"),
    ("random:mtbf=5s,seed=1.5", "seed must be a whole number"),
    ("random:mtbf=5s,seed=" + "9" * 5000, "seed must be a whole number"),
    ("random:mtbf=5s,max=x", "max must be a whole number"),
    ("random:mtbf=5s,max=" + "9" * 5000, "max must be a whole number"),
    ("random:mtbf=5s,max=101", "max must be <= 100"),
    ("random:mtbf=5s,seed=1,seed=2", "given twice"),
    ("random:mtbf=5s,", "expected key=value"),
])
def test_malformed_plans_are_one_line_kill_plan_errors(cfg, plan, needle):
    with pytest.raises(KillPlanError) as info:
        parse_kill_plans([plan], cfg)
    message = str(info.value)
    assert needle in message and "\n" not in message


@pytest.mark.parametrize("plans", [[""], ["  "], [";;"], ["server:1@step=3;"],
                                   ["server:1@step=3;;server:0@step=4"]])
def test_empty_plans_are_refused(cfg, plans):
    with pytest.raises(KillPlanError, match="empty plan"):
        parse_kill_plans(plans, cfg)


def test_time_kills_take_units_like_durations(cfg):
    kills = parse_kill_plans(["trainer:0@time=2ms", "trainer:1@time=1.5m;server:0@time=0",
                              "server:1@time=12.5s"], cfg)
    assert [k.time for k in kills] == [0.002, 90.0, 0.0, 12.5]
    ms = parse_kill_plans(["random:mtbf=2ms,seed=1"], cfg)
    assert ms == parse_kill_plans(["random:mtbf=0.002,seed=1"], cfg)


def test_random_max_is_bounded_by_the_steps_and_parsing_is_cheap():
    cfg = load_config("tiny", sets=["training.steps=1000000"])
    # cheap by construction: a billion kills is refused before any is drawn (the test's timeout
    # bounds the rest; no wall-time assertion, which a busy machine would break)
    with pytest.raises(KillPlanError, match="max must be <= 10000"):
        parse_kill_plans(["random:mtbf=1s,max=1000000000"], cfg)
    assert len(parse_kill_plans(["random:mtbf=1s,max=10000"], cfg)) == 10000
    short = load_config("tiny", sets=["training.steps=10"])
    assert len(parse_kill_plans(["random:mtbf=1s"], short)) == 10  # the default 64 would exceed the steps


def test_parity_needs_parity_ranks():
    cfg = load_config("tiny")
    with pytest.raises(KillPlanError, match="no parity ranks"):
        parse_kill_plans(["parity:0@step=3"], cfg)


def test_kill_switch_picks_own_slot_only():
    kills = [Kill("server", 1, step=5), Kill("server", 0, step=3), Kill("server", 1, time=100.0)]
    sw = KillSwitch(kills, "server", 1, real=False, t0=0.0)
    assert sw.due(3, now=1.0) is None
    assert sw.due(5, now=1.0) == Kill("server", 1, step=5)
    assert sw.due(6, now=101.0) == Kill("server", 1, time=100.0)


def test_step_kills_take_a_time_into_the_step(cfg):
    kills = parse_kill_plans(["server:1@step=30+5ms", "trainer:0@step=2+0.25"], cfg)
    assert kills == [Kill("server", 1, step=30, after=0.005), Kill("trainer", 0, step=2, after=0.25)]
    assert str(kills[0]) == "server:1@step=30+5ms" and str(kills[1]) == "trainer:0@step=2+250ms"
    assert parse_kill_plans([str(kills[0])], cfg)[0] == kills[0]  # the printed form parses back


def test_a_kill_into_its_step_is_armed_at_the_step_and_fires_from_the_timer():
    fired = threading.Event()
    sw = KillSwitch([Kill("server", 1, step=4, after=0.01)], "server", 1, real=True, t0=0.0,
                    on_fire=lambda kill: fired.set())
    with patch("mpiec.failures.faults.die_now") as die:
        assert sw.due(3, now=0.0) is None and not fired.wait(0.05)  # not armed before its step
        assert sw.due(4, now=0.0) is None  # armed: the step runs, the timer kills mid-step
        assert fired.wait(5.0)
        time.sleep(0.01)
        die.assert_called_once()
    emulated = KillSwitch([Kill("server", 1, step=4, after=0.01)], "server", 1, real=False, t0=0.0)
    assert emulated.due(4, now=0.0) == Kill("server", 1, step=4, after=0.01)  # announced at the step


def test_real_time_kills_belong_to_the_timer():
    t0 = time.monotonic()  # the timer is armed for t0 + 1000 s; cancelled below
    sw = KillSwitch([Kill("trainer", 0, time=1000.0)], "trainer", 0, real=True, t0=t0)
    try:
        assert sw.due(0, now=t0 + 2000.0) is None  # the step loop must not act on it a second time
    finally:
        sw.cancel()


@pytest.fixture
def nodes_cfg():
    return load_config("tiny", sets=["training.steps=100", "layout.servers=6", "layout.spares=2",
                                     "layout.ranks_per_node=2"])


def test_node_plans(nodes_cfg):
    assert parse_kill_plans(["node:1@step=40", "node:4@time=3.5"], nodes_cfg) == [
        Kill("node", 1, step=40), Kill("node", 4, time=3.5)]
    assert str(Kill("node", 2, step=7)) == "node:2@step=7"
    with pytest.raises(KillPlanError) as err:  # 10 ranks after the monitor, 2 per node: nodes 0..4
        parse_kill_plans(["node:5@step=4"], nodes_cfg)
    assert "node:5 does not exist" in str(err.value) and "5 nodes, 0 to 4" in str(err.value)
    assert "layout.ranks_per_node = 2" in str(err.value)
    # without ranks_per_node every rank after the monitor is its own node
    plain = load_config("tiny")
    assert parse_kill_plans(["node:3@step=4"], plain) == [Kill("node", 3, step=4)]
    with pytest.raises(KillPlanError, match="node:4 does not exist .*4 nodes"):
        parse_kill_plans(["node:4@step=4"], plain)


def test_random_plans_draw_nodes(nodes_cfg):
    kills = parse_kill_plans(["random:mtbf=1s,seed=3,targets=node,max=20"], nodes_cfg)
    assert {k.role for k in kills} == {"node"} and {k.index for k in kills} <= set(range(5))
    assert len({k.index for k in kills}) > 1
    mixed = parse_kill_plans(["random:mtbf=1s,seed=3,targets=server+node,max=30"], nodes_cfg)
    assert {k.role for k in mixed} == {"server", "node"}


def test_kill_switch_takes_its_node_kills_and_its_slot_kills():
    kills = [Kill("node", 1, step=5, seq=0), Kill("server", 2, step=3, seq=1), Kill("node", 0, step=4, seq=2),
             Kill("node", 1, time=50.0, seq=3)]
    sw = KillSwitch(kills, "server", 2, real=False, t0=0.0, node=1)
    assert sw.due(3, now=0.0) == kills[1] and sw.due(4, now=0.0) is None
    assert sw.due(5, now=0.0) == kills[0] and sw.due(6, now=51.0) == kills[3]
    monitor = KillSwitch(kills, "monitor", 0, real=False, t0=0.0, node=None)  # never a node's victim
    assert all(monitor.due(s, now=100.0) is None for s in range(10))


@pytest.mark.parametrize("plan, needle", [
    ("server:1@time=1e300", "time must be at most 1e+09 s"),
    ("server:1@time=2e9", "time must be at most 1e+09 s"),
    ("server:1@time=20000000h", "time must be at most 1e+09 s"),
    ("server:1@step=3+1e300s", "the time into the step must be at most 1e+09 s"),
    ("server:1@step=3+2e9", "the time into the step must be at most 1e+09 s"),
    ("random:mtbf=1e300s", "mtbf must be at most 1e+09 s"),
    ("random:mtbf=2e9,seed=3", "mtbf must be at most 1e+09 s"),
    ("server:1@time=nan", "time must be a number of seconds"),
    ("server:1@step=3+nan", "time into the step after '+'"),
    ("server:1@step=3+infms", "time into the step after '+'"),
    ("server:1@step=3+1e400", "time into the step after '+'"),
    ("random:mtbf=nan", "not a duration"),
    ("random:mtbf=inf", "not a duration"),
])
def test_kill_times_out_of_range_are_refused_like_other_limits(cfg, plan, needle):
    """Issue 12, item 5: time=1e300 was accepted, then the victim's timer thread died of OverflowError."""
    with pytest.raises(KillPlanError) as info:
        parse_kill_plans([plan], cfg)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_kill_times_at_the_limit_are_accepted(cfg):
    kills = parse_kill_plans(["server:1@time=1e9", "server:0@step=3+1e9s", "random:mtbf=1e9s,max=3"], cfg)
    assert kills[0].time == 1e9 and kills[1].after == 1e9 and len(kills) == 5


def test_a_kill_too_far_for_a_timer_is_not_armed():
    """A random plan's later kills add up past threading.TIMEOUT_MAX (mtbf 1e9 s, many kills): no
    timer thread is started for them (it would raise OverflowError), and none fires."""
    t0 = time.monotonic()
    far = threading.TIMEOUT_MAX * 2
    sw = KillSwitch([Kill("server", 1, time=far)], "server", 1, real=True, t0=t0)
    try:
        assert sw._timer is None
        assert sw.due(0, now=t0 + 10.0) is None
    finally:
        sw.cancel()


def test_kills_before_a_resumed_step():
    from mpiec.failures.faults import kills_before

    kills = [Kill("server", 1, step=10), Kill("server", 0, step=30), Kill("trainer", 0, time=1.0),
             Kill("server", 1, at_end=True), Kill("node", 1, step=29, after=0.01)]
    assert kills_before(kills, 30) == [kills[0], kills[4]]
    assert kills_before(kills, 0) == []


def test_unfired_kills_say_why(cfg):
    from mpiec.failures.faults import Injector, unfired_kills
    from mpiec.layout import Slot

    plans = ["trainer:0@step=12", "trainer:0@step=28", "server:1@step=30", "spare:0@time=3"]
    cfg.layout.spares = 1
    kills = Injector(None, parse_kill_plans(plans, cfg)).kills  # type: ignore[arg-type]
    held = {Slot("trainer", 1), Slot("server", 0), Slot("server", 1)}
    out = {str(k): why for k, why in unfired_kills(kills, {0}, held, lost=False, shrink=True)}
    assert set(out) == {"trainer:0@step=28", "server:1@step=30", "spare:0@time=3"}
    assert out["trainer:0@step=28"] == ("no rank holds trainer:0 any more: a shrink dropped it "
                                        "(layout.replacement = shrink)")
    assert out["server:1@step=30"] == "the run ended before it was due"
    assert "spare:0 was promoted" in out["spare:0@time=3"]
    lost = unfired_kills(kills, {0, 1, 3}, held, lost=True, shrink=True)
    assert [(str(k), why) for k, why in lost] == [("server:1@step=30", "the run was lost before it")]
