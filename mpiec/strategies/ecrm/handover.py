"""``ecrm``'s shrink without a rollback: the dropped servers' rows decoded onto the survivors.

Owns the handover (``StepAgent.handover``) of a server loss with no spare left under
``layout.replacement = "shrink"``. The survivors still hold the code's state of the placement
before the failure (``S`` servers, the dropped ones among them); the rebuilt communicators hold
only the survivors. In order, on every trainer and server (collective over ``data`` and, through
``HolderComm``, over ``servers`` in the old holder numbering):

1. **sync** — the rebuild's ``sync_survivors`` with the dropped servers as the lost members:
   parity encodes every survivor at the committed step ``C`` and each dropped server ``d`` at
   ``V_d``;
2. **replay** — the trainers send the row gradients of ``d``'s rows they pushed in steps
   ``V_d + 1 .. C`` to ``d``'s *host*, the ``j``-th survivor for the ``j``-th dropped server (a
   distinct survivor each: a shrink keeps at least ``k + r > r`` servers);
3. **decode** — the host decodes all of ``d``'s rows at ``V_d`` into a shard of the old placement
   (``Rebuilder`` with ``decode_for``; the other members answer its fetches), then applies the
   replayed gradients with its own optimizer (``replay_into``): ``d``'s rows at ``C``, bit for bit.

The runtime then moves every row, the decoded ones included, to its owner under the placement of
``S - len(dropped)`` servers (``roles.server.move_rows``), and the fresh agents re-encode the
parity of the new stripes (``Member.on_recovered`` with ``plan.relayout``): no step is
re-executed.

Invariants: every member takes the same branches (a ``RebuildError`` is raised on every rank
alike: the problems are gathered first); the old state is only read, except the parity versions
that ``sync`` aligns (as every rebuild does), so nothing the survivors train on changes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from mpiec.layout import SERVER
from mpiec.strategies.api.base import ServerShard
from mpiec.strategies.ecrm.holders import HolderComm
from mpiec.strategies.ecrm.rebuild import rebuild_trainer, replay, share_versions, sync_survivors
from mpiec.strategies.ecrm.rebuilder import Rebuilder
from mpiec.strategies.ecrm.transfer import RebuildError, check_all

if TYPE_CHECKING:
    from mpiec.strategies.api.base import RecoveryPlan
    from mpiec.strategies.api.env import RankEnv, ShardState
    from mpiec.strategies.ecrm.member import Member
    from mpiec.strategies.replay import Pushed


def dropped_servers(plan: RecoveryPlan) -> list[int]:
    """The dropped servers' indexes in the numbering before the failure."""
    return sorted(s.index for s in plan.dropped if s.role == SERVER)


def hosts(servers_before: int, dropped: list[int]) -> tuple[list[int], dict[int, int]]:
    """(the survivors' old indexes in order, which is their new numbering; dropped server ->
    the new index of the survivor that rebuilds its rows)."""
    survivors = [h for h in range(servers_before) if h not in dropped]
    return survivors, {d: j for j, d in enumerate(dropped)}


def handover_server(m: Member, state: ShardState, plan: RecoveryPlan) -> ServerShard | None:
    """A surviving server: its side of the handover; the dropped server's rows it rebuilt (a
    shard of the old placement at ``plan.committed``) or None."""
    env = m.env
    real = env.comms.servers
    assert real is not None  # a server
    dropped = dropped_servers(plan)
    survivors, route = hosts(m.pl.servers, dropped)
    parity = real.Get_size() - len(survivors)  # dedicated parity ranks follow the servers
    m.holder_comm = HolderComm(real, survivors + [m.pl.servers + j for j in range(parity)],
                               m.pl.servers + parity)
    try:
        return _handover(m, state, plan, dropped, route)
    finally:
        m.holder_comm = None


def _handover(m: Member, state: ShardState, plan: RecoveryPlan, dropped: list[int],
              route: Mapping[int, int]) -> ServerShard | None:
    env = m.env
    times = {"start": time.perf_counter()}
    lost = frozenset(dropped)
    versions: dict[int, int] = {}
    problem = ""
    try:
        versions = sync_survivors(m, plan, times, dropped=lost)
        assert m.rebuilder is not None  # made by ``sync_survivors``
        if m.rebuilder.lost != lost:  # the same gathered tables on every member
            earlier = sorted(m.rebuilder.lost - lost)
            raise RebuildError(f"members {earlier} are still being rebuilt from an earlier failure: ecrm "
                               "cannot also re-place the dropped servers' rows (strategy.rebuild = 'sync' "
                               "finishes every rebuild inside its recovery)")
    except RebuildError as exc:
        problem = str(exc)
    versions, problem = share_versions(env, versions, problem)
    if problem:
        raise RebuildError(problem)
    me = env.slot.index  # the new numbering: the route's
    steps, problem = replay(env, None, versions, plan, server=me, route=route)
    check_all(m.comm, problem)
    target = next((d for d, host in route.items() if host == me), None)
    shard = None
    if target is not None:
        rows = m.pl.slot_rows(target)
        shard = ServerShard(index=target, table=np.zeros((rows.size, m.row_bytes // 4), np.float32),
                            global_rows=rows, dim=env.cfg.model.dim)
        m.rebuilder = Rebuilder(m, lost, m.chunk, decode_for=target,
                                into=shard.table.view(np.uint8).reshape(rows.size, m.row_bytes))
    assert m.rebuilder is not None
    rb = m.rebuilder
    rb.finish()  # every member: the hosts' decode rounds (the others answer)
    m.rebuilder = None  # (this member is dropped with its agent: the new layout builds fresh ones)
    if shard is not None and target is not None:
        for _, slots, grads, counts in steps:
            state.replay_into(shard.table, slots, grads, counts)
        env.event("handover", plan.step,
                  detail=f"server {target}'s {rb.rows} rows decoded at step {versions[target]} "
                         f"({rb.bytes} bytes fetched) and {len(steps)} steps replayed in "
                         f"{time.perf_counter() - times['start']:.3f} s")
    return shard


def handover_trainer(env: RankEnv, kept: Mapping[int, Pushed], plan: RecoveryPlan) -> None:
    """A trainer: send the dropped servers' hosts the gradients it kept (``kept``, by step)."""
    dropped = dropped_servers(plan)
    rebuild_trainer(env, kept, plan, route=hosts(env.n_servers + len(dropped), dropped)[1])


__all__ = ["handover_server", "handover_trainer"]
