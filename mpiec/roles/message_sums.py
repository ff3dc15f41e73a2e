"""Checksums of the embedding-gradient messages (``failures.message_checksums``): a detector of a
message corrupted between a trainer and a server, whatever the strategy.

Owns the fold a trainer takes of each server's block of its gradient message, the small exchange
that carries the folds beside the message, and the server's check of what arrived. A block that
does not match is a detected fault: the server records a ``message_corrupt`` event and raises
``PeerFailure`` before it applies anything of the step, so the recovery's agreement puts the
committed step before it, every rank that finished the step undoes it, and the step is executed
again (a strategy that does not recover loses the run, saying why; without ULFM the server stops
the job with the line naming the message: nothing could bring the others to a recovery).

Invariants:

* the fold is the XOR of a block's 32-bit words: one flipped bit anywhere in a block always
  changes it (two flips of the same bit position in one block cancel: a parity, not a hash);
* the folds travel in their own ``Ialltoall`` on the data communicator, posted right after the
  gradients' ``Ialltoallv`` by trainers and servers alike (the same order on every rank); with the
  check off no rank posts it and the messages are those of a run without it;
* pure functions of arrays below ``post``; nothing here changes a gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from mpiec.comm import PeerFailure
from mpiec.errors import MpiecError
from mpiec.failures.corruption import MESSAGE_CORRUPT

if TYPE_CHECKING:
    from mpiec.roles.context import RankContext

EVENT = MESSAGE_CORRUPT  # the detection's event kind (``failures.corruption.mark_detections`` reads it)


def fold(block: np.ndarray) -> int:
    """The XOR of the 32-bit words of a C-contiguous float32 ``block`` (0 for an empty one)."""
    if not block.size:
        return 0
    return int(np.bitwise_xor.reduce(block.reshape(-1).view(np.uint32)))


def folds(rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One fold per destination of a message: ``counts[d]`` rows of ``rows`` for data rank ``d``."""
    ends = np.cumsum(counts)
    return np.array([fold(rows[e - c:e]) for c, e in zip(counts, ends, strict=True)], dtype=np.int64)


def mismatches(rows: np.ndarray, counts: np.ndarray, sent: np.ndarray, senders: int) -> list[int]:
    """The senders (data ranks below ``senders``: the trainers) whose block of the arrived ``rows``
    (``counts[i]`` rows from data rank ``i``) does not fold to the fold ``sent[i]`` they sent."""
    got = folds(rows, counts)
    return [i for i in range(senders) if int(got[i]) != int(sent[i])]


def post(comm: MPI.Intracomm, send: np.ndarray, recv: np.ndarray) -> MPI.Request:
    """Post the folds' exchange: ``send[d]`` to data rank ``d``, ``recv[d]`` from it."""
    return comm.Ialltoall([send, MPI.INT64_T], [recv, MPI.INT64_T])


def refuse(ctx: RankContext, step: int, bad: list[int], counts: np.ndarray) -> None:
    """A server found corrupted blocks (``bad``: trainers) in step ``step``'s gradients: record it,
    say it, and raise ``PeerFailure`` before anything of the step is applied."""
    who = ", ".join(f"trainer {i} ({int(counts[i])} rows)" for i in bad)
    detail = f"step {step}: the gradient message from {who} to {ctx.slot} failed its checksum"
    ctx.event(EVENT, step, detail=detail)
    if not ctx.ulfm:  # no revoke to bring the others to a recovery: the job ends, saying why
        raise MpiecError(f"{detail}: not applied; without ULFM (failures.mode = emulated, or an MPI "
                         "without it) no step can be executed again, so the run stops")
    print(f"[mpiec] {detail}: not applied, the step is executed again", flush=True)
    raise PeerFailure(MPI.ERR_OTHER, f"step {step} push (a corrupted gradient message from {who})")


__all__ = ["EVENT", "fold", "folds", "mismatches", "post", "refuse"]
