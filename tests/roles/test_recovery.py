"""The monitor's recovery plan (``roles/recovery.make_plan``) and a rank's reconciliation
(``reconcile``), in process: spares, kills, scopes, undo."""

from __future__ import annotations

from pathlib import Path

import pytest
from mpi4py import MPI

from mpiec.comm import Comms
from mpiec.launch.resolve import load_config
from mpiec.layout import Slot, initial_slots
from mpiec.roles.context import RankContext
from mpiec.roles.recovery import make_plan, note_dead_names, reconcile
from mpiec.roles.runner import make_agent
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.api.env import RankEnv


def context(tmp_path: Path, strategy: str = "ckpt", spares: int = 2, kills: str = "", **sets) -> RankContext:
    args = [f"layout.spares={spares}", f"strategy.name='{strategy}'"]
    args += [f"{k}={v}" for k, v in sets.items()]
    if strategy == "ckpt":
        args.append(f"strategy.dir='{tmp_path / 'ck'}'")
    cfg = load_config(preset="tiny", sets=args, kill=[kills] if kills else None)
    lay = cfg.layout
    slots = initial_slots(lay.trainers, lay.servers, lay.parity_ranks, lay.spares)
    ctx = RankContext(cfg=cfg, slots=slots, comms=Comms(world=MPI.COMM_SELF, data=None, trainers=None),
                      ulfm=True, t0_wall=0.0, out_path=tmp_path / "run.h5")
    ctx.agent = make_agent(ctx.strategy, RankEnv(ctx), ctx.slot.role, None)
    return ctx


def fail(ctx: RankContext, dead: list[Slot], committed: int = 9) -> Failure:
    """As ``detect_ulfm`` leaves the monitor: ``dead`` gone from the table (their names noted)."""
    note_dead_names(ctx, [s for s in dead if s in ctx.slots])
    ctx.slots = [s for s in ctx.slots if s not in dead]
    return Failure(step=committed + 1, committed=committed, dead=dead, survivors=list(ctx.slots))


def test_lowest_spare_takes_the_lowest_dead_slot(tmp_path):
    ctx = context(tmp_path)
    plan = make_plan(ctx, fail(ctx, [Slot("server", 1), Slot("trainer", 0)]))
    assert plan.scope is Scope.ROLLBACK and plan.candidates == [-1]  # no checkpoint yet: the start
    assert plan.assignments == {Slot("spare", 0): Slot("trainer", 0), Slot("spare", 1): Slot("server", 1)}
    assert Slot("spare", 0) not in plan.slots and plan.slots.count(Slot("server", 1)) == 1


def test_trainer_only_failure_keeps_the_committed_step(tmp_path):
    ctx = context(tmp_path)
    plan = make_plan(ctx, fail(ctx, [Slot("trainer", 1)]))
    assert plan.scope is Scope.COMMITTED and plan.committed == 9
    assert plan.replaced == [Slot("trainer", 1)]


def test_no_spare_left_names_the_slot(tmp_path):
    ctx = context(tmp_path, spares=0)
    plan = make_plan(ctx, fail(ctx, [Slot("server", 1)]))
    assert plan.aborts and plan.reason == "no spare left for server 1"


def test_spawn_takes_what_spares_cannot(tmp_path):
    ctx = context(tmp_path, spares=1, **{"layout.replacement": "'spawn'"})
    plan = make_plan(ctx, fail(ctx, [Slot("server", 0), Slot("server", 1)]))
    assert plan.assignments == {Slot("spare", 0): Slot("server", 0)} and plan.spawn == [Slot("server", 1)]
    assert plan.slots[-1] == Slot("server", 1)


def test_shrink_drops_a_trainer_and_renumbers_the_survivors(tmp_path):
    ctx = context(tmp_path, spares=0, **{"layout.trainers": 4, "training.batch_size": 16,
                                         "layout.replacement": "'shrink'"})
    plan = make_plan(ctx, fail(ctx, [Slot("trainer", 1)]))
    assert plan.scope is Scope.COMMITTED and plan.dropped == [Slot("trainer", 1)] and plan.replaced == []
    assert plan.renamed == {Slot("trainer", 2): Slot("trainer", 1), Slot("trainer", 3): Slot("trainer", 2)}
    assert [s for s in plan.slots if s.role == "trainer"] == [Slot("trainer", i) for i in range(3)]


def test_shrink_uses_a_spare_first(tmp_path):
    ctx = context(tmp_path, spares=1, **{"layout.replacement": "'shrink'"})
    plan = make_plan(ctx, fail(ctx, [Slot("trainer", 0), Slot("server", 1)]))
    assert plan.assignments == {Slot("spare", 0): Slot("trainer", 0)}
    assert plan.dropped == [Slot("server", 1)] and plan.scope is Scope.ROLLBACK and not plan.renamed


def test_shrink_of_servers_rolls_back_onto_renumbered_servers(tmp_path):
    ctx = context(tmp_path, spares=0, **{"layout.servers": 3, "layout.replacement": "'shrink'"})
    plan = make_plan(ctx, fail(ctx, [Slot("server", 0)]))
    assert plan.scope is Scope.ROLLBACK and plan.dropped == [Slot("server", 0)]
    assert plan.renamed == {Slot("server", 1): Slot("server", 0), Slot("server", 2): Slot("server", 1)}


def test_shrink_says_why_it_cannot(tmp_path):
    ctx = context(tmp_path, spares=0, **{"layout.replacement": "'shrink'", "layout.trainers": 1,
                                         "training.batch_size": 128})
    plan = make_plan(ctx, fail(ctx, [Slot("trainer", 0)]))
    assert plan.aborts and "every trainer died" in plan.reason
    ctx = context(tmp_path, spares=0, **{"layout.replacement": "'shrink'", "layout.servers": 1})
    plan = make_plan(ctx, fail(ctx, [Slot("server", 0)]))
    assert plan.aborts and "0 server(s) left" in plan.reason
    ecrm = {"layout.replacement": "'shrink'", "layout.servers": 4, "strategy.params.k": 2}
    ctx = context(tmp_path, "ecrm", spares=0, **ecrm)  # a trainer's gradients gone with the server
    plan = make_plan(ctx, fail(ctx, [Slot("server", 2), Slot("trainer", 1)]))
    assert plan.aborts and "a trainer died in the same failure" in plan.reason
    assert "set strategy.fallback = 'ckpt', or give the run spares" in plan.reason
    ctx = context(tmp_path, "ecrm", spares=0, **ecrm, **{"layout.parity_ranks": 1})
    plan = make_plan(ctx, fail(ctx, [Slot("server", 2)]))
    assert plan.aborts and "dedicated parity ranks (layout.parity_ranks) cannot shrink" in plan.reason
    ctx = context(tmp_path, "cpr", spares=0, **{"layout.replacement": "'shrink'", "layout.servers": 3})
    plan = make_plan(ctx, fail(ctx, [Slot("server", 2)]))
    assert plan.aborts and "strategy cpr cannot restore rows onto fewer servers" in plan.reason


@pytest.mark.parametrize("strategy", ["ecsnap", "cpr", "cpr-mfu", "cpr-ssu"])
def test_a_strategy_that_cannot_shrink_is_refused_even_when_it_rolls_back(strategy, tmp_path):
    """``ecsnap``'s plan is a rollback, which the runtime used as is: its snapshots, coded for the
    old placement, restored onto the new one (IndexError on every survivor). Every strategy that
    does not declare ``shrinks`` gets its one-line refusal instead, whatever its plan."""
    ctx = context(tmp_path, strategy, spares=0, **{"layout.replacement": "'shrink'", "layout.servers": 4})
    assert not type(ctx.strategy).shrinks
    plan = make_plan(ctx, fail(ctx, [Slot("server", 1)]))
    assert plan.aborts and plan.reason == type(ctx.strategy).shrink_refusal(ctx.cfg)
    assert f"strategy {strategy} cannot restore rows onto fewer servers" in plan.reason
    ctx = context(tmp_path, strategy, spares=0, **{"layout.replacement": "'shrink'", "layout.servers": 4})
    plan = make_plan(ctx, fail(ctx, [Slot("trainer", 1)]))  # trainers shrink under every strategy
    assert not plan.aborts and plan.dropped == [Slot("trainer", 1)]


def test_every_strategy_that_declares_shrinks_answers_a_rollback_plan_onto_fewer_servers(tmp_path):
    """``on_shrink`` is asked also when the strategy's own plan is a rollback (``log``'s fallback
    after a trainer kill; ``ecrm``'s fallback): the answer is a rollback onto the new placement."""
    sets = {"layout.replacement": "'shrink'", "layout.servers": 4}
    for strategy, extra in (("ckpt", {}), ("cnr", {}), ("log", {}),
                            ("ecrm", {"strategy.params.k": 2, "strategy.params.fallback": "'ckpt'",
                                      "strategy.params.fallback_interval": 5})):
        ctx = context(tmp_path / strategy, strategy, spares=0, **sets, **extra)
        assert type(ctx.strategy).shrinks and not type(ctx.strategy).shrink_refusal(ctx.cfg)
        plan = make_plan(ctx, fail(ctx, [Slot("server", 1), Slot("trainer", 0)]))
        assert not plan.aborts and plan.scope is Scope.ROLLBACK and plan.relayout, (strategy, plan.reason)
        assert plan.dropped == [Slot("trainer", 0), Slot("server", 1)]


def test_ecrm_hands_a_dropped_servers_rows_over_to_the_survivors(tmp_path):
    """No rollback: the survivors decode the rows at the committed step (``StepAgent.handover``)."""
    ctx = context(tmp_path, "ecrm", spares=0, **{"layout.replacement": "'shrink'", "layout.servers": 4,
                                                  "strategy.params.k": 2})
    plan = make_plan(ctx, fail(ctx, [Slot("server", 2)]))
    assert not plan.aborts and plan.scope is Scope.COMMITTED and plan.handover and plan.relayout
    assert plan.dropped == [Slot("server", 2)] and plan.renamed == {Slot("server", 3): Slot("server", 2)}
    assert plan.replaced == [] and "rows decoded on the survivors" in plan.reason


def test_none_loses_the_run(tmp_path):
    ctx = context(tmp_path, strategy="none")
    assert make_plan(ctx, fail(ctx, [Slot("server", 0)])).aborts


def test_the_kill_that_fired_is_consumed_once(tmp_path):
    ctx = context(tmp_path, kills="server:1@step=10;server:1@step=30;trainer:0@step=12")
    plan = make_plan(ctx, fail(ctx, [Slot("server", 1)]))
    fired = [k for k in ctx.faults.kills if k.seq in plan.consumed]
    assert [str(k) for k in fired] == ["server:1@step=10"]  # not the later one of the same slot


class UndoRecorder:
    def __init__(self) -> None:
        self.undone: list[int] = []

    def undo_last(self, committed: int) -> None:
        self.undone.append(committed)


def server_context(tmp_path: Path, completed: int, applied: int) -> RankContext:
    ctx = context(tmp_path)
    ctx.slots = [Slot("server", 0), *ctx.slots[1:]]  # this process (world rank 0) holds server 0
    ctx.progress.completed, ctx.progress.applied = completed, applied
    return ctx


def test_a_step_applied_but_not_completed_is_undone(tmp_path):
    """A server that saw the failure inside the strategy's after_apply hook of step 6 holds step 6
    in its table with ``completed`` still 5: agreed on 5, it must undo 6 (else 6 runs twice)."""
    ctx, role = server_context(tmp_path, completed=5, applied=6), UndoRecorder()
    reconcile(ctx, role, RecoveryPlan(scope=Scope.COMMITTED, committed=5))
    assert role.undone == [5] and ctx.progress.completed == ctx.progress.applied == 5
    assert [e for e in ctx.events if e[2] == "undo"]


def test_reconcile_leaves_a_rank_at_the_agreed_step_and_every_rollback_alone(tmp_path):
    cases = ((5, 5, Scope.COMMITTED), (5, -1, Scope.REPLACED), (6, 6, Scope.ROLLBACK))
    for completed, applied, scope in cases:
        ctx, role = server_context(tmp_path, completed, applied), UndoRecorder()
        reconcile(ctx, role, RecoveryPlan(scope=scope, committed=5))
        assert role.undone == [] and ctx.progress.completed == completed
    ctx, role = server_context(tmp_path, completed=6, applied=-1), UndoRecorder()  # a trainer's way
    reconcile(ctx, role, RecoveryPlan(scope=Scope.COMMITTED, committed=5))
    assert role.undone == [5]



def test_a_plan_carries_every_kill_fired_so_far(tmp_path):
    """A rank that a second failure cut off before it received the first plan learns that plan's
    kills from the next one (it fired the first kill again on its renamed slot once)."""
    ctx = context(tmp_path, kills="server:1@step=10;server:0@step=10+20ms")
    first = make_plan(ctx, fail(ctx, [Slot("server", 1)]))
    ctx.faults.consumed.update(first.consumed)  # the monitor's own log_detection
    second = make_plan(ctx, fail(ctx, [Slot("server", 1), Slot("server", 0)]))
    assert [str(k) for k in ctx.faults.kills if k.seq in second.consumed] == ["server:1@step=10",
                                                                               "server:0@step=10+20ms"]


def adopt(ctx: RankContext, plan: RecoveryPlan) -> None:
    """What ``carry_out`` does with a completed plan, on the monitor."""
    ctx.slots, ctx.names = list(plan.slots), dict(plan.names)
    ctx.faults.consumed.update(plan.consumed)
    ctx.ledger.unrecovered, ctx.ledger.dead_names = [], []


SHRINK3 = {"layout.servers": 3, "layout.replacement": "'shrink'"}


def test_a_renumbered_survivor_keeps_its_kill_name_and_a_dropped_name_is_held_by_nobody(tmp_path):
    """Issue 36 item 6: ``server:0@12; server:2@28`` on 3 servers fired 1 of 2 (the survivor launched
    as server 2 was re-armed as server 1). A slot name means the slot as launched."""
    ctx = context(tmp_path, spares=0, kills="server:0@step=12;server:2@step=28", **SHRINK3)
    first = make_plan(ctx, fail(ctx, [Slot("server", 0)], committed=11))
    assert first.renamed == {Slot("server", 1): Slot("server", 0), Slot("server", 2): Slot("server", 1)}
    assert first.names[Slot("server", 0)] == Slot("server", 1)
    assert first.names[Slot("server", 1)] == Slot("server", 2)
    assert Slot("server", 0) not in first.names.values()
    adopt(ctx, first)
    # the process holding server:1 now dies of server:2's kill: that kill is the one consumed
    second = make_plan(ctx, fail(ctx, [Slot("server", 1)], committed=27))
    assert [str(k) for k in ctx.faults.kills if k.seq in second.consumed] == ["server:0@step=12",
                                                                                "server:2@step=28"]
    assert second.names == {**{s: s for s in second.slots if s.role != "server"},
                            Slot("server", 0): Slot("server", 1)}


def test_trainers_keep_their_names_and_a_growth_takes_a_dropped_one(tmp_path):
    ctx = context(tmp_path, spares=0, kills="trainer:0@step=12;trainer:0@step=28",
                  **{"layout.replacement": "'shrink'", "layout.grow_back_steps": 5})
    plan = make_plan(ctx, fail(ctx, [Slot("trainer", 0)], committed=11))
    assert plan.names[Slot("trainer", 0)] == Slot("trainer", 1) and plan.grow_at == 17
    adopt(ctx, plan)
    ctx.grow_at = plan.grow_at
    grow = make_plan(ctx, Failure(step=17, committed=16, dead=[], survivors=list(ctx.slots)))
    assert grow.grow and grow.spawn == [Slot("trainer", 1)]
    # the spawned process takes the dropped name: trainer:0's second kill can fire on it
    assert grow.names[Slot("trainer", 1)] == Slot("trainer", 0)
    assert grow.names[Slot("trainer", 0)] == Slot("trainer", 1)


def test_a_growth_cut_again_and_again_with_no_rank_dead_is_given_up(tmp_path):
    """A spawn that keeps failing (no death, so no recovery completes in between) is retried
    ``GROWTH_ATTEMPTS`` times, then the run goes on without growing: never a loop to the time limit."""
    from mpiec.roles.recovery import GROWTH_ATTEMPTS

    ctx = context(tmp_path, spares=0, **{"layout.replacement": "'shrink'", "layout.grow_back_steps": 5})
    adopt(ctx, make_plan(ctx, fail(ctx, [Slot("trainer", 0)], committed=11)))
    ctx.grow_at = 17
    again = Failure(step=17, committed=16, dead=[], survivors=list(ctx.slots))
    plans = [make_plan(ctx, again) for _ in range(GROWTH_ATTEMPTS + 1)]  # each attempt cut in its spawn
    assert all(p.grow for p in plans[:-1]) and not plans[-1].grow and not plans[-1].aborts
    assert plans[-1].grow_at == -1 and "cut 3 times with no rank dead" in plans[-1].grow_short


HELD = {"layout.replacement": "'shrink'", "layout.grow_back_steps": 5, "layout.grow_from": "'spares'",
        "layout.servers": 4}


def test_spares_held_for_growth_wait_through_a_shrink_and_take_the_missing_slots_at_the_growth(tmp_path):
    """Issue 36 item 1: ``layout.grow_from = "spares"``. A failure still shrinks (the spares are not
    replacements); at the growth the lowest spare takes the lowest missing slot, trainers first, by
    promotion (``assignments``), nothing spawned; grown servers receive rows, they are not restored."""
    ctx = context(tmp_path, spares=2, **HELD)
    first = make_plan(ctx, fail(ctx, [Slot("server", 1), Slot("trainer", 0)], committed=9))
    assert first.dropped == [Slot("trainer", 0), Slot("server", 1)] and not first.assignments
    assert first.grow_at == 15 and not first.grow_short
    assert [s for s in first.slots if s.role == "spare"] == [Slot("spare", 0), Slot("spare", 1)]
    adopt(ctx, first)
    ctx.grow_at = first.grow_at
    grow = make_plan(ctx, Failure(step=15, committed=14, dead=[], survivors=list(ctx.slots)))
    assert grow.grow and grow.relayout and not grow.spawn and not grow.aborts, grow.reason
    assert grow.assignments == {Slot("spare", 0): Slot("trainer", 1), Slot("spare", 1): Slot("server", 3)}
    assert grow.reason == "grow back onto held spares" and not grow.grow_short and grow.grow_at == -1
    assert not any(s.role == "spare" for s in grow.slots) and len(grow.slots) == len(first.slots)
    assert grow.replaced == [Slot("trainer", 1)]  # the new server's rows move to it (``move_rows``)


def test_too_few_held_spares_grow_what_they_can_and_say_so(tmp_path):
    ctx = context(tmp_path, spares=1, **HELD)
    first = make_plan(ctx, fail(ctx, [Slot("server", 1), Slot("trainer", 0)], committed=9))
    adopt(ctx, first)
    ctx.grow_at = first.grow_at
    grow = make_plan(ctx, Failure(step=15, committed=14, dead=[], survivors=list(ctx.slots)))
    assert grow.assignments == {Slot("spare", 0): Slot("trainer", 1)} and not grow.spawn
    assert not grow.relayout  # no server grows: no row moves
    assert grow.grow_short == ("1 spare(s) held for growth, 2 slot(s) missing: server:3 not grown back, the "
                               "run goes on with 2 trainer(s), 3 server(s)")
    # no spare left: the next shrink plans no growth (no revoke for nothing) and says so
    adopt(ctx, grow)
    ctx.grow_at = grow.grow_at
    again = make_plan(ctx, fail(ctx, [Slot("server", 0)], committed=20))
    assert again.dropped == [Slot("server", 0)] and again.grow_at == -1
    assert again.grow_short == ("no spare is left to grow back onto: the run goes on with 2 trainer(s), "
                                "2 server(s)")


def test_a_spare_takes_the_dead_slots_name(tmp_path):
    ctx = context(tmp_path, spares=1, kills="server:1@step=5;server:1@step=20")
    plan = make_plan(ctx, fail(ctx, [Slot("server", 1)], committed=4))
    assert plan.names[Slot("server", 1)] == Slot("server", 1) and Slot("spare", 0) not in plan.names


def test_a_failure_during_an_ecrm_handover_rolls_back_and_consumes_the_kill_by_name(tmp_path):
    """Issue 36 item 8: server 1 dropped, its rows handed over; the server launched as 4 (server 3
    after the renumbering) dies during the handover. The survivors' state may be half re-placed,
    so ecrm's plan falls back to a rollback, and ``on_shrink`` (asked of every rollback now) must
    keep it: handing over again crashed every server with ValueError (their members still held
    the interrupted handover's placement). ``failure.dead`` mixes the two numberings (server:1 of
    the first, server:3 of the second; server:1 of the second is alive): the kills are consumed by
    name, both of them (by slot, server:4's kill stayed live)."""
    sets = {"layout.replacement": "'shrink'", "layout.servers": 6, "strategy.params.k": 2,
            "strategy.params.fallback": "'ckpt'", "strategy.params.fallback_interval": 5}
    ctx = context(tmp_path, "ecrm", spares=0, kills="server:1@step=15+1ms;server:4@step=15+900ms", **sets)
    first = make_plan(ctx, fail(ctx, [Slot("server", 1)], committed=14))
    assert first.handover and first.names[Slot("server", 3)] == Slot("server", 4)
    ctx.ledger.relayout = True  # (share_plan, on the monitor)
    ctx.slots, ctx.names = list(first.slots), dict(first.names)  # adopted; the handover then fails
    note_dead_names(ctx, [Slot("server", 3)])
    ctx.slots = [s for s in ctx.slots if s != Slot("server", 3)]
    failure = Failure(step=15, committed=14, dead=[Slot("server", 1), Slot("server", 3)],
                      survivors=list(ctx.slots))
    second = make_plan(ctx, failure)
    assert second.scope is Scope.ROLLBACK and not second.handover and second.relayout, second.reason
    assert "interrupted the handover" in second.reason
    assert second.dropped == [Slot("server", 3)] and second.renamed == {Slot("server", 4): Slot("server", 3)}
    assert sum(s.role == "server" for s in second.slots) == 4
    assert second.names[Slot("server", 3)] == Slot("server", 5)
    assert [str(k) for k in ctx.faults.kills if k.seq in second.consumed] == ["server:1@step=15+1ms",
                                                                                "server:4@step=15+900ms"]
