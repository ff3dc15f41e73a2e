"""The agents of ``cpr``, ``cpr-mfu`` and ``cpr-ssu``, and the step header word they share.

Full checkpoints are composed as in ``ckpt`` (``strategies.checkpointing``: trainer 0's
``Schedule`` and ``PartWriter`` of the dense replica, each server's ``PartWriter`` of its shard,
the coordinator's ``ManifestCommitter``, a ``Restorer`` per trainer and server). On top:

* ``CprServer``: its ``UpdateCounter`` (``ledger``), and for a variant its ``ServerPartials``
  (``partials``); on a server failure its replacement restores the newest full checkpoint that
  verifies, then its partials on top (``Scope.REPLACED``);
* ``CprTrainer``: every trainer's ``LostUpdates`` ledger; trainer 0's also holds the schedules
  (full, and a variant's ``PartialSchedule``);
* ``CprCoordinator``: commits the full checkpoints, records the partials the servers committed,
  plans the partial recoveries and gives the PLS figures.

The header word (``HEADER``): trainer 0 sets ``checkpoint`` (a full checkpoint after this step)
or ``partial`` (a partial one), never both; every server puts the slowest full part it wrote
(``part_ms``, milliseconds, saturating at about 4.6 h: trainer 0's ``Schedule`` reads it as its
``t_save``) and its update count (``updates``, ``ledger.UpdateCounter``), each in its own field.
The part time is in milliseconds so that the count gets 37 bits (a long run's count does not fit
beside a 40-bit time in microseconds).

Invariants: every agent is built for one role by the strategy's factory; after a recovery of
scope REPLACED every trainer and server agrees (one ``allgather`` on ``data``) on the full
checkpoint each replaced server restored, so every trainer's ledger charges the same loss.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from mpiec.checkpoint import CheckpointError, CheckpointStore
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.agents import Coordinator, ServerAgent, TrainerAgent
from mpiec.strategies.checkpointing import (
    CHECKPOINT_FIELD,
    Interval,
    ManifestCommitter,
    PartWriter,
    Restorer,
    Schedule,
    expected_mtbf_s,
    measured_pls,
    predicted_pls,
    rollback_plan,
)
from mpiec.strategies.cpr.ledger import LostUpdates, UpdateCounter
from mpiec.strategies.header import HeaderLayout
from mpiec.strategies.plan import Failure, RecoveryPlan, Scope

if TYPE_CHECKING:
    from mpiec.strategies.cpr.partials import PartialSchedule, ServerPartials
    from mpiec.strategies.env import RankEnv, ShardState

#: trainer 0's decisions, then each server's slowest part (ms) and its update count
HEADER = HeaderLayout(CHECKPOINT_FIELD, ("partial", 1), ("part_ms", 24), ("updates", 37))
PART_MS_LIMIT = HEADER.fields["part_ms"].limit
UPDATES_LIMIT = HEADER.fields["updates"].limit
SCHEDULER = 0  # the data rank whose word decides (trainer 0)


def exchange_restored(env: RankEnv, mine: tuple[int, int] | None) -> dict[int, int]:
    """Every trainer and server, after a REPLACED recovery: replaced server -> the full checkpoint
    its restore used (``mine``: this rank's entry, None if it restored nothing)."""
    from mpiec.comm import guard  # here: the launcher imports this module without MPI

    with guard("cpr restored checkpoints"):
        return dict(x for x in env.comms.data_comm().allgather(mine) if x is not None)


class CprTrainer(TrainerAgent):
    """Every trainer keeps the servers' counts (``ledger``) and restores its dense replica on a
    rollback; trainer 0's also holds the ``schedule``, the ``writer`` of the dense replica and, for
    a variant, the ``partial`` schedule."""

    def __init__(self, env: RankEnv, restorer: Restorer, ledger: LostUpdates,
                 schedule: Schedule | None = None, writer: PartWriter | None = None,
                 partial: PartialSchedule | None = None, detail: str = "") -> None:
        super().__init__(env)
        self.restorer = restorer
        self.ledger = ledger
        self.schedule = schedule
        self.writer = writer
        self.partial = partial
        self.detail = detail  # the checkpoint_start event's

    def header_word(self, step: int) -> int:
        if self.schedule is None:
            return 0
        if self.schedule.due(step):
            return HEADER.pack(checkpoint=1)
        if self.partial is not None and self.partial.due(step):
            return HEADER.pack(partial=1)
        return 0

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        full = bool(HEADER.get(words[SCHEDULER], "checkpoint"))
        servers = words[self.env.n_trainers:]
        self.ledger.observe(step, HEADER.column(servers, "updates"), full)
        if self.schedule:
            self.schedule.observe(HEADER.column(servers, "part_ms") * 1000)
        if full:
            if self.schedule:
                self.env.event("checkpoint_start", step, detail=self.detail)
                self.schedule.started(step)
            if self.writer:
                self.writer.save(step)
        if self.partial is not None and HEADER.get(words[SCHEDULER], "partial"):
            self.partial.taken()

    def background(self, step: int) -> None:
        if self.writer:
            self.writer.poll()

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        return self.restorer.restore(plan, step)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if self.schedule:
            self.schedule.restarted()
        restored = exchange_restored(self.env, None) if plan.scope is Scope.REPLACED else {}
        if plan.scope is Scope.REPLACED:
            self.ledger.failed(plan.committed, restored)
        # a restored server counts from 0 again: its counts at older checkpoints are now 0
        recounted = (sorted(restored) if plan.scope is Scope.REPLACED
                     else list(range(self.env.cfg.layout.servers)) if plan.scope is Scope.ROLLBACK else [])
        self.ledger.recovered(plan.restored, recounted)

    def summary(self) -> dict[str, Any]:
        out = {**self.restorer.figures(), "lost_updates": self.ledger.lost}
        if self.writer:
            self.writer.finish()
            out.update(self.writer.figures())
        if self.schedule:
            out.update(self.schedule.figures())
        return out


class CprServer(ServerAgent):
    """A server writes its shard when trainer 0's word says so (and, for a variant, its partial
    checkpoint), counts its updates for the header, and restores: its whole shard on a rollback,
    or as a replacement the newest full checkpoint that verifies and the partials on top."""

    def __init__(self, env: RankEnv, role: ShardState, writer: PartWriter, restorer: Restorer,
                 counter: UpdateCounter, partials: ServerPartials | None = None) -> None:
        super().__init__(env)
        self.role = role
        self.writer = writer
        self.restorer = restorer
        self.counter = counter
        self.partials = partials
        self.restored_base = -1  # a replacement: the full checkpoint its restore used
        self.restores = 0  # partial recoveries (the restorer counts the rollbacks)
        self.restore_s = 0.0

    def header_word(self, step: int) -> int:
        return HEADER.pack(part_ms=min(self.writer.part_us() // 1000, PART_MS_LIMIT),
                           updates=self.counter.count(UPDATES_LIMIT))  # through step - 1

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        if self.partials is not None:
            self.partials.selection.on_pull(step, slots)

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        self.counter.applied(step, slots)

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        if HEADER.get(words[SCHEDULER], "checkpoint"):  # a full checkpoint of this step
            self.writer.save(step)
            self.counter.full_started()
            if self.partials is not None:
                self.partials.full_started(step)
        elif self.partials is not None and HEADER.get(words[SCHEDULER], "partial"):
            self.partials.save(step, self.role, self.counter)

    def background(self, step: int) -> None:
        self.writer.poll()

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        if plan.scope is Scope.ROLLBACK:
            return self.restorer.restore(plan, step)
        t0 = time.perf_counter()
        base = -1
        for s in [s for s in self.restorer.store.complete_steps() if s <= step] + [-1]:
            try:  # the newest full checkpoint whose part verifies
                if s < 0:
                    self.restorer.reset()
                else:
                    self.restorer.load(s)
                base = s
                break
            except (CheckpointError, ValueError) as exc:
                self.env.event("restore_failed", plan.step, detail=str(exc)[:250])
        self.restored_base = base
        applied = self.partials.load_on_top(plan, base, step, self.role) if self.partials is not None else []
        kind = self.partials.kind if self.partials is not None else "partial"
        self.env.event("restore", plan.step, detail=f"partial recovery: full checkpoint {base}, "
                       f"{len(applied)} {kind} checkpoints on top, committed step {step}")
        self.restores += 1
        self.restore_s += time.perf_counter() - t0
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if self.partials is not None:
            self.partials.drop_newer(plan.restored)
        replaced = self.env.slot in plan.replaced
        if plan.scope is Scope.REPLACED:
            exchange_restored(self.env, (self.env.slot.index, self.restored_base) if replaced else None)
        self.counter.recovered(plan.restored, from_disk=replaced or plan.scope is Scope.ROLLBACK)

    def summary(self) -> dict[str, Any]:
        self.writer.finish()
        out = {**self.writer.figures(), **self.restorer.figures()}
        out["checkpoint_critical_s"] += self.partials.critical_s if self.partials is not None else 0.0
        out["restores"] += self.restores
        out["restore_s"] += self.restore_s
        return out


class CprCoordinator(Coordinator):
    """Commits the full checkpoints, records the servers' partial ones, plans partial recoveries
    (a full rollback only when no trainer of the original ones survives) and gives the PLS figures:
    ``pls`` = Σ over failures of (steps since the restored full checkpoint × shards lost) / (N_shards
    × steps), ``pls_predicted`` = ``T_ckpt / (2 · N_shards · MTBF)``."""

    def __init__(self, env: RankEnv, store: CheckpointStore, committer: ManifestCommitter, interval: Interval,
                 target_pls: float, mode: str, kind: str) -> None:
        super().__init__(env)
        self.store = store
        self.committer = committer
        self.interval = interval
        self.target_pls = target_pls
        self.mode = mode
        self.kind = kind  # the partials' ("" for plain cpr)
        self.partial_rows: dict[int, list[Any]] = {}  # step -> [bytes, slowest stall (s), rows]
        self.pending_loss: dict[Slot, int] = {}  # dead server -> steps since the full checkpoint
        self.losses: list[tuple[int, int]] = []  # (steps since the restored full checkpoint, shards)

    def on_message(self, source: Slot, payload: Any) -> None:
        if payload[0] != "partial":
            self.committer.on_message(payload)
            return
        _, step, _epoch, info, rows, stall = payload
        entry = self.partial_rows.setdefault(step, [0, 0.0, 0])
        entry[0] += int(info["bytes"])
        entry[1] = max(entry[1], float(stall))
        entry[2] += rows

    def plan(self, failure: Failure) -> RecoveryPlan:
        dead_servers = [s for s in failure.dead if s.role == SERVER]
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not dead_servers:
            return RecoveryPlan(Scope.COMMITTED, reason="no embedding state lost")
        self.committer.drop_pending()
        if not originals:  # no dense replica survives: every rank goes back to a full checkpoint
            return rollback_plan(self.store, failure.committed)
        fulls = [s for s in self.store.complete_steps() if s <= failure.committed]
        since = failure.committed - (fulls[0] if fulls else -1)
        self.pending_loss = {s: since for s in dead_servers}
        return RecoveryPlan(Scope.REPLACED, reason=f"partial recovery of {[str(s) for s in dead_servers]}: "
                            f"{since} steps of their updates lost")

    def resume_steps(self) -> list[int]:
        return self.store.complete_steps()

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.committer.drop_pending()
        if plan.scope is Scope.ROLLBACK:
            self.committer.drop_newer(plan.restored)
        if plan.scope is Scope.REPLACED:
            self.losses += [(since, 1) for since in self.pending_loss.values()]
            self.pending_loss = {}

    def checkpoint_rows(self) -> list[tuple[Any, ...]]:
        # a partial is written on the training thread: its stall is its total time
        parts = [(s, self.kind, b, sec, 32, r, sec) for s, (b, sec, r) in self.partial_rows.items()]
        return sorted(list(self.committer.rows) + parts, key=lambda r: (r[0], r[1] != "full"))

    def predicted(self) -> float:
        """``pls_predicted``: the interval and the MTBF in one unit (a step's time from the run's)."""
        cfg = self.env.cfg
        mtbf_s, mtbf_steps = expected_mtbf_s(cfg)
        steps, shards = cfg.training.steps, cfg.layout.servers
        t_step = self.env.now() / max(steps, 1)
        interval = float(self.interval.steps) if self.interval.steps else None
        if mtbf_s is not None:
            interval_s = self.interval.seconds or (interval * t_step if interval else 0.0)
            return predicted_pls(interval_s, shards, mtbf_s) if interval_s > 0 else math.nan
        mtbf = mtbf_steps if mtbf_steps is not None else float(steps)
        if interval is None:
            interval = (self.interval.seconds or 0.0) / t_step if t_step > 0 else 0.0
        return predicted_pls(interval, shards, mtbf) if interval > 0 else math.nan

    def summary(self) -> dict[str, Any]:
        cfg = self.env.cfg
        fulls = [r[2] for r in self.committer.rows]
        parts = [b for b, _s, _r in self.partial_rows.values()]
        return {
            **self.committer.figures(), "checkpoint_interval": self.interval.describe(),
            "checkpoint_mode": self.mode, "checkpoint_dir": str(self.store.root),
            "emulated_bandwidth": bool(self.store.emulated_bandwidth),
            "lost_updates": 0,
            "pls": measured_pls(self.losses, cfg.layout.servers, cfg.training.steps),
            "pls_predicted": self.predicted(), "pls_target": self.target_pls,
            "pls_failures": len(self.losses),
            "full_checkpoint_bytes": float(np.mean(fulls)) if fulls else 0.0,
            "partial_checkpoints": len(parts),
            "partial_checkpoint_bytes": float(np.mean(parts)) if parts else 0.0,
            # the coordinator's count: a replaced server's own count died with it
            "partial_rows_saved": sum(r for _b, _s, r in self.partial_rows.values()),
            "checkpoints": len(fulls) + len(parts),
            "checkpoint_bytes": self.committer.committed_bytes + int(sum(parts)),
        }


__all__ = ["HEADER", "CprCoordinator", "CprServer", "CprTrainer", "exchange_restored"]
