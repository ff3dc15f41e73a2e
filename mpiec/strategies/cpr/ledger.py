"""CPR's lost-update accounting: the servers' running counts, and the trainers' ledger of them.

A server counts the row updates its restore from disk would not bring back (``UpdateCounter``:
cumulative, less what its partial checkpoints saved) and sends the count in the ``updates`` field
of every step header word, so the survivors know it when the server dies. Every trainer keeps the
counts of the last few steps and the counts right after each full checkpoint (``LostUpdates``); a
lost shard's loss is its count at the committed step less its count at the full checkpoint its
replacement actually restored (agreed by every data rank after the restore).

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

import numpy as np


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


__all__ = ["LostUpdates", "UpdateCounter"]
