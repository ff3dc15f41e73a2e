"""What every rank acts on after a failure: the agreed ``Failure`` and the ``RecoveryPlan``.

Owns the plan's fields, all declared here (the coordinator's answer, then the runtime's
bookkeeping: spares, spawned slots, the slot table, the step restored), the recovery ``Scope``
and ``ServerShard`` (a server's rows as strategies see them). Plain data: it is broadcast from
the monitor to every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from mpiec.layout import Slot


class Scope(Enum):
    """Which ranks restore state after a failure."""

    ROLLBACK = "rollback"  # every trainer and server restores a checkpoint; steps since re-execute
    REPLACED = "replaced"  # survivors stay at the committed step; only replaced slots restore
    COMMITTED = "committed"  # survivors stay at the committed step; replaced slots rebuilt at it


@dataclass
class Failure:
    """What the survivors agreed on after a failure (identical on every survivor)."""

    step: int  # the step the failure interrupted (first step not committed)
    committed: int  # last step every surviving trainer and server completed
    dead: list[Slot] = field(default_factory=list)  # slots whose rank died (all failures of this recovery)
    emulated: bool = False
    survivors: list[Slot] = field(default_factory=list)  # slots of the ranks alive, in world order

    def dead_roles(self) -> set[str]:
        return {s.role for s in self.dead}

    def alive(self, role: str) -> list[int]:
        return sorted(s.index for s in self.survivors if s.role == role)


@dataclass
class RecoveryPlan:
    """The strategy's answer to a failure; the runtime fills the bookkeeping fields."""

    scope: Scope | None  # None: abort, the run is lost
    candidates: list[int] = field(default_factory=list)  # ROLLBACK: newest first (-1: initial state)
    reason: str = ""
    # -- filled by the runtime -------------------------------------------------
    step: int = 0  # the interrupted step (for events)
    committed: int = -1  # survivors' agreed committed step
    assignments: dict[Slot, Slot] = field(default_factory=dict)  # spare slot -> dead slot it takes
    spawn: list[Slot] = field(default_factory=list)  # dead slots taken by spawned processes (spawn mode)
    consumed: list[int] = field(default_factory=list)  # seq of every planned kill fired so far
    epoch: int = 0  # recoveries so far, this one included
    restored: int = -1  # the step whose state every rank holds after restore (ROLLBACK: chosen candidate)
    slots: list[Slot] = field(default_factory=list)  # the slot table after the recovery, by world rank
    failure: Failure | None = None  # what the survivors agreed on (None: a resume from a checkpoint)
    replaced: list[Slot] = field(default_factory=list)  # slots whose holder is new, in slot order
    # elastic (layout.replacement = "shrink"): dead slots left empty, survivors renumbered (old -> new)
    dropped: list[Slot] = field(default_factory=list)
    renamed: dict[Slot, Slot] = field(default_factory=dict)
    # the name kill plans use for every slot of ``slots`` (``RankContext.names``): the slot as the
    # run was launched (a growth's new slot: a dropped one's name)
    names: dict[Slot, Slot] = field(default_factory=dict)
    relayout: bool = False  # every row re-placed (the server count changed)
    # a shrink without rollback: the step agents rebuild the dropped servers' rows (``handover``)
    handover: bool = False
    grow: bool = False  # a planned growth back onto new ranks (no failure): rows move, none restored
    grow_at: int = -1  # every rank's ``grow_at`` after this recovery (the step trainer 0 starts a growth)
    # layout.grow_from = "spares": why a growth grows less than the configured layout lacks, or none is
    # planned (fewer spares wait than slots are missing); "" when it grows everything
    grow_short: str = ""

    @classmethod
    def abort(cls, reason: str) -> RecoveryPlan:
        return cls(scope=None, reason=reason)

    @property
    def aborts(self) -> bool:
        return self.scope is None


@dataclass
class ServerShard:
    """A server's state, as strategies see it (arrays are the live ones)."""

    index: int
    table: np.ndarray  # float32 [n_local, dim + state]: weights then optimizer state
    global_rows: np.ndarray  # int64 global row id of each local slot (padding: -1)
    dim: int
