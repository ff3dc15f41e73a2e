"""``ecrm`` recovery: bring parity to one version, rebuild what the replay needs, replay.

Owns the collective work of an ``ecrm`` recovery, after the runtime's detect,
reconcile and replace: every survivor holds its data at the agreed committed
step ``C``; replaced servers and parity ranks hold nothing yet. Members still
being rebuilt from an earlier failure count as lost again (their rebuild starts
over). One entry per role, called by that role's agent: ``rebuild_server``,
``rebuild_parity``, ``rebuild_trainer`` (every trainer, server and parity rank
calls its own; they meet in the collectives). In order, on the ranks concerned:

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
   at once (``strategy.rebuild = "sync"``), the data rows at once and the parity rows in rounds
   (``"data"``), or both in rounds while training goes on (``"background"``).

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from mpiec.comm import alltoallv_buffers
from mpiec.layout import TRAINER, servers_rank
from mpiec.strategies.ecrm.parity import Deltas
from mpiec.strategies.ecrm.rebuilder import Rebuilder, encode_jobs
from mpiec.strategies.ecrm.transfer import RebuildError, check_all, collective, run_jobs
from mpiec.strategies.replay import Pushed, replay_steps

if TYPE_CHECKING:
    from mpiec.strategies.api.base import RecoveryPlan
    from mpiec.strategies.api.env import RankEnv, ShardState
    from mpiec.strategies.ecrm.member import Member

#: one replayed step on a lost server: (step, local slots, gradient rows), in the push's order
Replayed = tuple[int, np.ndarray, np.ndarray, np.ndarray]  # (step, slots, gradients, rows per trainer)

# -- 1. sync -------------------------------------------------------------------------

def sync(m: Member, targets: dict[int, int], tables: list, silent: frozenset[int] = frozenset()) -> None:
    """Collective over ``servers``: every surviving holder's contribution of source ``src``
    at version ``targets[src]`` (undo what is newer, receive what is missing). ``tables``:
    the holders' versions before (None: not a holder, or lost); ``silent``: sources that
    send nothing (lost): every holder must reach their target by undoing alone."""
    comm = m.comm
    me = comm.Get_rank()
    store = m.store if not m.replaced_self else None
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
    after = [(None, "") if a is None else a for a in after]  # a dropped holder (``HolderComm``)
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
    # what each holder misses from me (a data server is source ``me``)
    words, steps, payloads, counts = [], [], [], np.zeros(size, dtype=np.int64)
    if m.source is not None and me in targets and me not in silent:
        tgt, chains = targets[me], {}
        for h, applied in enumerate(tables):
            if applied is None:
                continue
            since = int(applied[me])
            if since not in chains:
                try:
                    chains[since] = m.pipeline.chain(since, tgt, m.tail)
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
    st = np.concatenate(steps or [np.empty(0, np.int64)])
    p = np.concatenate(payloads or [np.empty((0, m.width), np.uint8)])
    rcounts = np.empty(size, dtype=np.int64)
    with collective("ecrm parity sync"):
        comm.Alltoall([counts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
        n = int(rcounts.sum())
        rw, rs = np.empty(n, np.int64), np.empty(n, np.int64)
        rp = np.empty((n, m.width), np.uint8)
        comm.Alltoallv(*alltoallv_buffers(w, counts, rw, rcounts))
        comm.Alltoallv(*alltoallv_buffers(st, counts, rs, rcounts))
        comm.Alltoallv(*alltoallv_buffers(np.ascontiguousarray(p), counts, rp, rcounts, m.width))
    if store is not None:
        sources = np.repeat(np.arange(size, dtype=np.int64), rcounts)
        for t in np.unique(rs):
            sel = rs == t
            store.apply(int(t), Deltas(sources[sel], rw[sel], rp[sel]))
        for src_, tgt in targets.items():
            store.set_version([src_], tgt)


def holder_tables(m: Member) -> list:
    """Collective over ``servers``: every member's (parity versions or None, ranks it still rebuilds)."""
    mine = None if (m.store is None or m.replaced_self) else m.store.applied.copy()
    carried = sorted(m.rebuilder.lost) if m.rebuilder is not None else []
    with collective("ecrm parity versions"):
        tables = m.comm.allgather((mine, carried))
    return [(None, []) if t is None else t for t in tables]  # a dropped holder (``HolderComm``)


def sync_survivors(m: Member, plan: RecoveryPlan, times: dict[str, float],
                   dropped: frozenset[int] | None = None) -> dict[int, int]:
    """Servers and parity ranks (collective over ``servers``): the lost members, the rebuilder,
    parity synced to the survivors at ``C``; returns each lost source's decoded version ``V_d``.
    The lost members are the plan's replaced ones, or ``dropped`` (a shrink's ``handover``: holders
    without a process). Raises ``RebuildError`` on every member alike (beyond tolerance, kept
    deltas missing)."""
    C, S = plan.committed, m.pl.servers
    replaced = set(dropped) if dropped is not None else {
        r for s in plan.replaced if (r := servers_rank(s, S)) is not None}
    versions: dict[int, int] = {}
    comm = m.comm
    m.replaced_self = comm.Get_rank() in replaced
    tables = holder_tables(m)
    carried = frozenset().union(*[set(c) for _, c in tables])  # an earlier rebuild not finished
    lost = frozenset(replaced | carried)
    m.replaced_self = comm.Get_rank() in lost
    applied = [None if (t is None or h in lost) else t for h, (t, _) in enumerate(tables)]
    holders = [t for t in applied if t is not None]
    lost_sources = sorted(h for h in lost if h < S)
    for d in lost_sources:
        versions[d] = min(int(t[d]) for t in holders) if holders else C
    if m.replaced_self:
        m.pipeline.outgoing.clear()
    # raises RebuildError beyond tolerance, on every member alike
    m.rebuilder = Rebuilder(m, lost, m.chunk, carried - replaced)
    sync(m, {**{src: C for src in range(S) if src not in lost}, **versions}, applied,
         silent=frozenset(versions))
    times["sync"] = time.perf_counter()
    if m.code.name == "sum":  # a decoded row carries its stripe's parity drift: measure it where intact
        run_jobs(m, encode_jobs(m, "drift", lost) if m.store is not None and not m.replaced_self else [])
    return versions


# -- 2. replay ----------------------------------------------------------------------------

def share_versions(env: RankEnv, versions: dict[int, int], problem: str) -> tuple[dict[int, int], str]:
    """Collective over ``data``: server 0's (lost sources' versions, problem) to every trainer and
    server (the servers learnt them in the sync, the trainers replay from them)."""
    data = env.comms.data
    assert data is not None  # a trainer or a server
    with collective("ecrm replay plan"):
        return data.bcast((versions, problem), root=env.n_trainers)


def replay(env: RankEnv, kept: Mapping[int, Pushed] | None, versions: dict[int, int],
           plan: RecoveryPlan, *, trainer: int | None = None, server: int | None = None,
           route: Mapping[int, int] | None = None) -> tuple[list[Replayed], str]:
    """Collective over ``data``: the trainers' kept gradients (``kept``; None on a server) of the
    steps after each lost server's decoded version, sent to it (``replay.replay_steps``); returns
    (the steps a lost server received, "" or why the replay is impossible) alike on every rank."""
    try:
        return list(replay_steps(env, kept, versions, plan.committed, trainer=trainer, server=server,
                                 route=route)), ""
    except RebuildError as exc:  # e.g. a trainer replaced in this recovery kept no gradients
        problem = str(exc)
        if any(s.role == TRAINER for s in plan.replaced):
            problem += ("; a trainer died with a server: strategy.exchange = 'immediate' or "
                        "fallback = 'ckpt' survive it")
        return [], problem


# -- 3. decode, replay, sync again -------------------------------------------------------------

def settle(m: Member, plan: RecoveryPlan, versions: dict[int, int], rows: np.ndarray,
           apply: Callable[[], Any], times: dict[str, float]) -> None:
    """Collective over ``servers``: the rows the replay updates decoded (at ``V_d``), the replay
    applied (``apply``), its deltas sent to the holders; then the rest of the rebuild at once
    (``strategy.rebuild = "sync"``), its data rows at once (``"data"``), or later in rounds."""
    C, S = plan.committed, m.pl.servers
    rb = m.rebuilder
    assert rb is not None  # made by ``sync_survivors``
    rb.decode(rows)
    times["decode"] = time.perf_counter()
    apply()
    times["replay"] = time.perf_counter()
    applied = [None if (t is None or h in rb.lost) else t
               for h, (t, _) in enumerate(holder_tables(m))]
    sync(m, {d: C for d in versions}, applied)
    if m.store is not None and not m.replaced_self:
        m.store.set_version(np.arange(S), C)
    if m.store is not None:
        m.store.drop_after(C)
    if m.rebuild_mode == "sync":
        rb.finish()
        if rb.encoding and m.store is not None:  # re-encoded from the data at C (see Member.overlap)
            m.store.reset_versions(C)
    elif m.rebuild_mode == "data":
        rb.finish_decode()
    times["encode"] = time.perf_counter()


# -- the whole sequence, per role -------------------------------------------------------------

def rebuild_server(m: Member, shard: ShardState, plan: RecoveryPlan) -> dict[str, float]:
    """A server (source; maybe a holder, maybe lost): returns the phase times (perf_counter)."""
    times = {"start": time.perf_counter()}
    versions: dict[int, int] = {}
    problem = ""  # a servers-side RebuildError, told to the trainers before they enter the replay
    try:
        versions = sync_survivors(m, plan, times)
    except RebuildError as exc:
        problem = str(exc)
    versions, problem = share_versions(m.env, versions, problem)  # server 0 took part above
    if problem:  # every trainer, server and parity rank gives up alike (no one waits in a collective)
        raise RebuildError(problem)
    steps, problem = replay(m.env, None, versions, plan, server=m.env.slot.index)
    m.stats["replayed_steps"] = max(m.stats["replayed_steps"], len(steps) if not problem else 0)
    check_all(m.comm, problem)  # the dedicated parity ranks learn it here
    rows = np.concatenate([s for _, s, _, _ in steps]) if steps else np.empty(0, np.int64)

    def apply() -> None:
        for t, slots, grads, counts in steps:
            shard.replay(t, slots, grads, counts)

    settle(m, plan, versions, rows, apply, times)
    return times


def rebuild_parity(m: Member, plan: RecoveryPlan) -> dict[str, float]:
    """A dedicated parity rank (a holder only): returns the phase times (perf_counter)."""
    times = {"start": time.perf_counter()}
    versions = sync_survivors(m, plan, times)  # a RebuildError is raised on every member alike
    check_all(m.comm, "")  # the servers' replay problem, if any
    settle(m, plan, versions, np.empty(0, np.int64), lambda: None, times)
    return times


def rebuild_trainer(env: RankEnv, kept: Mapping[int, Pushed], plan: RecoveryPlan,
                    route: Mapping[int, int] | None = None) -> None:
    """A trainer: send the lost servers the gradients it kept (``kept``, by step); ``route``: to
    the survivors that rebuild them instead (a shrink's ``handover``, ``replay_steps``)."""
    versions, problem = share_versions(env, {}, "")
    if problem:
        raise RebuildError(problem)
    _, problem = replay(env, kept, versions, plan, trainer=env.slot.index, route=route)
    if problem:
        raise RebuildError(problem)
