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

STATUS = 4  # figures a member's fetch carries beside its counts (a round: rows left per phase, CPU, gap)

__all__ = ["STATUS", "Job", "RebuildError", "check_all", "collective", "fetch", "fetch_rows", "merge_jobs",
           "run_jobs", "run_round"]


def fetch_rows(comm: MPI.Intracomm, want: dict[int, np.ndarray], width: int,
               provide: Callable[[np.ndarray], np.ndarray], status: np.ndarray | None = None
               ) -> tuple[np.ndarray, dict[int, int], np.ndarray]:
    """Collective over ``comm``: rows ``want[h]`` of every member ``h`` in one receive buffer
    (uint8 ``[n, width]``: holder by holder in rank order, each holder's rows in the order asked)
    and the first row of each holder's block; ``provide(idx)`` answers the others' requests with
    uint8 ``[len(idx), width]`` rows. The count matrix is gathered by every member, so when no
    member asks for anything (a degraded read with every row rebuilt) the round is that one
    small collective and nothing else. ``status``: ``STATUS`` int64 figures of this member
    that travel with the counts; returns every member's (a ``[size, STATUS]`` table) third."""
    size, me = comm.Get_size(), comm.Get_rank()
    mine = np.zeros(size + STATUS, dtype=np.int64)
    for h, idx in want.items():
        mine[h] = idx.size
    if status is not None:
        mine[size:] = status
    scounts = mine[:size]
    table = np.empty((size, size + STATUS), dtype=np.int64)
    # blocking collectives under ``collective``: polled nonblocking ones (``comm.wait``) hung a
    # node kill across hosts (TCP) in tests/runs/test_multihost.py
    where = "ecrm rebuild fetch"
    with collective(where):
        comm.Allgather([mine, size + STATUS, MPI.INT64_T], [table, size + STATUS, MPI.INT64_T])
    counts, left = table[:, :size], table[:, size:]
    if not counts.any():
        return np.empty((0, width), dtype=np.uint8), {}, left
    rcounts = np.ascontiguousarray(counts[:, me])
    sidx = np.concatenate([want[h] for h in range(size) if h in want and want[h].size]
                          or [np.empty(0, np.int64)])
    ridx = np.empty(int(rcounts.sum()), dtype=np.int64)
    with collective(where):
        comm.Alltoallv(*alltoallv_buffers(np.ascontiguousarray(sidx, dtype=np.int64), scounts, ridx, rcounts))
    rows = provide(ridx) if ridx.size else np.empty((0, width), dtype=np.uint8)
    back = np.empty((int(scounts.sum()), width), dtype=np.uint8)
    with collective(where):
        comm.Alltoallv(*alltoallv_buffers(np.ascontiguousarray(rows), rcounts, back, scounts, width))
    starts = np.concatenate([[0], np.cumsum(scounts)[:-1]])
    return back, {h: int(starts[h]) for h in want}, left


def fetch(comm: MPI.Intracomm, want: dict[int, np.ndarray], width: int,
          provide: Callable[[np.ndarray], np.ndarray]) -> dict[int, np.ndarray]:
    """Collective over ``comm``: rows ``want[h]`` of every member ``h`` (``fetch_rows``, split
    by holder: views of the one receive buffer)."""
    back, starts, _ = fetch_rows(comm, want, width, provide)
    return {h: back[starts[h]:starts[h] + want[h].size] for h in want} if starts else \
        {h: np.empty((0, width), dtype=np.uint8) for h in want}


@dataclass
class Job:
    """One fetch round of one member: which rows it needs and what it does with them."""

    want_data: dict[int, np.ndarray]
    want_parity: dict[int, np.ndarray]
    finish: Callable[[dict[int, np.ndarray], dict[int, np.ndarray]], None]
    rows: int = 0  # rows the round rebuilds or checks (for the figures)


def merge_jobs(jobs: list[Job]) -> list[Job]:
    """``jobs`` as one round: every holder asked once for the rows of all of them, each job's
    ``finish`` given its own rows (a rolling scrub's window: one round instead of one per residue
    class, each round a handful of collectives on every member). Data rows only (the verification's
    jobs); the memory is the sum of the jobs', so only for small jobs."""
    if len(jobs) < 2:
        return jobs
    if any(j.want_parity for j in jobs):
        raise ValueError("merge_jobs merges data-row jobs only")
    holders = sorted({h for j in jobs for h in j.want_data})
    want = {h: np.concatenate([j.want_data[h] for j in jobs if h in j.want_data]) for h in holders}
    spans: list[dict[int, tuple[int, int]]] = []
    at = dict.fromkeys(holders, 0)
    for j in jobs:
        mine = {}
        for h, idx in j.want_data.items():
            mine[h] = (at[h], at[h] + idx.size)
            at[h] += idx.size
        spans.append(mine)

    def finish(got_d: dict[int, np.ndarray], got_p: dict[int, np.ndarray]) -> None:
        for j, mine in zip(jobs, spans, strict=True):
            j.finish({h: got_d[h][a:b] for h, (a, b) in mine.items()}, {})

    return [Job(want, {}, finish, rows=sum(j.rows for j in jobs))]


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
