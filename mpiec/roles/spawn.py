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
collide with an original rank's.

A death while the survivors are inside ``Spawn`` (or its ``Merge``) leaves them there for good:
Open MPI's ULFM does not recover a spawn a failure cut, nor reliably a failure in a world that
holds spawned processes (open-mpi/ompi #12585, #13325). The monitor therefore watches from a run's
first spawn to the end of its training (``SpawnWatch``, a thread; the main thread is blocked in
MPI without the GIL): once a process of ``world`` has died (a kill note appeared, or ULFM lists a
failed rank) and the recovery has not completed (nor a new spawn started)
``layout.spawn_grace_s`` later, that thread writes the result file (lost, with the reason)
and asks the launcher to end the job (``launcher.write_stop_request``); the launcher kills
mpiexec's process group, so nothing lingers. Ending the ranks from inside is not enough:
``mpiexec`` stayed up when every survivor ended itself (tried, reverted in 4bad541).

Measured costs and Open MPI pitfalls are in
docs/runtime.md ("Replacement by spawn"); among them, PRRTE reports the spawned job's end (no
``MPI_Finalize``, as every rank after a failure) as improper, which the launcher's output relay
holds back (``launcher.relay_output``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, cast

from mpi4py import MPI

from mpiec.comm import Comms, PeerFailure, failed_ranks, failure_class, returning
from mpiec.comm.tags import TAG_SPAWN
from mpiec.failures.faults import kill_notes_dir
from mpiec.layout import MONITOR, Slot
from mpiec.roles.context import TRACE_EVENTS, RankContext
from mpiec.strategies.api.plan import RecoveryPlan

if TYPE_CHECKING:
    from pathlib import Path

    from mpiec.config import Config
    from mpiec.roles.monitor import Monitor

JOIN_TIMEOUT_S = 120.0  # a spawned process whose parents vanished gives up instead of hanging
WATCH_POLL_S = 0.1  # SpawnWatch: how often it looks for a death (a directory listing, a local MPI call)
OUTPUT_S = 1.0  # a cut run's last lines need this long through mpiexec before the launcher kills it
HOLD_S = 60.0  # a cut run's monitor, should its spawn return after all: the launcher ends it meanwhile


class SpawnWatch:
    """The monitor's watch over a run that spawned (see the module's docstring), from its first
    ``Spawn`` to the end of training (``stop_watch``). Open MPI recovers neither a spawn that a
    death cut (the survivors may also split: the monitor out of ``Spawn`` with an error and in the
    next shrink, the others inside ``Merge``) nor, reliably, a failure in a world that holds
    spawned processes (their job runs without ULFM's recovery flag: a server killed after a
    growth back hung the next recovery, 1 of 4 runs).

    A death is a kill note (any host: the victim writes it before it dies) of a slot in ``world``
    written after the last completed recovery, or a rank of ``world`` that ULFM reports failed (a
    death without a note, where the library knows it). Once one is seen, the recovery must
    complete (``rearm_watch``) within ``layout.spawn_grace_s``, counted from the later of the
    death and the latest spawn's start (a new spawn is progress), or the run is cut. While it
    watches, a marker file tells the launcher the monitor's pid (``launcher.spawn_marker_path``):
    Open MPI may crash every survivor, the monitor too, when a process dies inside ``Spawn`` (a
    segfault in ``ompi_comm_revoke_local``), and the launcher then ends the job at once. The main
    thread and the cut exclude each other: either the run goes on and the watch never acts, or
    the run is cut and the main thread never goes on (``hold``), so the result file is written
    once."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self.grace = ctx.cfg.layout.spawn_grace_s
        self.notes = kill_notes_dir(ctx.out_path, ctx.run_id)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.cut = False
        self.world = ctx.comms.world
        self.slots: list[Slot] = []
        # A note of a slot in world is its current holder's if written after the last completed
        # recovery: an earlier holder of that slot died before it (it was replaced there).
        self.since = ctx.ledger.recoveries[-1]["restored"] if ctx.ledger.recoveries else -math.inf
        self.spawn: list[Slot] = []
        self.in_spawn = False
        self.spawn_at = time.monotonic()
        self.who: list[str] = []  # the dead seen, [] while none
        self.seen_at = 0.0
        self.during_spawn = False  # the dead seen died during a spawn of this recovery
        self.generation = 0  # bumped by every completed recovery: a scan begun before it is stale
        self.thread = threading.Thread(target=self._watch, name="mpiec-spawn-watch", daemon=True)

    def spawning(self, plan: RecoveryPlan) -> None:
        """The main thread is about to ``Spawn`` for ``plan`` over the current ``world``."""
        from mpiec.launch.launcher import write_spawn_marker

        with self.lock:
            self.world, self.slots = self.ctx.comms.world, list(self.ctx.slots)
            self.spawn, self.spawn_at, self.in_spawn = list(plan.spawn), time.monotonic(), True
            self.during_spawn = self.during_spawn or bool(self.who)
        if not self.thread.is_alive():
            try:
                write_spawn_marker(self.ctx.out_path, os.getpid())
            except OSError:  # the watch itself still works; only the launcher's fallback is missing
                pass
            self.thread.start()

    def spawned(self) -> None:
        """The main thread left ``Spawn`` and ``Merge`` (returned or raised): never go on if cut."""
        with self.lock:
            self.in_spawn = False
            cut = self.cut
        if cut:
            self.hold()

    def rearm(self) -> None:
        """A recovery completed or aborted (every rank took part in its collectives): the dead seen
        so far are accounted for; watch the world it left. Never go on if the run was cut."""
        with self.lock:
            cut = self.cut
            self.generation += 1
            self.who, self.in_spawn, self.during_spawn = [], False, False
            self.world, self.slots = self.ctx.comms.world, list(self.ctx.slots)
            self.since = self.ctx.now()
        if cut:
            self.hold()

    def stop(self) -> None:
        """Training is over: stop watching (the monitor writes the result itself from here)."""
        from mpiec.launch.launcher import spawn_marker_path

        with self.lock:
            self.done.set()
            cut = self.cut
        if cut:
            self.hold()
        spawn_marker_path(self.ctx.out_path).unlink(missing_ok=True)

    def deaths(self) -> list[str]:
        """Who of ``world`` is dead, as the line names them ([] while nobody is). A process that
        died before a spawn began but after the shrink that made ``world`` counts too: the spawn
        waits for it as well."""
        with self.lock:
            slots, world, since = list(self.slots), self.world, self.since
        out = []
        try:
            names = sorted(f.name for f in self.notes.iterdir() if not f.name.startswith("."))
        except OSError:  # no note yet: the folder is made by the first victim
            names = []
        for name in names:
            try:
                note = json.loads((self.notes / name).read_text())
                slot = Slot(note["role"], int(note["index"]))
                if slot in slots and float(note["time"]) > since:
                    out.append(f"{slot} (kill {note['plan']})")
            except (OSError, ValueError, KeyError, TypeError):  # the monitor's own reader says why, later
                continue
        return out or [str(slots[r]) if 0 <= r < len(slots) else f"world rank {r}"
                       for r in failed_ranks(world)]

    def _watch(self) -> None:
        while not self.done.wait(WATCH_POLL_S):
            with self.lock:
                who, generation, in_spawn = list(self.who), self.generation, self.in_spawn
            if not who:
                found = self.deaths()
                with self.lock:
                    if found and generation == self.generation:
                        self.who, self.seen_at = found, time.monotonic()
                        self.during_spawn = self.during_spawn or self.in_spawn
                if found and TRACE_EVENTS:
                    print(f"[trace {self.ctx.now():8.3f} spawn watch] dead: {', '.join(found)}"
                          f"{' (in the spawn)' if in_spawn else ''}", file=sys.stderr, flush=True)
                continue
            with self.lock:
                if time.monotonic() - max(self.seen_at, self.spawn_at) < self.grace or self.done.is_set():
                    continue
                self.cut = True
                in_spawn = self.during_spawn or self.in_spawn
            self._end_run(who, in_spawn)
            return

    def _end_run(self, who: list[str], in_spawn: bool) -> None:
        """Write the result (lost) and the launcher's stop request (``in_spawn``: the death cut a
        spawn of this recovery). Never raises: a failure to
        write is printed, and the stop request still goes out (the run then ends as a crash)."""
        from mpiec.launch.launcher import write_stop_request

        ctx = self.ctx
        dead = ", ".join(who)
        if in_spawn:
            reason = (f"{dead} died while MPI_Comm_spawn started "
                      f"{'a process' if len(self.spawn) == 1 else 'processes'} for "
                      f"{', '.join(map(str, self.spawn))}; Open MPI never returns from a spawn that a "
                      f"death cut, so the run was ended {self.grace:g} s after the death "
                      "(layout.spawn_grace_s)")
        else:
            reason = (f"{dead} died and the recovery did not complete within {self.grace:g} s "
                      "(layout.spawn_grace_s): Open MPI's ULFM does not reliably recover a run that "
                      "spawned processes (open-mpi/ompi #12585), so the run was ended")
        path = ""
        try:
            ctx.event("abort", ctx.progress.current_step, ctx.rank, detail=reason[:250])
            path = str(cast("Monitor", ctx.role).write_lost_result(reason))
        except Exception:  # noqa: BLE001 - whatever it was, the job must still end now
            print("[mpiec] the result of a run whose spawn was cut could not be written:", file=sys.stderr)
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(OUTPUT_S)
        try:
            write_stop_request(ctx.out_path, reason, path)
        except OSError as exc:
            print(f"[mpiec] cannot ask the launcher to end the run ({exc}); it ends at its time limit",
                  file=sys.stderr, flush=True)

    def hold(self) -> None:
        """The run was cut and its result written: never go on (the launcher kills the job)."""
        self.thread.join()
        time.sleep(HOLD_S)
        os._exit(1)


def rearm_watch(ctx: RankContext) -> None:
    """The monitor, when a recovery completed or aborted: its spawn watch, if one runs, rearms."""
    if ctx.spawn_watch is not None:
        ctx.spawn_watch.rearm()


def stop_watch(ctx: RankContext) -> None:
    """The monitor, when training is over: its spawn watch, if one runs, ends."""
    if ctx.spawn_watch is not None:
        watch, ctx.spawn_watch = ctx.spawn_watch, None
        watch.stop()


def spawn_replacements(ctx: RankContext, plan: RecoveryPlan) -> None:
    """Survivors: start one process per slot of ``plan.spawn`` and merge them into ``world``."""
    world = ctx.comms.world
    info = MPI.Info.Create()
    info.Set("map_by", "slot:OVERSUBSCRIBE")  # a dead rank's slot is not given back
    watch = None
    if ctx.slot.role == MONITOR:
        watch = ctx.spawn_watch = ctx.spawn_watch or SpawnWatch(ctx)
        watch.spawning(plan)
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
        if watch is not None:
            watch.spawned()
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


__all__ = ["spawn_replacements", "join_context", "rearm_watch", "stop_watch", "SpawnWatch", "TAG_SPAWN"]
