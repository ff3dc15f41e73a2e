"""Row kernels of an ``ecrm`` rebuild: gather the rows a peer asks for, decode and install in place.

Owns the two loops a rebuild runs per row, with no Python per row and no temporary
arrays: ``take_rows`` (a member answers a fetch: its data or parity rows by index, into
the send buffer) and ``combine_into`` (the rebuilding member forms each lost row as a GF(2^8)
combination of the fetched members' rows, straight from the receive buffer, and writes it in
place into its table or parity array, marking it done). Both are MPI-free.

Invariant: ``combine_into`` writes the bytes ``GFCode.decode`` (or ``encode``) would return for
the same inputs and coefficients -- the same ``mac`` kernels, byte for byte
(``tests/kernels/test_rebuild_kernels.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .gf256 import _ACTIVE, GF_AFFINE, _combine_ptrs, _mac_at

__all__ = ["combine_into", "pending_rows", "take_rows"]


@njit(cache=True)
def _take_rows(data, parity, idx, out):
    w = out.shape[1]
    o = out.reshape(-1)
    d = data.reshape(-1)
    p = parity.reshape(-1)
    for t in range(idx.size):
        i = idx[t]
        base = t * w
        if i >= 0:
            s0 = i * w
            for c in range(w):
                o[base + c] = d[s0 + c]
        else:
            s0 = (-1 - i) * w
            for c in range(w):
                o[base + c] = p[s0 + c]


def take_rows(data: np.ndarray, parity: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """``out[t] = data[idx[t]]`` for ``idx[t] >= 0``, ``parity[-1 - idx[t]]`` otherwise.

    2-D C-contiguous uint8 arrays of the same row width (an absent one: shape ``(0, w)``)."""
    _take_rows(data, parity, idx, out)


@njit(cache=True)
def _combine_into(coef, src, offs, dst, slots, done, gfni):
    k = coef.size
    w = dst.shape[1]
    d = dst.reshape(-1)
    s = src.reshape(-1)
    mark = done.size > 0
    words = w % 4 == 0  # whole 32-bit words: copies and xors a word at a time
    n4 = w // 4
    d4 = d.view(np.uint32) if words and d.size % 4 == 0 else d[:0].view(np.uint32)
    s4 = s.view(np.uint32) if words and s.size % 4 == 0 else s[:0].view(np.uint32)
    fast = words and d4.size > 0 and s4.size > 0
    for t in range(slots.size):
        r = slots[t] * w
        for j in range(k):
            c = coef[j]
            so = (offs[j] + t) * w
            if fast and c == 1:
                r4, so4 = r // 4, so // 4
                if j == 0:
                    for x in range(n4):
                        d4[r4 + x] = s4[so4 + x]
                else:
                    for x in range(n4):
                        d4[r4 + x] ^= s4[so4 + x]
                continue
            if j == 0:
                for x in range(w):
                    d[r + x] = 0
            _mac_at(d, r, s, so, w, c, gfni)
        if mark:
            done[slots[t]] = True


@njit(cache=True)
def _combine_tiles(coef, mats, sbase, offs, tmp, dst, slots, done):
    """GFNI path: per tile of rows, the fused combine of the contiguous source blocks into
    ``tmp`` (registers, one store per output byte), then the tile's rows copied to their slots."""
    k = offs.size
    w = dst.shape[1]
    tile = tmp.shape[0]
    t4 = tmp.reshape(-1)
    tptr = np.empty(1, dtype=np.int64)
    tptr[0] = sbase[1]
    sptrs = np.empty(k, dtype=np.int64)
    d = dst.reshape(-1)
    mark = done.size > 0
    n = slots.size
    for a in range(0, n, tile):
        b = min(n, a + tile)
        for j in range(k):
            sptrs[j] = sbase[0] + (offs[j] + a) * w
        _combine_ptrs(coef, mats, sptrs, tptr, (b - a) * w)
        for t in range(a, b):
            r = slots[t] * w
            q = (t - a) * w
            for x in range(w):
                d[r + x] = t4[q + x]
            if mark:
                done[slots[t]] = True


_TILE_ROWS = 2048  # rows per tile of the GFNI path: sources and output stay in L2


def combine_into(coef: np.ndarray, src: np.ndarray, offs: np.ndarray, dst: np.ndarray,
                 slots: np.ndarray, done: np.ndarray | None = None) -> None:
    """``dst[slots[t]] = xor_j coef[j] * src[offs[j] + t]`` (GF(2^8)); ``done[slots[t]] = True``.

    ``src``: the receive buffer (2-D C-contiguous uint8), member ``j``'s rows a contiguous
    block from row ``offs[j]``; ``dst``: the table or parity array as uint8 rows of the same
    width. Coefficients all 1 (``xor``, replication): a word-wise copy and xor per row; others
    with GFNI: the fused tiled combine (``gf256.combine``'s kernel) and a copy to the slots."""
    flags = np.empty(0, dtype=np.bool_) if done is None else done
    coef = np.ascontiguousarray(coef, dtype=np.uint8).reshape(-1)
    offs = np.ascontiguousarray(offs, dtype=np.int64).reshape(-1)
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if not slots.size:
        return
    w = dst.shape[1]
    if _ACTIVE[0] and (coef != 1).any() and src.flags.c_contiguous:
        tmp = np.empty((min(_TILE_ROWS, slots.size), w), dtype=np.uint8)
        base = np.array([src.ctypes.data, tmp.ctypes.data], dtype=np.int64)
        c2 = coef.reshape(1, -1)
        _combine_tiles(c2, np.ascontiguousarray(GF_AFFINE[c2]), base, offs, tmp, dst, slots, flags)
        return
    _combine_into(coef, src, offs, dst, slots, flags, _ACTIVE[0])


@njit(cache=True)
def _pending_rows(slots, done, seen):
    out = np.empty(slots.size, dtype=np.int64)
    n = 0
    for t in range(slots.size):
        s = slots[t]
        if not done[s] and not seen[s]:
            seen[s] = True
            out[n] = s
            n += 1
    for t in range(n):
        seen[out[t]] = False
    return out[:n]


def pending_rows(slots: np.ndarray, done: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The distinct ``slots`` not ``done``, in their first-seen order, in one pass (``seen``: a
    scratch bool array as long as ``done``, all False, left all False)."""
    return _pending_rows(np.ascontiguousarray(slots, dtype=np.int64), done, seen)
