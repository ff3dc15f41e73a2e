"""Elastic recovery under real kills (``layout.replacement = "shrink"``, no spare): the survivors
take the dead rank's virtual shards or rows and every run ends with the failure-free checksum."""

from __future__ import annotations

import json

import pytest
from run_helpers import mpiec, story

from mpiec.results import decode

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(600)]

SHRINK = ["--preset", "tiny", "--set", "layout.spares=0", "--set", "layout.replacement='shrink'"]
ECRM_PLAIN = ["--strategy", "ecrm", "--set", "strategy.params.k=2", "--set", "strategy.params.r=1"]
ECRM = [*ECRM_PLAIN, "--set", "strategy.params.fallback='ckpt'",
        "--set", "strategy.params.fallback_interval=5"]


@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free("--preset", "tiny")["param_checksum"]  # shared: tests/runs/conftest.py


def shrink_run(tmp_path, strategy: list[str], kills: list[str], *sets: str):
    args = ["run", *SHRINK, *strategy]
    for kill in kills:
        args += ["--kill", kill]
    for s in sets:
        args += ["--set", s]
    return mpiec(args, out=tmp_path, timeout=240)


def kinds(res, kind: str) -> list[str]:
    return [decode(e["detail"]) for e in res.events if decode(e["kind"]) == kind]


@pytest.mark.parametrize("strategy", [["--strategy", s] for s in ("ckpt", "cnr", "log")] + [ECRM_PLAIN, ECRM],
                         ids=["ckpt", "cnr", "log", "ecrm", "ecrm-fallback"])
def test_a_server_kill_shrinks_onto_the_survivors_losslessly(strategy, reference, tmp_path):
    run = shrink_run(tmp_path, strategy, ["server:1@step=15+2ms"], "layout.servers=4")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference and res.summary["kills_fired"] == 1
    tl = res.timeline
    # before the kill on 4 servers; after it (steps a rollback re-executes included) on 3
    assert set(tl["servers"][tl["epoch"] == 0]) == {4} and set(tl["servers"][tl["epoch"] == 1]) == {3}
    assert set(tl["trainers"]) == {2}
    # every survivor server rebuilt for the new placement (server:2 -> server:1, ...)
    assert len([d for d in kinds(res, "relayout") if d.startswith("server:")]) == 3
    if "ecrm" in strategy:  # the dropped rows decoded on a survivor, nothing re-executed (fallback or not)
        # seen failing once (a clean clone's suite, 2026-12-02: lossless on 3 servers, yet no handover
        # line): what the run said and recorded, so that a recurrence says which path it took
        said = "\n".join(line for line in run.stdout.splitlines() if "recover" in line or "lost" in line)
        events = [(decode(e["kind"]), int(e["step"]), decode(e["detail"])[:120]) for e in res.events]
        assert "rows decoded on the survivors" in run.stdout and res.summary["reexecuted_steps"] == 0, \
            f"{said}\nreexecuted_steps {res.summary['reexecuted_steps']}\nevents {events}"
        decoded = kinds(res, "handover")
        assert len(decoded) == 1 and decoded[0].startswith("server 1's ")
        assert " rows decoded at step " in decoded[0]


def test_a_trainer_kill_hands_its_shards_to_the_survivors(reference, tmp_path):
    run = shrink_run(tmp_path, ["--strategy", "ckpt"], ["trainer:0@step=15"])
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference
    assert set(res.timeline["trainers"][res.timeline["epoch"] == 1]) == {1}
    assert kinds(res, "relayout") == ["trainer:1 -> trainer:0 of 1 trainers (dropped trainer:0)"]


def test_a_server_kill_then_a_trainer_kill_under_ecrm(reference, tmp_path):
    run = shrink_run(tmp_path, ECRM_PLAIN, ["server:1@step=12+3ms", "trainer:1@step=26"], "layout.servers=4",
                     "layout.trainers=4", "training.batch_size=32")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference and res.summary["kills_fired"] == 2
    last = res.timeline[res.timeline["step"] == 39]
    assert int(last["trainers"][0]) == 3 and int(last["servers"][0]) == 3


def test_two_server_kills_under_ecrm_are_handed_over_or_rolled_back_losslessly(reference, tmp_path):
    """Two servers of different stripes (6 servers, k = 2, r = 1) killed 25 ms apart. Server 4's
    timer runs from the start of step 15 whatever its rank does, and no recovery completes within
    25 ms of it, so it dies before the first recovery ends, at one of two points:

    * before the survivors' shrink and agreement are over: one failure with both dead, both
      servers' rows decoded in one handover, nothing re-executed;
    * after the plan for server 1 alone: it interrupts that handover, the survivors' rows may be
      half re-placed, and the fallback rolls every server back onto the placement of 4.

    Both end on exactly 4 servers with the failure-free checksum. Once in ~40 runs this ended on 3
    with 2 kills fired (not reproduced in 12 runs with the second kill 25 ms to 2.5 s into the
    step): no kill can take a third server (each kill is consumed by its slot's name, and no rank
    holds server 4's name after either outcome), so a third server lost is a rank that died some
    other way, e.g. of an exception, and was recovered from as if killed. Such a run now fails
    here, with that rank's traceback."""
    run = shrink_run(tmp_path, ECRM, ["server:1@step=15+1ms", "server:4@step=15+25ms"], "layout.servers=6")
    assert run.code == 0, run.stdout + run.stderr
    assert "internal error" not in run.stderr, run.stderr  # a crashed rank is no planned failure
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 2 and json.loads(s["kills_unfired"]) == []
    assert int(res.timeline["servers"][-1]) == 4
    if "interrupted the handover" in run.stdout:
        assert "rollback to the fallback checkpoint" in run.stdout
    else:
        assert "went on without server:1, server:4 (the dropped servers' rows decoded" in run.stdout
        assert len(kinds(res, "handover")) == 2 and s["reexecuted_steps"] == 0


def test_a_second_kill_during_the_shrink_is_recovered_too(reference, tmp_path):
    run = shrink_run(tmp_path, ["--strategy", "ckpt"], ["server:1@step=15", "server:2@step=15+40ms"],
                     "layout.servers=4")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference
    assert res.summary["kills_fired"] == 2 and int(res.timeline["servers"][-1]) == 2


def test_kills_name_the_slots_as_launched_and_those_that_cannot_fire_are_reported(reference, tmp_path):
    """Issue 36 item 6. A renumbered survivor keeps its launch name: on 3 servers, server:2's kill
    fires on the server launched as 2 (server 1 after the first shrink; it fired 1 of 2 before);
    a dropped slot's later kill cannot fire and says so, on the console and in the result file."""
    run = shrink_run(tmp_path / "s", ["--strategy", "ckpt"], ["server:0@step=12", "server:2@step=28"],
                     "layout.servers=3")
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 2 and s["kills_planned"] == 2
    assert json.loads(s["kills_unfired"]) == [] and int(run.result().timeline["servers"][-1]) == 1
    run = shrink_run(tmp_path / "t", ["--strategy", "ckpt"], ["trainer:0@step=12", "trainer:0@step=28"])
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 1
    why = "no rank holds trainer:0 any more: a shrink dropped it (layout.replacement = shrink)"
    assert json.loads(s["kills_unfired"]) == [{"kill": "trainer:0@step=28", "why": why}]
    assert f"note: 1 of 2 planned kill(s) did not fire: trainer:0@step=28 ({why})" in run.stdout


def test_what_cannot_shrink_says_why(tmp_path):
    run = shrink_run(tmp_path / "a", [*ECRM_PLAIN, "--set", "layout.parity_ranks=1"],
                     ["server:1@step=10"], "layout.servers=4")
    out = run.stdout + run.stderr
    assert run.code != 0 and "dedicated parity ranks (layout.parity_ranks) cannot shrink" in out
    run = shrink_run(tmp_path / "b", ["--strategy", "ecrm"], ["server:1@step=10"], "layout.servers=3")
    assert run.code != 0 and "strategy ecrm needs at least 3" in run.stdout + run.stderr


def test_resume_onto_fewer_trainers_ends_with_the_same_checksum(reference, tmp_path):
    ck = tmp_path / "ck"
    first = mpiec(["run", "--preset", "tiny", "--strategy", "ckpt", "--set", "strategy.interval=10",
                   "--set", f"strategy.dir='{ck}'", "--kill", "server:0@step=25"], out=tmp_path / "a")
    assert first.code != 0 and list(ck.glob("step-*/MANIFEST.json")), first.stdout + first.stderr
    run = mpiec(["run", "--resume", str(ck), "--set", "layout.trainers=1", "--set", "training.batch_size=128",
                 "--set", "layout.servers=3"], out=tmp_path / "b")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["resumed_from_step"] >= 9 and res.summary["param_checksum"] == reference
    assert set(res.timeline["trainers"]) == {1} and set(res.timeline["servers"]) == {3}


GROW = ["--set", "layout.grow_back_steps=5"]


def spawn_failed_without_a_death(res) -> bool:
    """A recovery began in a growth's ``MPI_Comm_spawn`` failing while no rank had died."""
    detected = [decode(e["detail"]) for e in res.events if decode(e["kind"]) == "detect"]
    shrunk = [decode(e["detail"]) for e in res.events if decode(e["kind"]) == "shrink"]
    return any(d.startswith("spawn (") for d in detected) and "dead []" in shrunk


@pytest.mark.parametrize("strategy,kill", [(["--strategy", "ckpt"], "server:1@step=10"),
                                           (ECRM, "server:2@step=10+2ms"),
                                           (["--strategy", "log"], "server:2@step=10"),
                                           (["--strategy", "ckpt"], "trainer:0@step=10")],
                         ids=["ckpt-server", "ecrm-server", "log-server", "ckpt-trainer"])
def test_a_shrink_grows_back_onto_a_spawned_rank_losslessly(strategy, kill, reference, tmp_path):
    """Two recoveries: the shrink, then the growth. Or three, when the growth's spawn failed with no
    rank dead (seen once in ~40 clean-clone suites, ``MPI_Comm_spawn`` under ULFM, open-mpi/ompi
    #12585): the ranks cannot tell how far an interrupted growth re-placed the rows, so the next
    attempt rolls every server back onto the placement it has, and trainer 0 starts the growth again
    (reproduced by making the spawn fail once: lossless either way). A growth of trainers only moves
    no rows: a cut one is simply planned again, no epoch of its own."""
    run = shrink_run(tmp_path, [*strategy, *GROW], [kill], "layout.servers=4")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    n = res.summary["recoveries"]
    assert res.summary["param_checksum"] == reference, story(run)
    assert n == 2 or (n == 3 and spawn_failed_without_a_death(res)), story(run)
    assert "grow back onto spawned ranks: spawned -> " in run.stdout and f"growth {n}:" in run.stdout
    tl = res.timeline[res.timeline["epoch"] == n]  # after the growth: the configured layout again
    assert set(tl["servers"]) == {4} and set(tl["trainers"]) == {2} and len(tl) > 0
    # the rollback of a cut growth may resume right at the growth's step (no step in its epoch)
    assert {0, 1, n} <= set(res.timeline["epoch"]) <= set(range(n + 1))


def test_a_strategy_that_cannot_move_rows_grows_its_trainers_only(reference, tmp_path):
    run = shrink_run(tmp_path, ["--strategy", "cnr", *GROW], ["server:2@step=10"], "layout.servers=4")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference
    assert "trainers only: strategy cnr keeps its servers" in run.stdout
    assert int(res.timeline["servers"][-1]) == 3


HELD = [*GROW, "--set", "layout.grow_from='spares'", "--set", "layout.spares=1"]


def held_run(tmp_path, kills: list[str]):
    """4 servers, 1 spare held for growth, ``ckpt``; server:1 dies at step 10 (a shrink) and the growth
    is due 5 steps after it."""
    return shrink_run(tmp_path, ["--strategy", "ckpt", *HELD], ["server:1@step=10", *kills],
                      "layout.servers=4")


def in_order(res) -> list[dict]:
    """Every event (time, kind, detail, role, step), in time order."""
    out = [{"time": float(e["time"]), "kind": decode(e["kind"]), "detail": decode(e["detail"]),
            "role": decode(e["role"]), "step": int(e["step"])} for e in res.events]
    return sorted(out, key=lambda e: e["time"])


def test_a_shrink_grows_back_onto_a_held_spare_losslessly(reference, tmp_path):
    """Issue 36 item 1: ``layout.grow_from = "spares"``. The spare waits through the shrink (it does
    not replace server:1) and is promoted into the missing server slot at the growth; nothing is
    spawned, and the run ends with the failure-free checksum on the configured layout."""
    run = held_run(tmp_path, [])
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference and res.summary["recoveries"] == 2
    assert "went on without server:1" in run.stdout and "spawned" not in run.stdout
    assert "grow back onto held spares: spare:0 -> server:3" in run.stdout and "growth 2:" in run.stdout
    assert kinds(res, "replace") == ["spare:0 takes server:3"]
    tl = res.timeline
    assert set(tl["servers"][tl["epoch"] == 1]) == {3} and set(tl["servers"][tl["epoch"] == 2]) == {4}
    assert len(tl[tl["epoch"] == 2]) > 0 and not kinds(res, "grow_short")


@pytest.mark.parametrize("kill", ["server:0@step=15+5ms", "trainer:1@step=15+5ms"],
                         ids=["server", "trainer"])
def test_a_kill_during_a_growth_onto_held_spares_is_recovered(kill, reference, tmp_path):
    """Issue 36 item 1: with no spawn on the path, a death during the growth (due at step 15) is one
    more failure during a recovery: the survivors shrink again and the run ends with the failure-free
    checksum. ``server:0`` and ``trainer:1`` die 5 ms into step 15, at the growth's signal (150 ms
    in, the growth had completed first on an idle machine: restore_end at 0.30 s, then the kill).
    Where the growth's plan came first, its promotion of the spare stands and no spare is left for
    another growth; where the death cut the growth's detection, the plan is a shrink, the spare keeps
    waiting and the next growth takes it, short of one slot. Either way the monitor says what was
    not grown back, and the run ends on the layout it names."""
    run = held_run(tmp_path, [kill])
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 2, run.stdout
    events = in_order(res)
    second = next(e["time"] for e in events if e["kind"] == "kill" and e["detail"] == kill)
    monitor = [e for e in events if e["role"] == "monitor" and e["time"] < second]
    # in the growth: none completed before the kill
    assert not [e for e in monitor if e["kind"] == "restore_end" and e["detail"] == "resume at step 15"]
    assert len([d for d in kinds(res, "replace") if d.startswith("spare:0 takes ")]) == 1
    short = kinds(res, "grow_short")
    assert len(short) == 1, run.stdout
    # which of the two depends on whether the death came after the growth's plan or cut it (both
    # right, the docstring says why); the monitor's events do not tell them apart reliably (a
    # detection logged at step 15 before the kill also preceded a plan that saw the death, 2 of 2
    # idle runs), so the note is checked against the layout the run ended on instead
    assert short[0].startswith(("no spare is left to grow back onto: ",
                                "1 spare(s) held for growth, 2 slot(s) missing: ")), short
    tl = res.timeline
    layout = f"the run goes on with {int(tl['trainers'][-1])} trainer(s), {int(tl['servers'][-1])} server(s)"
    assert short[0].endswith(layout) and f"note: {short[0]}" in run.stdout
    assert int(tl["trainers"][-1]) + int(tl["servers"][-1]) == 5  # 6 launched, 2 dead, the spare grown


def test_growth_onto_held_spares_refuses_what_it_cannot_do(tmp_path):
    for sets, got in ((["layout.spares=0"], "'shrink', 5, 0"),
                      (["layout.spares=1", "layout.grow_back_steps=0"], "'shrink', 0, 1")):
        args = ["run", *SHRINK, "--strategy", "ckpt", *GROW, "--set", "layout.grow_from='spares'"]
        run = mpiec([*args, *(x for s in sets for x in ("--set", s))], out=tmp_path)
        assert run.code == 2 and run.stdout == "", run.stdout + run.stderr
        lines = run.stderr.strip().splitlines()
        assert lines == ["mpiec: error: layout.grow_from = 'spares' needs layout.replacement = 'shrink', "
                         f"layout.grow_back_steps > 0 and layout.spares >= 1 (got {got})"], run.stderr
