"""Rebuilding lost members while training goes on: degraded reads and background rounds.

Owns, on every member of ``servers`` after an ``ecrm`` recovery, the state of
the rebuild in progress: which ranks' members are lost (``lost``), on a
replacement which of its rows are rebuilt, on a replaced holder which of its
parity rows are still to re-encode, and the phase (``decode`` then ``encode``).

Invariants:

* every round is collective over ``servers`` and every member takes the same
  branches: the phase and the end of the rebuild are decided by an
  ``allreduce`` of what is left, so they change on every member at once;
* a lost row is decoded at a *consistent point*: the survivors' rows and the
  parity are at the same step (while a rebuild runs, every step commits its
  parity deltas whatever ``strategy.parity_every`` says, and they are applied
  at the end of the step instead of during the next one), and a lost row
  that is not rebuilt yet was never updated since the recovery (a row is
  decoded before it is served -- a *degraded read* -- and only served rows get
  gradients), so decoding it at any later consistent point gives its value;
* parity rows are re-encoded only once every data row is rebuilt.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.stripes import data_stripes, member_index, residue_holders, stripe_losses
from mpiec.strategies.ecrm.transfer import Job, RebuildError, collective, fetch, run_round

if TYPE_CHECKING:
    from mpiec.strategies.ecrm.member import Member

CHUNK = 1 << 17  # stripes per round inside a recovery: bounds the memory a round needs on big tables


def encode_jobs(m: Member, mode: str = "encode", lost_ranks: frozenset[int] = frozenset(),
                chunk: int = CHUNK) -> list[Job]:
    """A holder's rounds over its parity rows, from the ``k`` data members of each stripe:
    ``encode`` replaces them, ``verify`` counts the rows that differ, ``drift`` (``sum`` code)
    records how far they are from a fresh encoding (``verify`` too); stripes with a member on
    ``lost_ranks`` are skipped."""
    pl, k, S = m.pl, m.pl.k, m.pl.servers
    store = m.store
    assert store is not None  # a holder's
    jobs = []
    for residue in range(min(S, pl.n_stripes)):
        sel = np.flatnonzero((store.stripes >= 0) & (store.stripes % S == residue))
        if not sel.size or set(residue_holders(pl, residue)) & lost_ranks:
            continue
        i = int(store.members[sel[0]])
        holders = residue_holders(pl, residue)[:k]
        for start in range(0, sel.size, chunk):
            part = sel[start:start + chunk]
            st = store.stripes[part]
            wd = {holders[j]: member_index(pl, st, j) for j in range(k)}

            def finish(got_d: dict, got_p: dict, part: np.ndarray = part, i: int = i,
                       holders: list[int] = holders) -> None:
                parity = m.code.encode([got_d[h] for h in holders])[i]
                rows = np.ascontiguousarray(parity).view(np.uint8).reshape(part.size, m.width)
                if mode == "encode":
                    store.load_bytes(part, rows)
                    return
                if store.sum:
                    err = float(np.abs(store.array[part].astype(np.float64) - parity.astype(np.float64)).max(
                        initial=0.0))
                    mag = max(float(np.abs(parity).max(initial=0.0)), 1e-30)
                    m.stats["sum_drift_max_abs"] = max(m.stats["sum_drift_max_abs"], err)
                    m.stats["sum_drift_max_rel"] = max(m.stats["sum_drift_max_rel"], err / mag)
                    m.stats["sum_drift_checks"] += 1  # 0 checks: the 0.0 drift above is no measurement
                if mode == "verify":
                    m.stats["verify_mismatches"] += store.mismatches(part, rows)

            jobs.append(Job(wd, {}, finish, rows=part.size))
    return jobs


def residue_plan(pl: RowPlacement, lost: frozenset[int], carried: frozenset[int] = frozenset()
                 ) -> dict[int, tuple[list[int], list[int]]]:
    """Residue -> (holder of every member, the k members a decode reads). Raises beyond tolerance,
    naming the stripe and its lost members (``carried``: ranks lost by an earlier failure whose
    rebuild had not finished)."""
    out = {}
    losses = stripe_losses(pl, set(lost))
    S = pl.servers
    for residue in range(min(S, pl.n_stripes)):
        members = losses.get(residue, [])
        if len(members) > pl.r:
            holders = residue_holders(pl, residue)

            def name(h: int) -> str:
                who = f"server {h}" if h < S else f"parity {h - S}"
                return who + (" (still being rebuilt)" if h in carried else "")

            names = ", ".join(f"member {m} on {name(holders[m])}" for m in members)
            raise RebuildError(f"stripe {residue} (and every stripe s with s % {S} == {residue}) lost "
                               f"{len(members)} members ({names}); the code rebuilds at most r = {pl.r}")
        chosen = [x for x in range(pl.k + pl.r) if x not in members][:pl.k]  # data first: cheaper
        out[residue] = (residue_holders(pl, residue), chosen)
    return out


class Rebuilder:
    """The rebuild in progress on one member (see the module docstring); ``lost``: the
    ``servers`` ranks whose members are rebuilt, ``carried``: those of them lost by an earlier
    failure (for the error line)."""

    def __init__(self, m: Member, lost: frozenset[int], chunk: int,
                 carried: frozenset[int] = frozenset()) -> None:
        a = self.a = m
        self.lost, self.chunk = lost, max(1, int(chunk))
        pl = a.pl
        self.plan = residue_plan(pl, lost, carried)
        me = a.comm.Get_rank()
        self.decoding = me in lost and a.source is not None  # a replaced data server decodes its rows
        self.encoding = me in lost and a.store is not None
        self.phase: str | None = "decode"
        self.cursor = 0
        self.todo_rows = 0  # rows of this replacement not rebuilt yet (kept, not recounted: O(1))
        if self.decoding:
            self.stripes, self.members = data_stripes(pl, me)
            self.rebuilt = np.zeros(self.stripes.size, dtype=bool)
            self.todo_rows = self.stripes.size
        self.parts = encode_jobs(a, "encode", chunk=self.chunk) if self.encoding else []
        self.t_start = time.perf_counter()
        self.rows = self.bytes = self.reencoded = self.degraded_rows = self.rounds = 0

    # -- decode ------------------------------------------------------------------------------
    def decode(self, slots: np.ndarray) -> None:
        """Collective: a replacement decodes its local ``slots`` not rebuilt yet (others: none)."""
        a, pl, k, r = self.a, self.a.pl, self.a.pl.k, self.a.pl.r
        todo = np.empty(0, dtype=np.int64)
        if self.decoding and slots.size:
            slots = np.unique(np.asarray(slots, dtype=np.int64))
            todo = slots[~self.rebuilt[slots]]
        want: tuple[dict[int, list[np.ndarray]], ...] = ({}, {})  # per kind (data, parity): holder -> indexes
        blocks = []  # (residue part, member, kind, holder, position in the holder's list)
        for residue in np.unique(self.stripes[todo] % pl.servers) if todo.size else []:
            part = todo[self.stripes[todo] % pl.servers == residue]
            holders, chosen = self.plan[int(residue)]
            st = self.stripes[part]
            for x in chosen:
                kind = 0 if x < k else 1
                lst = want[kind].setdefault(holders[x], [])
                blocks.append((part, x, kind, holders[x], len(lst)))
                lst.append(member_index(pl, st, x))
        got = []
        for kind, width, provide in ((0, a.row_bytes, a.provide_data), (1, a.width, a.provide_parity)):
            w = {h: np.concatenate(v) for h, v in want[kind].items()}
            fetched = fetch(a.comm, w, width, provide)
            split = {}
            for h, v in want[kind].items():
                bounds = np.cumsum([x.size for x in v])[:-1]
                split[h] = np.split(fetched[h], bounds)
                self.bytes += fetched[h].nbytes
            got.append(split)
        if not todo.size:
            return
        table = a.table_bytes()
        by_part: dict[int, tuple[np.ndarray, list, list]] = {}
        for part, x, kind, h, pos in blocks:
            key = id(part)
            if key not in by_part:
                by_part[key] = (part, [None] * k, [None] * r)
            rows = got[kind][h][pos]
            if kind == 0:
                by_part[key][1][x] = rows
            else:
                by_part[key][2][x - k] = a.parity_rows(rows)
        for part, data, par in by_part.values():
            m = int(self.members[part[0]])
            (rows,) = a.code.decode(data, par, [m])
            table[part] = rows
            self.rebuilt[part] = True
            self.rows += part.size
            self.todo_rows -= part.size

    def degraded(self, slots: np.ndarray | None) -> None:
        """Collective, at a pull while rows are still lost: decode the requested ones first."""
        if self.phase != "decode":
            return
        before = self.rows
        self.decode(slots if slots is not None and self.decoding else np.empty(0, np.int64))
        self.degraded_rows += self.rows - before

    # -- background rounds ------------------------------------------------------------------------
    def left(self) -> tuple[int, int]:
        return self.todo_rows, len(self.parts) if self.encoding else 0

    def step(self, rows: int | None = None) -> bool:
        """Collective: one background round (``rows`` rows to decode, default ``chunk``); False
        once everything is rebuilt -- decided in the round that does the last work, not one round
        later, so a member whose last rows are rebuilt no longer counts as lost to a failure
        that follows (a later failure takes it for lost again only while work is really left)."""
        a = self.a
        idx = np.empty(0, dtype=np.int64)
        if self.decoding and self.todo_rows:
            want, end = rows or self.chunk, self.cursor
            found: list[np.ndarray] = []
            while end < self.rebuilt.size and sum(x.size for x in found) < want:
                start, end = end, min(self.rebuilt.size, end + 2 * want)  # a window, not the shard
                found.append(np.flatnonzero(~self.rebuilt[start:end]) + start)
            idx = np.concatenate(found or [np.empty(0, np.int64)])[:want]
        todo, parts = self.left()
        # what is left now, after a decode round, after an encode round (every member alike)
        mine = np.array([todo, parts, todo - idx.size, parts, todo, max(parts - 1, 0)], dtype=np.int64)
        left = np.empty(6, dtype=np.int64)
        with collective("ecrm rebuild progress"):
            a.comm.Allreduce(mine, left, op=MPI.MAX)
        self.rounds += 1
        if left[0] > 0:
            if idx.size:
                self.cursor = int(idx[-1]) + 1
            self.decode(idx)
            after = left[2:4]
        elif left[1] > 0:
            self.phase = "encode"  # every data row is rebuilt: the lost parity rows can be encoded
            job = self.parts.pop(0) if self.parts else None
            self.bytes += run_round(self.a, job)
            self.reencoded += job.rows if job is not None else 0
            after = left[4:6]
        else:
            after = left[0:2]
        if after.any():
            return True
        self.phase = None
        return False

    def finish(self) -> None:
        """Collective: everything left, in big rounds (inside a recovery, or after the last step)."""
        while self.step(max(self.chunk, 1 << 17)):
            pass
