"""The life of a rank: run its role, survive failures, hand in its final report.

Owns the failure sequence every survivor goes through, identically:

1. a role raises ``PeerFailure`` (ULFM: a peer died or ``world`` was revoked)
   or ``EmulatedFailure`` (a peer announced its emulated death);
2. ULFM: revoke every communicator, shrink ``world``, agree on the last step
   every survivor completed; emulated: the step is known to all, no shrink;
3. the strategy decides (``Decision.ABORT`` or ``CONTINUE``) — a pure function
   of the agreed ``Failure``, so every survivor decides the same;
4. at the end every live rank sends its final report to the monitor in one
   gather over the current ``world``; the monitor writes the result file.

Invariant: no rank waits forever: every wait is on a communicator that a
failure revokes (ULFM) or that the victim keeps serving (emulated).
"""

from __future__ import annotations

from typing import Any

from mpiec.comm import PeerFailure, agree_min, shrink
from mpiec.layout import MONITOR, PARITY, SERVER, SPARE, TRAINER, Slot
from mpiec.roles.context import RankContext
from mpiec.roles.exchange import EmulatedFailure
from mpiec.strategies.base import Decision, Failure


def make_role(ctx: RankContext) -> Any:
    from mpiec.roles.monitor import Monitor
    from mpiec.roles.server import Server
    from mpiec.roles.spare import Spare
    from mpiec.roles.trainer import Trainer

    return {MONITOR: Monitor, TRAINER: Trainer, SERVER: Server, SPARE: Spare,
            PARITY: Spare}[ctx.slot.role](ctx)


def data_rank_slot(ctx: RankContext, data_rank: int) -> Slot:
    lay = ctx.cfg.layout
    if data_rank < lay.trainers:
        return Slot(TRAINER, data_rank)
    if data_rank < lay.trainers + lay.servers:
        return Slot(SERVER, data_rank - lay.trainers)
    return Slot(PARITY, data_rank - lay.trainers - lay.servers)


def ulfm_failure(ctx: RankContext, exc: PeerFailure) -> Failure:
    detected = ctx.now()
    ctx.comms.revoke()
    old_slots = list(ctx.slots)
    new_world, dead = shrink(ctx.comms.world)
    ctx.comms.free()
    ctx.comms.world = new_world
    ctx.comms.data = ctx.comms.trainers = None
    ctx.slots = [s for r, s in enumerate(old_slots) if r not in dead]
    dead_slots = [old_slots[r] for r in dead]
    shrunk = ctx.now()
    # Ranks outside the step loop (monitor, spares) vote "no constraint".
    mine = ctx.completed + 1 if ctx.slot.role in (TRAINER, SERVER, PARITY) else 2**31 - 1
    committed = agree_min(new_world, mine) - 1
    step = ctx.current_step = committed + 1  # the step the failure interrupted, as all agree
    ctx.event("detect", step, ctx.rank, detail=exc.where, at=detected)
    ctx.event("shrink", step, ctx.rank, detail=f"dead {[str(s) for s in dead_slots]}", at=shrunk)
    ctx.event("agree", step, ctx.rank, detail=f"committed step {committed}")
    return Failure(step=step, committed=committed, dead=dead_slots)


def emulated_failure(ctx: RankContext, exc: EmulatedFailure) -> Failure:
    dead = [data_rank_slot(ctx, r) for r in exc.data_ranks]
    if exc.step is not None:  # monitor and spares learn the step from the notice
        ctx.current_step = exc.step
    ctx.dead = ctx.slot in dead
    if not ctx.dead:  # the victim plays dead: it detects nothing
        ctx.event("detect", ctx.current_step, ctx.rank, detail=f"emulated death of {[str(s) for s in dead]}")
    return Failure(step=ctx.current_step, committed=ctx.current_step - 1, dead=dead, emulated=True)


def run_rank(ctx: RankContext, role: Any = None) -> str:
    """Run this rank (its ``role`` from ``make_role``) to the end: ``"done"`` or ``"lost"``."""
    role = role if role is not None else make_role(ctx)
    outcome = "done"
    while True:
        try:
            role.run()
            break
        except PeerFailure as exc:
            failure = ulfm_failure(ctx, exc)
        except EmulatedFailure as exc:
            failure = emulated_failure(ctx, exc)
        ctx.failures_seen += 1
        decision = ctx.strategy.on_failure(failure)
        if decision is Decision.ABORT:
            if not ctx.dead:
                ctx.event("abort", failure.step, ctx.rank, detail=f"strategy {ctx.cfg.strategy.name}")
            outcome = "lost"
            break
        role = ctx.strategy.recover(ctx, role, failure)  # pragma: no cover - no such strategy yet

    report = {"info": ctx.rank_info(), "events": ctx.events, "dead": ctx.dead,
              "role": role.final_report(), "strategy": ctx.strategy.summary() if not ctx.dead else {}}
    reports = ctx.comms.world.gather(report, root=0)
    if ctx.rank == 0:
        role.write_result(reports, outcome)
    if ctx.failures_seen:
        # Hold everyone until the file is written: after a failure the caller skips
        # MPI_Finalize (Open MPI can hang there with operations the failure cut off).
        ctx.comms.world.bcast(None, root=0)
    return outcome
