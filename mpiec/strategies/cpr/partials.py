"""CPR's partial checkpoints (``cpr-mfu``, ``cpr-ssu``): which rows, when, and where they go.

Owns the variants' components:

* the row selections a server keeps on its pull path: ``MfuRows`` (per-row access counters; the
  ``mfu_fraction`` most pulled rows) and ``SsuRows`` (the rows pulled in the steps of a
  deterministic sub-sample, ``ssu_sampled``, during the current and the previous full-checkpoint
  interval);
* ``Partials``: a variant's policy (its kind, its given interval, how a server builds its
  selection) and ``partial_interval`` (by default four partials per full interval, in seconds when
  the full interval is in seconds);
* ``PartialSchedule``: trainer 0's decisions (the ``schedule.partial`` field of its header word);
* ``ServerPartials``: a server's own partial checkpoints under ``<ckpt root>/partial/server-<i>``:
  written and committed by that server alone, pruned, loaded on top of a restored full one.

Parts (``strategies.compose``): ``FullOrPartial`` (trainer 0: the kit's ``SchedulePart`` that
also decides the partials, so "full or partial" is decided in one place), ``PartialsPart`` (a
server's partials) and ``PartialBook`` (the coordinator's record of them and their figures).

Invariants:

* a partial checkpoint is taken after the same step on every server: trainer 0 decides, never on
  a full-checkpoint step and never after the run's last step;
* a partial is complete as soon as its server committed it (one part, its own manifest); a write
  that fails leaves no partial (a ``checkpoint_fail`` event says why) and credits nothing;
* a server deletes its partials older than the second-newest full checkpoint it started (no
  restore needs them) and, after a recovery, those of steps that will be re-executed;
* the selections are pure functions of the pulls (and the seed): every run picks the same rows.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mpiec.kernels import tracking
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore
from mpiec.strategies.api.compose import Part
from mpiec.strategies.checkpointing import Interval, Schedule, server_part
from mpiec.strategies.checkpointing.kit import SCHEDULER, PartTime, SchedulePart, decided

if TYPE_CHECKING:
    from mpiec.layout import Slot
    from mpiec.strategies.api.env import RankEnv, ShardState
    from mpiec.strategies.api.plan import RecoveryPlan
    from mpiec.strategies.checkpointing import ManifestCommitter, PartWriter
    from mpiec.strategies.cpr.ledger import UpdateCounter


def ssu_sampled(seed: int, step: int, rate: float) -> bool:
    """Is ``step`` in SSU's sub-sample? A deterministic hash of (seed, step) below ``rate``."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + int(step) * 0xBF58476D1CE4E5B9 + 1) & (2**64 - 1)
    x ^= x >> 31
    x = (x * 0x94D049BB133111EB) & (2**64 - 1)
    x ^= x >> 29
    return (x >> 11) / float(2**53) < rate


class RowSelection(Protocol):
    """A server's choice of the rows its partial checkpoints save (local slots)."""

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        """Local ``slots`` were pulled at ``step`` (−1: an evaluation round)."""

    def full_started(self) -> None:
        """A full checkpoint of the shard was started."""

    def rows(self) -> np.ndarray:
        """The local slots the partial checkpoint of now saves (int64)."""
        ...


class MfuRows:
    """``cpr-mfu``: per-row access counters of the training pulls; the ``fraction`` most pulled."""

    def __init__(self, n: int, fraction: float) -> None:
        self.counts = np.zeros(n, dtype=np.int64)
        self.fraction = float(fraction)

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        if step >= 0:
            tracking.counters_add(self.counts, slots)

    def full_started(self) -> None:
        pass

    def rows(self) -> np.ndarray:
        return tracking.top_fraction(self.counts, self.fraction)


class SsuRows:
    """``cpr-ssu``: the rows pulled by the sampled steps (``ssu_sampled``) of the current and of
    the previous full-checkpoint interval."""

    def __init__(self, n: int, seed: int, rate: float) -> None:
        self.seed = int(seed)
        self.rate = float(rate)
        self.tracked = np.zeros(n, dtype=np.bool_)
        self.tracked_prev = np.zeros_like(self.tracked)

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        if step >= 0 and ssu_sampled(self.seed, step, self.rate):
            self.tracked[slots] = True

    def full_started(self) -> None:
        self.tracked_prev, self.tracked = self.tracked, self.tracked_prev
        self.tracked[:] = False

    def rows(self) -> np.ndarray:
        return np.flatnonzero(self.tracked | self.tracked_prev).astype(np.int64)


@dataclass(frozen=True)
class Partials:
    """A variant's partial checkpoints: ``kind`` (``mfu``, ``ssu``: the dataset rows' kind),
    ``every`` (its ``<kind>_every`` key; 0: a quarter of the full interval) and ``select(n)``, a
    server's selection over a shard of ``n`` local slots."""

    kind: str
    every: int
    select: Callable[[int], RowSelection]


def partial_interval(interval: Interval, given: int) -> tuple[int, float | None]:
    """(every so many steps, every so many seconds) of the partials: ``given`` steps, else a quarter
    of the full interval (in seconds when the full interval is in seconds only)."""
    every = given or (max(1, interval.steps // 4) if interval.steps else 0)
    every_s = interval.seconds / 4 if not every and interval.seconds else None
    return every, every_s


class PartialSchedule:
    """Trainer 0's partial-checkpoint decisions, beside its full ``schedule`` (whose clock, run
    length and last full checkpoint it reads)."""

    def __init__(self, schedule: Schedule, every: int, every_s: float | None) -> None:
        self.schedule = schedule
        self.every = int(every)
        self.every_s = every_s
        self.last_t = 0.0  # when the last partial was taken

    def due(self, step: int) -> bool:
        """A partial checkpoint after ``step`` (asked only when no full one is due)?"""
        if step + 1 >= self.schedule.total_steps:
            return False
        if self.every:
            return (step + 1) % self.every == 0
        return self.schedule.now() - max(self.last_t, self.schedule.last_t) >= float(self.every_s or 0.0)

    def taken(self) -> None:
        """The partial decided for this step was taken (now)."""
        self.last_t = self.schedule.now()


class ServerPartials:
    """One server's partial checkpoints (``kind``, rows from ``selection``) in its own store beside
    the full checkpoints' ``store``."""

    def __init__(self, env: RankEnv, store: CheckpointStore, kind: str, selection: RowSelection) -> None:
        self.env = env
        self.kind = kind
        self.selection = selection
        self.part = server_part(env.slot.index)
        self.store = CheckpointStore(Path(store.root) / "partial" / self.part, storage=store.storage,
                                     ledger=store.ledger_path)
        self.store.root.mkdir(parents=True, exist_ok=True)
        self.full_steps: list[int] = []  # the two newest full checkpoints this server started

    def full_started(self, step: int) -> None:
        self.full_steps = (self.full_steps + [step])[-2:]
        self.selection.full_started()

    def save(self, step: int, role: ShardState, counter: UpdateCounter) -> float | None:
        """Write and commit the partial checkpoint of ``step``, credit its rows' updates in
        ``counter`` and tell the coordinator ``("partial", step, epoch, info, rows, stall_s)``;
        its training-thread seconds (the whole write), None when it failed."""
        t0 = time.perf_counter()
        rows = self.selection.rows()
        shard = role.shard
        rows = rows[shard.global_rows[rows] >= 0]
        arrays = {"global_rows": shard.global_rows[rows], "table": shard.table[rows]}
        try:
            info = self.store.write_part(step, self.part, arrays)
            self.store.commit(step, {self.part: info}, {"kind": self.kind, "rows": int(rows.size)})
            self.prune()
        except CheckpointError as exc:
            self.env.event("checkpoint_fail", step, detail=str(exc)[:250])
            return None
        counter.credit(rows)
        stall = time.perf_counter() - t0  # written on the training thread: stall = total
        self.env.tell_monitor(("partial", step, self.env.epoch, info.to_dict(), int(rows.size), stall))
        return stall

    def prune(self) -> None:
        """Partials older than the second-newest full checkpoint written are never needed."""
        if len(self.full_steps) < 2:
            return
        for s in self.store.complete_steps():
            if s < self.full_steps[0]:
                shutil.rmtree(self.store.step_dir(s), ignore_errors=True)

    def load_on_top(self, plan: RecoveryPlan, base: int, step: int, role: ShardState) -> list[int]:
        """After the full checkpoint ``base`` was restored: the partials of steps ``base < s <= step``
        in order, each over the last; a bad one is skipped (its rows stay at the older version).
        Returns the steps applied."""
        applied = []
        for s in sorted(p for p in self.store.complete_steps() if base < p <= step):
            try:
                part = self.store.read_part(s, self.part)
            except CheckpointError as exc:
                self.env.event("restore_failed", plan.step, detail=str(exc)[:250])
                continue
            role.load_rows(part["global_rows"], part["table"])
            applied.append(s)
        return applied

    def drop_newer(self, step: int) -> None:
        """After a recovery to ``step``: the partials of re-executed steps are stale."""
        for s in self.store.complete_steps():
            if s > step:
                shutil.rmtree(self.store.step_dir(s), ignore_errors=True)


# -- the parts ---------------------------------------------------------------------------------------
class FullOrPartial(SchedulePart):
    """Trainer 0 of a variant: the kit's ``SchedulePart`` that also owns the ``PartialSchedule``
    (every ``every`` = (steps, seconds) of ``partial_interval``) and decides, in one place, per
    step: a full checkpoint (``schedule.checkpoint``) or else a partial one (``schedule.partial``),
    never both."""

    fields = (*SchedulePart.fields, ("partial", 1))

    def __init__(self, env: RankEnv, schedule: Schedule, part_time: PartTime | None, detail: str, *,
                 every: tuple[int, float | None]) -> None:
        super().__init__(env, schedule, part_time, detail)
        self.partial = PartialSchedule(schedule, *every)

    def header_word(self, step: int) -> dict[str, int]:
        if self.schedule.due(step):
            return {"checkpoint": 1}
        return {"partial": int(self.partial.due(step))}

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        super().after_step(step, words)  # the full schedule's (the kit's part this one is)
        if words is not None and self.header.get(words[SCHEDULER], "partial"):
            self.partial.taken()


class PartialsPart(Part):
    """A server's partial checkpoints (``ServerPartials``): tracks its pulls, takes a partial when
    trainer 0's word says ``schedule.partial`` (crediting the shared ``UpdateCounter``; its
    training-thread time counts in the shared ``PartWriter``'s ``checkpoint_critical_s``), and
    drops the partials of steps a recovery re-executes. (A replacement loads them on top of its
    full checkpoint: ``recovery.ReplacementRestore``.)"""

    def __init__(self, role: ShardState, partials: ServerPartials, counter: UpdateCounter,
                 writer: PartWriter) -> None:
        self.role, self.partials, self.counter, self.writer = role, partials, counter, writer

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        self.partials.selection.on_pull(step, slots)

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        if decided(self.header, words):
            self.partials.full_started(step)
        elif self.header.get(words[SCHEDULER], "schedule.partial"):
            stall = self.partials.save(step, self.role, self.counter)
            if stall is not None:
                self.writer.stalled(stall)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.partials.drop_newer(plan.restored)


class PartialBook(Part):
    """The coordinator's record of the partial checkpoints the servers committed (their
    ``("partial", ...)`` messages; the others are the committer's), their ``checkpoints`` rows
    (``rows``: the kit's ``CommitterPart`` merges them in step order) and figures, counted into
    ``checkpoints`` / ``checkpoint_bytes`` beside the ``committer``'s full ones. ``kind``: the
    rows' kind (``mfu``, ``ssu``; plain cpr takes none and reports zeros)."""

    def __init__(self, committer: ManifestCommitter, kind: str) -> None:
        self.committer = committer
        self.kind = kind
        self.partial_rows: dict[int, list[Any]] = {}  # step -> [bytes, slowest stall (s), rows]

    def on_message(self, source: Slot, payload: Any) -> None:
        if not (isinstance(payload, tuple) and payload and payload[0] == "partial"):
            return
        _, step, _epoch, info, rows, stall = payload
        entry = self.partial_rows.setdefault(step, [0, 0.0, 0])
        entry[0] += int(info["bytes"])
        entry[1] = max(entry[1], float(stall))
        entry[2] += rows

    def rows(self) -> list[tuple[Any, ...]]:
        """The partials' dataset rows (a partial is written on the training thread: its stall is
        its total time)."""
        return [(s, self.kind, b, sec, 32, r, sec) for s, (b, sec, r) in self.partial_rows.items()]

    def summary(self) -> dict[str, Any]:
        fulls = [r[2] for r in self.committer.rows]
        parts = [b for b, _s, _r in self.partial_rows.values()]
        return {
            "full_checkpoint_bytes": float(np.mean(fulls)) if fulls else 0.0,
            "partial_checkpoints": len(parts),
            "partial_checkpoint_bytes": float(np.mean(parts)) if parts else 0.0,
            # the coordinator's count: a replaced server's own count died with it
            "partial_rows_saved": sum(r for _b, _s, r in self.partial_rows.values()),
            "checkpoints": len(parts), "checkpoint_bytes": int(sum(parts)),  # + the committer's (sum)
        }


__all__ = ["FullOrPartial", "MfuRows", "PartialBook", "PartialSchedule", "Partials", "PartialsPart",
           "RowSelection", "ServerPartials", "SsuRows", "partial_interval", "ssu_sampled"]
