"""Where every member of every stripe lives, as ``ecrm`` needs it (pure numpy, no MPI).

Owns the map (stripe ``s``, member ``m``) -> (holder's rank in the ``servers``
communicator, index in the holder's local array), on top of
``layout.RowPlacement``: data members ``m < k`` are rows of a server's shard
(local slot), parity members ``m = k + i`` rows of a holder's parity array
(parity slot). Invariant: under rotated and dedicated placement the holders of
a stripe's members depend only on ``s % S`` (S = servers), so stripes are
handled in *residue classes*: every stripe of one class has its members on the
same holders, and its losses follow one pattern. Rotation works on *positions*
(``RowPlacement.order``: the server at each position, spread over nodes), so
member ``m`` of stripe ``s`` lives on ``order[(s + m) % S]``; ``node_losses``
says what one node failure costs each residue class.
"""

from __future__ import annotations

import numpy as np

from mpiec.layout import RowPlacement


def member_holder(pl: RowPlacement, stripes: np.ndarray, m: int) -> np.ndarray:
    """``servers`` rank holding member ``m`` of each stripe."""
    stripes = np.asarray(stripes, dtype=np.int64)
    if m < pl.k:
        return pl.order[(stripes + m) % pl.servers]
    h = pl.parity_holder(stripes, m - pl.k)
    return h + pl.servers if pl.dedicated_parity else h


def member_index(pl: RowPlacement, stripes: np.ndarray, m: int) -> np.ndarray:
    """Index of member ``m`` of each stripe in its holder's array (shard slot or parity slot)."""
    stripes = np.asarray(stripes, dtype=np.int64)
    if m < pl.k:
        return pl.local_slot(stripes * pl.k + m)
    return pl.parity_slot(stripes, m - pl.k)


def residue_holders(pl: RowPlacement, residue: int) -> list[int]:
    """``servers`` rank of every member ``0..k+r-1`` of the stripes ``s % S == residue``."""
    s = np.array([residue], dtype=np.int64)
    return [int(member_holder(pl, s, m)[0]) for m in range(pl.k + pl.r)]


def parity_stripes(pl: RowPlacement, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(stripe, parity index i) of each parity slot of ``servers`` rank ``rank``, in slot order.

    Slots a holder reserves but no stripe uses (the last rotation is partial) get stripe -1.
    """
    S, k, r = pl.servers, pl.k, pl.r
    if pl.dedicated_parity:
        if rank < S:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.arange(pl.n_stripes, dtype=np.int64), np.full(pl.n_stripes, rank - S, dtype=np.int64)
    out_s, out_i, out_slot = [], [], []
    for i in range(r):
        # parity member i of stripe s sits at position (s + k + i) mod S: one residue class
        sel = np.arange((int(pl.position[rank]) - k - i) % S, pl.n_stripes, S, dtype=np.int64)
        out_s.append(sel)
        out_i.append(np.full(sel.size, i, dtype=np.int64))
        out_slot.append(pl.parity_slot(sel, i))
    slot = np.concatenate(out_slot) if out_slot else np.empty(0, np.int64)
    n = int(slot.max()) + 1 if slot.size else 0
    s_out = np.full(n, -1, dtype=np.int64)
    i_out = np.zeros(n, dtype=np.int64)
    if slot.size:
        s_out[slot] = np.concatenate(out_s)
        i_out[slot] = np.concatenate(out_i)
    return s_out, i_out


def stripe_losses(pl: RowPlacement, lost_ranks: set[int]) -> dict[int, list[int]]:
    """Residue -> lost members, for every residue class that loses at least one member."""
    out = {}
    for residue in range(min(pl.servers, pl.n_stripes)):
        lost = [m for m, h in enumerate(residue_holders(pl, residue)) if h in lost_ranks]
        if lost:
            out[residue] = lost
    return out


def node_losses(pl: RowPlacement, holder_nodes: list[int]) -> dict[int, tuple[int, list[int]]]:
    """Residue -> (node, members) of the node that holds the most members of those stripes.

    ``holder_nodes[h]``: node of ``servers`` rank ``h`` (servers, then dedicated parity ranks;
    -1 = a node of its own). What one node failure costs each residue class at worst: a
    placement tolerates every single node failure when no entry has more than ``r`` members.
    """
    out = {}
    for residue in range(min(pl.servers, pl.n_stripes)):
        by_node: dict[int, list[int]] = {}
        for m, h in enumerate(residue_holders(pl, residue)):
            if holder_nodes[h] >= 0:
                by_node.setdefault(holder_nodes[h], []).append(m)
        if by_node:
            node = max(sorted(by_node), key=lambda n: len(by_node[n]))
            out[residue] = (node, by_node[node])
    return out
