"""``ckpt``: periodic full checkpoints, full recovery (the XDL / TorchRec baseline).

Composed of the checkpoint components (``strategies.checkpointing``): trainer 0's agent holds
the ``Schedule`` and writes the dense replica, every server writes its shard (rows and optimizer
state, with their global ids), each through a ``PartWriter``; the coordinator's
``ManifestCommitter`` commits the manifest once every part of the step is there and prunes old
checkpoints; every trainer and server restores through a ``Restorer``.

Invariants:

* a checkpoint is taken after the same step on every rank: the decision is trainer 0's, carried
  in the ``checkpoint`` field of its step header word, so time-based and ``auto`` intervals stay
  consistent;
* on a server failure (or when every trainer died, or with ``on_trainer_failure = "rollback"``)
  every trainer and server rolls back to the newest complete checkpoint whose parts verify, and
  the steps since are re-executed; training is deterministic, so the run ends with the
  failure-free ``param_checksum``. With no checkpoint yet, the rollback goes to the initial
  state (step −1);
* a trainer-only failure needs no rollback by default: the servers hold the embeddings at the
  committed step and the replacement copies the dense replica from a surviving trainer (the
  runtime's peer copy);
* parts of a checkpoint that may never complete (written in an epoch that a failure ended) are
  never committed.

Interval (``strategy.interval``): a number of steps, or ``"auto"`` = Young's
``sqrt(2 · t_save · MTBF)`` with ``t_save`` the slowest part's write time measured at the first
checkpoint (taken after ``first`` steps; the servers put it in their header's ``part_us`` field)
and the MTBF from ``failures.mtbf_s``, else from the kill plan, else one failure per run;
``strategy.interval_s`` sets a fixed interval in seconds instead (a number of steps, if given
too, decides). The summary says which rule chose the interval (``checkpoint_interval_rule``:
``given``, ``given-seconds``, ``young``; ``cpr`` adds ``pls``) and what it came to in steps
(``checkpoint_interval_steps``: the rule's steps, or for a rule in seconds the median gap between
the checkpoints taken).

Per checkpoint (the result's ``checkpoints`` dataset): kind, bytes and embedding rows of all its
parts, ``stall_s`` = the longest time a writer's training thread spent on it (the whole write in
``sync`` mode, the snapshot copy in ``async`` mode), ``seconds`` = the slowest part's total (its
stall plus, in ``async`` mode, its background write).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from mpiec.checkpoint import CheckpointStore
from mpiec.layout import TRAINER, Slot
from mpiec.strategies.agents import Coordinator, ServerAgent, TrainerAgent
from mpiec.strategies.base import Failure, RecoveryPlan, Scope, Strategy
from mpiec.strategies.checkpointing import (
    CHECKPOINT_FIELD,
    PART_US_FIELD,
    TRAINER_PART,
    Interval,
    ManifestCommitter,
    PartWriter,
    Restorer,
    Schedule,
    checkpoint_root,
    claim_root,
    full_parts,
    open_store,
    rollback_plan,
    root_directories,
    server_part,
)
from mpiec.strategies.costs import CostModel
from mpiec.strategies.header import HeaderLayout
from mpiec.strategies.params import param

if TYPE_CHECKING:
    from mpiec.strategies.env import DenseState, RankEnv, ShardState

#: the step header word: trainer 0's decision, and each server's slowest part write time (µs)
HEADER = HeaderLayout(CHECKPOINT_FIELD, PART_US_FIELD)
SCHEDULER = 0  # the data rank whose word decides (trainer 0)


@dataclass(frozen=True)
class CkptParams:
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


class FullCheckpoint(Strategy):
    """Periodic full checkpoints; no cross-key rule (``interval`` in steps wins over ``interval_s``)."""

    name = "ckpt"
    description = "periodic full checkpoints; on a failure every rank rolls back (XDL/TorchRec baseline)"
    Params = CkptParams
    recovers = True
    shrinks = True
    lossless = True
    cost = CostModel("rollback", interval="young")
    summary_rules: ClassVar[dict[str, str]] = {
        "checkpoints": "sum", "checkpoint_bytes": "sum", "checkpoint_interval": "first",
        "checkpoint_critical_s": "max", "checkpoint_write_s": "max", "checkpoint_max_part_s": "max",
        "restores": "max", "restore_s": "max", "restore_read_s": "max", "checkpoint_mode": "first",
        "emulated_bandwidth": "first", "checkpoint_dir": "first", "checkpoint_parts_sent": "sum",
        "checkpoint_interval_steps": "first", "checkpoint_interval_rule": "first",
        "checkpoint_interval_s": "first", "checkpoint_writer_cpu_s": "sum",
    }
    params: CkptParams

    def interval(self) -> Interval:
        """The interval rule of ``strategy.interval`` / ``interval_s``."""
        return Interval.given(self.params.interval, self.params.interval_s)

    def checkpoint_root(self, out_path: Path) -> Path | None:
        return checkpoint_root(self.params.dir, out_path)

    def directories(self, out_path: Path) -> list[tuple[str, Path]]:
        return root_directories(self.params.dir, out_path)

    def store(self, env: RankEnv) -> CheckpointStore:
        return open_store(env, self.params.bandwidth_mb_s, directory=self.params.dir)

    # -- the agents -------------------------------------------------------------------------------
    def coordinator(self, env: RankEnv) -> CkptCoordinator:
        store = self.store(env)
        claim_root(store, resuming=bool(env.resume_from))
        committer = ManifestCommitter(env, store, lambda: full_parts(env.n_servers), self.params.keep)
        return CkptCoordinator(env, store, committer, self.params, self.interval())

    def trainer(self, env: RankEnv, role: DenseState) -> CkptTrainer:
        store = self.store(env)
        restorer = Restorer.for_trainer(env, store, role)
        if env.slot.index != 0:  # trainer 0 decides and writes the dense replica
            return CkptTrainer(env, restorer)
        schedule = Schedule.from_config(self.cfg, self.interval(), self.params.first, env.now)
        writer = PartWriter(env, store, TRAINER_PART, role.state, background=self.params.mode == "async")
        return CkptTrainer(env, restorer, schedule, writer, detail=f"{self.params.mode} full checkpoint")

    def server(self, env: RankEnv, role: ShardState) -> CkptServer:
        store = self.store(env)
        writer = PartWriter(env, store, server_part(env.slot.index), role.state, rows=role.n_rows,
                            background=self.params.mode == "async")
        return CkptServer(env, writer, Restorer.for_server(env, store, role))


def checkpoint_after(words: np.ndarray | None) -> bool:
    """Does this step's header say: checkpoint now (trainer 0's ``checkpoint`` field)?"""
    return words is not None and bool(HEADER.get(words[SCHEDULER], "checkpoint"))


class CkptTrainer(TrainerAgent):
    """Every trainer restores its dense replica on a rollback; trainer 0's also holds the
    ``schedule`` (its word decides) and the ``writer`` of the dense replica. ``header``: the
    strategy's header layout, with a ``checkpoint`` field and the servers' part write time in
    ``part_field``, ``part_to_us`` µs per unit (cnr reuses this agent with its own layout)."""

    def __init__(self, env: RankEnv, restorer: Restorer, schedule: Schedule | None = None,
                 writer: PartWriter | None = None, detail: str = "", header: HeaderLayout = HEADER,
                 part_field: str = "part_us", part_to_us: int = 1) -> None:
        super().__init__(env)
        self.restorer = restorer
        self.schedule = schedule
        self.writer = writer
        self.detail = detail  # the checkpoint_start event's
        self.header, self.part_field, self.part_to_us = header, part_field, part_to_us

    def header_word(self, step: int) -> int:
        return self.header.pack(checkpoint=self.schedule.due(step)) if self.schedule else 0

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is None:
            return
        if self.schedule:
            part = self.header.column(words[self.env.n_trainers:], self.part_field)
            self.schedule.observe(part * self.part_to_us)
        if not self.header.get(words[SCHEDULER], "checkpoint"):
            return
        if self.schedule:
            self.env.event("checkpoint_start", step, detail=self.detail)
            self.schedule.started(step)
        if self.writer:
            self.writer.save(step)

    def background(self, step: int) -> None:
        if self.writer:
            self.writer.poll()

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        return self.restorer.restore(plan, step)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if self.schedule:
            self.schedule.restarted()

    def summary(self) -> dict[str, Any]:
        out = self.restorer.figures()
        if self.writer:
            self.writer.finish()
            out.update(self.writer.figures())
        if self.schedule:
            out.update(self.schedule.figures())
        return out


class CkptServer(ServerAgent):
    """A server writes its shard when trainer 0's word says so, and restores it on a rollback."""

    def __init__(self, env: RankEnv, writer: PartWriter, restorer: Restorer) -> None:
        super().__init__(env)
        self.writer = writer
        self.restorer = restorer

    def header_word(self, step: int) -> int:
        return HEADER.pack(part_us=self.writer.part_us())  # trainer 0's Young rule needs t_save

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if checkpoint_after(words):
            self.writer.save(step)

    def background(self, step: int) -> None:
        self.writer.poll()

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        return self.restorer.restore(plan, step)

    def summary(self) -> dict[str, Any]:
        self.writer.finish()
        return {**self.writer.figures(), **self.restorer.figures()}


class CkptCoordinator(Coordinator):
    """Commits the checkpoints and plans the recoveries: a rollback whenever embedding state (or
    every trainer, or with ``on_trainer_failure = rollback`` any trainer) was lost."""

    def __init__(self, env: RankEnv, store: CheckpointStore, committer: ManifestCommitter,
                 params: CkptParams, interval: Interval) -> None:
        super().__init__(env)
        self.store = store
        self.committer = committer
        self.params = params
        self.interval = interval

    def on_message(self, source: Slot, payload: Any) -> None:
        self.committer.on_message(payload)

    def plan(self, failure: Failure) -> RecoveryPlan:
        lost_state = {s.role for s in failure.dead} - {"spare", TRAINER}
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        trainer_dead = TRAINER in failure.dead_roles()
        forced = trainer_dead and self.params.on_trainer_failure == "rollback"
        if not lost_state and originals and not forced:
            return RecoveryPlan(Scope.COMMITTED, reason="no embedding state lost")
        self.committer.drop_pending()
        return rollback_plan(self.store, failure.committed)

    def on_grow(self, plan: RecoveryPlan) -> bool:
        """Checkpoints need nothing but the new number of parts (the committer reads it); the one in
        flight is dropped (its parts are of the old placement)."""
        self.committer.drop_pending()
        return True

    def on_shrink(self, failure: Failure, plan: RecoveryPlan) -> RecoveryPlan:
        """Every shard is restored from the checkpoint onto the new placement (rows by global id)."""
        self.committer.drop_pending()
        return rollback_plan(self.store, failure.committed, "rollback onto fewer servers")

    def resume_steps(self) -> list[int]:
        return self.store.complete_steps()

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.committer.drop_pending()
        if plan.scope is Scope.ROLLBACK:
            self.committer.drop_newer(plan.restored)

    def checkpoint_rows(self) -> list[tuple[Any, ...]]:
        return list(self.committer.rows)

    def summary(self) -> dict[str, Any]:
        return {**self.committer.figures(), "checkpoint_interval": self.interval.describe(),
                "checkpoint_mode": self.params.mode, "checkpoint_dir": str(self.store.root),
                "emulated_bandwidth": bool(self.store.emulated_bandwidth)}


__all__ = ["HEADER", "CkptCoordinator", "CkptParams", "CkptServer", "CkptTrainer", "FullCheckpoint"]
