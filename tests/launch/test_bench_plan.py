"""mpiec bench's plan: scenarios, one kill plan for all, twins that differ only in failures."""

from __future__ import annotations

import argparse

import pytest

from mpiec.cli_args import add_config_args
from mpiec.errors import MpiecError
from mpiec.failures.faults import parse_kill_plans
from mpiec.launch.bench import Bench, add_bench_args, resolved_kills, scenario_plans
from mpiec.launch.resolve import load_config


def bench_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_config_args(p, strategy=False)
    add_bench_args(p)
    p.add_argument("--out")
    p.add_argument("--timeout")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(["--preset", "tiny", *argv])


@pytest.mark.parametrize("name", ["server", "trainer", "two-servers", "random"])
def test_every_scenario_parses_for_the_layout(name):
    cfg = load_config(preset="tiny", sets=["layout.servers=3"])
    for horizon in (0.0, 4.0):  # no baseline run: at steps; else at times of the baseline's training
        plans = scenario_plans(name, cfg, horizon_s=horizon, mtbf_s=1.0, max_kills=2, seed=3)
        kills = parse_kill_plans(plans, cfg)
        assert kills and len(kills) <= 2
        assert all(k.step is None or 0 < k.step < cfg.training.steps for k in kills)
        if name != "random":
            assert all((k.time is not None) == (horizon > 0) for k in kills)
            assert all(k.time is None or 0 < k.time < horizon for k in kills)


def test_a_random_plan_is_drawn_once_into_explicit_kills():
    cfg = load_config(preset="tiny")
    plans = scenario_plans("random", cfg, horizon_s=0.0, mtbf_s=0.5, max_kills=3, seed=7)
    once, again = resolved_kills(plans, cfg), resolved_kills(plans, cfg)
    assert once == again and 1 <= len(once) <= 3
    assert all("@time=" in k and not k.startswith("random") for k in once)
    other = scenario_plans("random", cfg, horizon_s=0.0, mtbf_s=0.5, max_kills=3, seed=8)
    assert resolved_kills(other, cfg) != once


def test_failure_free_and_failure_runs_differ_only_in_failures_and_output():
    bench = Bench(bench_args("--strategies", "ckpt,cpr", "--scenario", "two-servers"))
    assert bench.variants == ["none", "ckpt", "cpr"] and bench.baseline_added
    bench.failure_free_s = 10.0  # the baseline's training time, as measured by its run
    bench.kills, bench.spares = bench.kill_plan(bench.first), 2
    assert bench.kills == ["server:0@time=3.500", "server:1@time=7.000"]
    for v in bench.variants:
        ff, fail = bench.fair(bench.base[v], False), bench.fair(bench.base[v], True)
        assert ff.failures.kill == [] and len(fail.failures.kill) == 2
        assert ff.layout == fail.layout and ff.layout.spares == 2 and ff.strategy == fail.strategy
        # the interval rules see the scenario's MTBF in both runs: last kill time over 2 kills
        assert ff.failures.mtbf_s == fail.failures.mtbf_s == 3.5
        assert ff.output.name != fail.output.name


def test_a_given_mtbf_is_kept():
    bench = Bench(bench_args("--strategies", "ckpt", "--set", "failures.mtbf_s=30"))
    bench.kills, bench.spares = bench.kill_plan(bench.first), 1
    cfg = bench.fair(bench.base["ckpt"], True)
    assert cfg.failures.mtbf_s == 30 and cfg.failures.mtbf_steps == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["--scenario", "server", "--kill", "server:0@step=3"], "--scenario and --kill/--trace"),
    (["--strategies", "none,magic"], "unknown strategy 'magic'"),
    (["--max-kills", "0"], "--max-kills must be >= 1"),
    (["--mtbf", "-2"], "--mtbf must be > 0"),
    (["--kill", "server:9@step=3"], "server:9"),
])
def test_bad_bench_input_is_refused_before_any_run(argv, message):
    with pytest.raises(MpiecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Bench(bench_args(*argv))


def test_a_trace_becomes_the_same_explicit_kills_for_every_strategy(tmp_path):
    trace = "tests/fixtures/traces/small_trace.json"
    bench = Bench(bench_args("--strategies", "ckpt,ecrm", "--trace", trace, "--max-kills", "2"))
    assert bench.scenario == "trace"
    bench.failure_free_s = 20.0
    kills = bench.kill_plan(bench.first)
    assert 1 <= len(kills) <= 2 and kills == bench.kill_plan(bench.first)
    assert all(2.0 <= float(k.split("time=")[1]) <= 18.0 for k in kills)  # within 10 %..90 % of the time
    bad = tmp_path / "bad.json"
    bad.write_text('[{"node_id": 1}]')
    with pytest.raises(MpiecError, match="bad.json.*missing field"):
        Bench(bench_args("--trace", str(bad)))


# -- repeated benches (--repeat N) -------------------------------------------------------------------

from mpiec.launch.bench import core_case, kill_shift, rotation, run_plan, shifted_kills  # noqa: E402


def test_repeats_are_interleaved_round_robin_with_none_first_and_last():
    variants = ["none", "ckpt", "ecrm"]
    plan = run_plan(variants, variants, repeat=5)
    assert len(plan) == 30
    for v in variants:
        for failure in (False, True):
            assert [r.repeat for r in plan if r.variant == v and r.failure == failure] == list(range(5))
    rounds = [[r.variant for r in plan if r.repeat == i and not r.failure] for i in range(5)]
    assert rounds[0] == ["none", "ckpt", "ecrm"] and rounds[-1][-1] == "none"
    assert rounds[1] == ["ckpt", "ecrm", "none"] and rounds[2] == ["ecrm", "none", "ckpt"]
    assert len({tuple(r) for r in rounds[:3]}) == 3  # rotated each round
    assert plan[0] == ("none", False, 0) and plan[-1].variant == "none"
    # a variant's failure-free run comes right before its failure run (its interval sizes the shift)
    for a, b in zip(plan[::2], plan[1::2], strict=True):
        assert a.variant == b.variant and not a.failure and b.failure and a.repeat == b.repeat


def test_rotation_and_a_baseline_that_is_no_contender():
    assert [rotation(i, 4, 3) for i in range(4)] == [0, 1, 2, 1]
    assert rotation(0, 1, 3) == 0 and rotation(3, 5, 1) == 0
    plan = run_plan(["none", "ckpt"], ["ckpt"], repeat=2)
    assert [(r.variant, r.failure) for r in plan] == [("none", False), ("ckpt", False), ("ckpt", True),
                                                      ("ckpt", False), ("ckpt", True), ("none", False)]
    assert [r.failure for r in run_plan(["none"], ["none"], 2, with_failures=False)] == [False, False]


def test_kills_fall_at_evenly_spread_phases_of_the_interval():
    assert [kill_shift(i, 5, 10) for i in range(5)] == [0, 2, 4, 6, 8]
    assert [kill_shift(i, 4, 6) for i in range(4)] == [0, 2, 3, 4]  # round(1.5) == 2, round(4.5) == 4
    assert kill_shift(3, 5, None) == 0 and kill_shift(3, 5, 0) == 0 and kill_shift(0, 1, 10) == 0
    kills = ["server:1@step=20", "server:0@time=1.000", "server:0@end"]
    assert shifted_kills(kills, 4, 0.05, 40) == ["server:1@step=24", "server:0@time=1.200", "server:0@end"]
    assert shifted_kills(["server:1@step=38"], 4, 0.0, 40) == ["server:1@step=39"]  # before the last step
    assert shifted_kills(kills, 0, 0.05, 40) == kills


def test_the_bench_says_which_core_case_it_is_in():
    bound, line = core_case(7, 2)
    assert not bound and "share cores" in line and "CPU cost" in line
    bound, line = core_case(7, 16)
    assert bound and "--bind-to core" in line and "throughput overhead" in line


def test_repeated_runs_get_their_round_in_the_name_and_shifted_kills():
    bench = Bench(bench_args("--strategies", "ckpt", "--repeat", "5", "--kill", "server:1@step=20"))
    bench.kills, bench.spares = ["server:1@step=20"], 1
    bench.intervals = {"ckpt": 10, "none": 0}
    assert bench.shift_for("ckpt", 3) == (6, ["server:1@step=26"])
    assert bench.shift_for("none", 3) == (0, ["server:1@step=20"])
    cfg = bench.fair(bench.base["ckpt"], True, 3, bench.shift_for("ckpt", 3)[1])
    assert cfg.output.name.endswith("-r3") and cfg.failures.kill == ["server:1@step=26"]
    # the interval rules see the unshifted scenario: every repeat has the same interval
    assert cfg.failures.mtbf_steps == bench.fair(bench.base["ckpt"], True, 0).failures.mtbf_steps
    with pytest.raises(MpiecError, match="--repeat"):
        Bench(bench_args("--repeat", "0"))


def test_failure_runs_alone_spread_their_kills_over_a_stated_interval():
    # --no-failure-free: no failure-free run tells the interval; a variant that states it still
    # gets its repeats at spread phases (an 'auto' interval cannot be known: no shift)
    bench = Bench(bench_args("--strategies", "ckpt:interval=8,ckpt", "--repeat", "4", "--no-failure-free",
                             "--kill", "server:1@step=20"))
    bench.kills = ["server:1@step=20"]
    assert [bench.shift_for("ckpt:interval=8", i)[0] for i in range(4)] == [0, 2, 4, 6]
    assert bench.shift_for("ckpt", 2) == (0, ["server:1@step=20"])


def test_a_variant_can_shrink_instead_of_taking_spares():
    from mpiec.cli_args import bench_parser
    from mpiec.launch.bench import variant_config

    args = bench_parser().parse_args(["--preset", "tiny", "--set", "layout.servers=3"])
    cfg = variant_config(args, "ckpt:interval=5:replacement=shrink", [])
    assert cfg.layout.replacement == "shrink" and cfg.layout.servers == 3
    assert cfg.strategy.params == {"interval": 5} and cfg.variant == "ckpt:interval=5:replacement=shrink"
    assert variant_config(args, "ckpt:spares=2", []).layout.spares == 2
    assert variant_config(args, "ckpt", []).variant == "ckpt"


def test_a_variant_can_turn_the_runtimes_corruption_detectors_on():
    from mpiec.cli_args import bench_parser
    from mpiec.launch.bench import run_label, variant_config

    args = bench_parser().parse_args(["--preset", "tiny"])
    cfg = variant_config(args, "none:message_checksums=true:dense_check_every=2", [])
    assert cfg.failures.message_checksums and cfg.failures.dense_check_every == 2
    assert cfg.strategy.params == {} and cfg.variant == "none:dense_check_every=2:message_checksums=true"
    assert run_label(cfg.variant) != run_label(variant_config(args, "none", []).variant)  # their own files
