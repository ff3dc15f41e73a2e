"""Replay of kept row gradients to replaced servers, shared by ``ecrm`` and ``log``.

Owns the collective that sends the row gradients the trainers kept (what they pushed at
each step, as ``after_push`` gave it: local slots grouped by server in ``data`` rank order,
the counts per data rank, the gradient rows) to the servers being rebuilt, step by step,
and the collective error check every member of a recovery collective runs before it.

Invariants:

* every rank of ``data`` iterates the same steps in the same order, whether or not it sends
  or receives anything (the collectives match); a trainer that lacks a needed step, or whose
  kept copy of it is unusable, says so in the check before the first step, so no rank enters
  a collective the others skip;
* a replaced server receives each step's gradients in ``data`` rank order (trainer 0 first,
  each trainer's rows in the order it pushed them) with the rows from each trainer: the
  original push, so ``Server.replay`` (the normal apply, which sums a row's gradients over
  the trainers' blocks in a fixed tree) reaches the step's failure-free state bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
from mpi4py import MPI

from mpiec.comm import alltoallv_buffers, guard

if TYPE_CHECKING:
    from mpiec.strategies.api.env import RankEnv

#: one step's push as a trainer kept it: (local slots, counts per data rank, gradient rows)
Pushed = tuple[np.ndarray, np.ndarray, np.ndarray]


def collective(where: str):  # noqa: ANN201 - a context manager
    """``guard`` for a recovery's collectives: under ULFM, Open MPI reports some collectives
    that meet a dead peer as ``MPI_ERR_OTHER``, or delivers a pickled object garbled; that is a
    peer failure here too (it restarts the recovery, and the runtime ends a run whose failures
    show no dead rank)."""
    return guard(where, nonblocking_collective=True)


class RebuildError(Exception):
    """The lost state cannot be rebuilt (beyond a code's tolerance, or kept data missing)."""


def check_all(comm: MPI.Intracomm, problem: str) -> None:
    """Collective: raise ``RebuildError`` on every member if any member has a problem."""
    with collective("rebuild check"):
        problems = comm.allgather(problem)
    bad = [p for p in problems if p]
    if bad:
        raise RebuildError(bad[0])


class Kept(Protocol):
    """A trainer's kept pushes by step (a dict, or ``log``'s store with its spilled records)."""

    def __contains__(self, step: object) -> bool: ...
    def __getitem__(self, step: int) -> Pushed: ...


def replay_steps(env: RankEnv, kept: Kept | None, versions: dict[int, int], committed: int,
                 verify: Callable[[Sequence[int]], str] | None = None, *, trainer: int | None = None,
                 server: int | None = None, route: Mapping[int, int] | None = None
                 ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Collective over ``data``: the kept gradients of the steps after each lost server's
    version, sent to it. ``versions`` maps a lost server's index to the step its rows are at
    (it receives the steps ``versions[d] + 1 .. committed``). The caller says what this rank is:
    ``trainer`` = its index on a trainer, which sends ``kept`` (its kept pushes by step; None if it
    kept none, e.g. it was itself replaced), checked first by ``verify`` (a check of the kept
    copies of some steps: "" when usable, else what is wrong); ``server`` = its index on a
    server, which receives if it is in ``versions``. Yields, on a lost server, ``(step, slots,
    gradients, rows from each trainer)`` of each step it needs, in step order; every rank must
    exhaust the iterator. ``route``: lost server ``d``'s gradients go to server ``route[d]`` of the
    current ``data`` communicator (a shrink's ``handover``: ``d`` has no process, a survivor
    rebuilds its rows; one lost server per receiver), whose ``server`` argument is then its own
    index; the kept pushes still address the layout they were pushed in (``T`` trainers first).
    Raises ``RebuildError`` on every rank if a trainer cannot send."""
    to = dict(route) if route is not None else {d: d for d in versions}
    if len(set(to.values())) != len(to):
        raise ValueError(f"one lost server per receiving server: {to}")
    mine = next((d for d, s in to.items() if s == server), None) if server is not None else None
    data = env.comms.data_comm()
    T = env.n_trainers
    dim = env.cfg.model.dim
    first = min(versions.values(), default=committed) + 1
    steps = range(first, committed + 1)
    problem = ""
    if trainer is not None:
        missing = [t for t in steps if kept is None or t not in kept]
        if missing:
            problem = (f"trainer {trainer} does not keep the gradients of step {missing[0]} that the "
                       f"rebuilt servers {sorted(versions)} need (it was itself replaced)")
        elif verify is not None:
            problem = verify(list(steps))
    check_all(data, problem)
    size = data.Get_size()
    for t in steps:
        scounts = np.zeros(size, dtype=np.int64)
        sslots, sgrads = [], []
        if trainer is not None and kept is not None:  # (kept: checked above, on every rank)
            slots, counts, grads = kept[t]
            starts = np.concatenate([[0], np.cumsum(counts)])
            for d in sorted(versions, key=to.__getitem__):  # blocks in destination order
                if t > versions[d]:
                    lo, hi = starts[T + d], starts[T + d + 1]
                    sslots.append(slots[lo:hi])
                    sgrads.append(grads[lo:hi])
                    scounts[T + to[d]] = hi - lo
        rcounts = np.empty(size, dtype=np.int64)
        with collective("replay"):
            data.Alltoall([scounts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
            n = int(rcounts.sum())
            rslots = np.empty(n, dtype=np.int64)
            rgrads = np.empty((n, dim), dtype=np.float32)
            ss = np.ascontiguousarray(np.concatenate(sslots or [np.empty(0, np.int64)]), dtype=np.int64)
            sg = np.ascontiguousarray(np.concatenate(sgrads or [np.empty((0, dim), np.float32)]))
            data.Alltoallv(*alltoallv_buffers(ss, scounts, rslots, rcounts))
            data.Alltoallv(*alltoallv_buffers(sg, scounts, rgrads, rcounts, dim))
        if mine is not None and mine in versions and t > versions[mine]:
            yield t, rslots, rgrads, rcounts[:T]
