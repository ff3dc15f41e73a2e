"""``ecrm`` recovery: bring parity to one version, rebuild what the replay needs, replay.

Owns the collective work of an ``ecrm`` recovery, after the runtime's detect,
reconcile and replace (``mpiec.roles.recovery``): every survivor holds its data
at the agreed committed step ``C``; replaced servers and parity ranks hold
nothing yet. Members still being rebuilt from an earlier failure count as lost
again (their rebuild starts over). In order, on the ranks concerned:

1. **sync** (``servers``): holders undo the contributions newer than their target
   (``C`` for a surviving source, ``V_d`` = the oldest version any holder has of
   a lost source ``d``) from their kept incoming deltas, and receive the
   surviving sources' deltas they miss up to ``C`` from the sources' kept
   outgoing ones. Parity now encodes the survivors at ``C`` and each lost
   source at ``V_d``.
2. **replay** (``data``, then ``servers``): the trainers send the row gradients
   they pushed to the lost servers in steps ``V_d + 1 .. C``; the replacement
   decodes those rows (at ``V_d``: the code is linear, so survivors at ``C`` and
   the lost member at ``V_d`` decode exactly) and applies the gradients through
   the server's normal apply, in trainer order: the rows reach exactly the
   failure-free state at ``C``; their deltas go to the holders (**sync** again).
3. the other lost rows and parity rows are rebuilt by ``rebuilder.Rebuilder``:
   at once (``strategy.rebuild = "sync"``) or in rounds while training goes on.

With batched commits (``strategy.parity_every = N > 1``) versions are commit
steps: an undo lands on the commit before the first one it takes out (maybe
below the target), so the holders' versions are gathered again after it, and a
source sends each holder the *chain* of its kept commits from the holder's
version to ``C`` (``DeltaPipeline.chain``), the last piece being the open
window's rows (their bytes at the last commit XOR their bytes at ``C``). A lost
source's target ``V_d`` is its last commit every holder has (holders share one
commit sequence, checked: each must land on ``V_d`` exactly), so the replay is
at most ``N + 1`` steps. A rebuild in progress forces a commit every step, so
a rebuild decodes as with ``N = 1``; the decode inside the recovery is at ``V_d``
against the survivors at ``C`` as always (the code is linear).

Every step that can fail for another reason than a peer's death (a kept delta
or gradient missing) is checked on every member at once, so no member enters a
collective the others skip. A failure during any of this restarts the
recovery: holders track the version of every source's contribution
(``ParityStore.applied``), so the next attempt starts from what was done.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from mpiec.layout import PARITY, SERVER, TRAINER, servers_rank
from mpiec.roles.exchange import alltoallv_buffers
from mpiec.strategies.ecrm.parity import Deltas
from mpiec.strategies.ecrm.rebuilder import Rebuilder, encode_jobs
from mpiec.strategies.ecrm.transfer import RebuildError, check_all, collective, run_jobs
from mpiec.strategies.replay import replay_steps

# -- 1. sync -------------------------------------------------------------------------

def sync(agent: object, targets: dict[int, int], tables: list, silent: frozenset[int] = frozenset()) -> None:
    """Collective over ``servers``: every surviving holder's contribution of source ``src``
    at version ``targets[src]`` (undo what is newer, receive what is missing). ``tables``:
    the holders' versions before (None: not a holder, or lost); ``silent``: sources that
    send nothing (lost): every holder must reach their target by undoing alone."""
    a = agent
    comm = a.ctx.comms.servers
    me = comm.Get_rank()
    store = a.store if not a.replaced_self else None
    problem = ""
    if store is not None:
        for src, tgt in targets.items():
            if store.applied[src] > tgt:
                try:
                    store.undo(src, tgt)
                except RuntimeError as exc:
                    problem = str(exc)
    # where the undo landed (batched commits: on the commit before the first one undone)
    with collective("ecrm parity versions after undo"):
        after = comm.allgather((store.applied.copy() if store is not None else None, problem))
    tables = [None if t is None else after[h][0] for h, t in enumerate(tables)]
    problem = next((p for _, p in after if p), "")
    for src in sorted(silent):
        for h, applied in enumerate(tables):
            if applied is not None and int(applied[src]) != targets[src] and not problem:
                problem = (f"parity holder {h} has lost server {src}'s contribution at step "
                           f"{int(applied[src])}, not at step {targets[src]}")
    if problem:
        raise RebuildError(problem)  # every member saw the same gathered problem
    size = comm.Get_size()
    # what each holder misses from me (I am source ``me`` if I am a data server)
    words, steps, payloads, counts = [], [], [], np.zeros(size, dtype=np.int64)
    if me < a.pl.servers and me in targets and me not in silent:
        tgt, chains = targets[me], {}
        for h, applied in enumerate(tables):
            if applied is None:
                continue
            since = int(applied[me])
            if since not in chains:
                try:
                    chains[since] = a.pipeline.chain(since, tgt, a.tail)
                except LookupError as exc:
                    problem = f"server {me} (holder {h} is at step {since}): {exc}"
                    break
            for t, out in chains[since]:
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
        comm.Alltoallv(*alltoallv_buffers(w, counts, rw, rcounts))
        comm.Alltoallv(*alltoallv_buffers(s, counts, rs, rcounts))
        comm.Alltoallv(*alltoallv_buffers(np.ascontiguousarray(p), counts, rp, rcounts, a.width))
    if store is not None:
        src = np.repeat(np.arange(size, dtype=np.int64), rcounts)
        for t in np.unique(rs):
            sel = rs == t
            store.apply(int(t), Deltas(src[sel], rw[sel], rp[sel]))
        for src_, tgt in targets.items():
            store.set_version([src_], tgt)


# -- 2. replay ----------------------------------------------------------------------------

def gather_replay(agent: object, versions: dict[int, int], committed: int) -> list[tuple[int, np.ndarray,
                                                                                          np.ndarray]]:
    """Collective over ``data``: the trainers' kept gradients of the steps after each lost
    server's decoded version, sent to it (``replay.replay_steps``); returns (step, slots,
    gradients) on a lost server."""
    a = agent
    return list(replay_steps(a.ctx, a.pushed if a.ctx.slot.role == TRAINER else None, versions, committed))


# -- the whole sequence -------------------------------------------------------------------------

def holder_tables(agent: object) -> list:
    """Collective over ``servers``: every member's (parity versions or None, ranks it still rebuilds)."""
    a = agent
    mine = None if (a.store is None or a.replaced_self) else a.store.applied.copy()
    carried = sorted(a.rebuilder.lost) if a.rebuilder is not None else []
    with collective("ecrm parity versions"):
        return a.ctx.comms.servers.allgather((mine, carried))


def rebuild(agent: object, plan: object) -> dict[str, float]:
    """Every trainer, server and parity rank; returns the phase times (perf_counter)."""
    a = agent
    ctx = a.ctx
    C = plan.committed
    S = ctx.cfg.layout.servers
    T = ctx.cfg.layout.trainers
    replaced = {servers_rank(s, S) for s in plan.replaced if s.role in (SERVER, PARITY)}
    times = {"start": time.perf_counter()}
    role = ctx.slot.role
    versions: dict[int, int] = {}
    problem = ""  # a servers-side RebuildError, told to the trainers before they enter the replay
    if role in (SERVER, PARITY):
        try:
            versions = _sync_survivors(a, plan, replaced, times)
        except RebuildError as exc:
            problem = str(exc)
    if role in (SERVER, TRAINER):
        with collective("ecrm replay plan"):  # server 0 knows them (it took part above)
            versions, problem = ctx.comms.data.bcast((versions, problem), root=T)
    if problem:  # every trainer, server and parity rank gives up alike (no one waits in a collective)
        raise RebuildError(problem)
    if role in (SERVER, TRAINER):
        try:
            replay = gather_replay(a, versions, C)
        except RebuildError as exc:  # e.g. a trainer replaced in this recovery kept no gradients
            problem = str(exc)
            if any(s.role == TRAINER for s in plan.replaced):
                problem += ("; a trainer died with a server: strategy.exchange = 'immediate' or "
                            "fallback = 'ckpt' survive it")
        a.stats["replayed_steps"] = max(a.stats["replayed_steps"], len(replay) if not problem else 0)
    if role in (SERVER, PARITY):  # dedicated parity ranks learn it from the servers
        check_all(ctx.comms.servers, problem)
    elif problem:
        raise RebuildError(problem)
    if role in (SERVER, PARITY):
        rows = np.empty(0, np.int64)
        if role == SERVER and replay:
            rows = np.concatenate([s for _, s, _ in replay])
        a.rebuilder.decode(rows)  # the rows the replay updates, decoded at V_d
        times["decode"] = time.perf_counter()
        for t, slots, grads in replay if role == SERVER else []:
            a.role.replay(t, slots, grads)
        times["replay"] = time.perf_counter()
        applied = [None if (t is None or h in a.rebuilder.lost) else t
                   for h, (t, _) in enumerate(holder_tables(a))]
        sync(a, {d: C for d in versions}, applied)
        if a.store is not None and not a.replaced_self:
            a.store.set_version(np.arange(S), C)
        if a.store is not None:
            a.store.drop_after(C)
        if a.p["rebuild"] == "sync":
            a.rebuilder.finish()
        times["encode"] = time.perf_counter()
    return times


def _sync_survivors(a: object, plan: object, replaced: set[int], times: dict[str, float]) -> dict[int, int]:
    """Servers and parity ranks (collective over ``servers``): the lost members, the rebuilder,
    parity synced to the survivors at ``C``; returns each lost source's decoded version ``V_d``.
    Raises ``RebuildError`` on every member alike (beyond tolerance, kept deltas missing)."""
    ctx, C, S = a.ctx, plan.committed, a.ctx.cfg.layout.servers
    versions: dict[int, int] = {}
    comm = ctx.comms.servers
    a.replaced_self = comm.Get_rank() in replaced
    tables = holder_tables(a)
    carried = frozenset().union(*[set(c) for _, c in tables])  # an earlier rebuild not finished
    lost = frozenset(replaced | carried)
    a.replaced_self = comm.Get_rank() in lost
    applied = [None if (t is None or h in lost) else t for h, (t, _) in enumerate(tables)]
    holders = [t for t in applied if t is not None]
    lost_sources = sorted(h for h in lost if h < S)
    for d in lost_sources:
        versions[d] = min(int(t[d]) for t in holders) if holders else C
    if a.replaced_self:
        a.pipeline.outgoing.clear()
    # raises RebuildError beyond tolerance, on every member alike
    a.rebuilder = Rebuilder(a, lost, a.chunk, carried - replaced)
    sync(a, {**{src: C for src in range(S) if src not in lost}, **versions}, applied,
         silent=frozenset(versions))
    times["sync"] = time.perf_counter()
    if a.code.name == "sum":  # a decoded row carries its stripe's parity drift: measure it where intact
        run_jobs(a, encode_jobs(a, "drift", lost) if a.store is not None and not a.replaced_self else [])
    return versions
