"""The checkpoint kit: periodic checkpoints as parts (``strategies.compose``) a strategy adds per role.

``CheckpointKit(cfg, params)`` is built by a strategy from its checkpoint keys
(``CheckpointParams``, which a strategy's ``Params`` extends) and gives, per role, the parts of
``ckpt``'s behaviour:

===========  =========================================================================================
role         parts (in this order)
===========  =========================================================================================
trainer      ``SchedulePart`` (trainer 0: decides, ``schedule.checkpoint``), ``WriterPart`` (trainer
             0: the dense replica), ``RestorerPart`` (every trainer)
server       ``WriterPart`` (its shard; its slowest write time in ``writer.<part_time>``),
             ``RestorerPart``
coordinator  ``CommitterPart`` (commits manifests, prunes, the ``checkpoints`` rows, resume),
             ``RollbackPlanner`` (a rollback whenever embedding state was lost)
===========  =========================================================================================

A strategy that checkpoints something else replaces or adds parts: a ``WriterPart`` with its own
``snapshot`` (cnr's chains), a ``Restorer`` with its own ``load``, a coordinator part whose ``plan``
answers first and returns None to leave a case to the ``RollbackPlanner`` (log, cpr, ecrm's
fallback), trainer 0's deciding part (``trainer_parts(decider=...)``: a ``SchedulePart`` that also
decides other checkpoints in the same word, cpr's partials), rows of checkpoints committed
elsewhere merged into the ``checkpoints`` dataset (``coordinator_parts(beside=...)``).
``KIT_RULES`` are the merge rules of the kit's summary keys (a strategy's ``summary_rules`` start
from them); ``header_fields()`` its header namespaces (``schedule``, ``writer``). ``PartTime``
sizes the writer's field (``ckpt``: µs in 40 bits; ``cnr``, whose header also carries its changed
rows, ms in 24).

Invariants: those of ``ckpt`` (``strategies.ckpt``'s docstring): a checkpoint is taken after the
same step everywhere (trainer 0's ``schedule.checkpoint`` field decides); a rollback goes to the
newest complete checkpoint whose parts verify; parts of an epoch a failure ended are never
committed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from mpiec.layout import TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointStore
from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.params import param
from mpiec.strategies.api.plan import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing.committer import ManifestCommitter
from mpiec.strategies.checkpointing.restorer import Restorer, rollback_plan
from mpiec.strategies.checkpointing.rules import checkpoint_root, root_directories
from mpiec.strategies.checkpointing.schedule import Interval, Schedule
from mpiec.strategies.checkpointing.store import TRAINER_PART, claim_root, full_parts, open_store, server_part
from mpiec.strategies.checkpointing.writer import PartWriter

if TYPE_CHECKING:
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState
    from mpiec.strategies.api.header import HeaderView

SCHEDULER = 0  # the data rank whose word decides (trainer 0)


@dataclass(frozen=True)
class CheckpointParams:
    """The kit's ``strategy.KEY`` keys (``ckpt``'s; other strategies extend the dataclass)."""

    interval: int | Literal["auto"] = param(
        "auto", "steps between checkpoints, or auto: Young's sqrt(2 · t_save · MTBF), t_save measured "
        "at the first checkpoint", ge=1)
    interval_s: float = param(0.0, "seconds between checkpoints instead (0: not in seconds; a number "
                              "of steps in interval decides)", ge=0)
    first: int = param(10, "auto: the first checkpoint (which measures t_save) after this many steps, "
                       "at most a tenth of the run", ge=1)
    mode: Literal["sync", "async"] = param("sync", "sync: write on the training thread; async: snapshot, "
                                           "then write in a background thread")
    dir: str = param("", "checkpoint directory (empty: <result name>.ckpt beside the result file)")
    keep: int = param(2, "complete checkpoints kept (older ones are pruned after a commit)", ge=1)
    bandwidth_mb_s: float = param(0.0, "cap on each writer's write rate, MB/s (0: no cap; on top of "
                                  "the [storage] model)", ge=0)
    on_trainer_failure: Literal["peer", "rollback"] = param(
        "peer", "a trainer-only failure: peer = copy the dense replica from a survivor, no rollback; "
        "rollback = every rank rolls back to the last checkpoint")


#: merge rules of every summary key the kit's parts return
KIT_RULES: dict[str, str] = {
    "checkpoints": "sum", "checkpoint_bytes": "sum", "checkpoint_interval": "first",
    "checkpoint_critical_s": "max", "checkpoint_write_s": "max", "checkpoint_max_part_s": "max",
    "restores": "max", "restore_s": "max", "restore_read_s": "max", "checkpoint_mode": "first",
    "emulated_bandwidth": "first", "checkpoint_dir": "first", "checkpoint_parts_sent": "sum",
    "checkpoint_interval_steps": "first", "checkpoint_interval_rule": "first",
    "checkpoint_interval_s": "first", "checkpoint_writer_cpu_s": "sum",
}


@dataclass(frozen=True)
class PartTime:
    """The writer's header field: its slowest part write time, ``per_s`` units a second, each
    ``to_us`` µs (trainer 0's Young rule reads it); saturates at the field's limit."""

    name: str
    bits: int
    per_s: float
    to_us: int


MICROS = PartTime("part_us", 40, 1e6, 1)
MILLIS = PartTime("part_ms", 24, 1e3, 1000)


def decided(header: HeaderView, words: np.ndarray | None) -> bool:
    """Does this step's header say: checkpoint now (trainer 0's ``schedule.checkpoint``)?"""
    return words is not None and bool(header.get(words[SCHEDULER], "schedule.checkpoint"))


# -- the parts ---------------------------------------------------------------------------------------
class SchedulePart(Part):
    """Trainer 0: decides when (``Schedule``), from the servers' part write times."""

    namespace = "schedule"
    fields: ClassVar[tuple[tuple[str, int], ...]] = (("checkpoint", 1),)

    def __init__(self, env: RankEnv, schedule: Schedule, part_time: PartTime | None, detail: str) -> None:
        self.env, self.schedule, self.part_time, self.detail = env, schedule, part_time, detail

    def header_word(self, step: int) -> dict[str, int]:
        return {"checkpoint": self.schedule.due(step)}

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        t = self.part_time
        if t is None:  # the writers report no time (an interval in steps never reads it)
            self.schedule.observe(np.zeros(len(words) - self.env.n_trainers, dtype=np.int64))
        else:
            part = self.header.column(words[self.env.n_trainers:], f"writer.{t.name}")
            self.schedule.observe(part * t.to_us)
        if self.header.get(words[SCHEDULER], "checkpoint"):
            self.env.event("checkpoint_start", step, detail=self.detail)
            self.schedule.started(step)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.schedule.restarted()

    def summary(self) -> dict[str, Any]:
        return self.schedule.figures()


class WriterPart(Part):
    """Writes this rank's part when trainer 0's word says so (``snapshot(step, words)`` instead of
    the writer's full ``save`` when given); ``reports``: puts its slowest write time in the header."""

    namespace = "writer"

    def __init__(self, writer: PartWriter, part_time: PartTime | None, reports: bool,
                 snapshot: Callable[[int, np.ndarray], None] | None = None) -> None:
        self.writer, self.part_time, self.snapshot = writer, part_time, snapshot
        self.reports = reports and part_time is not None

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        t = self.part_time
        return {self.namespace: ((t.name, t.bits),)} if t is not None else {}

    def header_word(self, step: int) -> dict[str, int] | None:
        t = self.part_time
        if not self.reports or t is None:
            return None
        return {t.name: min(int(self.writer.max_part_s * t.per_s), self.header.limit(t.name))}

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is not None and decided(self.header, words):
            if self.snapshot is None:
                self.writer.save(step)
            else:
                self.snapshot(step, words)

    def background(self, step: int) -> None:
        self.writer.poll()

    def summary(self) -> dict[str, Any]:
        self.writer.finish()
        return self.writer.figures()


class RestorerPart(Part):
    """Restores this rank's state of a checkpointed step (``Restorer``); ``rollback_only``: only in
    a ROLLBACK (another scope is left to the strategy's parts: the answer is None)."""

    def __init__(self, restorer: Restorer, rollback_only: bool = False) -> None:
        self.restorer = restorer
        self.rollback_only = rollback_only

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool | None:
        if self.rollback_only and plan.scope is not Scope.ROLLBACK:
            return None
        return self.restorer.restore(plan, step)

    def summary(self) -> dict[str, Any]:
        return self.restorer.figures()


class CommitterPart(Part):
    """The coordinator's commits (``ManifestCommitter``): manifests, pruning, the ``checkpoints``
    rows, the steps a ``--resume`` can start from. ``beside``: the rows of checkpoints a strategy
    commits without a manifest of this committer (cpr's partials, each committed by its server),
    merged into the dataset in step order, after the committed checkpoint of the same step."""

    def __init__(self, env: RankEnv, store: CheckpointStore, committer: ManifestCommitter,
                 interval: Interval, mode: str,
                 beside: Callable[[], list[tuple[Any, ...]]] | None = None) -> None:
        self.env, self.store, self.committer, self.interval, self.mode = env, store, committer, interval, mode
        self.beside = beside

    def on_message(self, source: Slot, payload: Any) -> None:
        self.committer.on_message(payload)

    def resume_steps(self) -> list[int]:
        return self.store.complete_steps()

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.committer.drop_pending()
        if plan.scope is Scope.ROLLBACK:
            self.committer.drop_newer(plan.restored)

    def checkpoint_rows(self) -> list[tuple[Any, ...]]:
        rows = list(self.committer.rows)
        if self.beside is None:
            return rows
        merged = [((r[0], 0), r) for r in rows] + [((r[0], 1), r) for r in self.beside()]
        return [r for _, r in sorted(merged, key=lambda x: x[0])]  # stable: commit order within a key

    def summary(self) -> dict[str, Any]:
        return {**self.committer.figures(), "checkpoint_interval": self.interval.describe(),
                "checkpoint_mode": self.mode, "checkpoint_dir": str(self.store.root),
                "emulated_bandwidth": bool(self.store.emulated_bandwidth)}


class RollbackPlanner(Part):
    """The coordinator's plan: a rollback whenever embedding state (or every trainer, or with
    ``on_trainer_failure = rollback`` any trainer) was lost; a shrink rolls back onto the new
    placement; a growth drops the checkpoint in flight."""

    def __init__(self, store: CheckpointStore, committer: ManifestCommitter, on_trainer_failure: str) -> None:
        self.store, self.committer, self.on_trainer_failure = store, committer, on_trainer_failure

    def plan(self, failure: Failure) -> RecoveryPlan:
        lost_state = {s.role for s in failure.dead} - {"spare", TRAINER}
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        trainer_dead = TRAINER in failure.dead_roles()
        forced = trainer_dead and self.on_trainer_failure == "rollback"
        if not lost_state and originals and not forced:
            return RecoveryPlan(Scope.COMMITTED, reason="no embedding state lost")
        return self.rollback(failure)

    def rollback(self, failure: Failure, reason: str = "full rollback") -> RecoveryPlan:
        """A full rollback to the newest complete checkpoint at or before the committed step."""
        self.committer.drop_pending()
        return rollback_plan(self.store, failure.committed, reason)

    def on_grow(self, plan: RecoveryPlan) -> bool:
        """Checkpoints need nothing but the new number of parts (the committer reads it); the one in
        flight is dropped (its parts are of the old placement)."""
        self.committer.drop_pending()
        return True

    def on_shrink(self, failure: Failure, plan: RecoveryPlan) -> RecoveryPlan:
        """Every shard is restored from the checkpoint onto the new placement (rows by global id)."""
        return self.rollback(failure, "rollback onto fewer servers")


# -- the kit -----------------------------------------------------------------------------------------
class CheckpointKit:
    """The parts of periodic checkpoints for a strategy of config ``cfg`` and checkpoint keys
    ``params``; ``interval`` overrides the rule of ``interval`` / ``interval_s`` (cpr's PLS)."""

    RULES: ClassVar[dict[str, str]] = KIT_RULES

    def __init__(self, cfg: Any, params: CheckpointParams, *, part_time: PartTime | None = MICROS,
                 interval: Interval | None = None, records: Any = None) -> None:
        self.cfg = cfg
        self.params = params
        self.part_time = part_time
        self.interval = interval or Interval.given(params.interval, params.interval_s)
        self.records = records  # the config the manifests record (None: the rank's)

    @classmethod
    def fallback(cls, cfg: Any, params: dict[str, Any], *, records: bool,
                 part_time: PartTime | None = MICROS) -> CheckpointKit:
        """A strategy's ``ckpt`` fallback: the kit under ``cfg`` with strategy ``ckpt`` and ``params``
        (its keys); ``records``: the manifests record that ckpt config (``--resume`` goes on as
        ckpt), else the strategy's own; ``part_time``: as ``__init__``'s."""
        from mpiec.strategies.api.params import parse_params

        strategy = dataclasses.replace(cfg.strategy, name="ckpt", params=params)
        fcfg = dataclasses.replace(cfg, strategy=strategy)
        return cls(fcfg, parse_params(CheckpointParams, params, "ckpt"), records=fcfg if records else None,
                   part_time=part_time)

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """The kit's header namespaces: trainer 0's decision, the writers' part time."""
        out: dict[str, tuple[tuple[str, int], ...]] = {SchedulePart.namespace: SchedulePart.fields}
        if self.part_time is not None:  # None: the writers report no time (an interval in steps)
            out[WriterPart.namespace] = ((self.part_time.name, self.part_time.bits),)
        return out

    def root(self, out_path: Path) -> Path:
        """``Strategy.checkpoint_root``: where the checkpoints go (the kit's typed ``dir``)."""
        return checkpoint_root(self.params.dir, out_path)

    def directories(self, out_path: Path) -> list[tuple[str, Path]]:
        """``Strategy.directories`` of a strategy whose only folder is the kit's root."""
        return root_directories(self.params.dir, out_path)

    def store(self, env: RankEnv) -> CheckpointStore:
        """This rank's store on the run's root (``strategy.bandwidth_mb_s`` applied)."""
        return open_store(env, self.params.bandwidth_mb_s, directory=self.params.dir)

    @property
    def background(self) -> bool:
        return self.params.mode == "async"

    # -- per role ---------------------------------------------------------------------------------
    def coordinator_store(self, env: RankEnv) -> CheckpointStore:
        """The coordinator's store, with the root claimed for this run."""
        store = self.store(env)
        claim_root(store, resuming=bool(env.resume_from))
        return store

    def committer(self, env: RankEnv, store: CheckpointStore, **options: Any) -> ManifestCommitter:
        """The coordinator's ``ManifestCommitter`` (``options``: its ``meta``, ``classify``, ``needs``);
        its manifests record the kit's config (a fallback's: ``--resume`` goes on as ``ckpt``)."""
        return ManifestCommitter(env, store, lambda: full_parts(env.n_servers), self.params.keep,
                                 config=self.records, **options)

    def coordinator_parts(self, env: RankEnv, store: CheckpointStore | None = None,
                          committer: ManifestCommitter | None = None,
                          beside: Callable[[], list[tuple[Any, ...]]] | None = None) -> list[Part]:
        """The ``CommitterPart`` (``beside``: its) and the ``RollbackPlanner``."""
        store = store if store is not None else self.coordinator_store(env)
        committer = committer if committer is not None else self.committer(env, store)
        return [CommitterPart(env, store, committer, self.interval, self.params.mode, beside),
                RollbackPlanner(store, committer, self.params.on_trainer_failure)]

    def trainer_parts(self, env: RankEnv, role: DenseState, store: CheckpointStore | None = None,
                      rollback_only: bool = False, restorer: bool = True,
                      decider: Callable[..., SchedulePart] = SchedulePart) -> list[Part]:
        """Every trainer restores its dense replica (``restorer``: with the kit's ``RestorerPart``;
        False: the strategy restores through ``Restorer.for_trainer`` itself); trainer 0 also
        decides and writes it. ``decider``: trainer 0's deciding part, built as a ``SchedulePart``
        (``env, schedule, part_time, detail``); a strategy that decides other checkpoints beside the
        full ones in the same word gives its own ``SchedulePart`` (cpr's partials)."""
        store = store if store is not None else self.store(env)
        restoring: list[Part] = []
        if restorer:
            restoring.append(RestorerPart(Restorer.for_trainer(env, store, role), rollback_only))
        if env.slot.index != 0:
            return restoring
        schedule = Schedule.from_config(self.cfg, self.interval, self.params.first, env.now)
        writer = PartWriter(env, store, TRAINER_PART, role.state, background=self.background)
        return [decider(env, schedule, self.part_time, f"{self.params.mode} full checkpoint"),
                WriterPart(writer, self.part_time, reports=False), *restoring]

    def server_writer(self, env: RankEnv, role: ShardState, store: Any = None,
                      on_written: Callable[[int, int], int] | None = None) -> PartWriter:
        """A server's ``PartWriter`` of its shard (``store``: what it writes through)."""
        return PartWriter(env, store if store is not None else self.store(env), server_part(env.slot.index),
                          role.state, rows=role.n_rows, background=self.background, on_written=on_written)

    def server_parts(self, env: RankEnv, role: ShardState, store: CheckpointStore | None = None,
                     rollback_only: bool = False, restorer: bool = True) -> list[Part]:
        """A server writes its shard when trainer 0's word says so, and restores it on a rollback
        (``restorer``: as ``trainer_parts``')."""
        store = store if store is not None else self.store(env)
        restoring: list[Part] = []
        if restorer:
            restoring.append(RestorerPart(Restorer.for_server(env, store, role), rollback_only))
        return [WriterPart(self.server_writer(env, role, store), self.part_time, reports=True), *restoring]


__all__ = ["KIT_RULES", "MICROS", "MILLIS", "SCHEDULER", "CheckpointKit", "CheckpointParams", "CommitterPart",
           "PartTime", "RestorerPart", "RollbackPlanner", "SchedulePart", "WriterPart", "decided"]
