"""What a strategy's agents may use of their rank: ``RankEnv`` and the role-state protocols.

Owns the seam between the runtime (``mpiec.roles``) and the strategies. An agent sees its rank
only through a ``RankEnv`` (slot, ranks, communicators, clock, event log, epoch, placement) and
its role's state only through ``DenseState`` (a trainer's replica) or ``ShardState`` (a server's
rows). Progress bookkeeping, the recovery ledger and fault injection are the runtime's and are
not here.

Invariants: a ``RankEnv`` is read-only (assigning to it raises); it reads the rank's live values,
so after a recovery rebuilt the communicators or advanced the epoch the agent sees the new ones.
This module imports nothing of the runtime: ``RankView`` is the structural type of what it reads.
A strategy's point-to-point messages use ``tags`` only (``mpiec.comm.tags``: the rule, and the audit
that ``mpiec.contract`` turns on, under which ``comms`` are checking wrappers of the same handles).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mpiec.comm.tags import STRATEGY_TAGS, TagRange, audit_on, audited

if TYPE_CHECKING:
    from mpiec.comm import Comms
    from mpiec.config import Config
    from mpiec.layout import RowPlacement, Slot
    from mpiec.strategies.api.base import ServerShard


class _Progress(Protocol):
    completed: int


class RankView(Protocol):
    """The runtime's per-rank record, as far as ``RankEnv`` reads it (``roles.context.RankContext``)."""

    cfg: Config
    comms: Comms
    placement: RowPlacement
    out_path: Path
    resume_from: str
    epoch: int
    first_rank: int

    @property
    def progress(self) -> _Progress: ...
    @property
    def n_trainers(self) -> int: ...
    @property
    def n_servers(self) -> int: ...

    @property
    def rank(self) -> int: ...
    @property
    def slot(self) -> Slot: ...
    @property
    def monitor_rank(self) -> int: ...
    def now(self) -> float: ...
    def event(self, kind: str, step: int, rank: int = -1, slot: Slot | None = None,
              detail: str = "", at: float | None = None) -> None: ...
    def tell_monitor(self, payload: Any, synchronous: bool = False) -> None: ...


class RankEnv:
    """A rank as its strategy agent sees it. Read-only; every value is the rank's current one."""

    __slots__ = ("_audit", "_audited", "_view")
    _view: RankView
    _audit: bool  # MPIEC_TAG_AUDIT, read once
    _audited: tuple[Comms, Comms] | None  # (the runtime's comms, their audited wrappers)

    def __init__(self, view: RankView) -> None:
        object.__setattr__(self, "_view", view)
        object.__setattr__(self, "_audit", audit_on())
        object.__setattr__(self, "_audited", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RankEnv is read-only (tried to set '{name}')")

    @property
    def cfg(self) -> Config:
        return self._view.cfg

    @property
    def slot(self) -> Slot:
        """The role slot this rank holds now (``Slot(role, index)``)."""
        return self._view.slot

    @property
    def rank(self) -> int:
        """This rank in the current ``world`` (the monitor is rank 0)."""
        return self._view.rank

    @property
    def first_rank(self) -> int:
        """This process's rank in the original world (stable across shrinks; for reports)."""
        return self._view.first_rank

    @property
    def comms(self) -> Comms:
        """The current communicators (``world``, ``data``, ``trainers``, ``servers``); a strategy's
        point-to-point messages go on ``data``, ``trainers`` or ``servers`` with ``tags``."""
        comms = self._view.comms
        if not self._audit:
            return comms
        if self._audited is None or self._audited[0] is not comms:  # a recovery rebuilt them
            object.__setattr__(self, "_audited", (comms, audited(comms, self.tags)))
        assert self._audited is not None
        return self._audited[1]

    @property
    def tags(self) -> TagRange:
        """The strategy's MPI tags (``tags[0]``, ``tags[1]``, ...; ``tags.slice`` for a part): the
        only tags its point-to-point messages use (``mpiec.comm.tags``; the contract checks it)."""
        return STRATEGY_TAGS

    @property
    def n_trainers(self) -> int:
        """Trainers now: the ``data`` ranks before the first server (``layout.trainers`` until an
        elastic recovery drops one)."""
        return self._view.n_trainers

    @property
    def n_servers(self) -> int:
        """Servers now (``layout.servers`` until an elastic recovery drops one)."""
        return self._view.n_servers

    @property
    def placement(self) -> RowPlacement:
        return self._view.placement

    @property
    def epoch(self) -> int:
        """Recoveries completed so far (the same on every rank)."""
        return self._view.epoch

    @property
    def completed(self) -> int:
        """The last step this rank completed (-1: none)."""
        return self._view.progress.completed

    @property
    def out_path(self) -> Path:
        """The run's result file (strategies put their files beside it)."""
        return self._view.out_path

    @property
    def resume_from(self) -> str:
        """The checkpoint root of ``mpiec run --resume`` ("" when the run starts afresh)."""
        return self._view.resume_from

    def now(self) -> float:
        """Seconds since the run's common start (wall clock, comparable across ranks)."""
        return self._view.now()

    def event(self, kind: str, step: int, detail: str = "", at: float | None = None) -> None:
        """Log an event of this rank at ``step`` (the result file's ``events``)."""
        self._view.event(kind, step, self._view.rank, detail=detail, at=at)

    def tell_monitor(self, payload: Any, synchronous: bool = False) -> None:
        """Send ``payload`` to the coordinator's ``on_message`` (small, eager, in order);
        ``synchronous``: return only once the monitor has received it (before a failure this rank
        is about to raise reaches the monitor)."""
        self._view.tell_monitor(payload, synchronous)


class DenseState(Protocol):
    """A trainer's state as its agent sees it: the dense replica."""

    def state(self) -> dict[str, np.ndarray]:
        """The live arrays (``params``, ``dense_state``)."""
        ...

    def load_state(self, state: dict[str, np.ndarray]) -> None: ...

    def reset(self) -> None:
        """The initial state (a pure function of the seed)."""
        ...


class ShardState(DenseState, Protocol):
    """A server's state as its agent sees it: its shard of the embedding rows."""

    shard: ServerShard

    def load_rows(self, rows: np.ndarray, table: np.ndarray) -> int:
        """Load the rows of ``table`` (global ids ``rows``) this shard holds; returns how many."""
        ...

    def n_rows(self) -> int:
        """Real rows of the shard (stripe padding excluded)."""
        ...

    def replay(self, step: int, slots: np.ndarray, grads: np.ndarray, counts: np.ndarray) -> None:
        """Re-apply logged gradients of an earlier ``step`` (in trainer order, ``counts[i]`` rows
        from trainer ``i``): the rows reach that step's state."""
        ...

    def replay_into(self, table: np.ndarray, slots: np.ndarray, grads: np.ndarray,
                    counts: np.ndarray) -> None:
        """``replay`` onto another shard's ``table`` (rows this server rebuilt for a dropped one),
        with this server's optimizer and no strategy hook."""
        ...


__all__ = ["DenseState", "RankEnv", "RankView", "ShardState"]
