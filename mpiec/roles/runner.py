"""The life of a rank: run its role, survive failures, hand in its final report.

Owns the loop every rank runs, identically:

1. run the role until it ends or raises ``PeerFailure`` (ULFM: a peer died or a
   communicator was revoked) or ``EmulatedFailure`` (a peer announced its
   emulated death);
2. hand the failure to ``recovery`` (detect → plan → reconcile → replace →
   restore); a failure during that restarts it with the failures merged;
3. resume the role (a spare may now hold another slot) or, if the plan aborts,
   stop;
4. at the end every live rank sends its final report to the monitor in one
   gather over the current ``world`` (a rank dying meanwhile is left out after
   a shrink, and the run is then lost if it held model state); the monitor
   writes the result file.

Invariant: no rank waits forever: every wait is on a communicator that a
failure revokes (ULFM) or that the victim keeps serving (emulated).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mpiec.comm import PeerFailure, guard, recv
from mpiec.layout import MONITOR, PARITY, SERVER, SPARE, TRAINER
from mpiec.roles.context import TAG_CONTROL, RankContext
from mpiec.roles.driver import Role
from mpiec.roles.exchange import EmulatedFailure
from mpiec.roles.recovery import (
    Detection,
    carry_out,
    detect_emulated,
    detect_ulfm,
    log_detection,
    merge,
    share_plan,
    shrink_world,
)
from mpiec.roles.spawn import join_context, rearm_watch, stop_watch
from mpiec.strategies.api.agents import Agent, Coordinator, ParityAgent, ServerAgent, TrainerAgent
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.env import DenseState, RankEnv, ShardState

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.roles.monitor import Monitor


def make_role(ctx: RankContext) -> Role:
    """Build the role of this rank's current slot and the strategy's agent for it (``ctx.agent``)."""
    from mpiec.roles.monitor import Monitor
    from mpiec.roles.parity import Parity
    from mpiec.roles.server import Server
    from mpiec.roles.spare import Spare
    from mpiec.roles.trainer import Trainer

    kinds: dict[str, Callable[[RankContext], Role]] = {MONITOR: Monitor, TRAINER: Trainer, SERVER: Server,
                                                       SPARE: Spare, PARITY: Parity}
    role = kinds[ctx.slot.role](ctx)
    ctx.role_slot, ctx.role, ctx.role_layout = ctx.slot, role, ctx.layout_now
    ctx.agent = make_agent(ctx.strategy, RankEnv(ctx), ctx.slot.role, role)
    return role


def make_agent(strategy: Strategy, env: RankEnv, kind: str, role: object) -> Agent:
    """The strategy's agent for a rank of role ``kind`` (a fresh one on every promotion); ``role``
    is the role object of that kind (a trainer's is a ``DenseState``, a server's a ``ShardState``)."""
    agent: object
    want: type[Agent]
    if kind == MONITOR:
        agent, factory, want = strategy.coordinator(env), "coordinator", Coordinator
    elif kind == TRAINER:
        agent, factory, want = strategy.trainer(env, cast(DenseState, role)), "trainer", TrainerAgent
    elif kind == SERVER:
        agent, factory, want = strategy.server(env, cast(ShardState, role)), "server", ServerAgent
    elif kind == PARITY:
        agent, factory, want = strategy.parity(env), "parity", ParityAgent
    else:
        agent, factory, want = strategy.spare(env), "spare", Agent
    if not isinstance(agent, want):  # else the first hook fails far from the cause (None has no ...)
        raise TypeError(f"strategy '{strategy.name}': {type(strategy).__qualname__}.{factory}() returned "
                        f"{type(agent).__name__}, not a {want.__module__}.{want.__qualname__}")
    return cast(Agent, agent)


def join_run(cfg: Config, out_path: Path, worker_args: list[str]) -> tuple[RankContext, Role]:
    """A process spawned for a dead slot: join the run and the recovery in progress; (context, role)."""
    ctx, plan = join_context(cfg, out_path, worker_args)
    assert plan.failure is not None
    role = carry_out(ctx, None, plan, Detection(plan.failure), make_role, spawned=True)
    if role is None:
        raise RuntimeError(f"spawned replacement for {ctx.slot}: the recovery failed ({plan.reason})")
    return ctx, role


def detect(ctx: RankContext, exc: Exception) -> Detection:
    if isinstance(exc, EmulatedFailure):
        return detect_emulated(ctx, exc.data_ranks, exc.step)
    assert isinstance(exc, PeerFailure)
    return detect_ulfm(ctx, exc)


def recover(ctx: RankContext, role: Role, exc: Exception) -> tuple[Role, str]:
    """Everything between a failure and the next step; (role to resume, "" or abort reason)."""
    detection: Detection | None = None
    while True:
        try:
            detection = merge(detection, detect(ctx, exc))
            if ctx.ledger.dead:  # emulated victim: out of world, waits for the end
                return role, "dead"
            plan = share_plan(ctx, detection.failure)
            if plan.aborts:
                log_detection(ctx, detection, plan)
                ctx.event("abort", plan.step, ctx.rank, detail=plan.reason[:250])
                return role, plan.reason or "aborted"
            # An earlier attempt may have promoted this rank before a failure cut it short: its
            # role is then the one built for the new slot, not the one it entered recovery with.
            role = ctx.role if ctx.role is not None else role
            new_role = carry_out(ctx, role, plan, detection, make_role)
            if new_role is None:
                ctx.event("abort", plan.step, ctx.rank, detail=plan.reason[:250])
                # a promoted rank reports as the role built for its new slot (not as the spare it was)
                return ctx.role if ctx.role is not None else role, plan.reason or "restore failed"
            return new_role, ""
        except PeerFailure as again:  # a failure during the recovery: start over, merged
            exc = again


def run_rank(ctx: RankContext, role: Role | None = None) -> str:
    """Run this rank (its ``role`` from ``make_role``) to the end: ``"done"`` or ``"lost"``."""
    role = role if role is not None else make_role(ctx)
    outcome, reason = "done", ""
    ctx.cpu_t0 = time.process_time()  # start-up (imports, kernels, shard) is not training's CPU
    ctx.faults.arm()
    while True:
        try:
            role.run()
            # Training is over on this rank. A fault-tolerant agreement makes sure it is over
            # everywhere: a rank that died meanwhile (even mid-evaluation) is recovered from
            # here too, instead of failing the final report.
            ctx.faults.disarm()
            with guard("end of training"):
                ctx.comms.world.Agree(1)
            break
        except (PeerFailure, EmulatedFailure) as exc:
            ctx.ledger.failures_seen += 1
            role, reason = recover(ctx, role, exc)
            rearm_watch(ctx)  # a run that spawned: the next death must be recovered in time (roles.spawn)
            if reason:
                outcome = "lost"
                break
    stop_watch(ctx)
    ctx.faults.disarm()
    if ctx.ledger.dead:
        return wait_for_release(ctx)
    ctx.faults.die_if_killed_at_end()
    reports = hand_in(ctx, ctx.final_report(role))
    held_state = [s for s in ctx.ledger.report_deaths if s.role in (TRAINER, SERVER)]
    if held_state and outcome == "done":
        outcome = "lost"
        reason = (f"{', '.join(map(str, held_state))} died during the final report, after training: "
                  f"{'its' if len(held_state) == 1 else 'their'} model state is gone (nothing recovers "
                  "after the last step)")
    if ctx.rank == 0:
        assert reports is not None  # the gather's root
        cast("Monitor", role).write_result(reports, outcome, reason if reason != "dead" else "")  # rank 0
    if ctx.ledger.failures_seen:
        # Hold everyone until the file is written: after a failure the caller skips
        # MPI_Finalize (Open MPI can hang there with operations the failure cut off).
        try:
            with guard("final hold"):
                ctx.comms.world.bcast(None, root=0)
        except PeerFailure:
            # A rank that got the hold's word leaves at once without MPI_Finalize, and ULFM may report
            # it dead to one still in the bcast. The root broadcasts only once the result file is
            # written, so nothing is lost either way (a dead monitor: the launcher finds no result
            # file): not worth a "stopping" line on a run that succeeded.
            pass
        if ctx.rank == 0:
            for old, victims in ctx.ledger.retired:
                for r in victims:
                    old.send(("release", None), dest=r, tag=TAG_CONTROL)
    return outcome


def hand_in(ctx: RankContext, report: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Gather every live rank's final report at the monitor: the reports on rank 0, None elsewhere.

    Collective over ``world``, once per rank, after training. Under ULFM a rank may die during the
    gather (a crash right after training, a kill planned ``@end``): the survivors then agree that
    it failed (``Agree`` raises the same error on every survivor when a rank died), shrink
    ``world`` and gather again without the dead, whose slots go to ``ctx.ledger.report_deaths`` for the
    monitor to record. Without ULFM such a death ends the job.
    """
    while True:
        reports, ok = None, 1
        try:
            with guard("final report"):
                reports = ctx.comms.world.gather(report, root=0)
        except PeerFailure:
            if not ctx.ulfm:
                raise
            ok = 0
        if not ctx.ulfm:
            return reports
        try:
            with guard("final report agreement"):
                ok = ctx.comms.world.Agree(ok)
        except PeerFailure:
            ok = 0
        if ok:
            return reports
        ctx.ledger.failures_seen += 1
        ctx.ledger.report_deaths += shrink_world(ctx)


def wait_for_release(ctx: RankContext) -> str:
    """An emulated victim: out of every communicator, it waits for the monitor's word."""
    assert ctx.ledger.retired_world is not None  # set when the victim left (``recovery.detect_emulated``)
    recv(ctx.ledger.retired_world, 0, TAG_CONTROL, "victim wait", max_pause=0.05)
    return "done"
