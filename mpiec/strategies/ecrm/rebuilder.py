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

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from mpiec.kernels.codes import GFCode
from mpiec.kernels.gf256 import gf_mat_inv, gf_matmul
from mpiec.kernels.rebuild import combine_into, pending_rows
from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.scrub import syndromes
from mpiec.strategies.ecrm.stripes import member_index, residue_holders, stripe_losses
from mpiec.strategies.ecrm.transfer import Job, RebuildError, fetch_rows

if TYPE_CHECKING:
    from mpiec.strategies.ecrm.member import Member

CHUNK = 1 << 17  # stripes per round inside a recovery: bounds the memory a round needs on big tables


def encode_jobs(m: Member, mode: str = "encode", lost_ranks: frozenset[int] = frozenset(),
                chunk: int = CHUNK, within: np.ndarray | None = None) -> list[Job]:
    """A holder's rounds over its parity rows (``within``: only the slots of this mask), from the
    ``k`` data members of each stripe: ``encode`` replaces them, ``verify`` counts the rows that
    differ (and keeps their syndromes, ``Member.found``), ``drift`` (``sum`` code) records how far
    they are from a fresh encoding (``verify`` too); stripes with a member on ``lost_ranks`` are
    skipped."""
    pl, k, S = m.pl, m.pl.k, m.pl.servers
    store = m.store
    assert store is not None  # a holder's
    jobs = []
    for residue in range(min(S, pl.n_stripes)):
        used = (store.stripes >= 0) & (store.stripes % S == residue)
        sel = np.flatnonzero(used if within is None else used & within)
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
                    if not store.sum:  # what the scrub locates from (``scrub``)
                        m.found.extend(syndromes(store.stripes[part], i, store.as_bytes(part), rows))

            jobs.append(Job(wd, {}, finish, rows=part.size))
    return jobs


def class_index(pl: RowPlacement, q: np.ndarray, residue: int, x: int) -> np.ndarray:
    """``stripes.member_index`` of member ``x`` for stripes ``q * S + residue`` of one residue
    class (every stripe of a class keeps a member at the same offset of its holder's block:
    data slot ``q * k + D``, parity slot ``q * r + P``, dedicated parity ``q * S + residue``)."""
    first = member_index(pl, np.array([residue], dtype=np.int64), x)[0]  # q = 0
    if x < pl.k:
        return q * pl.k + first
    if pl.dedicated_parity:
        return q * pl.servers + first
    return q * pl.r + first


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
    failure (for the error line).

    A round -- a degraded read, a background round, the decode inside the recovery -- is one
    fetch: the rebuilding member asks each surviving holder for the rows of the ``k`` chosen
    members of the stripes it rebuilds (index arrays computed by whole arrays per residue class;
    a parity row asked as ``-1 - slot``), every holder answers from its table or parity array in
    one kernel pass (``kernels.rebuild.take_rows``), and the rows come back in one receive buffer
    in which each (residue class, member) is a contiguous block: the rebuilding member forms each
    lost row from those blocks and writes it in place, marking it done, in one kernel pass
    (``kernels.rebuild.combine_into``; ``sum``: its own decode). No Python per row."""

    def __init__(self, m: Member, lost: frozenset[int], chunk: int,
                 carried: frozenset[int] = frozenset(), *, decode_for: int | None = None,
                 into: np.ndarray | None = None) -> None:
        """``decode_for``, ``into``: this member decodes the data rows of lost server ``decode_for``
        into ``into`` (uint8 ``[its local slots, row bytes]``) instead of its own (a shrink's
        ``handover``: the rows have no replacement to go to); it re-encodes nothing."""
        a = self.a = m
        self.lost, self.chunk = lost, max(1, int(chunk))
        pl = a.pl
        self.plan = residue_plan(pl, lost, carried)
        me = a.comm.Get_rank()
        # a replaced data server decodes its rows (or a survivor another's, ``decode_for``)
        self.decoding = decode_for is not None or (me in lost and a.source is not None)
        self.encoding = decode_for is None and me in lost and a.store is not None
        self.into = into
        target = me if decode_for is None else decode_for
        S = pl.servers
        # Decode while a lost member holds data rows (a server: ranks below S of ``servers``). Lost
        # dedicated parity ranks alone have none: the first round re-encodes already. (It started
        # with an empty decode round, so a parity rank's re-encode ended one round later: a server
        # killed the step after the recovery found the parity still "being rebuilt", its stripes
        # beyond r, and the run was lost when the parity kill fired a step late or the rounds were
        # paced apart on a loaded machine, issue 36 item 7.) Every member decides alike: ``lost``
        # is the plan's.
        self.phase: str | None = "decode" if decode_for is not None or any(h < S for h in lost) else "encode"
        self.cursor = 0
        self.todo_rows = 0  # rows of this replacement not rebuilt yet (kept, not recounted: O(1))
        self.gf = isinstance(a.code, GFCode)
        self.widths = sorted({a.row_bytes, a.width})  # one fetch per width, on every member alike
        self.coefs: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        if self.decoding:
            self.stripes, self.members = pl.data_stripes(target)
            self.res = self.stripes % S
            self.rebuilt = np.zeros(self.stripes.size, dtype=bool)
            self.seen = np.zeros(self.stripes.size, dtype=bool)  # scratch of ``pending_rows``
            self.todo_rows = self.stripes.size
        self.enc_slots = np.empty(0, dtype=np.int64)  # parity slots to re-encode, in slot order
        if self.encoding:
            store = a.store
            assert store is not None
            self.enc_slots = np.flatnonzero(store.stripes >= 0).astype(np.int64)
        self.enc_cursor = 0
        self.status = np.zeros(2, dtype=np.int64)  # the last round's gathered status (max over members)
        self.round_cpu = 0.0  # this member's CPU in its last background round (seconds)
        self.round_cpu_all = 0.0  # every member's, summed, of the round before (gathered)
        self.gap = 1  # steps to the next background round, agreed in the last one
        self.t_start = time.perf_counter()
        self.rows = self.bytes = self.reencoded = self.degraded_rows = self.rounds = 0
        # thread CPU seconds of this member's rebuild work: asking (index arrays), the fetch
        # (its collectives and answering the others), forming and installing rows; per phase
        self.cpu = {"plan": 0.0, "fetch": 0.0, "install": 0.0}
        self.cpu_phase = {"decode": 0.0, "encode": 0.0}
        self.cpu_degraded = 0.0  # of which in degraded reads (every pull while rows are lost)

    def coef(self, target: int, chosen: tuple[int, ...]) -> np.ndarray:
        """GF coefficients of member ``target`` over the members ``chosen`` (one row, k bytes)."""
        key = (target, chosen)
        if key not in self.coefs:
            code = self.a.code
            assert isinstance(code, GFCode)
            g = code.generator
            inv = gf_mat_inv(np.ascontiguousarray(g[np.array(chosen)]))
            self.coefs[key] = np.ascontiguousarray(gf_matmul(g[[target]], inv)[0], dtype=np.uint8)
        return self.coefs[key]

    # -- one round: ask, fetch, form and install -------------------------------------------------
    def gather(self, tasks: list[tuple[np.ndarray, np.ndarray, int, int, list[int], list[int]]],
               status: np.ndarray | None = None) -> list:
        """Collective: the rows every task needs, fetched. A task is (destination slots, their
        stripes' ``stripe // S``, the stripes' residue class, the member they are, the holders of
        every member, the k members to read). Returns per task its k source blocks as (width,
        buffer, first row)."""
        a, pl, k = self.a, self.a.pl, self.a.pl.k
        t0 = time.thread_time()
        want: dict[int, dict[int, list[np.ndarray]]] = {w: {} for w in self.widths}
        fill: dict[int, dict[int, int]] = {w: {} for w in self.widths}
        where = []
        for slots, q, residue, _target, holders, chosen in tasks:
            blocks = []
            for x in chosen:
                h = holders[x]
                w = a.row_bytes if x < k else a.width
                idx = class_index(pl, q, residue, x)
                if x >= k:
                    idx = -1 - idx
                want[w].setdefault(h, []).append(idx)
                pos = fill[w].get(h, 0)
                fill[w][h] = pos + slots.size
                blocks.append((w, h, pos))
            where.append(blocks)
        t1 = time.thread_time()
        got = {}
        received = 0
        for i, w in enumerate(self.widths):
            ask = {h: np.concatenate(v) for h, v in want[w].items()}
            back, starts, left = fetch_rows(a.comm, ask, w, functools.partial(a.provide_rows, width=w),
                                            status if i == 0 else None)
            if i == 0:
                self.status = left[:, :2].max(axis=0)
                self.round_cpu_all = float(left[:, 2].sum()) * 1e-9
                self.gap = max(int(left[:, 3].max()), 1)
            got[w] = (back, starts)
            received += back.nbytes
        self.bytes += received
        t2 = time.thread_time()
        self.cpu["plan"] += t1 - t0
        self.cpu["fetch"] += t2 - t1
        return [[(w, got[w][0], got[w][1][h] + pos) for w, h, pos in blocks] for blocks in where]

    def form(self, dst: np.ndarray, slots: np.ndarray, target: int, chosen: list[int], blocks: list,
             done: np.ndarray | None, install: Callable[[np.ndarray, np.ndarray], None]) -> None:
        """Member ``target`` of the stripes of ``slots`` from the fetched ``blocks`` of the members
        ``chosen``, written to ``dst[slots]`` (GF: in place; ``sum``: by ``install``)."""
        a, k, n = self.a, self.a.pl.k, slots.size
        if self.gf and len({id(b) for _, b, _ in blocks}) == 1:
            offs = np.array([first for _, _, first in blocks], dtype=np.int64)
            combine_into(self.coef(target, tuple(chosen)), blocks[0][1], offs, dst, slots, done)
            return
        rows = [b[first:first + n] for _, b, first in blocks]
        if target >= k:  # a parity member: encode from the k data members
            parity = a.code.encode(rows)[target - k]
            install(slots, np.ascontiguousarray(parity).view(np.uint8).reshape(n, -1))
            return
        data: list[np.ndarray | None] = [None] * k
        par: list[np.ndarray | None] = [None] * a.pl.r
        for x, r_ in zip(chosen, rows, strict=True):
            if x < k:
                data[x] = r_
            else:
                par[x - k] = a.parity_rows(r_)
        (out,) = a.code.decode(data, par, [target])
        install(slots, out)
        if done is not None:
            done[slots] = True

    # -- decode ------------------------------------------------------------------------------
    def decode(self, slots: np.ndarray, unique: bool = False, status: np.ndarray | None = None) -> None:
        """Collective: a replacement decodes its local ``slots`` not rebuilt yet (others: none);
        ``unique``: ``slots`` are sorted and unique already (a background round's); ``status``:
        what this member has left after the round (gathered into ``self.status``)."""
        a, pl = self.a, self.a.pl
        t0 = time.thread_time()
        tasks = []
        if self.decoding and slots.size:
            if unique:
                todo = slots[~self.rebuilt[slots]]
            else:  # a pull's rows: most are rebuilt; the others once each, in one pass
                todo = pending_rows(slots, self.rebuilt, self.seen)
            if todo.size:
                res = self.res[todo]
                present = np.flatnonzero(np.bincount(res, minlength=pl.servers))
                for residue in present.tolist():
                    part = todo if present.size == 1 else todo[res == residue]
                    holders, chosen = self.plan[residue]
                    # my data slot of stripe q * S + residue is q * k + (its offset in the block)
                    tasks.append((part, part // pl.k, residue, int(self.members[part[0]]), holders,
                                  chosen))
        self.cpu["plan"] += time.thread_time() - t0
        blocks = self.gather(tasks, status)
        if not tasks:
            self.cpu_phase["decode"] += time.thread_time() - t0
            return
        t1 = time.thread_time()
        table = self.into if self.into is not None else a.table_bytes()

        def install(part: np.ndarray, rows: np.ndarray) -> None:
            table[part] = rows

        for (part, _, _, target, _, chosen), blk in zip(tasks, blocks, strict=True):
            self.form(table, part, target, chosen, blk, self.rebuilt, install)
            self.rows += part.size
            self.todo_rows -= part.size
        t2 = time.thread_time()
        self.cpu["install"] += t2 - t1
        self.cpu_phase["decode"] += t2 - t0

    def degraded(self, slots: np.ndarray | None) -> None:
        """Collective, at a pull while rows are still lost: decode the requested ones first."""
        if self.phase != "decode":
            return
        before, t0 = self.rows, time.thread_time()
        self.decode(slots if slots is not None and self.decoding else np.empty(0, np.int64))
        self.degraded_rows += self.rows - before
        self.cpu_degraded += time.thread_time() - t0

    # -- re-encode a lost holder's parity rows -------------------------------------------------
    def encode(self, n: int, status: np.ndarray | None = None) -> int:
        """Collective: this member re-encodes its next ``n`` parity rows (others: none); returns
        the rows re-encoded."""
        a, pl, k = self.a, self.a.pl, self.a.pl.k
        t0 = time.thread_time()
        tasks = []
        part = self.enc_slots[self.enc_cursor:self.enc_cursor + n]
        store = a.store
        if part.size:
            assert store is not None
            stripes = store.stripes[part]
            res = stripes % pl.servers
            present = np.flatnonzero(np.bincount(res, minlength=pl.servers))
            for residue in present.tolist():
                sel = part if present.size == 1 else part[res == residue]
                st = stripes if present.size == 1 else stripes[res == residue]
                target = k + int(store.members[sel[0]])
                tasks.append((sel, st // pl.servers, residue, target, residue_holders(pl, residue),
                              list(range(k))))
        self.cpu["plan"] += time.thread_time() - t0
        blocks = self.gather(tasks, status)
        t1 = time.thread_time()
        if tasks:
            assert store is not None
            dst = store.array.view(np.uint8).reshape(store.array.shape[0], a.width)
            for (sel, _, _, target, _, chosen), blk in zip(tasks, blocks, strict=True):
                self.form(dst, sel, target, chosen, blk, None, store.load_bytes)
        self.enc_cursor += part.size
        self.reencoded += part.size
        t2 = time.thread_time()
        self.cpu["install"] += t2 - t1
        self.cpu_phase["encode"] += t2 - t0
        return int(part.size)

    # -- background rounds ------------------------------------------------------------------------
    def left(self) -> tuple[int, int]:
        """(data rows to decode, parity rows to re-encode) on this member."""
        return self.todo_rows, int(self.enc_slots.size - self.enc_cursor)

    def step(self, rows: int | None = None, gap: int = 1) -> bool:
        """Collective: one background round (``rows`` rows to decode or re-encode, default
        ``chunk``); False once everything is rebuilt -- decided in the round that does the last
        work, not one round later, so a member whose last rows are rebuilt no longer counts as
        lost to a failure that follows (a later failure takes it for lost again only while work
        is really left). What every member has left after the round travels with the round's
        fetch (``fetch_rows``' status), so a round is one gather of counts and, when rows move,
        two all-to-alls; the phase of the next round (decode while any data row is left, then
        re-encode) follows from it on every member alike."""
        want = rows or self.chunk
        idx = np.empty(0, dtype=np.int64)
        n_enc = 0
        todo, enc = self.left()
        if self.phase == "decode" and self.decoding and self.todo_rows:
            end = self.cursor
            found: list[np.ndarray] = []
            got = 0
            while end < self.rebuilt.size and got < want:
                start, end = end, min(self.rebuilt.size, end + 2 * want)  # a window, not the shard
                found.append(np.flatnonzero(~self.rebuilt[start:end]) + start)
                got += found[-1].size
            idx = np.concatenate(found or [np.empty(0, np.int64)])[:want]
        elif self.phase == "encode" and self.encoding:
            n_enc = min(want, enc)
        # left after this round; the CPU this member spent in the previous round (ns); the steps
        # this member asks to wait before the next round (the maximum is every member's ``gap``)
        status = np.array([todo - idx.size, enc - n_enc, int(self.round_cpu * 1e9), gap], dtype=np.int64)
        t0 = time.thread_time()
        self.rounds += 1
        if self.phase == "decode":
            if idx.size:
                self.cursor = int(idx[-1]) + 1
            self.decode(idx, unique=True, status=status)
        else:
            self.encode(n_enc, status=status)
        self.round_cpu = time.thread_time() - t0
        left = self.status
        if left[0] > 0:
            return True
        if left[1] > 0:
            self.phase = "encode"  # every data row is rebuilt: the lost parity rows can be encoded
            return True
        self.phase = None
        return False

    def finish(self) -> None:
        """Collective: everything left, in big rounds (inside a recovery, or after the last step)."""
        while self.step(max(self.chunk, 1 << 17)):
            pass

    def finish_decode(self) -> None:
        """Collective: every lost data row, in big rounds (``rebuild = "data"``, inside the
        recovery); the parity rows are left to the background rounds. The phase follows from the
        status every round gathers, so every member leaves the loop in the same round."""
        while self.phase == "decode" and self.step(max(self.chunk, 1 << 17)):
            pass
