"""The step protocol on ``data``: the header exchange and what its statuses mean.

The row all-to-alls (``ialltoallv``) are ``mpiec.comm``'s.

Owns the wire format between trainers and servers on the ``data``
communicator. Every step posts, in this order on every member:

1. ``Ialltoall`` of a header per destination: ``[count, status, info, word]``
   (count of row ids sent; ``status`` 1 = "I am dying" in emulated mode, 2 = "the
   loss diverged": everyone stops training;
   ``info`` = the sender's last server-apply time in microseconds, so trainer 0
   learns the servers' cost without an extra message; ``word`` = the strategy's
   ``header_word``, so a decision taken on one rank reaches every rank in step);
2. ``Ialltoallv`` of int64 local slots, trainer → server;
3. ``Ialltoallv`` of float32 rows, server → trainer (same counts, times dim);
4. ``Ialltoallv`` of float32 row gradients, trainer → server.

Invariant: receive buffers are laid out by source rank, and ``data`` ranks are
ordered by role slot, so a server sees the trainers' contributions in trainer
order — the fixed summation order that makes training deterministic.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from mpiec.comm import wait

HEADER = 4
STATUS_OK, STATUS_DYING, STATUS_DIVERGED = 0, 1, 2


class Diverged(Exception):
    """The training loss became non-finite: every data rank stops at the same step."""


class EmulatedFailure(Exception):
    """A peer announced its (emulated) death in the step header."""

    def __init__(self, data_ranks: list[int], step: int | None = None) -> None:
        super().__init__(f"emulated failure of data ranks {data_ranks}")
        self.data_ranks = data_ranks
        self.step = step  # set when relayed to ranks outside the step loop


def exchange_headers(comm: MPI.Intracomm, counts: np.ndarray, status: int, info: int,
                     where: str, word: int = 0) -> np.ndarray:
    """Post and complete the header all-to-all; returns the received [size, HEADER] headers."""
    size = comm.Get_size()
    send = np.empty((size, HEADER), dtype=np.int64)
    send[:, 0] = counts
    send[:, 1] = status
    send[:, 2] = info
    send[:, 3] = word
    recv = np.empty((size, HEADER), dtype=np.int64)
    wait(comm.Ialltoall([send, HEADER, MPI.INT64_T], [recv, HEADER, MPI.INT64_T]), where)
    dying = [int(r) for r in np.flatnonzero(recv[:, 1] == STATUS_DYING)]
    if dying:
        raise EmulatedFailure(dying)
    if np.any(recv[:, 1] == STATUS_DIVERGED):
        raise Diverged()
    return recv
