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

Invariant: a server's local data slots enumerate its rows in increasing
global id, so the slot order (and with it every per-shard checksum) depends
only on the config, never on timing.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def table_offsets(cardinalities: list[int]) -> np.ndarray:
    """``offsets[t]`` is the global id of table ``t``'s row 0; ``offsets[-1]`` the total."""
    return np.concatenate([[0], np.cumsum(np.asarray(cardinalities, dtype=np.int64))])


class RowPlacement:
    """Maps global row ids to (server, local slot) under rotated k+r striping."""

    def __init__(self, total_rows: int, servers: int, k: int = 1, r: int = 0,
                 dedicated_parity: bool = False) -> None:
        if k < 1 or r < 0:
            raise ValueError(f"need k >= 1 and r >= 0, got k={k}, r={r}")
        width = k if dedicated_parity else k + r
        if width > servers:
            raise ValueError(f"a stripe of {width} members needs at least {width} servers, "
                             f"the layout has {servers}")
        self.total_rows, self.servers, self.k, self.r = total_rows, servers, k, r
        self.dedicated_parity = dedicated_parity
        self.n_stripes = -(-total_rows // k)
        S = servers
        # pos[p, s'] = rank of stripe residue s' among the residues whose member on p
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
        return (rows // self.k + rows % self.k) % self.servers

    def local_slot(self, rows: np.ndarray) -> np.ndarray:
        """Index of each global row in its owner's local data array."""
        rows = np.asarray(rows, dtype=np.int64)
        stripe = rows // self.k
        owner = (stripe + rows % self.k) % self.servers
        return (stripe // self.servers) * self.k + self._data_pos[owner, stripe % self.servers]

    def rows_of(self, server: int) -> np.ndarray:
        """Global ids of a server's data rows, in local-slot order (padding rows excluded)."""
        S, k = self.servers, self.k
        stripes = np.arange(self.n_stripes, dtype=np.int64)
        member = (server - stripes) % S
        mine = member < k
        rows = stripes[mine] * k + member[mine]
        return rows[rows < self.total_rows]

    def n_local(self, server: int) -> int:
        """Number of local data slots of a server, padding rows of the last stripe included."""
        S, k = self.servers, self.k
        stripes = np.arange(self.n_stripes, dtype=np.int64)
        return int(np.count_nonzero((server - stripes) % S < k))

    # -- parity rows ------------------------------------------------------
    def parity_holder(self, stripes: np.ndarray, i: int) -> np.ndarray:
        """Holder of parity member ``i`` of each stripe: a server, or parity rank ``i``."""
        stripes = np.asarray(stripes, dtype=np.int64)
        if self.dedicated_parity:
            return np.full(stripes.shape, i, dtype=np.int64)
        return (stripes + self.k + i) % self.servers

    def parity_slot(self, stripes: np.ndarray, i: int) -> np.ndarray:
        """Index of parity member ``i`` of each stripe in its holder's parity array."""
        stripes = np.asarray(stripes, dtype=np.int64)
        if self.dedicated_parity:
            return stripes
        holder = self.parity_holder(stripes, i)
        S = self.servers
        return (stripes // S) * self.r + self._par_pos[holder, stripes % S]
