"""``ecsnap``'s per-role parts: snapshot trainers and servers, and the coordinator.

Owns what each role does of a snapshot (``strategy`` has the lifecycle and the invariants):

* ``SnapshotServer``: copies its shard into its ``SnapshotSet``, runs the parity exchange
  (``exchange.ParityExchange``) between steps and in ``overlap``, says in its header word how far
  it got (``ecsnap.done``: the last snapshot step whose exchange completed here, plus one;
  ``ecsnap.stall_us``: that snapshot's stall), and on a rollback brings the snapshot back with
  the other servers (``exchange.restore_shards``: decode, re-encode);
* ``SnapshotTrainer``: copies the dense replica; on a rollback receives the copy from the lowest
  trainer holding it. Trainer 0's also holds the ``SnapshotSchedule`` (its header word decides,
  in the ``ecsnap.snapshot`` field) and announces each snapshot to the coordinator (``start``, then
  ``commit`` with the ``checkpoints`` row) with a ``snapshot`` event;
* ``SnapshotCoordinator``: the snapshot steps it heard of, the tolerance check and the plan
  (``SnapshotPlan``: what each rollback candidate is), the ``checkpoints`` rows.

The disk fallback (``strategy.disk_every``) is the checkpoint kit's parts, composed beside these
(``strategies.compose``, after them): trainer 0's ``SchedulePart`` decides in the kit's
``schedule.checkpoint`` field, the ``WriterPart`` s write, the ``CommitterPart`` commits. The
kit's writers put no time in the header (``part_time=None``: the disk interval is a number of
steps, Young's ``t_save`` is never read). The restore of a ``disk`` candidate is this module's
(it knows which kind each candidate is): it goes through the kit's ``Restorer``
(``disk_restorer``); the coordinator part reads the disk candidates from the kit's store and
drops the committer's pending parts (``disk``: the ``DiskCheckpoints`` components).

Invariants: every data rank commits a snapshot at the end of the same step (the first whose every
server word says ``done`` past it); every rank numbers a plan's candidates alike (``restore`` is
called for each candidate in order until one works everywhere), so each knows which kind it
restores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.plan import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing.kit import SCHEDULER
from mpiec.strategies.ecsnap.exchange import ParityExchange, restore_shards
from mpiec.strategies.ecsnap.geometry import Geometry
from mpiec.strategies.ecsnap.schedule import SnapshotSchedule
from mpiec.strategies.ecsnap.snapshot import Snapshot, SnapshotSet, as_bytes
from mpiec.strategies.replay import collective

if TYPE_CHECKING:
    from mpiec.storage.checkpoint import CheckpointStore
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState
    from mpiec.strategies.checkpointing import ManifestCommitter, Restorer

#: the header fields of ecsnap's parts (namespace ``ecsnap``): trainer 0's snapshot decision, and
#: each server's progress (the last snapshot step whose exchange completed, + 1; that one's stall, µs)
FIELDS = (("snapshot", 1), ("done", 32), ("stall_us", 24))
LEAD = SCHEDULER  # the data rank whose word decides (trainer 0)
INT_MAX = 2**31 - 1
KEEP_CANDIDATES = 4  # snapshot steps a plan tries (newest first) before the disk and the initial state
STATS = ("snapshot_stall_s", "snapshot_overlap_s", "snapshot_total_s", "snapshot_restores",
         "snapshot_restore_s", "decoded_blocks", "decoded_rows", "decoded_bytes", "reencoded_blocks",
         "snapshot_recovery_bytes", "snapshot_traffic_bytes", "snapshot_memory_bytes", "parity_memory_bytes")
COUNTS = ("_bytes", "_blocks", "_rows", "restores")  # integer figures (the others are seconds)


@dataclass(frozen=True)
class Coding:
    """What every data rank computes alike: the code, the stripes and every shard's bytes."""

    code: Any
    geo: Geometry
    sizes: list[int]  # bytes of server s's shard (its rows · ``row_bytes``)
    row_bytes: int

    @property
    def r(self) -> int:
        return self.geo.r


@dataclass
class SnapshotPlan(RecoveryPlan):
    """A rollback whose candidates say what they are: ``kinds[i]`` of ``candidates[i]`` is
    ``snapshot``, ``disk`` or ``initial``."""

    kinds: list[str] = field(default_factory=list)
    disk_fallback: bool = False  # beyond the code's tolerance (counted once the recovery completes)


@dataclass(frozen=True)
class DiskCheckpoints:
    """The coordinator's view of the disk fallback: the kit's store and committer."""

    store: CheckpointStore
    committer: ManifestCommitter


class _SnapshotPart(Part):
    """What trainers and servers share: their snapshots, the commit rule, the restore of a plan's
    candidates by kind (``disk_restorer``: the disk fallback's, if any), the agreement on the
    snapshot kept, the figures."""

    namespace = "ecsnap"
    fields = FIELDS

    def __init__(self, env: RankEnv, role: DenseState, coding: Coding,
                 disk_restorer: Restorer | None) -> None:
        self.env = env
        self.role = role
        self.coding = coding
        self.disk = disk_restorer
        self.snaps = SnapshotSet()
        self.stats: dict[str, float] = dict.fromkeys(STATS, 0)
        self._plan: RecoveryPlan | None = None  # the plan whose candidates ``restore`` is trying
        self._tries = 0
        self._last_kind = ""  # what the last successful restore loaded
        self._keep = -1  # scopes without rollback: the snapshot every data rank keeps (``rebuild``)

    # -- what differs by role ---------------------------------------------------------------------
    def copy_into(self, snap: Snapshot) -> None:
        """Copy this rank's state into ``snap`` (registered as building)."""
        raise NotImplementedError

    def restore_snapshot(self, plan: RecoveryPlan, step: int) -> bool:
        """Load this rank's state of snapshot ``step`` (collective with its peers); False: unusable."""
        raise NotImplementedError

    def cut(self) -> None:
        """A failure ended the snapshot traffic in flight (servers)."""

    def observe(self, servers: np.ndarray) -> None:
        """Every step: the servers' words (trainer 0's schedule)."""

    def committed(self, step: int, snap: Snapshot, servers: np.ndarray) -> None:
        """``snap`` was committed at the end of ``step`` (trainer 0 announces it)."""

    def kept(self, keep: Snapshot | None, restored: int) -> None:
        """After a recovery to ``restored``, ``keep`` is the only snapshot."""

    # -- the snapshot -----------------------------------------------------------------------------
    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        lay = self.env.cfg.layout
        servers = words[lay.trainers:lay.trainers + lay.servers]
        self.observe(servers)
        building = self.snaps.building
        if building is not None and int(self.header.column(servers, "done").min()) - 1 >= building.step:
            self.committed(step, self.snaps.commit(step), servers)
        if self.header.get(words[LEAD], "snapshot"):
            t0 = time.perf_counter()
            self.take(step)
            self.stats["snapshot_stall_s"] += time.perf_counter() - t0

    def take(self, step: int) -> None:
        t0 = time.perf_counter()
        snap = self.snaps.take(step, t0)
        self.copy_into(snap)
        self.note_memory()
        snap.stall += time.perf_counter() - t0

    def note_memory(self) -> None:
        held = self.snaps.held()
        self.stats["snapshot_memory_bytes"] = max(self.stats["snapshot_memory_bytes"],
                                                  sum(s.data_bytes for s in held))
        self.stats["parity_memory_bytes"] = max(self.stats["parity_memory_bytes"],
                                                sum(s.parity_bytes for s in held))

    # -- recovery ---------------------------------------------------------------------------------
    def kind(self, plan: RecoveryPlan, step: int) -> str:
        """What candidate ``step`` of ``plan`` is (every rank counts its restore calls alike)."""
        if plan is not self._plan:
            self._plan, self._tries = plan, 0
        i, self._tries = self._tries, self._tries + 1
        if isinstance(plan, SnapshotPlan) and i < len(plan.kinds) and plan.candidates[i] == step:
            return plan.kinds[i]
        if step < 0:
            return "initial"
        if plan.failure is None and self.disk is not None:
            return "disk"  # ``mpiec run --resume``: the coordinator's ``resume_steps`` are on disk
        return "snapshot"

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        kind = self.kind(plan, step)
        t0 = time.perf_counter()
        self.cut()
        if kind == "disk" and self.disk is not None:
            ok = self.disk.restore(plan, step)
        elif kind == "initial":
            self.role.reset()
            ok = True
        else:
            ok = self.restore_snapshot(plan, step)
        if ok:
            self._last_kind = kind
            self.stats["snapshot_restore_s"] = max(self.stats["snapshot_restore_s"], time.perf_counter() - t0)
        return ok

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Scopes without rollback (no shard lost): the data ranks agree on the snapshot they all
        keep -- the newest one complete on every surviving trainer and server (a commit some ranks
        made in the step others undid, or a building snapshot every server completed, counts);
        replaced ranks do not vote. Collective over ``data``."""
        self._keep = -1
        self.cut()
        vote = max(self.snaps.complete_steps(), default=-1)
        if self.env.slot in plan.replaced:
            vote = INT_MAX
        with collective("ecsnap snapshot agreement"):
            agreed = self.env.comms.data_comm().allreduce(vote, op=MPI.MIN)
        self._keep = agreed if agreed != INT_MAX else -1
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.cut()
        if plan.scope is Scope.ROLLBACK:
            # counted here, not in ``restore``: a candidate this rank restored but another rank could
            # not (a snapshot still building when the kill came) is followed by the next candidate
            self.stats["snapshot_restores"] += self._last_kind == "snapshot"
            keep = self.snaps.get(plan.restored) if self._last_kind == "snapshot" else None
        else:
            keep = self.snaps.get(self._keep)
        self.snaps.keep_only(keep, plan.restored)
        self.kept(keep, plan.restored)
        self._plan, self._last_kind, self._keep = None, "", -1

    # -- results ----------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = self.disk.figures() if self.disk is not None else {}
        for key, value in self.stats.items():
            out[key] = int(value) if key.endswith(COUNTS) else float(value)
        return out


class SnapshotTrainer(_SnapshotPart):
    """A trainer's snapshots of the dense replica; trainer 0's also holds the ``schedule``."""

    def __init__(self, env: RankEnv, role: DenseState, coding: Coding, disk_restorer: Restorer | None,
                 schedule: SnapshotSchedule | None = None) -> None:
        super().__init__(env, role, coding, disk_restorer)
        self.schedule = schedule

    def header_word(self, step: int) -> dict[str, int] | None:
        if self.schedule is None:
            return None
        snapshot = self.schedule.due(step, building=self.snaps.building is not None)
        if snapshot:
            self.env.tell_monitor(("ecsnap", "start", step))
        return {"snapshot": snapshot}

    def observe(self, servers: np.ndarray) -> None:
        if self.schedule is not None:
            self.schedule.observe(self.header.column(servers, "stall_us"))

    def copy_into(self, snap: Snapshot) -> None:
        state = self.role.state()
        if snap.dense is None or set(snap.dense) != set(state):
            snap.dense = {name: np.empty_like(a) for name, a in state.items()}
        for name, a in state.items():
            np.copyto(snap.dense[name], a)
        snap.complete = True
        if self.schedule is not None:
            self.schedule.started(snap.step)

    def committed(self, step: int, snap: Snapshot, servers: np.ndarray) -> None:
        if self.schedule is None:
            return
        c = self.coding
        stall = max([int(us) * 1e-6 for us in self.header.column(servers, "stall_us")] + [snap.stall])
        shard_bytes = sum(c.sizes)
        parity = sum(c.geo.block_bytes(st, c.sizes) for st in c.geo.stripes) * c.r
        total = time.perf_counter() - snap.started
        rows = int(shard_bytes // c.row_bytes)
        self.env.event("snapshot", snap.step, detail=(
            f"snapshot of step {snap.step} committed after step {step}: {rows} rows, {shard_bytes} shard "
            f"bytes, {parity} parity bytes, stall {stall:.4f} s, {total:.4f} s in all"))
        self.env.tell_monitor(("ecsnap", "commit", snap.step,
                               (snap.step, "snapshot", shard_bytes, total, 32, rows, stall)))

    def restore_snapshot(self, plan: RecoveryPlan, step: int) -> bool:
        """The dense replica of snapshot ``step``, from the lowest trainer holding it."""
        comm = self.env.comms.trainers_comm()
        snap = self.snaps.get(step)
        have = snap is not None and snap.dense is not None
        with collective("ecsnap dense restore"):
            flags = comm.allgather(have)
        if not any(flags):
            self.env.event("snapshot_refused", plan.step, detail=f"no trainer holds snapshot {step}")
            return False
        root = flags.index(True)
        state = {name: (snap.dense[name] if have else np.empty_like(a))  # type: ignore[union-attr,index]
                 for name, a in self.role.state().items()}
        if not all(flags):
            for name in sorted(state):
                with collective("ecsnap dense restore"):
                    comm.Bcast(state[name], root=root)
        self.role.load_state(state)
        if not have:
            self.snaps.put(Snapshot(step, dense=state, complete=True))
        return True

    def kept(self, keep: Snapshot | None, restored: int) -> None:
        if self.schedule is not None:
            self.schedule.restarted(restored)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.schedule is not None:
            out.update(self.schedule.figures())
        return out


class SnapshotServer(_SnapshotPart):
    """A server's snapshots of its shard, the parity blocks it holds, the exchange in flight."""

    role: ShardState

    def __init__(self, env: RankEnv, role: ShardState, coding: Coding,
                 disk_restorer: Restorer | None) -> None:
        super().__init__(env, role, coding, disk_restorer)
        self.exchange: ParityExchange | None = None
        self.done_upto = -1  # the newest snapshot whose exchange completed here
        self.last_stall = 0.0

    def header_word(self, step: int) -> dict[str, int]:
        stall_us = min(int(self.last_stall * 1e6), self.header.limit("stall_us"))
        return {"done": self.done_upto + 1, "stall_us": stall_us}

    def copy_into(self, snap: Snapshot) -> None:
        table = as_bytes(self.role.state()["table"])
        if snap.data is None or snap.data.size != table.size:
            snap.data = np.empty_like(table)
        np.copyto(snap.data, table)
        c, me = self.coding, self.env.slot.index
        self.exchange = ParityExchange(self.env.comms.servers_comm(), c.geo, c.code, me, c.sizes, snap,
                                       self.env.tags)
        self.stats["snapshot_traffic_bytes"] += self.exchange.bytes_sent

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        super().after_step(step, words)
        if words is not None and step + 1 == self.env.cfg.training.steps:
            self.finish_exchange()

    def progress(self, key: str) -> None:
        """Fold the arrived shard copies into the parity; note when the exchange is done."""
        if self.exchange is None:
            return
        t0 = time.perf_counter()
        done = self.exchange.progress()
        spent = time.perf_counter() - t0
        snap = self.exchange.snap
        if key == "snapshot_stall_s":  # the snapshot's stall: the critical path's share only
            snap.stall += spent
        self.stats[key] += spent
        if done:
            self.exchange = None
            self.done_upto = snap.step
            self.last_stall = snap.stall
            self.stats["snapshot_total_s"] = max(self.stats["snapshot_total_s"],
                                                 time.perf_counter() - snap.started)
            self.note_memory()

    def finish_exchange(self) -> None:
        """The last step: complete the exchange in flight (every server does, so it ends)."""
        while self.exchange is not None:
            self.progress("snapshot_stall_s")
            if self.exchange is not None:
                time.sleep(2e-4)

    def overlap(self, step: int) -> None:
        self.progress("snapshot_overlap_s")  # while the trainers compute: off the critical path

    def background(self, step: int) -> None:
        self.progress("snapshot_stall_s")  # between steps: on the critical path (then the disk writer polls)

    def cut(self) -> None:
        if self.exchange is not None:
            self.exchange.cancel()
            self.exchange = None

    def restore_snapshot(self, plan: RecoveryPlan, step: int) -> bool:
        me, c = self.env.slot.index, self.coding
        snap, problem, figures = restore_shards(self.env.comms.servers_comm(), c.geo, c.code, me, c.sizes,
                                                self.snaps.get(step), step, self.env.tags)
        if snap is None:
            self.env.event("snapshot_refused", plan.step, detail=problem[:250])
            return False
        state = self.role.state()
        table = snap.data.view(np.float32).reshape(state["table"].shape)  # type: ignore[union-attr]
        self.role.load_state({"table": table, "global_rows": state["global_rows"]})
        self.snaps.put(snap)
        rows = int(figures["decoded_bytes"] // c.row_bytes)
        for key in ("decoded_blocks", "decoded_bytes", "reencoded_blocks"):
            self.stats[key] += figures[key]
        self.stats["decoded_rows"] += rows
        self.stats["snapshot_recovery_bytes"] += figures["recovery_bytes"]
        if figures["decoded_blocks"] or figures["reencoded_blocks"]:
            self.env.event("snapshot_decode", plan.step, detail=(
                f"snapshot of step {step}: decoded {rows} rows ({figures['decoded_bytes']} bytes) of "
                f"server:{me}, re-encoded {figures['reencoded_blocks']} parity blocks, "
                f"{figures['recovery_bytes']} bytes received"))
        return True

    def kept(self, keep: Snapshot | None, restored: int) -> None:
        self.done_upto = keep.step if keep is not None else -1


class SnapshotCoordinator(Part):
    """The snapshot steps announced, the committed snapshots' rows, the plan; the disk fallback's
    ``CommitterPart`` (after this part) commits the disk checkpoints, ``disk`` are its store and
    committer (the disk candidates of a plan)."""

    def __init__(self, env: RankEnv, geo: Geometry, code_name: str, interval: int | None,
                 disk: DiskCheckpoints | None, declared: dict[str, Any]) -> None:
        self.env = env
        self.geo = geo
        self.code_name = code_name
        self.interval = interval
        self.disk = disk
        self.declared = declared  # the summary's ``first`` figures of the configuration
        self.known: set[int] = set()  # snapshot steps trainer 0 announced
        self.rows: list[tuple[Any, ...]] = []  # the ``checkpoints`` rows of the committed snapshots
        self.fallbacks = 0

    def on_message(self, source: Slot, payload: Any) -> None:
        if payload[0] != "ecsnap":
            return  # the disk fallback's committer's
        _, kind, step, *rest = payload
        if kind == "start":
            self.known.add(int(step))
        elif kind == "commit":
            self.rows = [row for row in self.rows if row[0] != step] + [rest[0]]

    def snapshot_candidates(self, committed: int) -> list[int]:
        steps = set(self.known)
        if self.interval:  # the fixed schedule, in case trainer 0's notice did not arrive
            steps |= set(range(self.interval - 1, committed + 1, self.interval))
        return sorted((s for s in steps if 0 <= s <= committed), reverse=True)[:KEEP_CANDIDATES]

    def disk_candidates(self, committed: int) -> list[int]:
        """The disk checkpoints at or before ``committed``, newest first; the parts of those not
        committed yet are dropped (the failure ended their epoch)."""
        if self.disk is None:
            return []
        self.disk.committer.drop_pending()
        return [s for s in self.disk.store.complete_steps() if s <= committed]

    def plan(self, failure: Failure) -> RecoveryPlan:
        lost = {s.index for s in failure.dead if s.role == SERVER}
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not lost and originals:
            return RecoveryPlan(Scope.COMMITTED, reason="no shard lost: survivors stay at the committed step")
        committed = max(failure.committed, -1)
        disk = self.disk_candidates(committed)
        problem = self.beyond_tolerance(lost, originals)
        if problem and self.disk is None:
            return RecoveryPlan.abort(f"{problem}; strategy.disk_every = 0: no disk checkpoint to fall "
                                      "back to")
        snaps = [] if problem else self.snapshot_candidates(committed)
        plan = SnapshotPlan(Scope.ROLLBACK, candidates=snaps + disk + [-1],
                            reason=f"{problem}: rollback to the disk checkpoint" if problem
                            else "rollback to the erasure-coded snapshot",
                            kinds=["snapshot"] * len(snaps) + ["disk"] * len(disk) + ["initial"],
                            disk_fallback=bool(problem))
        if problem:
            self.env.event("disk_fallback", failure.step, detail=plan.reason[:250])
        return plan

    def beyond_tolerance(self, lost: set[int], originals: list[int]) -> str:
        """Why the snapshots cannot be restored after losing servers ``lost`` ("" if they can)."""
        beyond = self.geo.beyond(lost)
        if beyond is not None:
            t, data, par = beyond
            st = self.geo.stripes[t]
            names = ", ".join([f"server:{st.members[j]} (data)" for j in data] +
                              [f"server:{st.holders[i]} (parity {i})" for i in par])
            return (f"stripe {t} (data on servers {list(st.members)}, parity on {list(st.holders)}) lost "
                    f"{len(data) + len(par)} members ({names}); ecsnap {self.code_name} with r = "
                    f"{self.geo.r} decodes at most {self.geo.r} per stripe")
        if not originals:
            return "every trainer died: every copy of the snapshots' dense replica is lost"
        return ""

    # resume_steps: the disk fallback's committer's (none: nothing to resume from)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.fallbacks += isinstance(plan, SnapshotPlan) and plan.disk_fallback
        self.known = {s for s in self.known if s <= plan.restored}
        self.rows = [row for row in self.rows if row[0] <= plan.restored]

    def checkpoint_rows(self) -> list[tuple[Any, ...]]:
        return sorted(self.rows, key=lambda row: row[0])  # then the disk fallback's (its committer's)

    def summary(self) -> dict[str, Any]:
        out = dict(self.declared)
        out["snapshots"] = len(self.rows)
        out["disk_fallbacks"] = self.fallbacks
        return out


__all__ = ["FIELDS", "Coding", "DiskCheckpoints", "SnapshotCoordinator", "SnapshotPlan", "SnapshotServer",
           "SnapshotTrainer"]
