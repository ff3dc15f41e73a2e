"""Replacement by ``MPI_Comm_spawn`` (``layout.replacement = "spawn"``): both sides of it.

Owns how a fresh process joins a run during a recovery:

* survivors (``spawn_replacements``, collective over the shrunk ``world``):
  ``Spawn`` one process per slot of ``plan.spawn``, the monitor sends each its
  start-up payload (slot table, plan, clock origin, run token, kills fired so
  far), then ``Merge`` with the survivors first, so the spawned ranks come last
  in the new ``world`` — in ``plan.slots`` order;
* the spawned process (``join_context``, then ``runner.join_run``): receives the payload from its parent,
  merges, builds its context and joins the recovery where a promoted spare
  would be (``recovery.carry_out``), then trains like any rank.

Invariants: the spawned process runs the same worker module with the same
config file; it is never a kill target of an earlier holder's kills (the
payload carries the consumed ones); its ``first_rank`` is new (``n_ranks`` +
the number of processes spawned before), so kill notes and reports never
collide with an original rank's. Measured costs and Open MPI pitfalls are in
docs/runtime.md ("Replacement by spawn"); among them, PRRTE reports the spawned job's end (no
``MPI_Finalize``, as every rank after a failure) as improper, which the launcher's output relay
holds back (``launcher.relay_output``).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from mpiec.comm import Comms, PeerFailure, failure_class, returning
from mpiec.roles.context import RankContext
from mpiec.strategies.plan import RecoveryPlan

if TYPE_CHECKING:
    from pathlib import Path

    from mpiec.config import Config
    from mpiec.layout import Slot

TAG_SPAWN = 21
JOIN_TIMEOUT_S = 120.0  # a spawned process whose parents vanished gives up instead of hanging


def spawn_replacements(ctx: RankContext, plan: RecoveryPlan) -> None:
    """Survivors: start one process per slot of ``plan.spawn`` and merge them into ``world``."""
    world = ctx.comms.world
    info = MPI.Info.Create()
    info.Set("map_by", "slot:OVERSUBSCRIBE")  # a dead rank's slot is not given back
    try:
        inter = world.Spawn(sys.executable, args=["-P", "-m", "mpiec.worker", *ctx.worker_args, "--spawned"],
                            maxprocs=len(plan.spawn), info=info, root=0)
        inter = returning(inter)
        if ctx.rank == 0:
            for i, slot in enumerate(plan.spawn):
                inter.send(join_payload(ctx, plan, slot, i), dest=i, tag=TAG_SPAWN)
        merged = returning(inter.Merge(high=False))
    except MPI.Exception as exc:
        # A survivor that dies mid-spawn surfaces as any error class here: start the recovery over.
        raise PeerFailure(failure_class(exc) or exc.Get_error_class(), f"spawn ({exc})") from None
    finally:
        info.Free()
    ctx.comms = Comms(world=merged, data=None, trainers=None)
    if ctx.rank == 0:
        ctx.spawned += len(plan.spawn)


def join_payload(ctx: RankContext, plan: RecoveryPlan, slot: Slot, i: int) -> dict[str, Any]:
    return {"slot": slot, "plan": plan, "t0_wall": ctx.t0_wall, "run_id": ctx.run_id, "epoch": ctx.epoch,
            "consumed": sorted(ctx.faults.consumed | set(plan.consumed)),
            "first_rank": ctx.cfg.n_ranks + ctx.spawned + i,
            "resume_from": ctx.resume_from, "ulfm": ctx.ulfm}


def join_context(cfg: Config, out_path: Path, worker_args: list[str]) -> tuple[RankContext, RecoveryPlan]:
    """The spawned process: receive the payload from the run and build its context; (context, the
    recovery plan in progress, which it joins through ``runner.join_run``)."""
    parent = returning(MPI.Comm.Get_parent())
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not parent.Iprobe(source=0, tag=TAG_SPAWN):
        if time.monotonic() > deadline:
            raise RuntimeError(f"spawned replacement: no word from the run within {JOIN_TIMEOUT_S:.0f} s")
        time.sleep(0.005)
    payload = parent.recv(source=0, tag=TAG_SPAWN)
    world = returning(parent.Merge(high=True))
    plan = payload["plan"]
    from mpiec.comm import configure_nbc_errors

    configure_nbc_errors(payload["ulfm"])
    ctx = RankContext(cfg=cfg, slots=list(plan.slots), comms=Comms(world=world, data=None, trainers=None),
                      ulfm=payload["ulfm"], t0_wall=payload["t0_wall"], out_path=out_path,
                      resume_from=payload["resume_from"])
    ctx.first_rank = payload["first_rank"]
    ctx.run_id, ctx.epoch = payload["run_id"], payload["epoch"]
    ctx.faults.consumed = set(payload["consumed"])
    ctx.ledger.failures_seen = 1  # it exists because of a failure: it skips MPI_Finalize like the others
    ctx.worker_args = worker_args
    ctx.awaiting_restore = True
    return ctx, plan


__all__ = ["spawn_replacements", "join_context", "TAG_SPAWN"]
