"""CPR's model: PLS from the checkpoint interval, the interval from a target PLS, SSU's sample."""

from __future__ import annotations

import math

import pytest

from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config
from mpiec.strategies import STRATEGIES
from mpiec.strategies.checkpointing import Schedule, interval_for_pls, measured_pls, predicted_pls
from mpiec.strategies.cpr import PartialRecovery, PartialRecoveryMFU, cpr_interval, ssu_sampled
from mpiec.strategies.cpr.ledger import LostUpdates
from mpiec.strategies.cpr.partials import PartialSchedule


def test_predicted_pls_is_the_papers_formula():
    # PLS ≈ T_ckpt / (2 · N · MTBF): 10 steps, 4 shards, a failure every 100 steps
    assert predicted_pls(10, 4, 100) == pytest.approx(10 / 800)
    assert predicted_pls(30.0, 1, 60.0) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        predicted_pls(0, 4, 100)
    with pytest.raises(ValueError):
        predicted_pls(10, 0, 100)


@pytest.mark.parametrize("pls,shards,mtbf", [(0.01, 2, 500.0), (0.05, 8, 3600.0), (0.2, 1, 7.0)])
def test_interval_for_pls_inverts_predicted_pls(pls, shards, mtbf):
    interval = interval_for_pls(pls, shards, mtbf)
    assert interval == pytest.approx(2 * shards * mtbf * pls)
    assert predicted_pls(interval, shards, mtbf) == pytest.approx(pls)
    with pytest.raises(ValueError):
        interval_for_pls(0.0, shards, mtbf)
    with pytest.raises(ValueError):
        interval_for_pls(pls, shards, math.inf)


def test_measured_pls_counts_lost_steps_per_shard():
    # two failures in 100 steps of 4 shards: 6 steps of one shard, 2 steps of two shards
    assert measured_pls([(6, 1), (2, 2)], 4, 100) == pytest.approx((6 + 4) / 400)
    assert measured_pls([], 4, 100) == 0.0
    assert measured_pls([(3, 1)], 2, 0) == 0.0


def test_interval_from_the_kill_plan_and_from_mtbf_s():
    cfg = load_config("tiny", strategy="cpr", kill=["server:1@step=23"])  # MTBF 24 steps, 2 shards
    assert cpr_interval(cfg, 0.1) == (10, None)
    assert cpr_interval(cfg, 0.001) == (1, None)  # at least one step
    cfg = load_config("tiny", strategy="cpr", sets=["failures.mtbf_s=60.0"])
    steps, seconds = cpr_interval(cfg, 0.05)
    assert steps is None and seconds == pytest.approx(2 * 2 * 60 * 0.05)
    cfg = load_config("tiny", strategy="cpr")  # no failure expected: one per run
    assert cpr_interval(cfg, 0.05) == (max(1, round(0.05 * 4 * cfg.training.steps)), None)


def test_strategy_picks_the_interval():
    cfg = load_config("tiny", strategy="cpr", kill=["server:1@step=23"], sets=["strategy.target_pls=0.1"])
    assert PartialRecovery(cfg).kit.interval.steps == 10
    cfg = load_config("tiny", strategy="cpr", kill=["server:1@step=23"], sets=["strategy.interval=7"])
    assert PartialRecovery(cfg).kit.interval.steps == 7  # given directly: the target is not used
    cfg = load_config("tiny", strategy="cpr-mfu", kill=["server:1@step=23"], sets=["strategy.interval=8"])
    assert PartialRecoveryMFU(cfg).partial_every == (2, None)  # default: four per full interval


def test_interval_rule_and_resolved_steps_in_the_summary_keys():
    """Every checkpointing strategy says which rule chose its interval and what it came to in steps."""
    kill = ["server:1@step=23"]
    given = cpr_schedule(load_config("tiny", strategy="cpr", kill=kill, sets=["strategy.interval=7"]))
    assert given.figures()["checkpoint_interval_steps"] == 7
    assert given.figures()["checkpoint_interval_rule"] == "given"
    assert math.isnan(given.figures()["checkpoint_interval_s"])
    pls = cpr_schedule(load_config("tiny", strategy="cpr", kill=kill, sets=["strategy.target_pls=0.1"]))
    assert pls.figures() == {"checkpoint_interval_steps": 10, "checkpoint_interval_rule": "pls",
                             "checkpoint_interval_s": pytest.approx(math.nan, nan_ok=True)}
    pls_s = cpr_schedule(load_config("tiny", strategy="cpr", sets=["failures.mtbf_s=60.0"]))
    pls_s.step_times.extend([0.5] * 5)  # no checkpoint taken yet: seconds over the step time
    fig = pls_s.figures()
    assert fig["checkpoint_interval_rule"] == "pls" and fig["checkpoint_interval_s"] == pytest.approx(12.0)
    assert fig["checkpoint_interval_steps"] == 24
    young = ckpt_schedule(load_config("tiny", strategy="ckpt", kill=kill))
    young.taken = [3, 10, 16, 22, 22, 29]  # a re-executed checkpoint counts once: gaps 7, 6, 6, 7
    young.t_save, young.step_times = 0.02, young.step_times.__class__([0.1] * 5, maxlen=50)
    fig = young.figures()
    assert fig["checkpoint_interval_rule"] == "young" and fig["checkpoint_interval_steps"] in (6, 7)
    # Young: sqrt(2 · t_save · MTBF), the MTBF of 24 steps at 0.1 s a step
    assert fig["checkpoint_interval_s"] == pytest.approx(math.sqrt(2 * 0.02 * 24 * 0.1))
    secs = ckpt_schedule(load_config("tiny", strategy="ckpt", sets=["strategy.interval_s=2.5"]))
    assert secs.figures()["checkpoint_interval_rule"] == "given-seconds"


def ckpt_schedule(cfg, now=lambda: 0.0):
    """``ckpt``'s schedule (trainer 0's) for ``cfg``, on clock ``now``."""
    from mpiec.strategies.ckpt import FullCheckpoint

    strategy = FullCheckpoint(cfg)
    return Schedule.from_config(cfg, strategy.kit.interval, strategy.params.first, now)


def cpr_schedule(cfg, now=lambda: 0.0):
    """The schedule trainer 0's agent of a CPR strategy holds for ``cfg``, on clock ``now``."""
    from mpiec.strategies import STRATEGIES

    strategy = STRATEGIES[cfg.strategy.name](cfg)
    return Schedule.from_config(cfg, strategy.kit.interval, strategy.params.first, now)


def partial_schedule(cfg, now):
    """Trainer 0's (full schedule, partial schedule) of a CPR variant for ``cfg``, on clock ``now``."""
    schedule = cpr_schedule(cfg, now)
    return schedule, PartialSchedule(schedule, *PartialRecoveryMFU(cfg).partial_every)


def test_young_waits_for_the_measured_save_time():
    """After the first checkpoint, Young's interval needs t_save, which arrives a step later (or
    later still for a background write): no second checkpoint right after the first."""
    young = ckpt_schedule(load_config("tiny", strategy="ckpt", kill=["server:1@step=23"]), now=lambda: 5.0)
    young.last_step, young.last_t = 9, 1.0
    assert not any(young.due(s) for s in range(10, 10 + young.first))
    young.t_save = 0.02  # measured: sqrt(2 · 0.02 · MTBF) is well below the 4 s since
    assert young.due(10)
    young.t_save = 0.0  # never measured (writes failing): the rule resumes after `first` steps
    assert young.due(10 + young.first)


def test_partials_follow_an_interval_in_seconds():
    """A full interval in seconds (MTBF in seconds): partials every quarter of it, not every step."""
    cfg = load_config("tiny", strategy="cpr-mfu", sets=["failures.mtbf_s=60.0"])
    interval = PartialRecoveryMFU(cfg).kit.interval
    assert interval.steps is None and interval.seconds == pytest.approx(2 * 2 * 60 * 0.05)
    clock = {"t": 10.0}
    full, mfu = partial_schedule(cfg, lambda: clock["t"])
    assert mfu.every == 0 and mfu.every_s == pytest.approx(interval.seconds / 4)
    full.started(3)  # a full checkpoint just now
    assert not mfu.due(5)
    clock["t"] = 10.0 + mfu.every_s
    assert mfu.due(5)
    mfu.taken()  # taken: the next one a quarter interval later
    assert not mfu.due(6)
    assert not mfu.due(cfg.training.steps - 1)  # never after the last step
    _, given = partial_schedule(load_config("tiny", strategy="cpr-mfu", sets=["failures.mtbf_s=60.0",
                                                                           "strategy.mfu_every=3"]),
                                lambda: 0.0)
    assert given.every == 3 and given.every_s is None
    assert [s for s in range(12) if given.due(s)] == [2, 5, 8, 11]


@pytest.mark.parametrize("assignment", ["strategy.target_pls=0.0", "strategy.target_pls=2.0",
                                        "strategy.mfu_fraction=0", "strategy.mfu_every=-1",
                                        "strategy.ssu_rate=1.5", "strategy.bogus=1"])
def test_bad_params_are_refused(assignment):
    name = "cpr-ssu" if "ssu" in assignment else "cpr-mfu"
    with pytest.raises(ConfigError):
        STRATEGIES[name].validate(load_config("tiny", strategy=name, sets=[assignment]))


def test_plain_cpr_has_no_partial_keys():
    with pytest.raises(ConfigError):
        STRATEGIES["cpr"].validate(load_config("tiny", strategy="cpr", sets=["strategy.mfu_every=2"]))


def test_ssu_sample_is_deterministic_and_near_the_rate():
    picks = [ssu_sampled(1, s, 0.1) for s in range(20000)]
    assert picks == [ssu_sampled(1, s, 0.1) for s in range(20000)]
    assert 0.09 < sum(picks) / len(picks) < 0.11
    assert all(ssu_sampled(1, s, 1.0) for s in range(100))
    assert picks != [ssu_sampled(2, s, 0.1) for s in range(20000)]


def test_every_summary_key_has_a_merge_rule():
    for name in ("cpr", "cpr-mfu", "cpr-ssu"):
        assert set(STRATEGIES[name].summary_rules.values()) <= {"sum", "max", "min", "first"}


def test_the_update_count_and_the_part_time_have_their_own_header_fields():
    """The servers' word: the update count no longer reads as a part write time (t_save) on trainer 0;
    each part's fields in its own namespace (the kit's ``schedule``, ``writer``; cpr's ``ledger``)."""
    header = PartialRecoveryMFU(load_config("tiny", strategy="cpr-mfu")).header()
    word = header.pack(**{"writer.part_ms": 1500, "ledger.updates": 3_000_000_000})  # a long run's count
    assert header.get(word, "writer.part_ms") == 1500 and header.get(word, "ledger.updates") == 3_000_000_000
    assert header.get(word, "schedule.checkpoint") == 0 and header.get(word, "schedule.partial") == 0
    full = header.pack(**{"schedule.checkpoint": 1})
    assert header.column([full, word], "ledger.updates").tolist() == [0, 3_000_000_000]
    plain = PartialRecovery(load_config("tiny", strategy="cpr")).header()
    assert "schedule.partial" not in plain.fields and plain.fields["ledger.updates"].bits == 37


def test_lost_updates_count_from_the_checkpoint_restored():
    """Counts through step s - 1 arrive with step s; a full checkpoint after step 4; server 1 lost
    after step 7: its count through 7 less its count through 4."""
    ledger = LostUpdates()
    for step in range(9):
        ledger.observe(step, [10 * step, 100 * step], full=step == 4)
    ledger.failed(7, {1: 4})
    assert ledger.lost == 100 * 8 - 100 * 5
    ledger.failed(7, {0: -1})  # restored the initial state: everything through step 7
    assert ledger.lost == 300 + 80
