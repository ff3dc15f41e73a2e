"""Restoring a rank from a committed checkpoint, and the rollback plan that asks for it.

``Restorer`` loads one rank's state of a checkpointed step: a trainer its dense replica (the
``trainer`` part), a server its shard (``load_shard``: its own part, or when the checkpoint was
written with another number of servers, the rows it holds now from every server part), and for
step −1 the initial state. ``rollback_plan`` is the coordinator's plan that sends every trainer
and server there.

Invariants:

* a restore either loads the whole state of the step or returns False (a missing, truncated or
  corrupted part, a shard that finds fewer rows than it holds; a ``restore_failed`` event says
  why): the runtime then agrees on the outcome and tries the plan's next candidate;
* the candidates of a rollback are the complete checkpoints at or before the committed step,
  newest first, then −1 (the initial state, a pure function of the seed);
* ``restore_read_s`` is the storage's share of the restores (reads), ``restore_s`` the whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mpiec.storage.checkpoint import CheckpointError, CheckpointStore
from mpiec.strategies.api.plan import RecoveryPlan, Scope
from mpiec.strategies.checkpointing.store import TRAINER_PART, server_part

if TYPE_CHECKING:
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState


def rollback_plan(store: CheckpointStore, committed: int, reason: str = "full rollback") -> RecoveryPlan:
    """Every trainer and server back to the newest complete checkpoint at or before ``committed``
    (then older ones, then the initial state)."""
    candidates = [s for s in store.complete_steps() if s <= max(committed, -1)] + [-1]
    return RecoveryPlan(Scope.ROLLBACK, candidates=candidates, reason=reason)


def load_shard(store: CheckpointStore, step: int, shard: ShardState, index: int, servers: int) -> None:
    """Server ``index`` of ``servers``: its rows from checkpoint ``step``, also when the checkpoint
    was written with another number of servers (rows loaded by global id from every part)."""
    man = store.manifest(step)
    if man.get("meta", {}).get("servers") == servers:
        shard.load_state(store.read_part(step, server_part(index)))
        return
    loaded = 0
    for part in sorted(p for p in man["parts"] if p.startswith("server-")):
        arrays = store.read_part(step, part, mmap=True)
        loaded += shard.load_rows(arrays["global_rows"], arrays["table"])
    if loaded != shard.n_rows():
        raise CheckpointError(f"checkpoint of step {step} holds {loaded} of this server's "
                              f"{shard.n_rows()} rows")


class Restorer:
    """One rank's restores: ``load(step)`` reads and loads the state of a checkpointed step,
    ``reset()`` the initial state; both raise ``CheckpointError`` or ``ValueError`` on bad data."""

    def __init__(self, env: RankEnv, store: CheckpointStore, load: Callable[[int], None],
                 reset: Callable[[], None]) -> None:
        self.env = env
        self.store = store
        self.load = load
        self.reset = reset
        self.restores = 0
        self.restore_s = self.restore_read_s = 0.0

    @classmethod
    def for_trainer(cls, env: RankEnv, store: CheckpointStore, role: DenseState) -> Restorer:
        """A trainer: its dense replica from the ``trainer`` part."""
        return cls(env, store, lambda step: role.load_state(store.read_part(step, TRAINER_PART)), role.reset)

    @classmethod
    def for_server(cls, env: RankEnv, store: CheckpointStore, role: ShardState) -> Restorer:
        """A server: its shard (``load_shard``, as the server it is now)."""
        return cls(env, store, lambda step: load_shard(store, step, role, env.slot.index,
                                                       env.n_servers), role.reset)

    def restore(self, plan: RecoveryPlan, step: int) -> bool:
        """Load the state of ``step`` (−1: the initial state); False if it is unusable."""
        t0, read0 = time.perf_counter(), self.store.read_s
        try:
            if step < 0:
                self.reset()
            else:
                self.load(step)
        except (CheckpointError, ValueError) as exc:
            self.env.event("restore_failed", plan.step, detail=str(exc)[:250])
            return False
        self.record(time.perf_counter() - t0, self.store.read_s - read0)  # reads: the storage's share
        return True

    def record(self, seconds: float, read_s: float = 0.0) -> None:
        """One restore of this rank that took ``seconds`` (``read_s`` of them reading), by ``restore``
        or by a strategy's own restore through ``load`` / ``reset`` (cpr's partial recovery)."""
        self.restores += 1
        self.restore_s += seconds
        self.restore_read_s += read_s

    def figures(self) -> dict[str, Any]:
        return {"restores": self.restores, "restore_s": self.restore_s, "restore_read_s": self.restore_read_s}


__all__ = ["Restorer", "load_shard", "rollback_plan"]
