"""``ecrm`` recovery: bring parity to one version, decode lost rows, replay, re-encode.

Owns the collective work of an ``ecrm`` recovery, after the runtime's detect,
reconcile and replace (``mpiec.roles.recovery``): every survivor holds its data
at the agreed committed step ``C``; replaced servers and parity ranks hold
nothing yet. In order, on the ranks concerned:

1. **sync** (``servers``): holders undo the contributions newer than their target
   (``C`` for a surviving source, ``V_d`` = the oldest version any holder has of
   a replaced source ``d``) from their kept incoming deltas, and receive the
   surviving sources' deltas they miss up to ``C`` from the sources' kept
   outgoing ones. Parity now encodes the survivors at ``C`` and each lost
   source at ``V_d``.
2. **decode** (``servers``): each replacement fetches, stripe class by stripe
   class and in chunks, ``k`` surviving members of each of its stripes and
   decodes its data rows (at ``V_d``: the code is linear, so survivors at ``C``
   and the lost member at ``V_d`` decode exactly).
3. **replay** (``data``): the trainers send the row gradients they pushed to the
   lost servers in steps ``V_d + 1 .. C``; the replacement applies them through
   the server's normal apply, in trainer order: its rows reach exactly the
   failure-free state at ``C``; the deltas go to the holders (**sync** again).
4. **re-encode** (``servers``): a replaced holder recomputes its parity rows from
   the data rows, now all at ``C``.

Every step that can fail for another reason than a peer's death (a kept delta
or gradient missing) is checked on every member at once, so no member enters a
collective the others skip. A failure during any of this restarts the
recovery: holders track the version of every source's contribution
(``ParityStore.applied``), so the next attempt starts from what was done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from mpiec.comm import guard
from mpiec.layout import PARITY, SERVER, TRAINER, servers_rank
from mpiec.strategies.ecrm.parity import Deltas
from mpiec.strategies.ecrm.pipeline import alltoallv_rows
from mpiec.strategies.ecrm.stripes import data_stripes, member_index, residue_holders

CHUNK = 1 << 17  # stripes per fetch round: bounds the replacement's memory on big tables


def collective(where: str):  # noqa: ANN201 - a context manager
    """``guard`` for the rebuild's collectives: under ULFM, Open MPI reports some collectives
    that meet a dead peer as ``MPI_ERR_OTHER``; that is a peer failure here too (it restarts the
    recovery, and the runtime ends a run whose failures show no dead rank)."""
    return guard(where, nonblocking_collective=True)


class RebuildError(Exception):
    """The state cannot be rebuilt (beyond the code's tolerance, or kept data missing)."""


def check_all(comm: MPI.Intracomm, problem: str) -> None:
    """Collective: raise ``RebuildError`` on every member if any member has a problem."""
    with collective("ecrm rebuild check"):
        problems = comm.allgather(problem)
    bad = [p for p in problems if p]
    if bad:
        raise RebuildError(bad[0])


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
        alltoallv_rows(comm, np.ascontiguousarray(sidx, dtype=np.int64), scounts, ridx, rcounts, 1,
                       blocking=True)
        rows = provide(ridx) if ridx.size else np.empty((0, width), dtype=np.uint8)
        back = np.empty((int(scounts.sum()), width), dtype=np.uint8)
        alltoallv_rows(comm, np.ascontiguousarray(rows), rcounts, back, scounts, width, blocking=True)
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


def run_jobs(agent: object, jobs: list[Job]) -> None:
    """Collective over ``servers``: rounds until every member's jobs are done."""
    a = agent
    comm = a.ctx.comms.servers
    jobs = list(jobs)
    while True:
        job = jobs.pop(0) if jobs else None
        with collective("ecrm rebuild round"):
            more = comm.allreduce(0 if job is None else 1, op=MPI.MAX)
        if not more:
            return
        got_d = fetch(comm, job.want_data if job else {}, a.row_bytes, a.provide_data)
        got_p = fetch(comm, job.want_parity if job else {}, a.width, a.provide_parity)
        if job is not None:
            job.finish(got_d, got_p)


# -- 1. sync -------------------------------------------------------------------------

def sync(agent: object, targets: dict[int, int], tables: list) -> None:
    """Collective over ``servers``: every surviving holder's contribution of source ``src``
    at version ``targets[src]`` (undo what is newer, receive what is missing)."""
    a = agent
    comm = a.ctx.comms.servers
    me = comm.Get_rank()
    store = a.store if not a.replaced_self else None
    if store is not None:
        for src, tgt in targets.items():
            if store.applied[src] > tgt:
                store.undo(src, tgt)
    size = comm.Get_size()
    # what each holder misses from me (I am source ``me`` if I am a data server)
    words, steps, payloads, counts, problem = [], [], [], np.zeros(size, dtype=np.int64), ""
    if me < a.pl.servers and me in targets:
        tgt = targets[me]
        for h, applied in enumerate(tables):
            if applied is None:
                continue
            for t in range(min(int(applied[me]), tgt) + 1, tgt + 1):
                out = a.pipeline.outgoing.get(t)
                if out is None:
                    problem = (f"server {me} no longer keeps its parity deltas of step {t} "
                               f"(holder {h} is at step {int(applied[me])})")
                    break
                sel = out.dest == h
                words.append(out.words[sel])
                steps.append(np.full(int(sel.sum()), t, dtype=np.int64))
                payloads.append(out.payload[sel])
                counts[h] += int(sel.sum())
    check_all(comm, problem)
    # blocks were appended holder by holder (outer loop), so they are in destination order
    w = np.concatenate(words or [np.empty(0, np.int64)])
    s = np.concatenate(steps or [np.empty(0, np.int64)])
    p = np.concatenate(payloads or [np.empty((0, a.width), np.uint8)])
    rcounts = np.empty(size, dtype=np.int64)
    with collective("ecrm parity sync"):
        comm.Alltoall([counts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
        n = int(rcounts.sum())
        rw, rs = np.empty(n, np.int64), np.empty(n, np.int64)
        rp = np.empty((n, a.width), np.uint8)
        alltoallv_rows(comm, w, counts, rw, rcounts, 1, blocking=True)
        alltoallv_rows(comm, s, counts, rs, rcounts, 1, blocking=True)
        alltoallv_rows(comm, np.ascontiguousarray(p), counts, rp, rcounts, a.width, blocking=True)
    if store is not None:
        src = np.repeat(np.arange(size, dtype=np.int64), rcounts)
        for t in np.unique(rs):
            sel = rs == t
            store.apply(int(t), Deltas(src[sel], rw[sel], rp[sel]))
        for src_, tgt in targets.items():
            store.applied[src_] = tgt


# -- 2. decode -------------------------------------------------------------------------

def decode_jobs(agent: object, lost_ranks: set[int]) -> list[Job]:
    """A replaced server's rounds: decode its data rows from ``k`` surviving members."""
    a = agent
    pl, k, r, S = a.pl, a.pl.k, a.pl.r, a.pl.servers
    me = a.ctx.comms.servers.Get_rank()
    stripes, members = data_stripes(pl, me)
    table = a.table_bytes()
    jobs = []
    for residue in range(min(S, pl.n_stripes)):
        sel = np.flatnonzero(stripes % S == residue)
        if not sel.size:
            continue
        m = int(members[sel[0]])
        holders = residue_holders(pl, residue)
        lost = [x for x, h in enumerate(holders) if h in lost_ranks]
        if len(lost) > r:
            raise RebuildError(f"stripe {residue} lost {len(lost)} members, the code tolerates {r}")
        chosen = [x for x in range(k + r) if x not in lost][:k]
        for start in range(0, sel.size, CHUNK):
            part = sel[start:start + CHUNK]
            st = stripes[part]
            wd = {holders[x]: member_index(pl, st, x) for x in chosen if x < k}
            wp = {holders[x]: member_index(pl, st, x) for x in chosen if x >= k}

            def finish(got_d, got_p, part=part, chosen=chosen, m=m, holders=holders):
                data = [got_d[holders[x]] if x in chosen and x < k else None for x in range(k)]
                par = [a.parity_rows(got_p[holders[k + i]]) if k + i in chosen else None for i in range(r)]
                (rows,) = a.code.decode(data, par, [m])
                table[part] = rows
                a.stats["rebuild_rows"] += part.size
                a.stats["rebuild_bytes"] += sum(x.nbytes for x in list(got_d.values()) + list(got_p.values()))

            jobs.append(Job(wd, wp, finish))
    return jobs


# -- 4. re-encode ----------------------------------------------------------------------

def encode_jobs(agent: object, mode: str = "encode", lost_ranks: frozenset[int] = frozenset()) -> list[Job]:
    """A holder's rounds over its parity rows, from the ``k`` data members of each stripe:
    ``encode`` replaces them, ``verify`` counts the rows that differ, ``drift`` (``sum`` code)
    records how far they are from a fresh encoding; stripes with a member on ``lost_ranks``
    are skipped."""
    a = agent
    pl, k, S = a.pl, a.pl.k, a.pl.servers
    store = a.store
    jobs = []
    for residue in range(min(S, pl.n_stripes)):
        sel = np.flatnonzero((store.stripes >= 0) & (store.stripes % S == residue))
        if not sel.size or set(residue_holders(pl, residue)) & lost_ranks:
            continue
        i = int(store.members[sel[0]])
        holders = residue_holders(pl, residue)[:k]
        for start in range(0, sel.size, CHUNK):
            part = sel[start:start + CHUNK]
            st = store.stripes[part]
            wd = {holders[j]: member_index(pl, st, j) for j in range(k)}

            def finish(got_d, got_p, part=part, i=i, holders=holders):
                parity = a.code.encode([got_d[h] for h in holders])[i]
                rows = np.ascontiguousarray(parity).view(np.uint8).reshape(part.size, a.width)
                if mode in ("verify", "drift") and store.sum:
                    err = float(np.abs(store.array[part].astype(np.float64) - parity.astype(np.float64)).max(
                        initial=0.0))
                    mag = max(float(np.abs(parity).max(initial=0.0)), 1e-30)
                    a.stats["sum_drift_max_abs"] = max(a.stats["sum_drift_max_abs"], err)
                    a.stats["sum_drift_max_rel"] = max(a.stats["sum_drift_max_rel"], err / mag)
                if mode == "verify":
                    a.stats["verify_mismatches"] += store.mismatches(part, rows)
                elif mode == "drift":
                    pass
                else:
                    store.load_bytes(part, rows)
                    a.stats["reencoded_rows"] += part.size

            jobs.append(Job(wd, {}, finish))
    return jobs


# -- 3. replay ------------------------------------------------------------------------------

def replay(agent: object, versions: dict[int, int], committed: int) -> int:
    """Collective over ``data``: lost servers re-apply the trainers' kept gradients of the
    steps after their decoded version. Returns the number of steps replayed."""
    a = agent
    ctx = a.ctx
    data = ctx.comms.data
    T = ctx.cfg.layout.trainers
    with collective("ecrm replay plan"):
        versions = data.bcast(versions, root=T)  # server 0 took part in the sync: it knows them
    first = min(versions.values(), default=committed) + 1
    steps = range(first, committed + 1)
    problem = ""
    if ctx.slot.role == TRAINER:
        missing = [t for t in steps if t not in a.pushed]
        if missing:
            problem = (f"trainer {ctx.slot.index} does not keep the gradients of step {missing[0]} that the "
                       f"rebuilt servers {sorted(versions)} need (it was itself replaced)")
    check_all(data, problem)
    size = data.Get_size()
    for t in steps:
        scounts = np.zeros(size, dtype=np.int64)
        sslots, sgrads = [], []
        if ctx.slot.role == TRAINER:
            slots, counts, grads = a.pushed[t]
            starts = np.concatenate([[0], np.cumsum(counts)])
            for d in sorted(versions):
                if t > versions[d]:
                    lo, hi = starts[T + d], starts[T + d + 1]
                    sslots.append(slots[lo:hi])
                    sgrads.append(grads[lo:hi])
                    scounts[T + d] = hi - lo
        rcounts = np.empty(size, dtype=np.int64)
        dim = ctx.cfg.model.dim
        with collective("ecrm replay"):
            data.Alltoall([scounts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
            n = int(rcounts.sum())
            rslots = np.empty(n, dtype=np.int64)
            rgrads = np.empty((n, dim), dtype=np.float32)
            ss = np.concatenate(sslots or [np.empty(0, np.int64)])
            sg = np.ascontiguousarray(np.concatenate(sgrads or [np.empty((0, dim), np.float32)]))
            from mpiec.roles.exchange import displacements
            data.Alltoallv([ss, (scounts, displacements(scounts)), MPI.INT64_T],
                           [rslots, (rcounts, displacements(rcounts)), MPI.INT64_T])
            data.Alltoallv([sg.reshape(-1), (scounts * dim, displacements(scounts * dim)), MPI.FLOAT],
                           [rgrads.reshape(-1), (rcounts * dim, displacements(rcounts * dim)), MPI.FLOAT])
        if ctx.slot.role == SERVER and ctx.slot.index in versions and t > versions[ctx.slot.index]:
            a.role.replay(t, rslots, rgrads)
    return len(steps)


# -- the whole sequence -------------------------------------------------------------------------

def rebuild(agent: object, plan: object) -> dict[str, float]:
    """Every rank of the run (ranks outside ``servers`` and ``data`` return at once)."""
    a = agent
    ctx = a.ctx
    C = plan.committed
    S = ctx.cfg.layout.servers
    lost = [s for s in plan.replaced if s.role in (SERVER, PARITY)]
    lost_ranks = {servers_rank(s, S) for s in lost}
    lost_sources = sorted(s.index for s in lost if s.role == SERVER)
    times = {"start": time.perf_counter()}
    role = ctx.slot.role
    versions: dict[int, int] = {}
    if role in (SERVER, PARITY):
        comm = ctx.comms.servers
        a.replaced_self = comm.Get_rank() in lost_ranks
        mine = None if (a.store is None or a.replaced_self) else a.store.applied.copy()
        with collective("ecrm parity versions"):
            tables = comm.allgather(mine)
        holders = [t for t in tables if t is not None]
        for d in lost_sources:
            versions[d] = min(int(t[d]) for t in holders) if holders else C
        alive = {src: C for src in range(S) if src not in lost_sources}
        if a.replaced_self:
            a.pipeline.outgoing.clear()
        sync(a, {**alive, **versions}, tables)  # undo to V_d, survivors forward to C
        times["sync"] = time.perf_counter()
        if a.code.name == "sum":  # the decode error is the parity's drift: measure it on intact stripes
            intact = a.store is not None and not a.replaced_self
            run_jobs(a, encode_jobs(a, "drift", frozenset(lost_ranks)) if intact else [])
        jobs = decode_jobs(a, lost_ranks) if (a.replaced_self and role == SERVER) else []
        run_jobs(a, jobs)
        times["decode"] = time.perf_counter()
    if role in (SERVER, TRAINER):
        a.stats["replayed_steps"] = max(a.stats["replayed_steps"], replay(a, versions, C))
        times["replay"] = time.perf_counter()
    if role in (SERVER, PARITY):
        with collective("ecrm parity versions"):
            tables = ctx.comms.servers.allgather(None if (a.store is None or a.replaced_self)
                                                 else a.store.applied.copy())
        sync(a, {d: C for d in lost_sources}, tables)
        run_jobs(a, encode_jobs(a) if (a.replaced_self and a.store is not None) else [])
        if a.store is not None:
            a.store.applied[:] = C
            a.store.drop_after(C)
        times["encode"] = time.perf_counter()
        a.replaced_self = False
    return times
