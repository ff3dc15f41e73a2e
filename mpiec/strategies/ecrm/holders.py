"""The ``servers`` communicator as the old placement numbers it, after an elastic shrink.

Owns ``HolderComm``: during a shrink without rollback (``handover``) the survivors still hold
the code's state of the placement they were built for, whose holders are numbered
``0 .. S + P - 1`` with the dead ones among them, while the rebuilt ``servers`` communicator
numbers only the survivors. ``HolderComm`` speaks the old numbering over the new communicator,
so the rebuild's collectives (``rebuild.sync``, ``transfer.fetch_rows``, ``check_all``) run
unchanged: a dead holder sends nothing, receives nothing and is ``None`` in a gather.

Invariants: only the calls those collectives make are offered, each a collective over the real
communicator in the same order on every survivor; a count addressed to a dead holder must be 0
(checked: rows sent there would be lost).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI


class HolderComm:
    """``real`` (the survivors' ``servers`` communicator) addressed by old holder index:
    ``holders[i]`` is the old index of real rank ``i``, ``size`` the old member count."""

    def __init__(self, real: MPI.Intracomm, holders: list[int], size: int) -> None:
        if len(holders) != real.Get_size() or len(set(holders)) != len(holders) or \
                not all(0 <= h < size for h in holders):
            raise ValueError(f"holder map {holders} does not fit {real.Get_size()} ranks of {size} holders")
        self.real = real
        self.holders = np.asarray(holders, dtype=np.int64)
        self.size = size
        self.lost = sorted(set(range(size)) - set(holders))

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return int(self.holders[self.real.Get_rank()])

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        for h, v in zip(self.holders.tolist(), self.real.allgather(obj), strict=True):
            out[h] = v
        return out

    def allreduce(self, obj: Any, op: MPI.Op = MPI.SUM) -> Any:
        return self.real.allreduce(obj, op=op)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.real.bcast(obj, root=int(np.flatnonzero(self.holders == root)[0]))

    def Allgather(self, send: list, recv: list) -> None:  # noqa: N802
        """``[buf, n, type]`` each; ``recv``'s buffer is ``[size, n]``: a dead holder's row is 0."""
        sbuf, n, mpitype = send
        rbuf = recv[0]
        got = np.empty((self.real.Get_size(), n), dtype=rbuf.dtype)
        self.real.Allgather([sbuf, n, mpitype], [got, n, mpitype])
        rbuf.reshape(self.size, n)[...] = 0
        rbuf.reshape(self.size, n)[self.holders] = got

    def Alltoall(self, send: list, recv: list) -> None:  # noqa: N802
        """One element per holder each way (``[counts, 1, type]``)."""
        sbuf, rbuf = send[0], recv[0]
        self._no_rows_to_the_dead(sbuf)
        got = np.empty(self.real.Get_size(), dtype=rbuf.dtype)
        self.real.Alltoall([np.ascontiguousarray(sbuf[self.holders]), 1, send[2]], [got, 1, recv[2]])
        rbuf[...] = 0
        rbuf[self.holders] = got

    def Alltoallv(self, send: list, recv: list) -> None:  # noqa: N802
        """``comm.alltoallv_buffers``' specs, counts and displacements by holder: the survivors'
        entries are passed on (the buffers are contiguous by holder, a dead one's block empty)."""
        (sbuf, (sc, sd), st), (rbuf, (rc, rd), rt) = send, recv
        self._no_rows_to_the_dead(sc)
        h = self.holders
        self.real.Alltoallv([sbuf, (np.ascontiguousarray(sc[h]), np.ascontiguousarray(sd[h])), st],
                            [rbuf, (np.ascontiguousarray(rc[h]), np.ascontiguousarray(rd[h])), rt])

    def _no_rows_to_the_dead(self, counts: np.ndarray) -> None:
        if self.lost and np.asarray(counts)[self.lost].any():
            raise RuntimeError(f"rows addressed to lost holders {self.lost}")


__all__ = ["HolderComm"]
