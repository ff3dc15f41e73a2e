"""Collective building blocks of an ``ecrm`` rebuild over the ``servers`` communicator.

Owns the request/response row transfer (``fetch``) and the fetch rounds: every member of
``servers`` calls them in the same order, with or without rows of its own to ask for. The
collective error check (``check_all``, ``RebuildError``) and the collective guard are the shared
ones of ``mpiec.strategies.replay`` (``log`` uses them too), re-exported here; rows travel in
``mpiec.comm``'s all-to-all layout (``alltoallv_buffers``).

A round's *member* is ``member.Member`` (this rank's place in the code: its parity rows, its
data rows when it is a data server).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from mpiec.comm import alltoallv_buffers
from mpiec.strategies.replay import RebuildError, check_all, collective

if TYPE_CHECKING:
    from mpiec.strategies.ecrm.member import Member

__all__ = ["Job", "RebuildError", "check_all", "collective", "fetch", "run_jobs", "run_round"]


def fetch(comm: MPI.Intracomm, want: dict[int, np.ndarray], width: int,
          provide: Callable[[np.ndarray], np.ndarray]) -> dict[int, np.ndarray]:
    """Collective over ``comm``: rows ``want[h]`` of every member ``h``; ``provide(idx)``
    answers the others' requests with uint8 ``[len(idx), width]`` rows."""
    size = comm.Get_size()
    scounts = np.zeros(size, dtype=np.int64)
    for h, idx in want.items():
        scounts[h] = idx.size
    rcounts = np.empty(size, dtype=np.int64)
    with collective("ecrm rebuild fetch"):
        comm.Alltoall([scounts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
        sidx = np.concatenate([want[h] for h in range(size) if h in want] or [np.empty(0, np.int64)])
        ridx = np.empty(int(rcounts.sum()), dtype=np.int64)
        comm.Alltoallv(*alltoallv_buffers(np.ascontiguousarray(sidx, dtype=np.int64), scounts, ridx,
                                          rcounts))
        rows = provide(ridx) if ridx.size else np.empty((0, width), dtype=np.uint8)
        back = np.empty((int(scounts.sum()), width), dtype=np.uint8)
        comm.Alltoallv(*alltoallv_buffers(np.ascontiguousarray(rows), rcounts, back, scounts, width))
    out, start = {}, 0
    for h in range(size):
        if h in want:
            out[h] = back[start:start + want[h].size]
            start += want[h].size
    return out


@dataclass
class Job:
    """One fetch round of one member: which rows it needs and what it does with them."""

    want_data: dict[int, np.ndarray]
    want_parity: dict[int, np.ndarray]
    finish: Callable[[dict[int, np.ndarray], dict[int, np.ndarray]], None]
    rows: int = 0  # rows the round rebuilds or checks (for the figures)


def run_round(m: Member, job: Job | None) -> int:
    """Collective over ``servers``: one round (a member without a job only answers the others'
    requests); returns the bytes this member received."""
    comm = m.comm
    got_d = fetch(comm, job.want_data if job else {}, m.row_bytes, m.provide_data)
    got_p = fetch(comm, job.want_parity if job else {}, m.width, m.provide_parity)
    if job is not None:
        job.finish(got_d, got_p)
    return sum(x.nbytes for x in list(got_d.values()) + list(got_p.values()))


def run_jobs(m: Member, jobs: list[Job]) -> None:
    """Collective over ``servers``: rounds until every member's jobs are done."""
    jobs = list(jobs)
    while True:
        job = jobs.pop(0) if jobs else None
        with collective("ecrm rebuild round"):
            more = m.comm.allreduce(0 if job is None else 1, op=MPI.MAX)
        if not more:
            return
        run_round(m, job)
