"""Server-to-server traffic of ``ecsnap`` over the ``servers`` communicator.

Owns the two kinds of snapshot traffic:

* ``ParityExchange`` -- one snapshot's parity, nonblocking: every server sends
  its shard copy to the ``r`` holders of its stripe (``Isend``) and receives the
  copies of the stripes whose parity it holds (``Irecv``); ``progress`` (called
  between steps and while the trainers compute) folds each copy that arrived into
  the parity block (``parity ^= g_ij · block``) and drops it, so a holder keeps
  one incoming copy at most per member it still waits for;
* ``restore_shards`` -- the recovery: an agreement among the servers on who holds
  the snapshot, then the decode of lost shards (the helpers send their blocks to
  the replacement) and the re-encode of lost parity blocks (the stripe's data
  members send their blocks to the replaced holder); collective over ``servers``.

Invariants: every server posts the recovery's sends and receives in the order of
one plan that every server computes alike (``Geometry.recovery_plan``), so
messages between a pair match in order; a request a failure cut off is never
freed while MPI may still write its buffer (``ParityExchange.cancel`` keeps both).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from mpi4py import MPI

from mpiec.comm import guard, waitall
from mpiec.comm.tags import TagRange
from mpiec.strategies.ecsnap.geometry import Geometry
from mpiec.strategies.ecsnap.snapshot import Snapshot, decode_block, encode_block, mac_into
from mpiec.strategies.replay import collective

SNAPSHOT, RECOVERY = 0, 1  # ecsnap's tags: these of the strategy's range (``RankEnv.tags``)
_RETIRED: list[Any] = []  # cut-off requests and their buffers, kept alive to the end of the process


class ParityExchange:
    """The parity exchange of snapshot ``snap`` on server ``me`` (its data copy is taken)."""

    def __init__(self, comm: MPI.Intracomm, geo: Geometry, code: Any, me: int, sizes: list[int],
                 snap: Snapshot, tags: TagRange) -> None:
        self.snap = snap
        tag = tags[SNAPSHOT]
        stripe = geo.stripe_of(me)
        self.sends: list[MPI.Request] = []
        self.recvs: list[list[Any]] = []  # [request, buffer, parity block, coefficient]
        self.bytes_sent = 0
        self.t0 = time.perf_counter()
        for (t, i) in geo.held(me):
            st = geo.stripes[t]
            size = geo.block_bytes(st, sizes)
            block = snap.parity.get((t, i))
            if block is None or block.size != size:
                block = snap.parity[(t, i)] = np.zeros(size, dtype=np.uint8)
            else:
                block[...] = 0
            for j, src in enumerate(st.members):
                buf = np.empty(sizes[src], dtype=np.uint8)
                with guard("ecsnap parity receive"):
                    req = comm.Irecv([buf, MPI.BYTE], source=src, tag=tag)
                self.recvs.append([req, buf, block, int(code.parity_rows[i, j])])
        data = snap.data
        assert data is not None  # the exchange of a snapshot starts once its data copy is taken
        with guard("ecsnap parity send"):
            for h in stripe.holders:
                self.sends.append(comm.Isend([data, MPI.BYTE], dest=h, tag=tag))
                self.bytes_sent += data.nbytes

    def progress(self) -> bool:
        """Fold the copies that arrived into the parity; True once every block is encoded and
        every send completed (``snap.complete`` is then set)."""
        with guard("ecsnap parity exchange", nonblocking_collective=True):
            pending = []
            for item in self.recvs:
                if item[0].Test():
                    mac_into(item[2], item[1], item[3])
                else:
                    pending.append(item)
            self.recvs = pending
            self.sends = [s for s in self.sends if not s.Test()]
        done = not self.recvs and not self.sends
        if done:
            self.snap.complete = True
        return done

    def cancel(self) -> None:
        """A failure cut the exchange off: cancel what is pending, keep the buffers alive."""
        for req in self.sends + [item[0] for item in self.recvs]:
            try:
                req.Cancel()
            except MPI.Exception:
                pass
        _RETIRED.append((self.sends, self.recvs))
        self.sends, self.recvs = [], []


def transfer(comm: MPI.Intracomm, sends: list[tuple[int, np.ndarray]], recvs: list[tuple[int, int]],
             where: str, tag: int) -> list[np.ndarray]:
    """Post every send (dest, bytes) and receive (source, size), wait for all; the received buffers
    in ``recvs`` order. Every server calls it once per phase (collective in effect)."""
    with collective(where):
        reqs = [comm.Isend([a, MPI.BYTE], dest=d, tag=tag) for d, a in sends]
        bufs = [np.empty(n, dtype=np.uint8) for _, n in recvs]
        reqs += [comm.Irecv([b, MPI.BYTE], source=s, tag=tag)
                 for (s, _), b in zip(recvs, bufs, strict=True)]
    waitall(reqs, where)
    return bufs


def restore_shards(comm: MPI.Intracomm, geo: Geometry, code: Any, me: int, sizes: list[int],
                   snap: Snapshot | None, step: int,
                   tags: TagRange) -> tuple[Snapshot | None, str, dict[str, int]]:
    """Collective over ``servers``: bring snapshot ``step`` back on every server.

    ``snap`` is this server's snapshot of ``step`` (None: it has none, e.g. a replacement);
    ``tags`` the strategy's (its ``RECOVERY`` tag carries the transfers).
    Usable when every server that has a copy also has its parity complete, and every lost
    shard is decodable. Returns (this server's complete snapshot or None, the problem if
    unusable, figures: decoded blocks and bytes, re-encoded blocks, bytes received).
    """
    have_data = snap is not None and snap.data is not None
    have_parity = snap is not None and snap.complete
    with collective("ecsnap restore agreement"):
        flags = comm.allgather((have_data, have_parity))
    figures = {"decoded_blocks": 0, "decoded_bytes": 0, "reencoded_blocks": 0, "recovery_bytes": 0}
    stale = [s for s, (d, p) in enumerate(flags) if d and not p]
    if stale:
        return None, (f"snapshot {step}: servers {stale} hold a copy whose parity exchange had not "
                      "completed"), figures
    plan = geo.recovery_plan([f[0] for f in flags], [f[1] for f in flags])
    if plan.problem:
        return None, f"snapshot {step}: {plan.problem}", figures
    out = snap if snap is not None and have_data else Snapshot(step)

    # 1. decode: the helpers send their blocks to the lost member's (replaced) server
    sends, recvs, mine = [], [], []
    for t, j, helpers in plan.decodes:
        st = geo.stripes[t]
        target = st.members[j]
        size = geo.block_bytes(st, sizes)
        for m, h in helpers:
            if h == me:
                assert snap is not None  # a helper holds the snapshot (the flags above)
                block = snap.data if m < geo.k else snap.parity[(t, m - geo.k)]
                assert block is not None
                sends.append((target, block))
            if target == me:
                recvs.append((h, sizes[h] if m < geo.k else size))
        if target == me:
            mine.append((t, j, helpers))
    bufs = transfer(comm, sends, recvs, "ecsnap decode transfer", tags[RECOVERY])
    figures["recovery_bytes"] += sum(b.nbytes for b in bufs)
    at = 0
    for t, j, helpers in mine:
        st = geo.stripes[t]
        pieces = {m: bufs[at + n] for n, (m, _) in enumerate(helpers)}
        at += len(helpers)
        out.data = decode_block(code, len(st.members), j, pieces, geo.block_bytes(st, sizes), sizes[me])
        figures["decoded_blocks"] += 1
        figures["decoded_bytes"] += out.data.nbytes

    # 2. re-encode: parity blocks whose holder was replaced, from the stripe's data members
    sends, recvs, blocks = [], [], []
    for t, i in plan.reencodes:
        st = geo.stripes[t]
        holder = st.holders[i]
        if me in st.members:
            assert out.data is not None  # decoded above when it was lost
            sends.append((holder, out.data))
        if holder == me:
            recvs += [(s, sizes[s]) for s in st.members]
            blocks.append((t, i))
    bufs = transfer(comm, sends, recvs, "ecsnap re-encode transfer", tags[RECOVERY])
    figures["recovery_bytes"] += sum(b.nbytes for b in bufs)
    at = 0
    for t, i in blocks:
        st = geo.stripes[t]
        n = len(st.members)
        out.parity[(t, i)] = encode_block(code, i, bufs[at:at + n], geo.block_bytes(st, sizes))
        at += n
        figures["reencoded_blocks"] += 1
    if out.data is None or out.data.size != sizes[me]:
        return None, f"snapshot {step}: server {me} has no copy of its shard after the decode", figures
    out.complete = True
    return out, "", figures
