"""``log``: checkpoints + upstream update logs: lossless partial recovery (after MoEvement, SWIFT).

Full checkpoints are the checkpoint kit's (``strategies.checkpointing.kit``, ``ckpt``'s parts):
every agent is the kit's parts for its role plus the log's part (``strategies.compose``) — the
schedule on trainer 0's header word (the kit's fields; the log adds none), ``strategy.interval``
/ ``interval_s`` / ``auto`` = Young, the same store and manifests. On top, every trainer keeps a
log (``store.LogStore``) of the row gradients it pushed since the last committed checkpoint:
each step's push as ``after_push`` gives it, in memory up to ``strategy.log_memory_mb``,
spilled to local files beyond (format in ``spill``).

Recovery (the coordinator's ``plan``):

=======================================  ==========  ===============================================
failure                                  scope       what happens
=======================================  ==========  ===============================================
servers, every trainer's log intact      REPLACED    only the replacement restores its shard from the
                                                     newest committed checkpoint ``b <= C`` (the plan's
                                                     ``candidates[0]``); the trainers replay the steps
                                                     ``b+1 .. C`` of their logs to it (``replay``),
                                                     which applies them through ``Server.replay`` in
                                                     step and trainer order; everyone else keeps its
                                                     state. Lossless: the failure-free rows at ``C``
trainers only                            COMMITTED   the runtime's peer copy of the dense replica
a server, and a trainer died at or       ROLLBACK    the dead trainer's log is gone, so the steps since
after ``b`` (now or earlier)                         ``b`` cannot be replayed: ``ckpt``'s full rollback
                                                     (lossless, like ``ckpt``); event ``log_fallback``
every trainer                            ROLLBACK    ``ckpt``'s (no dense replica survives)
=======================================  ==========  ===============================================

Invariants:

* a trainer drops the records of steps ``<= c`` only once checkpoint ``c`` is committed (its
  manifest exists) *and* the trainer has completed step ``c + 1``. Completing ``c + 1`` needs
  every trainer's dense all-reduce and every server's rows of ``c + 1``, so every rank has
  completed ``c``: the committed step ``C`` of any later failure is ``>= c`` and the plan's
  checkpoint ``b`` (the newest committed one ``<= C``) is ``>= c``. Every surviving trainer's
  log therefore covers ``b + 1 .. C``;
* a replacement trainer logs from the step it resumes at: the coordinator remembers the newest
  such step (``covered_from``); a server failure whose checkpoint ``b`` is older rolls back;
* everything a replay changes is on the replacement (survivors only read their logs), so a
  failure during it restarts the recovery from the same checkpoint.

A restore that finds the plan's checkpoint corrupted tries older ones; a log does not reach
back that far (nor past a corrupted spill record), so the replay check then fails on every
rank (event ``rebuild_failed`` naming the record) and the run is lost: the runtime cannot turn
a partial recovery into a rollback once it started.

Figures (``summary``): ``log_memory_peak_bytes`` (max over trainers of the bytes held in
memory), ``log_spilled_bytes`` / ``log_spilled_records`` (written to spill files, all
trainers), ``log_spill_s`` (max over trainers, on the training thread), ``log_read_bytes``
(spilled bytes read back), ``log_replay_s`` (max over replacements: receiving and applying
the logged steps), ``log_replayed_steps``, ``log_replayed_rows``, ``log_replays``,
``log_fallbacks`` (server failures that rolled back instead), ``log_memory_limit_bytes``.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore
from mpiec.strategies.api import compose
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope, Strategy
from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.params import param
from mpiec.strategies.checkpointing import Restorer
from mpiec.strategies.checkpointing.kit import (
    KIT_RULES,
    CheckpointKit,
    CheckpointParams,
    RollbackPlanner,
    WriterPart,
    decided,
)
from mpiec.strategies.log.spill import HEADER as SPILL_HEADER
from mpiec.strategies.log.store import LogStore
from mpiec.strategies.replay import RebuildError, collective, replay_steps

if TYPE_CHECKING:
    from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState
    from mpiec.strategies.checkpointing import ManifestCommitter

#: test hook: trainer 0 flips one byte of the oldest spilled record a replay needs
CORRUPT_ENV = "MPIEC_LOG_CORRUPT_SPILL"


@dataclass(frozen=True)
class LogParams(CheckpointParams):
    """The checkpoint kit's keys (``ckpt``'s, same defaults and ranges), and the log's own."""

    log_memory_mb: float = param(256.0, "memory a trainer's log may hold, MiB; older records spill to "
                                 "files (0: every record spills)", ge=0)
    log_dir: str = param("", "directory of the spilled records (empty: <checkpoint dir>/log); a "
                         "<result name>.log folder goes in it")


class UpdateLog(Strategy):
    """Checkpoints and the trainers' update logs; no cross-key rule (``ckpt``'s keys have none)."""

    name = "log"
    description = ("checkpoints + trainers' logs of their pushed row gradients: only the failed shard "
                   "restores and replays them (lossless partial recovery)")
    Params = LogParams
    recovers = True
    shrinks = True
    lossless = True
    # the simulator: only the lost shards restore and replay the logged steps (calibrated from log runs)
    cost = CostModel("replay", interval="young")
    summary_rules: ClassVar[dict[str, str]] = {
        **KIT_RULES,
        "log_memory_peak_bytes": "max", "log_spilled_bytes": "sum", "log_spilled_records": "sum",
        "log_spill_s": "max", "log_read_bytes": "sum", "log_replay_s": "max", "log_replayed_steps": "max",
        "log_replayed_rows": "sum", "log_replays": "sum", "log_fallbacks": "first",
        "log_memory_limit_bytes": "first",
    }
    params: LogParams
    kit: CheckpointKit

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.kit = CheckpointKit(self.cfg, self.params)

    def limit_bytes(self) -> int:
        """``strategy.log_memory_mb`` in bytes."""
        return int(float(self.params.log_memory_mb) * 2**20)

    def directories(self, out_path: Path) -> list[tuple[str, Path]]:
        """The checkpoint root, then ``strategy.log_dir`` (the spilled records) when set."""
        log = [("log directory (strategy.log_dir)", Path(self.params.log_dir))] if self.params.log_dir else []
        return super().directories(out_path) + log  # the kit's root first

    def log_root(self, env: RankEnv, store: CheckpointStore) -> Path:
        """Where the trainers' spill directories go: ``strategy.log_dir/<result name>.log``, else
        ``<checkpoint dir>/log``."""
        if self.params.log_dir:
            return Path(self.params.log_dir) / f"{env.out_path.stem}.log"
        return Path(store.root) / "log"

    # -- the agents: the checkpoint kit's parts, and the log's -------------------------------------
    def coordinator(self, env: RankEnv) -> Coordinator:
        store = self.kit.coordinator_store(env)
        committer = self.kit.committer(env, store)
        committing, rollback = self.kit.coordinator_parts(env, store, committer)
        assert isinstance(rollback, RollbackPlanner)
        log = LogCoordinator(env, rollback, store, committer, self.log_root(env, store), self.limit_bytes())
        return compose.coordinator(self, env, committing, log, rollback)  # the log plans first

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        store = self.kit.store(env)
        # one directory per process: a replacement never appends to a dead trainer's files
        spill = (self.log_root(env, store)
                 / f"trainer-{env.slot.index}-rank{env.first_rank}-pid{os.getpid()}")
        corrupt = env.slot.index == 0 and bool(os.environ.get(CORRUPT_ENV))
        log = LogTrainer(env, store, LogStore(self.limit_bytes(), spill), corrupt=corrupt)
        return compose.trainer(self, env, *self.kit.trainer_parts(env, role, store), log)

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        store = self.kit.store(env)
        writer = WriterPart(self.kit.server_writer(env, role, store), self.kit.part_time, reports=True)
        # the log's part restores (a rollback as the kit's, a replaced server alone)
        log = LogServer(env, store, Restorer.for_server(env, store, role), role)
        return compose.server(self, env, writer, log)


def rollback_event(env: RankEnv, plan: RecoveryPlan, step: int) -> None:
    """A trainer or server rolled back to ``step`` (``restore`` event)."""
    what = "the initial state" if step < 0 else f"checkpoint {step}"
    env.event("restore", plan.step, detail=f"rollback of {env.slot} to {what}")


def replay_plan(env: RankEnv, base: int | None) -> dict[int, int]:
    """Collective over ``data``: every replaced server's index and the step its shard is at
    (``base``: this rank's, None when it is not a replaced server)."""
    with collective("log replay plan"):
        mine = (env.slot.index, base) if base is not None else None
        return dict(v for v in env.comms.data_comm().allgather(mine) if v is not None)


class LogTrainer(Part):
    """A trainer's log part, after the kit's parts: logs its pushes, trims the log at committed
    checkpoints and replays it to replaced servers. ``corrupt``: the ``MPIEC_LOG_CORRUPT_SPILL``
    test hook is armed (trainer 0)."""

    def __init__(self, env: RankEnv, store: CheckpointStore, log: LogStore, corrupt: bool = False) -> None:
        self.env = env
        self.store = store
        self.log = log
        self.corrupt = corrupt
        self.awaiting: list[int] = []  # checkpoints taken, not known committed yet

    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        """A step the failure interrupts is dropped again by ``on_recovered``."""
        self.log.append(step, slots, counts, grads)

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        if decided(self.header, words):
            self.awaiting.append(step)
        self.trim_committed(step)

    def trim_committed(self, completed: int) -> None:
        """Drop the log up to the newest checkpoint ``c`` that is committed, with
        ``c + 1 <= completed`` (why both: the module's first invariant)."""
        newest = None
        for c in self.awaiting:
            if c + 1 > completed:
                break
            try:
                self.store.manifest(c)
            except CheckpointError:
                continue  # not committed (yet, or never: a failure ended its epoch)
            newest = c
        if newest is not None:
            self.log.trim(newest)
            self.awaiting = [c for c in self.awaiting if c > newest]

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        """After the kit's restorer, only once it loaded ``step`` (the composite stops at a False)."""
        rollback_event(self.env, plan, step)
        return True

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Scope REPLACED: send the logged steps to the replaced servers (collective over ``data``)."""
        if plan.scope is not Scope.REPLACED:
            return True
        versions = replay_plan(self.env, None)
        if self.corrupt:
            self.corrupt_for_test(min(versions.values(), default=plan.committed) + 1, plan.committed)
        try:
            for _ in replay_steps(self.env, self.log, versions, plan.committed, verify=self.log.verify,
                                  trainer=self.env.slot.index):
                pass  # a trainer only sends
        except RebuildError as exc:
            self.env.event("rebuild_failed", plan.step, detail=str(exc)[:250])
            return False
        return True

    def corrupt_for_test(self, first: int, last: int) -> None:
        """Flip one payload byte of the oldest spilled record of the steps ``first .. last`` a
        replay needs (how the tests prove that a corrupted record is named, never replayed)."""
        steps = [t for t in sorted(self.log.spilled) if first <= t <= last]
        if steps:
            seg, offset = self.log.spilled[steps[0]]
            with open(seg.path, "r+b") as f:
                f.seek(offset + SPILL_HEADER.size)
                byte = f.read(1)
                f.seek(offset + SPILL_HEADER.size)
                f.write(bytes([byte[0] ^ 0x01]))

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.log.drop_after(plan.restored)  # those steps are executed (and logged) again
        self.awaiting = [c for c in self.awaiting if c <= plan.restored]
        if plan.scope is Scope.ROLLBACK and plan.restored >= 0:
            self.log.trim(plan.restored)  # every rank is at that committed checkpoint
            self.awaiting = []

    def summary(self) -> dict[str, Any]:
        out = {"log_memory_peak_bytes": self.log.peak_memory_bytes,
               "log_spilled_bytes": self.log.spilled_bytes,
               "log_spilled_records": self.log.spilled_records,
               "log_spill_s": self.log.spill_s, "log_read_bytes": self.log.read_bytes}
        self.log.close()
        return out


class LogServer(Part):
    """A server's log part, after the kit's ``WriterPart`` (its part of every checkpoint): restores
    on a rollback as the kit does; a replaced server restores its shard alone and receives the
    logged steps since."""

    def __init__(self, env: RankEnv, store: CheckpointStore, restorer: Restorer, role: ShardState) -> None:
        self.env = env
        self.store = store
        self.restorer = restorer  # its figures count the partial restores too
        self.role = role
        self.base = -1  # a replaced server: the checkpoint its shard was restored from
        self.replay_s = 0.0
        self.replayed_steps = self.replayed_rows = self.replays = 0

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        """ROLLBACK: the kit's restore. Otherwise (a replaced server): the plan's checkpoint, else an older
        one, else the initial shard; always True (the replay check then says whether the logs
        reach back to it)."""
        if plan.scope is Scope.ROLLBACK:
            ok = self.restorer.restore(plan, step)
            if ok:
                rollback_event(self.env, plan, step)
            return ok
        wanted = plan.candidates[0] if plan.candidates else -1
        older = [s for s in self.store.complete_steps() if s < wanted]
        for s in [wanted, *older, -1] if wanted >= 0 else [-1]:
            if self.restorer.restore(plan, s):  # a failed one logs restore_failed
                self.base = s
                break
        what = "the initial shard" if self.base < 0 else f"checkpoint {self.base}"
        todo = (f"replays steps {self.base + 1}..{plan.committed} from the trainers' logs"
                if self.base < plan.committed else "nothing to replay")
        self.env.event("restore", plan.step, detail=f"replacement {self.env.slot} restored {what}; {todo}")
        return True

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Scope REPLACED: a replaced server applies the logged steps since its checkpoint; every
        server takes part in the replay's collectives (over ``data``)."""
        if plan.scope is not Scope.REPLACED:
            return True
        t0 = time.perf_counter()
        replaced = self.env.slot in plan.replaced
        versions = replay_plan(self.env, self.base if replaced else None)
        steps = rows = 0
        try:
            for t, slots, grads, counts in replay_steps(self.env, None, versions, plan.committed,
                                                        server=self.env.slot.index):
                self.role.replay(t, slots, grads, counts)
                steps += 1
                rows += int(slots.size)
        except RebuildError as exc:
            self.env.event("rebuild_failed", plan.step, detail=str(exc)[:250])
            return False
        if replaced:
            seconds = time.perf_counter() - t0
            self.replay_s = max(self.replay_s, seconds)
            self.replayed_steps = max(self.replayed_steps, steps)
            self.replayed_rows += rows
            self.replays += 1
            span = f" ({self.base + 1}..{plan.committed})" if steps else ""
            self.env.event("replay", plan.step,
                           detail=f"{self.env.slot}: {steps} logged steps{span}, {rows} gradient rows "
                                  f"applied in {seconds:.3f} s")
        return True

    def summary(self) -> dict[str, Any]:
        return {**self.restorer.figures(), "log_replay_s": self.replay_s,
                "log_replayed_steps": self.replayed_steps, "log_replayed_rows": self.replayed_rows,
                "log_replays": self.replays}


class LogCoordinator(Part):
    """The coordinator's log part, between the kit's ``CommitterPart`` and ``RollbackPlanner``: the
    partial recovery of a server failure while every trainer's log covers the steps since the
    checkpoint; every other case is the planner's (``plan`` returns None), or its full rollback
    with the log's reason (``rollback``, the kit's planner)."""

    def __init__(self, env: RankEnv, rollback: RollbackPlanner, store: CheckpointStore,
                 committer: ManifestCommitter, log_root: Path, limit_bytes: int) -> None:
        self.env = env
        self.rollback = rollback
        self.store = store
        self.committer = committer  # the kit's
        self.log_root = log_root
        self.limit_bytes = limit_bytes
        self.covered_from = -1  # replacement trainers log from the step after this one (-1: all whole)
        self.fallbacks = 0

    def plan(self, failure: Failure) -> RecoveryPlan | None:
        dead_servers = [s for s in failure.dead if s.role == SERVER]
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not dead_servers or not originals:
            return None  # the kit's: peer copy, or a rollback when no dense replica is left
        committed = [s for s in self.store.complete_steps() if s <= failure.committed]
        base = committed[0] if committed else -1
        dead_trainers = [str(s) for s in failure.dead if s.role == TRAINER]
        why = ""
        if dead_trainers:
            why = f"{', '.join(dead_trainers)} died with its update log"
        elif base < self.covered_from:
            why = (f"a trainer replaced after step {self.covered_from} has no log of the steps since "
                   f"checkpoint {base}")
        if why:
            plan = self.rollback.rollback(failure, f"full rollback: {why}")
            self.fallbacks += 1
            self.env.event("log_fallback", failure.step, detail=plan.reason[:250])
            return plan
        self.committer.drop_pending()
        return RecoveryPlan(Scope.REPLACED, candidates=[base],
                            reason=f"{[str(s) for s in dead_servers]} restore checkpoint {base} and replay "
                                   f"steps {base + 1}..{failure.committed} from the trainers' logs")

    # on_grow is the kit's planner's: the trainers' logs start afresh (``on_recovered``), so a server
    # failure before the next checkpoint then rolls back

    def on_shrink(self, failure: Failure, plan: RecoveryPlan) -> RecoveryPlan:
        """A rollback: the logs hold rows by their old servers' local slots, not replayable onto
        the new placement. A plan that is a rollback already (``plan`` fell back, counted there)
        is ckpt's, which loads rows by global id onto any placement."""
        if plan.scope is Scope.ROLLBACK:
            return plan
        plan = self.rollback.rollback(
            failure, "full rollback: rows re-placed onto fewer servers (the logs address the old placement)")
        self.fallbacks += 1
        self.env.event("log_fallback", failure.step, detail=plan.reason[:250])
        return plan

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if plan.scope is Scope.ROLLBACK:
            self.covered_from = plan.restored  # every trainer logs the re-executed steps
        elif plan.relayout or any(s.role == TRAINER for s in plan.replaced + plan.dropped):
            # a replaced trainer has no log; after a trainer was dropped every trainer starts a new
            # one (their agents are rebuilt for the new layout)
            self.covered_from = max(self.covered_from, plan.restored)

    def summary(self) -> dict[str, Any]:
        out = {"log_fallbacks": self.fallbacks, "log_memory_limit_bytes": self.limit_bytes}
        shutil.rmtree(self.log_root, ignore_errors=True)  # spill directories of trainers that died
        return out


__all__ = ["LogCoordinator", "LogParams", "LogServer", "LogTrainer", "UpdateLog"]
