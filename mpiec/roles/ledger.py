"""The recovery ledger of one rank: what the failures so far left to remember.

Owns the bookkeeping of failures and recoveries that outlives one recovery (the runtime's, not
the strategy's): failures seen, slots dead since the last completed recovery, slots promoted in
an unfinished one (monitor), deaths during the final report, the emulated victims' old worlds,
and the phase times of every recovery (the result's ``recoveries``). Invariant: plain data,
changed only by ``roles.recovery`` and ``roles.runner``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpi4py import MPI

from mpiec.layout import Slot


@dataclass
class RecoveryLedger:
    failures_seen: int = 0  # failures this rank went through
    dead: bool = False  # emulated mode: this rank is the victim and only plays dead
    pending: set[Slot] = field(default_factory=set)  # monitor: slots promoted in an unfinished recovery
    unrecovered: list[Slot] = field(default_factory=list)  # slots dead since the last completed recovery
    # their names in the kill plans (``RankContext.names`` when each died): an interrupted shrink's
    # renumbering leaves ``unrecovered`` in two numberings, the names are one
    dead_names: list[Slot] = field(default_factory=list)
    report_deaths: list[Slot] = field(default_factory=list)  # slots that died during the final report
    empty_failures: int = 0  # monitor: consecutive failures in which no rank had died
    growth_attempts: int = 0  # monitor: growths planned since the last completed recovery
    # monitor: an unfinished recovery re-placed the rows over fewer servers (a failure cut it short):
    # the next attempt must finish the re-placement (a rollback of every server onto it)
    relayout: bool = False
    # monitor: (old world, emulated victims' ranks)
    retired: list[tuple[MPI.Intracomm, list[int]]] = field(default_factory=list)
    retired_world: MPI.Intracomm | None = None  # emulated victim: the world it left
    recoveries: list[dict[str, float]] = field(default_factory=list)  # phase times of each recovery


__all__ = ["RecoveryLedger"]
