"""A source's open commit window under batched parity commits (``strategy.parity_every = N``).

Owns, on a data server, the rows it updated since its last parity commit (the
*window*) and their bytes as they were at that commit (``base``): a row updated
in several steps of the window is kept once, with its first old bytes. At the
next commit the delta sent to the holders is ``old XOR current`` (``sum``:
``current - old``) of exactly those rows: one delta per row per commit, however
many steps updated it. No MPI.

Invariants: ``dirty[slot]`` is true exactly for the slots in the window; the
kept old bytes of a slot are its bytes at version ``base`` (a row is recorded
the first time the window sees it, before that step's update, so nothing
changed it since ``base``); a recovery can therefore send the change from
``base`` to whatever step the rows are at, even after reconciliation undid the
last step (its rows are back at their bytes of the step before).
"""

from __future__ import annotations

import numpy as np


class CommitWindow:
    def __init__(self, n_local: int, base: int = -1) -> None:
        self.dirty = np.zeros(n_local, dtype=bool)
        self.base = base  # the version (commit step) the holders have of these rows
        self.slots: list[np.ndarray] = []
        self.old: list[np.ndarray] = []
        self.nbytes = 0
        self.peak = 0

    def add(self, slots: np.ndarray, old: np.ndarray) -> None:
        """Rows ``slots`` (local, unique) are about to change; ``old`` their rows before it."""
        new = ~self.dirty[slots]
        if not new.any():
            return
        s = slots[new]
        self.dirty[s] = True
        self.slots.append(s)
        self.old.append(old[new])
        self.nbytes += s.nbytes + self.old[-1].nbytes
        self.peak = max(self.peak, self.nbytes)

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(local slots sorted, their rows at ``base``) of the window."""
        if not self.slots:
            return np.empty(0, np.int64), np.empty((0, 0), np.float32)
        slots = np.concatenate(self.slots)
        old = np.concatenate(self.old)
        order = np.argsort(slots, kind="stable")
        return slots[order], old[order]

    def reset(self, base: int) -> None:
        """A commit at ``base`` (or a recovery brought every holder to it): the window is empty."""
        for s in self.slots:
            self.dirty[s] = False
        self.slots, self.old, self.nbytes = [], [], 0
        self.base = base
