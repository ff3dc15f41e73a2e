"""Checking a server's own shard for silent corruption (``failures.shard_check_every``): a generic
detector of embedding rows changed at rest, whatever the strategy, that names the rows it finds.

Owns one 32-bit fold per row of the shard (the XOR of the row's words: weights and optimizer
state) and the two checks that compare a row with its fold:

* before every update, the rows the step is about to write (they are read anyway): a flipped row
  is found at its next update, before the update folds the flip into a new value;
* every ``shard_check_every`` steps, after the step's update, every row: a flipped row that no step
  updates is found within that many steps.

A row's fold is taken when the update path writes the row (and of every row when the shard is
built or loaded whole outside a recovery). A recovery may write rows by any way a strategy has
(restores, replays, a background rebuild that goes on for steps after it): after a recovery every
fold is *unknown* until the row's next update, and an unknown row is not checked. So the check
never mistakes a strategy's own write for a corruption, and what it cannot see is said: rows not
updated since the last recovery.

Invariants: the XOR fold changes with any one flipped bit of the row (two flips of the same bit
position in one row cancel: a parity, not a hash); a row found is reported once
(``SHARD_MISMATCH`` event naming its global row; the row is not repaired: this detector has no
redundancy) and checked again only after its next update; with the check off (0) nothing here runs.
"""

from __future__ import annotations

import numpy as np

from mpiec.kernels import tracking

SHOW_ROWS = 8  # global rows named in one event


def row_folds(table: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The XOR of the 32-bit words of each row of a C-contiguous float32 ``table`` (of rows
    ``rows``; all: None)."""
    picked = np.arange(table.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.empty(picked.size, np.uint32)
    tracking.fold_rows(table.view(np.uint32), picked, out)
    return out


class ShardCheck:
    """A server shard's folds and checks; ``every`` = ``failures.shard_check_every`` (0: off)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.folds = np.zeros(0, np.uint32)
        self.known = np.zeros(0, bool)
        if self.on:  # load the kernel now, not in the first timed step
            row_folds(np.zeros((1, 1), np.float32))

    @property
    def on(self) -> bool:
        return self.every > 0

    def rebase(self, table: np.ndarray) -> None:
        """Fold every row of ``table``: the shard was built or loaded whole (not by a recovery)."""
        if self.on:
            self.folds, self.known = row_folds(table), np.ones(table.shape[0], bool)

    def forget(self, n_rows: int) -> None:
        """A recovery ran: every fold unknown until its row's next update (``n_rows``: the shard's
        rows now, another number after a re-placement)."""
        if self.on:
            self.folds, self.known = np.zeros(n_rows, np.uint32), np.zeros(n_rows, bool)

    def before_update(self, table: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The rows of ``rows`` (local slots) whose fold is known and no longer matches."""
        if not self.on or not rows.size:
            return rows[:0]
        self._fit(table)
        known = rows[self.known[rows]]
        return known[row_folds(table, known) != self.folds[known]]

    def after_update(self, table: np.ndarray, rows: np.ndarray) -> None:
        """``rows`` were written by the update path: fold them anew."""
        if self.on and rows.size:
            self._fit(table)
            self.folds[rows] = row_folds(table, rows)
            self.known[rows] = True

    def due(self, step: int) -> bool:
        return self.on and (step + 1) % self.every == 0

    def scan(self, table: np.ndarray) -> np.ndarray:
        """Every known row that no longer matches its fold (local slots)."""
        self._fit(table)
        return np.flatnonzero(self.known & (row_folds(table) != self.folds))

    def found(self, rows: np.ndarray) -> None:
        """``rows`` were reported: unknown until their next update (one report per corruption)."""
        self.known[rows] = False

    def _fit(self, table: np.ndarray) -> None:
        if self.folds.size != table.shape[0]:  # the shard was replaced without a recovery's notice
            self.forget(table.shape[0])


__all__ = ["SHOW_ROWS", "ShardCheck", "row_folds"]
