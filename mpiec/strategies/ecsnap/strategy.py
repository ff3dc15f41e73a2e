"""``ecsnap``: erasure-coded in-memory snapshots, full rollback (after Gemini, ECCheck, REFT).

Owns the snapshot agents: on a server its shard snapshots and the parity blocks
it holds for other stripes (``snapshot.Snapshot``), and the nonblocking parity
exchange in flight (``exchange.ParityExchange``); on a trainer its copies of the
dense replica; on trainer 0 the schedule; on the monitor the known snapshot
steps, the tolerance check (``geometry.Geometry.beyond``) and the plan; and,
with ``strategy.disk_every = N``, a ``ckpt`` agent writing a full checkpoint to
disk every N steps, the fallback beyond the code's tolerance.

One snapshot of step ``B``:

1. trainer 0 decides it in step ``B``'s header (``header_word``: a fixed
   ``interval`` or Young's ``auto``; never while the previous one is still
   building), so every rank takes it after the same step;
2. after step ``B`` every server copies its shard (rows and optimizer state) into
   a snapshot buffer and every trainer its dense replica (the *stall*: the
   training thread's copy); the servers then post the parity exchange
   (``ParityExchange``: each shard copy to the ``r`` holders of its stripe), which
   progresses between steps and while the trainers compute (``overlap``), each
   arrived copy folded into the parity (``parity ^= g_ij · block``);
3. a server whose parity blocks are encoded and sends completed says so in its
   header word (the last snapshot step it completed); when every server's word
   of a step says ``B``, every rank *commits* ``B`` at the end of that same step:
   it becomes the snapshot to restore, and the previous one's buffers are reused
   by the next snapshot.

Invariants:

* at most two snapshots per rank: the committed one and the one building (kept
  until the new one is committed, so a failure during the parity exchange rolls
  back to the previous one); a snapshot is *usable* when every surviving server
  holds its copy and complete parity -- the same condition as the commit, checked
  again by an agreement among the servers at restore (``exchange.restore_shards``);
* a server failure rolls every trainer and server back to the newest usable
  snapshot: survivors load their copy, the replaced server's shard is decoded
  from ``k_t`` blocks of its stripe (GF(2^8), exact), replaced parity holders get
  their blocks re-encoded, and the steps since are re-executed -- training is
  deterministic, so the run ends with the failure-free ``param_checksum``;
* the dense replica is protected by replication: every trainer holds the same
  replica and so the same snapshot copy; a replaced trainer receives the copy of
  the lowest trainer holding it (a trainer-only failure needs no rollback: the
  servers hold the committed rows and the runtime copies the live replica);
* more than the code tolerates (a stripe that lost data blocks and more than
  ``r`` members in all, or every trainer) rolls back to the newest disk
  checkpoint when ``disk_every`` is set, and otherwise ends the run with one
  line naming the stripe;
* a recovery drops the snapshot building and any committed after the step the
  survivors keep, so every rank holds the same snapshots afterwards.

Memory (per server, ``B_s`` its shard bytes, ``L_t`` the largest shard of stripe
``t``): two snapshot buffers ``2 · B_s`` and two sets of the parity blocks it holds
``2 · Σ L_t``; per trainer ``2 ·`` the dense replica. Traffic per snapshot: every
server sends its shard ``r`` times (``r · Σ_s B_s`` in all). A recovery moves
``k_t · L_t`` per decoded shard and ``k_t`` shards per re-encoded parity block.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from mpi4py import MPI

from mpiec.errors import ConfigError
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing import expected_mtbf_s, young_interval
from mpiec.strategies.ecsnap.exchange import ParityExchange, restore_shards
from mpiec.strategies.ecsnap.geometry import Geometry
from mpiec.strategies.ecsnap.snapshot import Snapshot, as_bytes
from mpiec.strategies.legacy import LegacyStrategy
from mpiec.strategies.legacy_ckpt import WORD_CHECKPOINT, LegacyFullCheckpoint
from mpiec.strategies.replay import collective

INT_MAX = 2**31 - 1
DEFAULTS: dict[str, Any] = {"interval": "auto", "first": 10, "code": "rs", "k": "auto", "r": 1,
                            "disk_every": 0, "dir": ""}
WORD_SNAPSHOT, WORD_DISK = 1, 2  # trainer 0's header word
DONE_MASK = (1 << 32) - 1  # a server's word: (last snapshot step it completed + 1) | stall µs << 32
STALL_MAX_US = (1 << 24) - 1
KEEP_CANDIDATES = 4  # snapshot steps a plan tries (newest first) before the disk and the initial state


def resolved(cfg: Any) -> dict[str, Any]:
    p = {**DEFAULTS, **cfg.strategy.params}
    if p["k"] == "auto":
        p["k"] = max(1, cfg.layout.servers - int(p["r"])) if isinstance(p["r"], int) else 1
    return p


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate(cfg: Any) -> None:
    """One ``ConfigError`` line naming the first bad ``strategy.`` field."""
    p = cfg.strategy.params
    for key in p:
        if key not in DEFAULTS:
            raise ConfigError(f"unknown config key 'strategy.{key}' for strategy 'ecsnap' "
                              f"(known: {', '.join(sorted(DEFAULTS))})")
    interval = p.get("interval", DEFAULTS["interval"])
    if interval != "auto" and (not _is_int(interval) or interval < 1):
        raise ConfigError(f"strategy.interval must be a number of steps >= 1 or 'auto', got {interval!r}")
    first = p.get("first", DEFAULTS["first"])
    if not _is_int(first) or first < 1:
        raise ConfigError(f"strategy.first must be an integer >= 1, got {first!r}")
    code = p.get("code", DEFAULTS["code"])
    if code not in ("rs", "xor"):
        raise ConfigError(f"strategy.code must be rs or xor, got {code!r}")
    r = p.get("r", DEFAULTS["r"])
    if not _is_int(r) or not 1 <= r <= 4:
        raise ConfigError(f"strategy.r must be an integer in 1..4, got {r!r}")
    if code == "xor" and r != 1:
        raise ConfigError(f"strategy.code = xor has one parity block per stripe: strategy.r must be 1, "
                          f"got {r} (use code = rs for r = 2..4)")
    k = p.get("k", DEFAULTS["k"])
    if k != "auto" and (not _is_int(k) or not 1 <= k <= 255):
        raise ConfigError(f"strategy.k must be an integer in 1..255 or 'auto', got {k!r}")
    d = p.get("disk_every", DEFAULTS["disk_every"])
    if not _is_int(d) or d < 0:
        raise ConfigError(f"strategy.disk_every must be a number of steps >= 0 (0: no disk checkpoint), "
                          f"got {d!r}")
    if not isinstance(p.get("dir", ""), str):
        raise ConfigError(f"strategy.dir must be a directory name, got {p.get('dir')!r}")
    lay = cfg.layout
    if lay.parity_ranks:
        raise ConfigError("strategy 'ecsnap' keeps parity on the servers: layout.parity_ranks must be 0, "
                          f"got {lay.parity_ranks}")
    k = resolved(cfg)["k"]
    if k + r > lay.servers:
        raise ConfigError(f"strategy.k = {k}, r = {r}: a stripe's k + r = {k + r} members are distinct "
                          f"servers, the layout has layout.servers = {lay.servers}; lower k or r, or add "
                          "servers")


class ErasureCodedSnapshots(LegacyStrategy):
    name = "ecsnap"
    description = ("erasure-coded in-memory snapshots: RS parity across servers, no disk; full rollback "
                   "(Gemini, ECCheck, REFT)")
    recovers = True
    lossless = True
    cost_reason = ("not modelled: its snapshots go to peers' memory with an erasure code, a write and "
                   "a restore the calibration has no bandwidth fit for (a disk rollback would overstate it)")
    summary_rules: ClassVar[dict[str, str]] = {
        "code": "first", "k": "first", "r": "first", "snapshot_interval_rule": "first",
        "snapshot_interval_steps": "first", "snapshots": "first", "snapshot_memory_bytes": "sum",
        "parity_memory_bytes": "sum", "snapshot_traffic_bytes": "sum", "snapshot_stall_s": "max",
        "snapshot_overlap_s": "max", "snapshot_total_s": "max", "snapshot_restores": "max",
        "snapshot_restore_s": "max", "decoded_blocks": "sum", "decoded_rows": "sum", "decoded_bytes": "sum",
        "reencoded_blocks": "sum", "snapshot_recovery_bytes": "sum", "disk_fallbacks": "max",
        "disk_every": "first", **LegacyFullCheckpoint.summary_rules,
    }

    # -- configuration ----------------------------------------------------------------------
    @classmethod
    def param_keys(cls) -> set[str]:
        return set(DEFAULTS)

    @classmethod
    def validate_params(cls, cfg: Any) -> None:
        validate(cfg)

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        from mpiec.kernels.codes import make_code

        self.p = resolved(cfg)
        self.k, self.r = int(self.p["k"]), int(self.p["r"])
        self.code = make_code(self.p["code"], self.k, self.r)
        self.geo = Geometry(cfg.layout.servers, self.k, self.r)
        self.interval = self.p["interval"] if self.p["interval"] != "auto" else None
        self.fallback: LegacyFullCheckpoint | None = None
        if int(self.p["disk_every"]):
            params = {"interval": int(self.p["disk_every"]), "dir": self.p["dir"]}
            self.fallback = LegacyFullCheckpoint(dataclasses.replace(
                cfg, strategy=dataclasses.replace(cfg.strategy, name="ckpt", params=params)))
        # snapshots of this rank: step -> Snapshot (the committed one and the one building)
        self.snaps: dict[int, Snapshot] = {}
        self.committed: Snapshot | None = None
        self.building: Snapshot | None = None
        self.spare_buf: Snapshot | None = None  # a released snapshot's buffers, reused by the next one
        self.exchange: ParityExchange | None = None
        self.done_upto = -1  # server: the newest snapshot whose exchange completed here
        self.last_stall = 0.0
        # trainer 0: schedule
        self.taken: list[int] = []
        self.step_times: deque[float] = deque(maxlen=50)
        self._last_t: float | None = None
        self.t_snap = 0.0  # the slowest rank's stall of the last snapshot (from the servers' words)
        self.mtbf = expected_mtbf_s(cfg)
        # monitor
        self.known: set[int] = set()
        self.rows: list[tuple] = []
        self.fallbacks = 0
        # restore bookkeeping
        self._plan: Any = None
        self._tries = 0
        self._last_kind = ""
        self._keep = -1  # scopes without rollback: the snapshot every data rank keeps (``rebuild``)
        self.stats: dict[str, float] = {k: 0 for k in (
            "snapshot_stall_s", "snapshot_overlap_s", "snapshot_total_s", "snapshot_restores",
            "snapshot_restore_s", "decoded_blocks", "decoded_rows", "decoded_bytes", "reencoded_blocks",
            "snapshot_recovery_bytes", "snapshot_traffic_bytes", "snapshot_memory_bytes",
            "parity_memory_bytes")}

    def checkpoint_root(self, out_path: Path) -> Path | None:
        return self.fallback.checkpoint_root(out_path) if self.fallback is not None else None

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if self.fallback is not None:
            self.fallback.bind(ctx, role)
        dim, state = self.cfg.model.dim, 1 if self.cfg.training.optimizer == "adagrad" else 0
        self.row_bytes = (dim + state) * 4
        self.sizes = [ctx.placement.n_local(s) * self.row_bytes for s in range(self.cfg.layout.servers)]

    # -- schedule (trainer 0 decides in the step header) ------------------------------------
    def header_word(self, step: int) -> int:
        slot = self.ctx.slot
        if slot.role == SERVER:
            return (self.done_upto + 1) | (min(int(self.last_stall * 1e6), STALL_MAX_US) << 32)
        if slot != Slot(TRAINER, 0):
            return 0
        word = 0
        if self.due(step):
            word |= WORD_SNAPSHOT
            self.ctx.tell_monitor(("ecsnap", "start", step))
        if self.fallback is not None and self.fallback.header_word(step) == WORD_CHECKPOINT:
            word |= WORD_DISK
        return word

    def due(self, step: int) -> bool:
        """Trainer 0: snapshot after ``step``? Never while one is building, nor after the last step."""
        if step + 1 >= self.cfg.training.steps or self.building is not None:
            return False
        if self.interval:
            return (step + 1) % self.interval == 0
        last = max(self.taken, default=None)
        if last is None:
            return step + 1 >= min(int(self.p["first"]), max(1, self.cfg.training.steps // 10))
        if self.t_snap <= 0:
            return False  # the first snapshot's stall is not measured yet
        return step - last >= self.auto_steps()

    def auto_steps(self) -> int:
        """Young's interval ``sqrt(2 · t_snap · MTBF)`` in steps (median step time)."""
        mtbf_s, mtbf_steps = self.mtbf
        t_step = float(np.median(self.step_times)) if self.step_times else 0.01
        if mtbf_s is None:
            mtbf_s = (mtbf_steps if mtbf_steps is not None else self.cfg.training.steps) * t_step
        return max(1, int(round(young_interval(max(self.t_snap, 1e-6), mtbf_s) / max(t_step, 1e-6))))

    # -- the snapshot -----------------------------------------------------------------------
    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        if words is None:
            return
        T, S = self.cfg.layout.trainers, self.cfg.layout.servers
        lead = int(words[0])
        server_words = [int(w) for w in words[T:T + S]]
        if self.ctx.slot == Slot(TRAINER, 0):
            now = time.perf_counter()
            if self._last_t is not None:
                self.step_times.append(now - self._last_t)
            self._last_t = now
            self.t_snap = max([(w >> 32) * 1e-6 for w in server_words], default=0.0)
        if self.building is not None and min((w & DONE_MASK) for w in server_words) - 1 >= self.building.step:
            self.commit(step, server_words)
        if lead & WORD_SNAPSHOT:
            t0 = time.perf_counter()
            self.take(step)
            self.stats["snapshot_stall_s"] += time.perf_counter() - t0
        if self.fallback is not None:
            fw = np.zeros_like(words)
            fw[0] = WORD_CHECKPOINT if lead & WORD_DISK else 0
            self.fallback.after_step(step, fw)
        if step + 1 == self.cfg.training.steps and self.exchange is not None:
            self.finish_exchange()

    def take(self, step: int) -> None:
        """Copy this rank's state into a snapshot buffer; servers post the parity exchange."""
        t0 = time.perf_counter()
        role = self.ctx.slot.role
        snap = self.spare_buf or Snapshot(step)
        self.spare_buf = None
        snap.step, snap.complete, snap.promoted_at, snap.started, snap.stall = step, False, None, t0, 0.0
        if role == SERVER:
            table = as_bytes(self.role.state()["table"])
            if snap.data is None or snap.data.size != table.size:
                snap.data = np.empty_like(table)
            np.copyto(snap.data, table)
        elif role == TRAINER:
            state = self.role.state()
            if snap.dense is None or set(snap.dense) != set(state):
                snap.dense = {name: np.empty_like(a) for name, a in state.items()}
            for name, a in state.items():
                np.copyto(snap.dense[name], a)
            snap.complete = True
        else:
            return
        self.snaps[step] = self.building = snap
        if self.ctx.slot == Slot(TRAINER, 0):
            self.taken.append(step)
        if role == SERVER:
            self.exchange = ParityExchange(self.ctx.comms.servers, self.geo, self.code, self.ctx.slot.index,
                                           self.sizes, snap)
            self.stats["snapshot_traffic_bytes"] += self.exchange.bytes_sent
        self.note_memory()
        snap.stall += time.perf_counter() - t0

    def note_memory(self) -> None:
        held = list(self.snaps.values()) + ([self.spare_buf] if self.spare_buf is not None else [])
        self.stats["snapshot_memory_bytes"] = max(self.stats["snapshot_memory_bytes"],
                                                  sum(s.data_bytes for s in held))
        self.stats["parity_memory_bytes"] = max(self.stats["parity_memory_bytes"],
                                                sum(s.parity_bytes for s in held))

    def progress(self, key: str) -> None:
        """Servers: fold the arrived shard copies into the parity; note when the exchange is done."""
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
        self.progress("snapshot_stall_s")  # between steps: on the critical path
        if self.fallback is not None:
            self.fallback.background(step)

    def commit(self, step: int, server_words: list[int]) -> None:
        """Every server completed the building snapshot's exchange: it is the one to restore now."""
        snap = self.building
        snap.promoted_at = step
        old = self.committed
        self.committed, self.building = snap, None
        if old is not None:
            self.snaps.pop(old.step, None)
            self.spare_buf = old
        if self.ctx.slot == Slot(TRAINER, 0):
            stall = max([(w >> 32) * 1e-6 for w in server_words] + [snap.stall])
            shard_bytes = sum(self.sizes)
            parity = sum(self.geo.block_bytes(st, self.sizes) for st in self.geo.stripes) * self.r
            total = time.perf_counter() - snap.started
            rows = int(sum(self.sizes) // self.row_bytes)
            self.ctx.event("snapshot", snap.step, detail=(
                f"snapshot of step {snap.step} committed after step {step}: {rows} rows, {shard_bytes} shard "
                f"bytes, {parity} parity bytes, stall {stall:.4f} s, {total:.4f} s in all"))
            self.ctx.tell_monitor(("ecsnap", "commit", snap.step,
                                   (snap.step, "snapshot", shard_bytes, total, 32, rows, stall)))

    # -- monitor ----------------------------------------------------------------------------
    def on_message(self, source: Slot, payload: Any) -> None:
        if payload[0] != "ecsnap":
            if self.fallback is not None:
                self.fallback.on_message(source, payload)
            return
        _, kind, step, *rest = payload
        if kind == "start":
            self.known.add(int(step))
        elif kind == "commit":
            self.rows = [row for row in self.rows if row[0] != step] + [rest[0]]

    def snapshot_candidates(self, committed: int) -> list[int]:
        steps = set(self.known)
        if self.interval:  # the fixed schedule, in case trainer 0's notice did not arrive
            steps |= {s for s in range(self.interval - 1, committed + 1, self.interval)}
        return sorted((s for s in steps if 0 <= s <= committed), reverse=True)[:KEEP_CANDIDATES]

    def plan(self, failure: Failure) -> RecoveryPlan:
        if any(s.index < 0 for s in failure.dead):  # ``mpiec run --resume``: memory holds nothing yet
            disk = self.fallback.store.complete_steps() if self.fallback is not None else []
            plan = RecoveryPlan(Scope.ROLLBACK, candidates=disk + [-1], reason="resume from disk")
            plan.kinds = ["disk"] * len(disk) + ["initial"]  # type: ignore[attr-defined]
            return plan
        lost = {s.index for s in failure.dead if s.role == SERVER}
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not lost and originals:
            return RecoveryPlan(Scope.COMMITTED, reason="no shard lost: survivors stay at the committed step")
        if self.fallback is not None:
            self.fallback.drop_pending()
        committed = max(failure.committed, -1)
        disk = [s for s in self.fallback.store.complete_steps() if s <= committed] if self.fallback else []
        problem = self.beyond_tolerance(lost, originals)
        if problem and self.fallback is None:
            return RecoveryPlan.abort(f"{problem}; strategy.disk_every = 0: no disk checkpoint to fall "
                                      "back to")
        snaps = [] if problem else self.snapshot_candidates(committed)
        plan = RecoveryPlan(Scope.ROLLBACK, candidates=snaps + disk + [-1],
                            reason=f"{problem}: rollback to the disk checkpoint" if problem
                            else "rollback to the erasure-coded snapshot")
        plan.kinds = ["snapshot"] * len(snaps) + ["disk"] * len(disk) + ["initial"]  # type: ignore[attr-defined]
        if problem:
            plan.disk_fallback = True  # type: ignore[attr-defined]  # counted once the recovery completes
            self.ctx.event("disk_fallback", failure.step, detail=plan.reason[:250])
        return plan

    def beyond_tolerance(self, lost: set[int], originals: list[int]) -> str:
        """Monitor: why the snapshots cannot be restored after losing servers ``lost`` ("" if they can)."""
        beyond = self.geo.beyond(lost)
        if beyond is not None:
            t, data, par = beyond
            st = self.geo.stripes[t]
            names = ", ".join([f"server:{st.members[j]} (data)" for j in data] +
                              [f"server:{st.holders[i]} (parity {i})" for i in par])
            return (f"stripe {t} (data on servers {list(st.members)}, parity on {list(st.holders)}) lost "
                    f"{len(data) + len(par)} members ({names}); ecsnap {self.code.name} with r = {self.r} "
                    f"decodes at most {self.r} per stripe")
        if not originals:
            return "every trainer died: every copy of the snapshots' dense replica is lost"
        return ""

    # -- recovery ---------------------------------------------------------------------------
    def kind(self, plan: RecoveryPlan, step: int) -> str:
        """What candidate ``step`` of ``plan`` is (every rank counts its restore calls alike)."""
        if plan is not self._plan:
            self._plan, self._tries = plan, 0
        i, self._tries = self._tries, self._tries + 1
        kinds = getattr(plan, "kinds", None)
        if kinds and i < len(kinds) and plan.candidates[i] == step:
            return kinds[i]
        return "initial" if step < 0 else "snapshot"

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        kind = self.kind(plan, step)
        t0 = time.perf_counter()
        self.cut_exchange()
        if kind == "disk":
            ok = self.fallback.restore(plan, step, replaced)
        elif kind == "initial":
            self.role.reset()
            ok = True
        elif self.ctx.slot.role == SERVER:
            ok = self.restore_server(plan, step)
        else:
            ok = self.restore_trainer(plan, step)
        if ok:
            self._last_kind = kind
            self.stats["snapshot_restores"] += kind == "snapshot"
            self.stats["snapshot_restore_s"] = max(self.stats["snapshot_restore_s"], time.perf_counter() - t0)
        return ok

    def cut_exchange(self) -> None:
        """A failure ended the exchange in flight: its snapshot stays incomplete."""
        if self.exchange is not None:
            self.exchange.cancel()
            self.exchange = None

    def restore_server(self, plan: RecoveryPlan, step: int) -> bool:
        me = self.ctx.slot.index
        snap, problem, figures = restore_shards(self.ctx.comms.servers, self.geo, self.code, me, self.sizes,
                                                self.snaps.get(step), step)
        if snap is None:
            self.ctx.event("snapshot_refused", plan.step, detail=problem[:250])
            return False
        state = self.role.state()
        table = snap.data.view(np.float32).reshape(state["table"].shape)
        self.role.load_state({"table": table, "global_rows": state["global_rows"]})
        self.snaps[step] = snap
        rows = int(figures["decoded_bytes"] // self.row_bytes)
        for key in ("decoded_blocks", "decoded_bytes", "reencoded_blocks"):
            self.stats[key] += figures[key]
        self.stats["decoded_rows"] += rows
        self.stats["snapshot_recovery_bytes"] += figures["recovery_bytes"]
        if figures["decoded_blocks"] or figures["reencoded_blocks"]:
            self.ctx.event("snapshot_decode", plan.step, detail=(
                f"snapshot of step {step}: decoded {rows} rows ({figures['decoded_bytes']} bytes) of "
                f"server:{me}, re-encoded {figures['reencoded_blocks']} parity blocks, "
                f"{figures['recovery_bytes']} bytes received"))
        return True

    def restore_trainer(self, plan: RecoveryPlan, step: int) -> bool:
        """Trainers: the dense replica of snapshot ``step``, from the lowest trainer holding it."""
        comm = self.ctx.comms.trainers
        snap = self.snaps.get(step)
        have = snap is not None and snap.dense is not None
        with collective("ecsnap dense restore"):
            flags = comm.allgather(have)
        if not any(flags):
            self.ctx.event("snapshot_refused", plan.step, detail=f"no trainer holds snapshot {step}")
            return False
        root = flags.index(True)
        state = {name: (snap.dense[name] if have else np.empty_like(a))
                 for name, a in self.role.state().items()}
        if not all(flags):
            for name in sorted(state):
                with collective("ecsnap dense restore"):
                    comm.Bcast(state[name], root=root)
        self.role.load_state(state)
        if not have:
            self.snaps[step] = Snapshot(step, dense=state, complete=True)
        return True

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Scopes without rollback (no shard lost): the data ranks agree on the snapshot they all
        keep -- the newest one complete on every surviving trainer and server (a commit some ranks
        made in the step others undid, or a building snapshot every server completed, counts);
        replaced ranks do not vote. Collective over ``data``."""
        self._keep = -1
        role = self.ctx.slot.role
        if role not in (SERVER, TRAINER):
            return True
        self.cut_exchange()
        complete = [s.step for s in self.snaps.values() if s.complete]
        vote = max(complete, default=-1)
        if self.ctx.slot in plan.replaced:  # type: ignore[attr-defined]
            vote = INT_MAX
        with collective("ecsnap snapshot agreement"):
            agreed = self.ctx.comms.data.allreduce(vote, op=MPI.MIN)
        self._keep = agreed if agreed != INT_MAX else -1
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if self.fallback is not None:
            self.fallback.on_recovered(plan)
        self.cut_exchange()
        if self.ctx.rank == 0:
            self.fallbacks += bool(getattr(plan, "disk_fallback", False))
            self.known = {s for s in self.known if s <= plan.restored}
            self.rows = [row for row in self.rows if row[0] <= plan.restored]
        if plan.scope is Scope.ROLLBACK:
            keep = self.snaps.get(plan.restored) if self._last_kind == "snapshot" else None
        else:
            keep = self.snaps.get(self._keep)
        if keep is not None:
            keep.complete, keep.promoted_at = True, plan.restored
        for snap in self.snaps.values():
            if snap is not keep:
                self.spare_buf = snap
        self.snaps = {keep.step: keep} if keep is not None else {}
        self.committed, self.building = keep, None
        self.done_upto = keep.step if keep is not None else -1
        self._plan, self._last_kind, self._keep = None, "", -1
        self.taken = [s for s in self.taken if s <= plan.restored]
        self._last_t = None

    # -- results ----------------------------------------------------------------------------
    def checkpoint_rows(self) -> list[tuple]:
        rows = sorted(self.rows, key=lambda row: row[0])
        return rows + (self.fallback.checkpoint_rows() if self.fallback is not None else [])

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.name, "k": self.k, "r": self.r,
                               "disk_every": int(self.p["disk_every"]),
                               "snapshot_interval_rule": "given" if self.interval else "young"}
        if self.fallback is not None:
            out.update(self.fallback.summary())
        if self.ctx is None:
            return out
        if self.ctx.rank == 0:
            out["snapshots"] = len(self.rows)
            out["disk_fallbacks"] = self.fallbacks
        role = self.ctx.slot.role
        if role not in (SERVER, TRAINER):
            return out
        if self.ctx.slot == Slot(TRAINER, 0):
            gaps = np.diff(sorted(set(self.taken)))
            out["snapshot_interval_steps"] = int(self.interval or (np.median(gaps) if gaps.size else
                                                                   self.auto_steps()))
        counts = ("_bytes", "_blocks", "_rows", "restores")
        for key, value in self.stats.items():
            out[key] = int(value) if key.endswith(counts) else float(value)
        return out
