"""Locating and repairing what a verification found: ``ecrm``'s scrub (``verify_every``).

Owns, after each verification on every member of ``servers``: the *syndromes* the parity holders
found (a stored parity row XOR its fresh re-encode, GF codes), gathered on every member, where each
mismatching stripe's corruption lies (``locate``) and its repair (the member holding the corrupted
row XORs the error out of it).

Why it can locate: parity follows the data by deltas of every update (old XOR new), so a bit flip
``f`` in data member ``j`` of a stripe leaves every parity row ``p`` off by exactly ``G[p, j]·f``
(GF(2^8), bytewise) from then on, however often the row is updated after; a flip in parity row
``p`` leaves only that row off, by ``f``. With ``r >= 2`` and every coefficient nonzero (the Cauchy
Reed-Solomon code), the syndromes name the member and the error; with ``r = 1`` a flipped data row
and a flipped parity row look alike (detected, not located). Like any code of distance ``r + 1``, one
corrupted member per stripe is located; with ``r = 2`` two in one stripe may look like one elsewhere
(and be "repaired" there); ``r >= 3`` detects two without mistaking them.

What a repair gives back: the flipped bits. When the row was neither read nor updated between the
flip and the verification, that is the row the failure-free run has; otherwise the reads and
updates made with the wrong value stay in the model (the result's twin comparison says which).

Invariants: every member computes the same locations from the same gathered syndromes (the gather
is one collective of every verification, on every member alike); a repair changes only the bytes
of the error, in one row; a stripe whose syndromes fit no single member is left as it is and
reported (more than one corrupted member, or more than the code can tell).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from mpiec.failures.corruption import repair_detail
from mpiec.kernels.codes import GFCode
from mpiec.kernels.gf256 import GF_INV, GF_MUL
from mpiec.strategies.ecrm.stripes import member_index, residue_holders
from mpiec.strategies.replay import collective

if TYPE_CHECKING:
    from mpiec.strategies.ecrm.member import Member

#: syndromes of one verification on one holder: (stripe, parity index, stored XOR re-encode bytes)
Found = list[tuple[int, int, np.ndarray]]


class Location(NamedTuple):
    """Where a stripe's corruption is: member ``member`` (``0..k-1`` data, ``k..k+r-1`` parity) is
    off by ``error`` (bytes to XOR into it)."""

    member: int
    error: np.ndarray


def syndromes(stripes: np.ndarray, parity_index: int, stored: np.ndarray, fresh: np.ndarray) -> Found:
    """The rows of ``stored`` (uint8 ``[n, width]``) that differ from their re-encode ``fresh``."""
    syn = np.bitwise_xor(stored, fresh.reshape(stored.shape))
    bad = np.flatnonzero(syn.any(axis=1))
    return [(int(stripes[b]), parity_index, syn[b].copy()) for b in bad]


def locate(coef: np.ndarray, found: dict[int, np.ndarray]) -> Location | None:
    """The one member whose error explains a stripe's syndromes ``found`` (parity index -> bytes; the
    parity rows that matched are absent), under a code with parity coefficients ``coef`` (``r x k``);
    None when no single member does (or ``r = 1``: a data and a parity flip look alike)."""
    r, k = coef.shape
    if r < 2 or not found:
        return None
    if len(found) == 1:
        (p, syn), = found.items()
        return Location(k + p, syn)  # a data error would show in every parity row (no zero coefficient)
    if len(found) < r:
        return None
    first = found[0]
    for j in range(k):
        c = int(coef[0, j])
        if not c:
            continue
        error = GF_MUL[int(GF_INV[c]), first]
        if all(np.array_equal(GF_MUL[int(coef[p, j]), error], found[p]) for p in range(1, r)):
            return Location(j, error)
    return None


def repair(m: Member, step: int, mine: Found) -> list[int]:
    """Collective over ``servers`` (every member, after every verification of a GF code): gather the
    syndromes, locate each stripe's corruption and XOR the error out of the row this member holds;
    the stripes it could not place (the same list on every member). Events: ``scrub_repair`` on the
    member that repaired a row, ``scrub_unlocated`` on member 0 for a stripe it could not place."""
    with collective("ecrm verification"):
        everyone = m.comm.allgather(mine)
    stripes: dict[int, dict[int, np.ndarray]] = {}
    for found in everyone:
        for stripe, p, syn in found:
            stripes.setdefault(stripe, {})[p] = syn
    if not stripes:
        return []
    unlocated: list[int] = []
    pl, me = m.pl, m.comm.Get_rank()
    coef = m.code.parity_rows if isinstance(m.code, GFCode) else None
    for stripe, found in sorted(stripes.items()):
        where = locate(coef, found) if coef is not None else None
        if where is None:
            unlocated.append(stripe)
            m.stats["scrub_unlocated"] += 1
            if me == 0:
                why = ("one parity row per stripe (r = 1): a flipped data row and a flipped parity row "
                       "look alike" if coef is None or coef.shape[0] < 2 else
                       f"the syndromes of parity rows {sorted(found)} fit no single member")
                m.env.event("scrub_unlocated", step, detail=f"stripe {stripe}: not located ({why})")
            continue
        holder = residue_holders(pl, stripe % pl.servers)[where.member]
        if holder != me:
            continue
        slot = int(member_index(pl, np.array([stripe], dtype=np.int64), where.member)[0])
        m.stats["scrub_repaired"] += 1
        if where.member < pl.k:
            assert m.source is not None, "a data member's holder is a data server"
            row = m.source.table_bytes()[slot]
            row ^= where.error
            global_row = int(m.source.global_rows()[slot])
            m.env.event("scrub_repair", step, detail=repair_detail(
                global_row, f"stripe {stripe}, data member {where.member}: "
                            f"{int(np.count_nonzero(where.error))} bytes corrected from the code"))
        else:
            assert m.store is not None, "a parity member's holder keeps parity"
            m.store.array.view(np.uint8).reshape(m.store.array.shape[0], -1)[slot] ^= where.error
            m.env.event("scrub_repair", step, detail=f"stripe {stripe}, parity member {where.member - pl.k}: "
                                                     "re-encoded from the data")
    return unlocated


__all__ = ["Found", "Location", "locate", "repair", "syndromes"]
