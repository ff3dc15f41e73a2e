"""The per-step parity delta exchange of ``ecrm`` over the ``servers`` communicator.

Owns the wire protocol between data servers (sources) and parity holders, and
the sources' retained outgoing deltas. Per step ``s`` every member of
``servers`` (servers and dedicated parity ranks) posts, in this order:

1. ``post(s)``: an ``Ialltoall`` of row counts per holder -- on a server right
   after its apply of ``s`` (``after_apply``), on a parity rank at its step ``s``;
2. ``drain()``: the ``Ialltoallv`` of the delta words and bytes of ``s``; each
   holder then applies them to its parity. Servers drain while the trainers
   compute step ``s + 1`` (the ``overlap`` hook: rows of ``s + 1`` sent,
   gradients awaited), so the parity work is off the critical path; after the
   last step, and before an online verification, they drain at once.

Invariants: every member posts and drains the same steps in the same order (so
the nonblocking collectives match); a holder that completed the drain of ``s``
received every source's deltas of ``s``; once a member completed the drain of
``s + 1``, every holder has applied ``s`` (it posted ``s + 1`` after applying
``s``): step ``s`` is *committed*. Sources keep their outgoing deltas of the last
``keep`` steps (recovery resends the ones a holder misses).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from mpiec.comm import wait
from mpiec.layout import RowPlacement
from mpiec.roles.exchange import displacements
from mpiec.strategies.ecrm.parity import Deltas, ParityStore, pack_words
from mpiec.strategies.ecrm.stripes import member_holder, member_index


@dataclass
class Outgoing:
    """A source's deltas of one step, sorted by destination holder, as they travel: one
    uint8 row per delta, ``[int64 word | payload]`` (one message per holder, not two)."""

    dest: np.ndarray  # int64 [n]
    wire: np.ndarray  # uint8 [n, 8 + width]
    counts: np.ndarray  # int64 [size]: rows per holder

    @property
    def words(self) -> np.ndarray:
        return words_of(self.wire)

    @property
    def payload(self) -> np.ndarray:
        return self.wire[:, 8:]

    @property
    def nbytes(self) -> int:
        return self.dest.nbytes + self.wire.nbytes


def words_of(wire: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(wire[:, :8]).view(np.int64).reshape(-1)


def build_outgoing(pl: RowPlacement, global_rows: np.ndarray, payload: np.ndarray, size: int) -> Outgoing:
    """Route the deltas of a source's updated rows (global ids) to the holders of every parity member."""
    stripe = global_rows // pl.k
    j = global_rows % pl.k
    dest = np.concatenate([member_holder(pl, stripe, pl.k + i) for i in range(pl.r)])
    words = np.concatenate([pack_words(member_index(pl, stripe, pl.k + i), i, j) for i in range(pl.r)])
    order = np.argsort(dest, kind="stable") if pl.r > 1 or not np.all(dest[1:] >= dest[:-1]) else None
    rows = np.tile(np.arange(global_rows.size), pl.r)
    if order is not None:
        dest, words, rows = dest[order], words[order], rows[order]
    wire = np.empty((rows.size, 8 + payload.shape[1]), dtype=np.uint8)
    wire[:, :8] = words.view(np.uint8).reshape(-1, 8)
    wire[:, 8:] = payload[rows]
    counts = np.bincount(dest, minlength=size).astype(np.int64)
    return Outgoing(dest, wire, counts)


def alltoallv_rows(comm: MPI.Intracomm, send: np.ndarray, scounts: np.ndarray, recv: np.ndarray,
                   rcounts: np.ndarray, width: int, blocking: bool = False) -> MPI.Request | None:
    """Rows of ``width`` items (int64 words, or bytes for uint8) per destination."""
    mpitype = MPI.INT64_T if send.dtype == np.int64 else MPI.BYTE
    sc, rc = scounts * width, rcounts * width
    args = ([send, (sc, displacements(sc)), mpitype], [recv, (rc, displacements(rc)), mpitype])
    if blocking:
        comm.Alltoallv(*args)
        return None
    return comm.Ialltoallv(*args)


class DeltaPipeline:
    def __init__(self, comm_of: object, pl: RowPlacement, store: ParityStore | None, width: int,
                 keep: int = 3) -> None:
        self.comm_of = comm_of  # callable: the current ``servers`` communicator (rebuilt on recovery)
        self.pl, self.store, self.width, self.keep = pl, store, width, keep
        self.outgoing: dict[int, Outgoing] = {}
        self.pending: tuple[int, np.ndarray, np.ndarray, MPI.Request] | None = None
        self.bytes_sent = 0
        self.rows_sent = 0
        self.seconds_stage = 0.0  # on the critical path (after the apply)
        self.seconds_drain = 0.0  # overlapped with the trainers' compute
        self.peak_retained = 0

    @property
    def comm(self) -> MPI.Intracomm:
        return self.comm_of()  # type: ignore[operator]

    def stage(self, step: int, global_rows: np.ndarray, payload: np.ndarray) -> None:
        """Source: keep the deltas of ``step`` for the holders (the next ``post`` sends them)."""
        t0 = time.perf_counter()
        self.outgoing[step] = build_outgoing(self.pl, global_rows, payload, self.comm.Get_size())
        while len(self.outgoing) > self.keep:
            del self.outgoing[min(self.outgoing)]
        self.peak_retained = max(self.peak_retained, sum(o.nbytes for o in self.outgoing.values()))
        self.seconds_stage += time.perf_counter() - t0

    def post(self, step: int) -> None:
        """Post the count exchange of ``step`` (a rank with nothing staged sends zeros)."""
        t0 = time.perf_counter()
        size = self.comm.Get_size()
        out = self.outgoing.get(step)
        scounts = out.counts if out is not None else np.zeros(size, dtype=np.int64)
        rcounts = np.empty(size, dtype=np.int64)
        req = self.comm.Ialltoall([scounts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
        self.pending = (step, scounts, rcounts, req)
        self.seconds_stage += time.perf_counter() - t0

    def drain(self) -> int | None:
        """Complete the pending exchange and apply what this holder received; the step, or None."""
        if self.pending is None:
            return None
        t0 = time.perf_counter()
        step, scounts, rcounts, req = self.pending
        where = f"parity deltas of step {step}"
        wait(req, where)
        comm = self.comm
        out = self.outgoing.get(step)
        n = int(rcounts.sum())
        width = 8 + self.width
        wire = np.empty((n, width), dtype=np.uint8)
        send = out.wire if out is not None else np.empty((0, width), np.uint8)
        wait(alltoallv_rows(comm, send, scounts, wire, rcounts, width), where)
        self.pending = None
        self.bytes_sent += int(scounts.sum()) * (self.width + 8)
        self.rows_sent += int(scounts.sum())
        if self.store is not None:
            src = np.repeat(np.arange(comm.Get_size(), dtype=np.int64), rcounts)
            self.store.apply(step, Deltas(src, words_of(wire), wire[:, 8:]))
            self.store.mark_applied(np.arange(self.pl.servers), step)
        self.seconds_drain += time.perf_counter() - t0
        return step

    def reset(self, committed: int) -> None:
        """After a recovery: nothing in flight, nothing kept beyond the committed step."""
        self.pending = None
        for s in [s for s in self.outgoing if s > committed]:
            del self.outgoing[s]
