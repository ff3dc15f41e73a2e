"""Differential checkpoint chains (Check-N-Run): what a server tracks, writes and restores.

A server's chain is a *baseline* (every row of its shard) followed by *diffs* (rows changed
since the baseline, ``one-shot``, or since the previous checkpoint, ``consecutive``). Each
checkpoint's manifest names every server part's link in ``meta[CHAIN_META]["parts"][part]``
(``kind``, ``prev``: the checkpoint it is relative to, ``baseline``, ``rows``, ``sizes``: the
diff sizes since the baseline), so a restore follows the links back to a baseline.

* ``ChainTracker``: a server's modified-row bitsets (since the last checkpoint, since the
  baseline) and its position in the chain; decides baseline or diff and selects the rows;
* the parts themselves are written by ``writer.PartWriter`` (``save_snapshot``: the rows the
  tracker selected, copied by the caller; ``on_written``: the chain word before the part's);
* ``chain_of`` / ``chain_members`` / ``load_chains``: a chain from the manifests, the members
  every kept checkpoint needs, and a shard loaded from its chains.

Invariants: every row of a shard is in each baseline; each row changed since the baseline is
in the chain's diffs (a snapshot discarded by a recovery, or a failed write, breaks the chain:
the server's next checkpoint is a baseline); the messages of a written part are sent in the
epoch it was written in only, the chain word before the part's (the coordinator commits on the
last part, and needs every link by then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mpiec.kernels import tracking
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore

if TYPE_CHECKING:
    from mpiec.strategies.api.env import ShardState

CHAIN_META = "cnr"  # the manifest ``meta`` key holding the chain links


def intermittent_rebaseline(sizes: list[float]) -> bool:
    """Check-N-Run's intermittent rule: with ``sizes = [S_1, …, S_i]`` (the diffs since the
    baseline relative to a full checkpoint, ``S_i`` the one due now), take a new baseline when
    ``1 + S_1 + … + S_i ≤ (i + 1) · S_i``: the checkpoint due now would cost at least what
    a baseline plus the diffs so far cost per checkpoint on average."""
    if not sizes:
        return False
    return 1.0 + float(sum(sizes)) <= (len(sizes) + 1) * float(sizes[-1])


def chain_of(store: CheckpointStore, step: int, part: str) -> list[tuple[int, str]]:
    """``[(step, kind), …]`` to apply in order to restore ``part`` as of checkpoint ``step``:
    a baseline, then the diffs on top (``consecutive``: every one since the baseline).
    ``CheckpointError`` naming the member whose manifest is missing or says no chain."""
    out: list[tuple[int, str]] = []
    s = step
    while True:
        try:
            entry = store.manifest(s)["meta"][CHAIN_META]["parts"][part]
            kind, prev = str(entry["kind"]), int(entry["prev"])
        except CheckpointError as exc:
            raise CheckpointError(f"chain of step {step} ({part}) needs checkpoint {s}: {exc}") from None
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{store.step_dir(s)}: no Check-N-Run chain for {part} in its "
                                  "manifest (not a cnr checkpoint)") from None
        out.append((s, kind))
        if kind == "baseline":
            return out[::-1]
        if prev >= s or len(out) > 100000:
            raise CheckpointError(f"{store.step_dir(s)}: {part}'s chain link to step {prev} is invalid")
        s = prev


def chains(store: CheckpointStore, step: int) -> dict[str, list[tuple[int, str]]]:
    """Every server part's chain of complete checkpoint ``step``."""
    parts = store.manifest(step)["parts"]
    return {p: chain_of(store, step, p) for p in parts if p.startswith("server-")}


def chain_members(store: CheckpointStore, kept: Iterable[int]) -> set[int]:
    """The checkpoints the ``kept`` ones need (every member of their chains); a broken chain is
    never restored from, so its members are not needed for it."""
    needed: set[int] = set()
    for s in kept:
        try:
            needed |= {m for chain in chains(store, s).values() for m, _ in chain}
        except CheckpointError:
            continue
    return needed


def load_chains(store: CheckpointStore, step: int, parts: list[str], role: ShardState,
                decode: Callable[[dict[str, np.ndarray], dict[str, Any]], np.ndarray]) -> np.ndarray:
    """Load the chains of ``parts`` of checkpoint ``step`` into ``role`` (each baseline, then its
    diffs, rows by global id; ``decode(arrays, meta)`` gives a part's float32 rows from its arrays
    and its checkpoint's ``meta[CHAIN_META]``). Returns the mask of the shard's slots loaded from a
    diff. ``CheckpointError`` naming the unusable member, or when the baselines miss rows."""
    shard = role.shard
    changed = np.zeros(shard.table.shape[0], dtype=bool)  # rows in the diffs: since the baseline
    loaded = 0
    for part in parts:
        chain = chain_of(store, step, part)
        for m, kind in chain:
            try:
                arrays = store.read_part(m, part)
                table = decode(arrays, store.manifest(m)["meta"][CHAIN_META])
            except (CheckpointError, KeyError, ValueError) as exc:
                what = ", ".join(f"{k} {s}" for s, k in chain)
                raise CheckpointError(f"corrupted chain: {kind} {m} of checkpoint {step} "
                                      f"({what}) is unusable: {exc}") from None
            n = role.load_rows(arrays["global_rows"], table)
            if kind == "baseline":
                loaded += n
            else:
                changed |= np.isin(shard.global_rows, arrays["global_rows"])
    if loaded != role.n_rows():
        raise CheckpointError(f"the baselines of checkpoint {step} hold {loaded} of this server's "
                              f"{role.n_rows()} rows")
    return changed


class ChainTracker:
    """A server's rows changed since its last checkpoint and since its baseline, and its place in
    the chain: ``base`` (its baseline, −1: none, the next checkpoint is one), ``prev`` (its newest
    checkpoint) and ``sizes`` (``S_1..S_i`` of the diffs since the baseline)."""

    def __init__(self, n_slots: int, diff: str) -> None:
        self.diff = diff
        self.since_last = tracking.bitset_new(n_slots)
        self.since_base = tracking.bitset_new(n_slots)
        self.base = self.prev = -1
        self.sizes: list[float] = []

    def track(self, slots: np.ndarray) -> None:
        """Rows ``slots`` were updated."""
        tracking.bitset_set(self.since_last, slots)
        tracking.bitset_set(self.since_base, slots)

    def changed_since_base(self) -> int:
        return int(tracking.bitset_count(self.since_base))

    def next_kind(self, size: float) -> tuple[str, float]:
        """Baseline or diff now, and its size relative to a full checkpoint (``size``: the diff's,
        the same on every server)."""
        if self.base < 0:
            return "baseline", 1.0
        if self.diff == "intermittent" and intermittent_rebaseline(self.sizes + [size]):
            return "baseline", 1.0
        return "diff", size

    def take(self, step: int, size: float, global_rows: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Checkpoint ``step`` starts: the local slots it holds, and its link (``kind``, ``prev``,
        ``baseline``, ``size``, ``sizes``); the tracking moves on as if it were written."""
        kind, size = self.next_kind(size)
        if kind == "baseline":
            slots = np.flatnonzero(global_rows >= 0)
        else:
            # the set rows that are real (padding slots have global id -1), in one pass
            since = self.since_last if self.diff == "consecutive" else self.since_base
            slots = tracking.bitset_rows_kept(since, global_rows)
        prev = self.prev if self.diff == "consecutive" or kind == "baseline" else self.base
        link = {"kind": kind, "prev": step if kind == "baseline" else prev,
                "baseline": step if kind == "baseline" else self.base, "size": size,
                "sizes": [] if kind == "baseline" else self.sizes + [size]}
        tracking.bitset_clear(self.since_last)
        if kind == "baseline":
            tracking.bitset_clear(self.since_base)
            self.base, self.sizes = step, []
        else:
            self.sizes = self.sizes + [size]
        self.prev = step
        return slots, link

    def break_chain(self) -> None:
        """A checkpoint of the chain will never be restored: the next one is a baseline."""
        self.base = -1

    def restart(self) -> None:
        """The shard holds rows no chain has (the initial state, or another placement's)."""
        tracking.bitset_clear(self.since_last)
        tracking.bitset_clear(self.since_base)
        self.base, self.prev, self.sizes = -1, -1, []

    def resumed(self, step: int, link: Mapping[str, Any] | None, changed: np.ndarray) -> None:
        """The shard was restored from checkpoint ``step``, this server's ``link`` of it (None:
        not this server's chain), ``changed`` the slots loaded from its diffs: the tracking as
        right after writing it."""
        if not link:
            self.restart()
            return
        tracking.bitset_clear(self.since_last)
        tracking.bitset_clear(self.since_base)
        tracking.bitset_set(self.since_base, np.flatnonzero(changed))
        self.base, self.prev, self.sizes = int(link["baseline"]), step, list(link["sizes"])


__all__ = ["CHAIN_META", "ChainTracker", "chain_members",
           "chain_of", "chains", "intermittent_rebaseline", "load_chains"]
