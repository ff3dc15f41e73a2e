"""CPR's lost-update accounting: the servers' running counts, and the trainers' ledger of them.

A server counts the row updates its restore from disk would not bring back (``UpdateCounter``:
cumulative, less what its partial checkpoints saved) and sends the count in the ``ledger.updates``
field of every step header word, so the survivors know it when the server dies. Every trainer keeps
the counts of the last few steps and the counts right after each full checkpoint (``LostUpdates``);
a lost shard's loss is its count at the committed step less its count at the full checkpoint its
replacement actually restored (agreed by every data rank after the restore: ``exchange_restored``).

Parts (``strategies.compose``): ``ServerLedger`` (a server's counter, the owner of the ``ledger``
header namespace) and ``TrainerLedger`` (every trainer's ledger, the ``lost_updates`` figure).

Invariants:

* a server's word at step ``s`` holds its count through step ``s − 1`` (the header is built before
  the step's apply); the word of the step after a full checkpoint ``b`` therefore gives the count
  through ``b``;
* a checkpoint that was started but never committed saved nothing: the loss goes back to the
  checkpoint the replacement restored, not to the newest one started;
* the last step before a failure, whose word never arrived, is estimated from the step before (the
  last growth seen); a partial written after a full checkpoint that never committed credits only
  the updates since that full one's start (the count then errs high);
* the count in the header is clamped to the field (never negative: an undone step after a partial
  that credited it could take it below 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.plan import RecoveryPlan, Scope
from mpiec.strategies.checkpointing.kit import decided

if TYPE_CHECKING:
    from mpiec.strategies.api.env import RankEnv


class UpdateCounter:
    """A server's row updates not on disk: per local slot since the slot was last saved (by a full
    checkpoint's start or a partial), and the running total the header carries."""

    def __init__(self, n: int) -> None:
        self.unsaved = np.zeros(n, dtype=np.int64)
        self.updates = 0  # row updates applied since the start (or the last restore)
        self.credited = 0  # of which saved by partial checkpoints
        self.last_apply: tuple[int, np.ndarray] | None = None  # the last step applied and its slots

    def count(self, limit: int) -> int:
        """The header's count (through the last step applied), clamped to ``0..limit``."""
        return min(max(self.updates - self.credited, 0), limit)

    def applied(self, step: int, slots: np.ndarray) -> None:
        self.unsaved[slots] += 1
        self.updates += int(slots.size)
        self.last_apply = (step, slots.copy())

    def full_started(self) -> None:
        """A full checkpoint of the shard was started: every row is (being) saved."""
        self.unsaved[:] = 0

    def credit(self, rows: np.ndarray) -> None:
        """A partial checkpoint saved ``rows``."""
        self.credited += int(self.unsaved[rows].sum())
        self.unsaved[rows] = 0

    def recovered(self, restored: int, from_disk: bool) -> None:
        """After a recovery to step ``restored``: ``from_disk`` (this shard was restored, or every
        rank rolled back) the shard equals what is on disk; else a step undone past ``restored`` is
        taken back (it counts again when re-executed)."""
        if from_disk:
            self.unsaved[:] = 0
            self.updates = self.credited = 0
        elif self.last_apply is not None and self.last_apply[0] > restored:
            _, slots = self.last_apply
            self.unsaved[slots] -= 1
            self.updates -= int(slots.size)
        self.last_apply = None


class LostUpdates:
    """A trainer's ledger of every server's count (``observe`` after each step) and the updates
    lost so far (``lost``)."""

    def __init__(self) -> None:
        #: step -> (every server's count through step − 1, was step a full checkpoint)
        self.words: dict[int, tuple[np.ndarray, bool]] = {}
        self.at_full: dict[int, np.ndarray] = {}  # full checkpoint step -> the counts through it
        self.rate: np.ndarray | None = None  # the rows each server updated per step, last seen
        self.lost = 0

    def observe(self, step: int, counts: np.ndarray, full: bool) -> None:
        """``counts``: every server's header count of ``step``; ``full``: a full checkpoint after it."""
        counts = np.array(counts, dtype=np.int64)
        prev = self.words.get(step - 1)
        if prev is not None:  # rows a server updates per step, for the one step never reported
            grew = counts - prev[0]
            self.rate = np.where(grew > 0, grew, self.rate if self.rate is not None else 0)
        self.words[step] = (counts, full)
        self.words.pop(step - 3, None)
        if prev is not None and prev[1]:  # counts through the checkpoint
            self.at_full[step - 1] = counts
            for old in sorted(self.at_full)[:-8]:  # a restore goes back a few checkpoints at most
                del self.at_full[old]

    def failed(self, committed: int, restored: dict[int, int]) -> None:
        """Servers ``restored`` (server -> the full checkpoint its replacement restored, −1: the
        initial state) were lost after step ``committed``: add their lost updates."""
        if not self.words:
            return
        for server, base in sorted(restored.items()):
            self.lost += self.estimate(committed, server, base)

    def estimate(self, c: int, server: int, base: int) -> int:
        """Updates of ``server`` through step ``c`` that its restore from the full checkpoint of step
        ``base`` (−1: the initial state) did not bring back.

        The word of step ``c + 1`` gives the count through ``c`` exactly; a server killed at the
        start of a step never sent it: then the word of step ``c`` (through ``c − 1``) plus one
        step's updates at the last rate seen. Less the count through ``base``, noted when the
        word after that checkpoint arrived (none: ``base`` is ``c`` itself, nothing lost).
        """
        if c + 1 in self.words:
            total = int(self.words[c + 1][0][server])
        elif c in self.words:
            rate = int(self.rate[server]) if self.rate is not None else 0
            total = int(self.words[c][0][server]) + rate
        else:
            return 0
        if base < 0:
            return total
        if base not in self.at_full:
            return 0 if base >= c else total  # no note of it: at most the count since the start
        return max(total - int(self.at_full[base][server]), 0)

    def recovered(self, restored: int, recounted: list[int]) -> None:
        """Training resumes after step ``restored``; servers ``recounted`` count from 0 again (their
        counts at the older checkpoints are now 0)."""
        self.words = {s: w for s, w in self.words.items() if s <= restored}
        self.at_full = {s: w for s, w in self.at_full.items() if s <= restored}
        for s, w in self.at_full.items():
            w = w.copy()
            w[recounted] = 0
            self.at_full[s] = w


def exchange_restored(env: RankEnv, mine: tuple[int, int] | None) -> dict[int, int]:
    """Every trainer and server, after a REPLACED recovery: replaced server -> the full checkpoint
    its restore used (``mine``: this rank's entry, None if it restored nothing). Collective on
    ``data``: every trainer's ``TrainerLedger`` and every server's ``ReplacementRestore`` call it
    once per REPLACED recovery."""
    from mpiec.comm import guard  # here: the launcher imports this module without MPI

    with guard("cpr restored checkpoints"):
        return dict(x for x in env.comms.data_comm().allgather(mine) if x is not None)


class ServerLedger(Part):
    """A server's ``UpdateCounter``: counts every apply, puts the count in its header word
    (``ledger.updates``, through the step before), forgets the rows a full checkpoint (trainer 0's
    ``schedule.checkpoint``) saves, and after a recovery counts as its shard now is. The counter is
    shared with the server's ``PartialsPart``, whose partial checkpoints credit it."""

    namespace = "ledger"
    fields = (("updates", 37),)  # a long run's count: beside the writer's 24-bit part_ms

    def __init__(self, env: RankEnv, counter: UpdateCounter) -> None:
        self.env = env
        self.counter = counter

    def header_word(self, step: int) -> dict[str, int]:
        return {"updates": self.counter.count(self.header.limit("updates"))}  # through step - 1

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        self.counter.applied(step, slots)

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if decided(self.header, words):  # a full checkpoint of this step
            self.counter.full_started()

    def on_recovered(self, plan: RecoveryPlan) -> None:
        from_disk = self.env.slot in plan.replaced or plan.scope is Scope.ROLLBACK
        self.counter.recovered(plan.restored, from_disk=from_disk)


class TrainerLedger(Part):
    """Every trainer's ``LostUpdates``: observes the servers' ``ledger.updates`` after each step and,
    after a REPLACED recovery, charges the loss from the full checkpoints the replaced servers
    restored (``exchange_restored``); the ``lost_updates`` figure."""

    namespace = "ledger"  # reads the servers' field; packs none

    def __init__(self, env: RankEnv, ledger: LostUpdates) -> None:
        self.env = env
        self.ledger = ledger

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        if words is not None:
            counts = self.header.column(words[self.env.n_trainers:], "updates")
            self.ledger.observe(step, counts, decided(self.header, words))

    def on_recovered(self, plan: RecoveryPlan) -> None:
        replaced = plan.scope is Scope.REPLACED
        restored = exchange_restored(self.env, None) if replaced else {}
        if replaced:
            self.ledger.failed(plan.committed, restored)
        # a restored server counts from 0 again: its counts at older checkpoints are now 0
        recounted = (sorted(restored) if replaced
                     else list(range(self.env.cfg.layout.servers)) if plan.scope is Scope.ROLLBACK else [])
        self.ledger.recovered(plan.restored, recounted)

    def summary(self) -> dict[str, Any]:
        return {"lost_updates": self.ledger.lost}


__all__ = ["LostUpdates", "ServerLedger", "TrainerLedger", "UpdateCounter", "exchange_restored"]
