"""The per-step parity delta exchange of ``ecrm`` over the ``servers`` communicator.

Owns the wire protocol between data servers (sources) and parity holders, and
the sources' retained outgoing deltas. Per step ``s`` every member of
``servers`` (servers and dedicated parity ranks) posts, in this order:

1. ``post(s)``: an ``Ialltoall`` of row counts per holder -- on a server right
   after its apply of ``s`` (``after_apply``), on a parity rank at its step ``s``;
2. ``advance()``: the ``Ialltoallv`` of the delta rows of ``s``, posted while the
   trainers compute step ``s + 1`` (the servers' ``overlap`` point: rows of
   ``s + 1`` sent, gradients awaited); it progresses while the servers wait for
   their other messages (any MPI call drives it), nobody spins on it;
3. ``poll()``: a holder applies the exchanges that completed, in step order,
   at the next hooks; one still pending at ``overlap`` of ``s + 2`` is waited
   for there, so at most two steps are in flight. After the last step, before
   an online verification and while a rebuild runs, members ``drain()`` at the
   end of the step instead.

With batched commits (``strategy.parity_every = N > 1``) only *commit* steps
exchange anything: the same three calls, for the commit steps only, each
carrying the delta of the rows updated since the previous commit
(``window.CommitWindow``); every member decides which steps commit by the same
rule (``member.Member.commit_now``), so the collectives still match.

The per-row work is numba (``kernels.parity``): ``stage`` routes and packs a step's rows in one
counting sort (``route_pack``, on the placement's ``Routing`` tables), a holder applies the
receive buffer as it arrived (``ParityStore.apply``: ``gf_apply_wire``); the Python around them is a
fixed number of operations per step, not per row (in a run each costs microseconds on a cold core).

Invariants: every member posts the same steps' exchanges in the same order (so
the nonblocking collectives match; completion order is free); a holder applies
a step only once it received every source's deltas of it, and steps in order;
a holder has applied ``s`` at the latest at ``overlap`` of ``s + 2``, so a
recovery finds every holder within two steps of the committed step (with
``N > 1``: at the last commit at or before it, or a later one). Sources keep
their outgoing deltas (commits) of the last ``keep`` steps, each with the version it
starts from (``Outgoing.base``), and the newest windowed commit with the rows
as they were at its base (``Outgoing.old``): recovery resends, as a chain of
commits (``chain``), what a holder misses.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
from mpi4py import MPI

from mpiec.comm import guard, wait
from mpiec.kernels.parity import WORD, gf_apply_wire, gf_apply_words, route_pack, wire_words
from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.parity import Deltas, ParityStore
from mpiec.strategies.ecrm.stripes import member_holder, member_index


@dataclass
class Outgoing:
    """A source's deltas of one step, sorted by destination holder, as they travel: one
    uint8 row per delta, ``[int64 word | payload]`` (one message per holder, not two)."""

    dest: np.ndarray  # int64 [n]
    wire: np.ndarray  # uint8 [n, 8 + width]
    counts: np.ndarray  # int64 [size]: rows per holder
    base: int = -1  # the version (commit step) these deltas start from
    # batched commits, newest one only: (local slots, their rows at ``base``), so a recovery that
    # undoes this commit (its step is past the committed one) can send the delta from ``base``
    old: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def words(self) -> np.ndarray:
        return words_of(self.wire)

    @property
    def payload(self) -> np.ndarray:
        return self.wire[:, 8:]

    @property
    def nbytes(self) -> int:
        return self.dest.nbytes + self.wire.nbytes + (sum(a.nbytes for a in self.old) if self.old else 0)


def words_of(wire: np.ndarray) -> np.ndarray:
    return wire_words(wire)


@dataclass(frozen=True)
class Routing:
    """Where the parity members of a placement's stripes live, one entry per residue class
    (``stripe % S``; ``stripes.py``: a class's members are all on the same holders): parity member
    ``i`` of stripe ``s`` is on ``holder[i, s % S]`` at slot ``(s // S) * mul + base[i, s % S]``.
    Built once per placement, so staging a step does no per-row placement arithmetic in numpy."""

    holder: np.ndarray  # int64 [r, S]: ``servers`` rank
    base: np.ndarray  # int64 [r, S]: parity slot of the class's first stripe
    mul: int  # parity slots per class and rotation

    @classmethod
    def of(cls, pl: RowPlacement) -> Routing:
        found = _ROUTES.get(pl)
        if found is None:
            S = pl.servers
            res = np.arange(S, dtype=np.int64)
            holder = np.array([member_holder(pl, res, pl.k + i) for i in range(pl.r)], np.int64)
            base = np.array([member_index(pl, res, pl.k + i) for i in range(pl.r)], np.int64)
            # slots are linear in the rotation (``RowPlacement.parity_slot``): the step per rotation
            mul = int(member_index(pl, np.array([S]), pl.k)[0] - base[0, 0]) if pl.r else 0
            found = _ROUTES[pl] = cls(holder.reshape(pl.r, S), base.reshape(pl.r, S), mul)
        return found


def warm_kernels(width: int) -> None:
    """Load (numba cache) or compile the pipeline's kernels on a few rows."""
    rt = Routing.of(RowPlacement(8, 2, 1, 1))
    rows = np.arange(2, dtype=np.int64)
    _, wire, _ = route_pack(rows, np.zeros((2, width), np.uint8), 1, rt.holder, rt.base, rt.mul, 2)
    coef = np.ones((1, 1), np.uint8)
    parity = np.zeros((8, width), np.uint8)
    gf_apply_wire(parity, wire, coef)
    gf_apply_words(parity, wire_words(wire), wire[:, WORD:], coef)


_ROUTES: weakref.WeakKeyDictionary[RowPlacement, Routing] = weakref.WeakKeyDictionary()


def build_outgoing(pl: RowPlacement, global_rows: np.ndarray, payload: np.ndarray, size: int) -> Outgoing:
    """Route the deltas of a source's updated rows (global ids) to the holders of every parity member
    (one kernel pass: ``kernels.parity.route_pack``)."""
    rt = Routing.of(pl)
    dest, wire, counts = route_pack(global_rows, payload, pl.k, rt.holder, rt.base, rt.mul, size)
    return Outgoing(dest, wire, counts)


def _test(req: MPI.Request, step: int) -> bool:
    """``req.Test()`` with ``guard``'s translation of a peer failure, without entering a context
    manager on the way that succeeds (the common one, several times a step)."""
    try:
        return bool(req.Test())
    except MPI.Exception:
        with guard(f"parity deltas of step {step}", nonblocking_collective=True):
            raise
    return False  # not reached: guard raises PeerFailure or re-raises


class DeltaPipeline:
    def __init__(self, comm_of: object, pl: RowPlacement, store: ParityStore | None, width: int,
                 keep: int = 3) -> None:
        self.comm_of = comm_of  # callable: the current ``servers`` communicator (rebuilt on recovery)
        self.pl, self.store, self.width, self.keep = pl, store, width, keep
        self.outgoing: dict[int, Outgoing] = {}
        # in step order: [step, send counts, receive counts, request, receive buffer once posted]
        self.pending: list[list] = []
        self.bytes_sent = 0
        self.rows_sent = 0
        self.seconds_stage = 0.0  # on the critical path (after the apply)
        self.seconds_drain = 0.0  # overlapped with the trainers' compute
        # the same sections on this thread's CPU clock: the wall times include waiting for peers,
        # the CPU times are the parity work itself (what dedicated cores would have to absorb)
        self.cpu_stage = 0.0
        self.cpu_drain = 0.0
        self.peak_retained = 0
        self.route = Routing.of(pl)
        # one wire row as one MPI element: counts and displacements in rows, as the buffers hold them
        self.row_type = MPI.BYTE.Create_contiguous(WORD + width).Commit()
        self.nothing = np.empty((0, WORD + width), np.uint8)  # what a member with nothing staged sends
        warm_kernels(width)  # loaded now, not billed to the first step's stage and drain

    @property
    def comm(self) -> MPI.Intracomm:
        return self.comm_of()  # type: ignore[operator]

    def stage(self, step: int, global_rows: np.ndarray, payload: np.ndarray, base: int | None = None,
              old: tuple[np.ndarray, np.ndarray] | None = None, window_bytes: int = 0) -> None:
        """Source: keep the deltas of ``step`` for the holders (the next ``post`` sends them):
        the rows' change since version ``base`` (default ``step - 1``); ``old``: see ``Outgoing``."""
        t0, c0 = time.perf_counter(), time.thread_time()
        rt = self.route
        out = Outgoing(*route_pack(global_rows, payload, self.pl.k, rt.holder, rt.base, rt.mul,
                                   self.comm.Get_size()))
        out.base = step - 1 if base is None else base
        if old is not None:
            for o in self.outgoing.values():
                o.old = None  # only the newest commit can be past a committed step
            out.old = old
        self.outgoing[step] = out
        for s in [s for s in self.outgoing if s <= step - self.keep]:  # the last ``keep`` steps
            del self.outgoing[s]
        self.note_retained(window_bytes)
        self.seconds_stage += time.perf_counter() - t0
        self.cpu_stage += time.thread_time() - c0

    def note_retained(self, window_bytes: int = 0) -> None:
        """Peak of what this source keeps: outgoing commits plus the open window's old rows."""
        self.peak_retained = max(self.peak_retained,
                                 sum(o.nbytes for o in self.outgoing.values()) + window_bytes)

    def chain(self, since: int, upto: int, tail: object) -> list[tuple[int, Outgoing]]:
        """Source, in a recovery (its rows at ``upto``): the kept commits that take a holder's
        contribution from version ``since`` to ``upto``, as ``(version reached, deltas)``.
        ``tail(base, slots, old)`` builds the last piece from the rows' bytes at ``base`` when
        ``upto`` is not a commit (the open window, or a commit past ``upto`` that reconciliation
        undid); ``old`` None: the open window's. Raises ``LookupError`` when a piece is gone."""
        out, v = [], since
        items = sorted(self.outgoing.items())
        while v < upto:
            found = next(((s, o) for s, o in items if o.base == v), None)
            if found is not None and found[0] <= upto:
                out.append(found)
                v = found[0]
                continue
            old = found[1].old if found is not None else None
            piece = tail(v, *old) if old is not None else tail(v, None, None)  # type: ignore[operator]
            if piece is None:
                raise LookupError(f"no kept parity deltas from step {v} (kept commits, base -> step: "
                                  f"{[(o.base, s) for s, o in items]})")
            out.append((upto, piece))
            v = upto
        return out

    def post(self, step: int) -> None:
        """Post the count exchange of ``step`` (a rank with nothing staged sends zeros)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        size = self.comm.Get_size()
        out = self.outgoing.get(step)
        scounts = out.counts if out is not None else np.zeros(size, dtype=np.int64)
        rcounts = np.empty(size, dtype=np.int64)
        req = self.comm.Ialltoall([scounts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
        self.pending.append([step, scounts, rcounts, req, None])
        self.seconds_stage += time.perf_counter() - t0
        self.cpu_stage += time.thread_time() - c0

    def advance(self, upto: int) -> None:
        """Post the delta rows of every pending step ``<= upto`` whose counts are known (waiting
        for the counts, which were posted a step earlier); they then progress while this rank
        waits for its other messages."""
        t0, c0 = time.perf_counter(), time.thread_time()
        self._advance(upto)
        self.seconds_drain += time.perf_counter() - t0
        self.cpu_drain += time.thread_time() - c0

    def _advance(self, upto: int) -> None:
        """``advance`` without its clocks (``poll`` calls it inside its own)."""
        for entry in self.pending:
            step, scounts, rcounts, req, wire = entry
            if wire is not None or step > upto:
                continue
            if not _test(req, step):  # posted a step ago: usually there already
                wait(req, f"parity delta counts of step {step}")
            out = self.outgoing.get(step)
            # counts and displacements as Python ints, in rows of ``row_type``: a handful of
            # integers, cheaper as lists than as numpy arithmetic on a cold core
            sc, rc = scounts.tolist(), rcounts.tolist()
            wire = np.empty((sum(rc), WORD + self.width), dtype=np.uint8)
            send = out.wire if out is not None else self.nothing  # never the receive buffer: MPI
            # may refuse a send buffer equal to the receive buffer
            t = self.row_type
            with guard(f"parity deltas of step {step}", nonblocking_collective=True):
                entry[3] = self.comm.Ialltoallv([send, (sc, list(accumulate(sc[:-1], initial=0))), t],
                                                [wire, (rc, list(accumulate(rc[:-1], initial=0))), t])
            entry[4] = wire

    def poll(self, upto: int | None = None) -> None:
        """Apply the exchanges that completed, in step order; those of steps ``<= upto`` are
        waited for (``None``: only what already arrived, never waiting)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        while self.pending:
            step, scounts, rcounts, req, wire = self.pending[0]
            if wire is None:
                if upto is None or step > upto:
                    break
                self._advance(step)
                continue
            if not _test(req, step):
                if upto is None or step > upto:
                    break
                wait(req, f"parity deltas of step {step}")
            self.pending.pop(0)
            rows = int(scounts.sum())
            self.bytes_sent += rows * (self.width + WORD)
            self.rows_sent += rows
            if self.store is not None:  # applied from the receive buffer; every source is at ``step``
                self.store.apply(step, Deltas.from_wire(wire, rcounts), every_source=True)
        self.seconds_drain += time.perf_counter() - t0
        self.cpu_drain += time.thread_time() - c0

    def drain(self) -> None:
        """Complete every pending exchange and apply it (collective over ``servers``)."""
        self.poll(upto=2**62)

    def reset(self, committed: int) -> None:
        """After a recovery: nothing in flight, nothing kept beyond the committed step (every
        holder is at it now, so no commit's old rows are needed again)."""
        self.pending = []
        for s in [s for s in self.outgoing if s > committed]:
            del self.outgoing[s]
        for o in self.outgoing.values():
            o.old = None
