"""Who does what: role slots of world ranks, and where every embedding row lives.

Owns two mappings that every rank computes identically from the config:

* **role slots** — world rank 0 is the monitor, then ``trainers``, ``servers``,
  dedicated ``parity`` ranks and ``spares``. A slot (``server:1``) is a job, not
  a process: after a failure a spare takes the slot over (``RoleTable``).
* **row placement** — the logical rows of all tables are numbered globally
  (table ``t``'s row ``i`` is ``offsets[t] + i``). ECRec-style rotated
  striping: row ``g`` is member ``j = g % k`` of stripe ``s = g // k``; member
  ``m`` (data ``0..k-1``, parity ``k..k+r-1``) of stripe ``s`` lives on server
  ``(s + m) % S``, so every server holds data and parity (RAID-5 style). With
  dedicated parity ranks, data members rotate over the servers and parity
  member ``i`` of every stripe lives on parity rank ``i``. ``k = 1, r = 0`` is
  plain round-robin sharding (``none`` and the checkpoint strategies).
* **virtual trainer shards** — a step's global batch is cut into ``virtual``
  shards (a power of two); trainer ``i`` holds an aligned block of them
  (``trainer_blocks``), so its samples are one contiguous range of the step.
  Gradients are summed over shards in one fixed tree (``roles.shards``), so a
  run's result does not depend on how many trainers hold the shards.
* **nodes** — ranks that fail together (``rank_nodes``). With
  ``layout.ranks_per_node = N`` the ranks after the monitor are grouped in world
  rank order, N at a time: node 0 holds world ranks 1..N, node 1 the next N, and
  so on (trainers, then servers, parity ranks and spares: the roles' order); the
  monitor belongs to no node (-1), so a node failure never takes it. Without it
  every rank is its own node, unless the ranks run on several hosts: then a
  rank's node is its host, numbered in order of first appearance by world rank.
  Rotated striping then uses a *position order* (``spread_order``): stripe
  member ``m`` of stripe ``s`` lives on the server at position ``(s + m) % S``,
  and servers are ordered so that every window of a stripe's width holds
  servers of distinct nodes when the node sizes allow it. The order is a pure
  function of the config's nodes (never of the hosts found at run time), and
  the identity whenever the identity already spreads stripes as well.

Invariant: a server's local data slots enumerate its rows in increasing
global id, so the slot order (and with it every per-shard checksum) depends
only on the config, never on timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

MONITOR, TRAINER, SERVER, PARITY, SPARE = "monitor", "trainer", "server", "parity", "spare"


@dataclass(frozen=True)
class Slot:
    role: str
    index: int

    def __str__(self) -> str:
        return f"{self.role}:{self.index}"


def initial_slots(trainers: int, servers: int, parity_ranks: int, spares: int) -> list[Slot]:
    """The slot of every world rank at start-up, indexed by world rank."""
    slots = [Slot(MONITOR, 0)]
    slots += [Slot(TRAINER, i) for i in range(trainers)]
    slots += [Slot(SERVER, i) for i in range(servers)]
    slots += [Slot(PARITY, i) for i in range(parity_ranks)]
    slots += [Slot(SPARE, i) for i in range(spares)]
    return slots


def auto_virtual_trainers(trainers: int, global_batch: int) -> int:
    """``layout.virtual_trainers = 0``: 4, or the trainer count rounded up to a power of two if
    larger, at most the largest power of two <= the global batch (a shard holds >= 1 sample).
    One value for 1, 2 and 4 trainers, so their runs end with one checksum."""
    want = max(4, 1 << max(trainers - 1, 0).bit_length())
    return min(want, 1 << (max(global_batch, 1).bit_length() - 1))


def trainer_blocks(trainers: int, virtual: int) -> list[tuple[int, int]]:
    """The virtual shards ``[lo, hi)`` each trainer holds, by trainer position (0 .. trainers-1).

    ``virtual`` is a power of two >= ``trainers``; every block is a node of the fixed binary
    tree over the shards (``roles.shards``): aligned, of a power-of-two size. The widest block is
    split (the first of equal width) until there are ``trainers`` blocks, so sizes differ by at
    most a factor of 2 (3 trainers over 4 shards: 1, 1, 2)."""
    if virtual < trainers or virtual & (virtual - 1):
        raise ValueError(f"{virtual} virtual trainer shards for {trainers} trainers: need a power "
                         "of two >= the trainer count")
    blocks = [(0, virtual)]
    while len(blocks) < trainers:
        i = max(range(len(blocks)), key=lambda j: (blocks[j][1] - blocks[j][0], -j))
        lo, hi = blocks[i]
        mid = (lo + hi) // 2
        blocks[i:i + 1] = [(lo, mid), (mid, hi)]
    return blocks


def shard_samples(global_batch: int, virtual: int, shard: int) -> tuple[int, int]:
    """Samples ``[start, end)`` of virtual shard ``shard`` within a step's global batch."""
    return shard * global_batch // virtual, (shard + 1) * global_batch // virtual


def data_rank(slot: Slot, trainers: int) -> int | None:
    """Rank of a slot in the ``data`` communicator (trainers by index, then servers), or None.

    The one map between role slots and ``data`` ranks: ``comm.build_comms`` orders
    ``data`` by it and every per-destination buffer of a step is indexed by it.
    """
    if slot.role == TRAINER:
        return slot.index
    if slot.role == SERVER:
        return trainers + slot.index
    return None


def data_slot(rank: int, trainers: int) -> Slot:
    """Inverse of ``data_rank``."""
    return Slot(TRAINER, rank) if rank < trainers else Slot(SERVER, rank - trainers)


def servers_rank(slot: Slot, servers: int) -> int | None:
    """Rank of a slot in the ``servers`` communicator (servers, then dedicated parity ranks), or None."""
    if slot.role == SERVER:
        return slot.index
    if slot.role == PARITY:
        return servers + slot.index
    return None


def rank_nodes(n_ranks: int, ranks_per_node: int = 0, hosts: list[str] | None = None) -> list[int]:
    """Node of every world rank, indexed by world rank (the monitor, rank 0: -1 unless nodes are hosts).

    ``ranks_per_node > 0``: emulated nodes of that many ranks in world-rank order after the
    monitor (the last one may be smaller). Otherwise, when ``hosts`` (the processor name of
    every world rank) names several hosts, nodes are hosts, numbered in order of first
    appearance (the monitor's host is node 0; the monitor is still never a kill target);
    else every rank after the monitor is its own node.
    """
    if ranks_per_node > 0:
        return [-1] + [(w - 1) // ranks_per_node for w in range(1, n_ranks)]
    if hosts is not None and len(set(hosts)) > 1:
        index = {h: i for i, h in enumerate(dict.fromkeys(hosts))}
        return [index[h] for h in hosts]
    return [-1] + list(range(n_ranks - 1))


def node_count(n_ranks: int, ranks_per_node: int = 0) -> int:
    """Number of nodes of the config's node map (kill plans ``node:I`` name ``I < node_count``)."""
    workers = n_ranks - 1
    return -(-workers // ranks_per_node) if ranks_per_node > 0 else workers


def window_collisions(order: list[int], nodes: list[int], width: int, windows: int | None = None) -> int:
    """Most members one node holds in a window of ``width`` cyclically consecutive positions
    (``order[p]``: server at position ``p``, ``nodes[i]``: node of server ``i``; -1 = its own node).
    ``windows``: how many windows start at positions 0, 1, ... (default: all of them)."""
    S = len(order)
    worst = 0
    for start in range(S if windows is None else min(windows, S)):
        seen: dict[object, int] = {}
        for j in range(min(width, S)):
            i = order[(start + j) % S]
            key = nodes[i] if nodes[i] >= 0 else ("own", i)
            seen[key] = seen.get(key, 0) + 1
        worst = max(worst, max(seen.values(), default=0))
    return worst


def spread_order(nodes: list[int], width: int) -> list[int]:
    """Servers in position order such that a stripe's ``width`` consecutive positions fall on
    distinct nodes whenever every node holds at most ``S // width`` servers (``nodes[i]``: node
    of server ``i``, -1 = its own). The identity when it does as well (the common case: one
    server per node), so layouts without nodes keep their placement.

    Construction: servers grouped by node (largest nodes first) are dealt round-robin into
    ``m`` = (largest node size) runs, which are concatenated: a node's servers land in
    distinct, consecutive runs, at the same offset, each run at least ``width`` long.
    """
    S = len(nodes)
    identity = list(range(S))
    if S == 0 or width <= 1:
        return identity
    keys = [n if n >= 0 else ("own", i) for i, n in enumerate(nodes)]
    groups: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    grouped = [i for g in sorted(groups.values(), key=lambda g: (-len(g), g[0])) for i in g]
    m = max(len(g) for g in groups.values())
    dealt = [grouped[j] for b in range(m) for j in range(b, S, m)]
    if window_collisions(dealt, nodes, width) < window_collisions(identity, nodes, width):
        return dealt
    return identity


def layout_nodes(layout: Any) -> list[int]:
    """``rank_nodes`` of a ``LayoutConfig`` at start-up (the config's nodes, never the hosts)."""
    return rank_nodes(layout.n_ranks, layout.ranks_per_node)


def holder_nodes(layout: Any, nodes: list[int] | None = None) -> list[int]:
    """Node of every ``servers`` rank (servers, then dedicated parity ranks) at start-up."""
    nodes = layout_nodes(layout) if nodes is None else nodes
    first = 1 + layout.trainers
    return nodes[first: first + layout.servers + layout.parity_ranks]


def stripe_placement(layout: Any, total_rows: int, k: int = 1, r: int = 0) -> RowPlacement:
    """The run's ``RowPlacement``: rotated k+r striping, positions spread over the config's nodes."""
    dedicated = layout.parity_ranks > 0
    width = k if dedicated else k + r
    order = spread_order(holder_nodes(layout)[: layout.servers], width)
    return RowPlacement(total_rows, layout.servers, k, r, dedicated_parity=dedicated, order=order)


def table_offsets(cardinalities: list[int]) -> np.ndarray:
    """``offsets[t]`` is the global id of table ``t``'s row 0; ``offsets[-1]`` the total."""
    return np.concatenate([[0], np.cumsum(np.asarray(cardinalities, dtype=np.int64))])


class RowPlacement:
    """Maps global row ids to (server, local slot) under rotated k+r striping."""

    def __init__(self, total_rows: int, servers: int, k: int = 1, r: int = 0,
                 dedicated_parity: bool = False, order: list[int] | None = None) -> None:
        if k < 1 or r < 0:
            raise ValueError(f"need k >= 1 and r >= 0, got k={k}, r={r}")
        width = k if dedicated_parity else k + r
        if width > servers:
            raise ValueError(f"a stripe of {width} members needs at least {width} servers, "
                             f"the layout has {servers}")
        if order is not None and sorted(order) != list(range(servers)):
            raise ValueError(f"order must be a permutation of the {servers} servers, got {order}")
        self.total_rows, self.servers, self.k, self.r = total_rows, servers, k, r
        self.dedicated_parity = dedicated_parity
        self.n_stripes = -(-total_rows // k)
        S = servers
        # order[p]: the server at position p (rotated striping works on positions); position[i]: inverse
        self.order = np.arange(S, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
        self.position = np.empty(S, dtype=np.int64)
        self.position[self.order] = np.arange(S, dtype=np.int64)
        # pos[p, s'] = rank of stripe residue s' among the residues whose member at position p
        # is a data member (-1 if p holds no data member of s'); ppos likewise for parity.
        self._data_pos = np.full((S, S), -1, dtype=np.int64)
        self._par_pos = np.full((S, S), -1, dtype=np.int64)
        for p in range(S):
            nd = npar = 0
            for s in range(S):
                m = (p - s) % S
                if m < k:
                    self._data_pos[p, s] = nd
                    nd += 1
                elif m < k + r and not dedicated_parity:
                    self._par_pos[p, s] = npar
                    npar += 1

    # -- data rows --------------------------------------------------------
    def owner(self, rows: np.ndarray) -> np.ndarray:
        """Server index holding each global row."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.order[(rows // self.k + rows % self.k) % self.servers]

    def local_slot(self, rows: np.ndarray) -> np.ndarray:
        """Index of each global row in its owner's local data array."""
        rows = np.asarray(rows, dtype=np.int64)
        stripe = rows // self.k
        pos = (stripe + rows % self.k) % self.servers
        return (stripe // self.servers) * self.k + self._data_pos[pos, stripe % self.servers]

    def data_stripes(self, server: int) -> tuple[np.ndarray, np.ndarray]:
        """(stripe, member) of each local data slot of a server, in slot order (padding included).

        The server is data member ``m`` of the stripes ``s = position - m (mod S)``, ``m < k``:
        ``k`` residue classes, so its stripes in ascending order are every whole rotation's
        residues, sorted, then the last rotation's prefix. Built by broadcasting, without a
        pass of modulos over all the stripes (a promoted spare computes this inside a recovery)."""
        S, k = self.servers, self.k
        members = np.arange(k, dtype=np.int64)
        residues = (self.position[server] - members) % S
        order = np.argsort(residues, kind="stable")
        residues, members = residues[order], members[order]
        rotations = -(-self.n_stripes // S)
        stripes = (np.arange(rotations, dtype=np.int64)[:, None] * S + residues[None, :]).ravel()
        n = self.n_local(server)  # ascending: the stripes below n_stripes are a prefix
        return stripes[:n], np.broadcast_to(members, (rotations, k)).ravel()[:n]

    def rows_of(self, server: int) -> np.ndarray:
        """Global ids of a server's data rows, in local-slot order (padding rows excluded)."""
        stripes, members = self.data_stripes(server)
        rows = stripes * self.k + members  # one member per stripe: ascending with the stripes
        return rows[: int(np.searchsorted(rows, self.total_rows))]

    def slot_rows(self, server: int) -> np.ndarray:
        """Global id of each local data slot of a server, -1 for the stripe padding."""
        rows = self.rows_of(server)
        out = np.full(self.n_local(server), -1, dtype=np.int64)
        out[: rows.size] = rows
        return out

    def n_local(self, server: int) -> int:
        """Number of local data slots of a server, padding rows of the last stripe included: the
        stripes below ``n_stripes`` in each of its ``k`` residue classes (``data_stripes``)."""
        S, n = self.servers, self.n_stripes
        residues = (int(self.position[server]) - np.arange(self.k, dtype=np.int64)) % S
        return int(sum((n - int(c) + S - 1) // S for c in residues if c < n))

    # -- parity rows ------------------------------------------------------
    def parity_holder(self, stripes: np.ndarray, i: int) -> np.ndarray:
        """Holder of parity member ``i`` of each stripe: a server, or parity rank ``i``."""
        stripes = np.asarray(stripes, dtype=np.int64)
        if self.dedicated_parity:
            return np.full(stripes.shape, i, dtype=np.int64)
        return self.order[(stripes + self.k + i) % self.servers]

    def parity_slot(self, stripes: np.ndarray, i: int) -> np.ndarray:
        """Index of parity member ``i`` of each stripe in its holder's parity array."""
        stripes = np.asarray(stripes, dtype=np.int64)
        if self.dedicated_parity:
            return stripes
        S = self.servers
        pos = (stripes + self.k + i) % S
        return (stripes // S) * self.r + self._par_pos[pos, stripes % S]
