"""The per-row work of ``ecrm``'s parity delta pipeline, as whole-batch kernels.

Owns the two loops that a data server (a *source*) and a parity *holder* run over every delta row
of a step, so that neither touches a row from Python:

* ``route_pack`` (source, *stage*): the holder and parity slot of every parity member of every
  updated row, and the wire buffer the all-to-all sends -- one row ``[int64 word | payload]`` per
  (row, parity member), grouped by holder -- built in one counting sort, no argsort;
* ``gf_apply_wire`` / ``gf_apply_words`` (holder, *drain*): ``parity[slot] ^= g[i, j] * payload``
  for every received row, straight from the receive buffer (no unpacking, no grouping by
  coefficient: GF(2^8) addition is commutative, so the order is free).

Routing is arithmetic on tables of one row per residue class (``stripe % S``: ``ecrm``'s
placement puts every stripe of a class on the same holders, ``stripes.py``), precomputed once per
placement: a stripe ``s``'s parity member ``i`` is on ``holder[i, s % S]`` at parity slot
``(s // S) * mul + base[i, s % S]``.

A delta row's *word* is ``(parity slot << 12) | (i << 8) | j`` (parity member ``i`` of the stripe,
data member ``j``), little-endian in the first 8 bytes of its wire row.

Invariants:

* ``route_pack`` orders the wire rows exactly as a stable sort by holder of the concatenation
  over parity members ``i = 0..r-1`` of the rows in the given order (what the numpy version did),
  so the bytes sent are unchanged;
* the apply kernels are exact and byte-wise (``gf256._mac_at``: GFNI or portable, the same
  bytes); applying the same rows twice leaves parity as it was (XOR), which is how a holder
  undoes a step;
* a word naming a slot outside the parity array, or a member outside the code, raises
  ``IndexError`` instead of writing out of bounds.

No MPI, no I/O; numba-jitted with ``cache=True``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .embedding import prefetch_row
from .gf256 import (
    _CPU_GFNI,
    GF_AFFINE,
    GF_MASKS,
    _gfni_mac32,
    _gfni_mac64,
    _mul_masked,
    gfni_active,
)

__all__ = ["gf_apply_wire", "gf_apply_words", "route_pack", "wire_words"]

WORD = 8  # bytes of a row's word on the wire


@njit(cache=True)
def _route_pack(rows, payload, k, holder, base, mul, size, dest, wire, counts):
    n = rows.size
    r, S = holder.shape
    w = payload.shape[1]
    hq = np.empty(r * n, np.int64)
    wq = np.empty(r * n, np.int64)
    for q in range(size):
        counts[q] = 0
    # pass 1: holder and word of every (parity member, row); rows per holder. Unsigned division
    # (ids are checked >= 0): Python's floor semantics on signed ints cost a third more here.
    uk, uS = np.uint64(k), np.uint64(S)
    for i in range(r):
        for t in range(n):
            if rows[t] < 0:
                return t  # see the apply loops: no raise inside a row loop
            g = np.uint64(rows[t])
            s = g // uk
            res = s % uS
            h = holder[i, res]
            if h < 0 or h >= size:
                return t
            q = i * n + t
            hq[q] = h
            wq[q] = ((np.int64(s // uS) * mul + base[i, res]) << 12) | (i << 8) | np.int64(g - s * uk)
            counts[h] += 1
    at = np.empty(size, np.int64)
    acc = 0
    for h in range(size):
        at[h] = acc
        acc += counts[h]
    # pass 2: counting sort by holder (stable: the order of pass 1 within a holder), packed rows
    rw = WORD + w
    out = wire.reshape(-1)
    src = payload.reshape(-1)
    for i in range(r):
        for t in range(n):
            q = i * n + t
            h = hq[q]
            p = at[h]
            at[h] = p + 1
            dest[p] = h
            word = wq[q]
            o = np.uint64(p * rw)  # unsigned offsets: no wraparound check, so the copy vectorises
            for b in range(WORD):
                out[o + np.uint64(b)] = (word >> (8 * b)) & 0xFF
            o += np.uint64(WORD)
            a = np.uint64(t * w)
            for c in range(np.uint64(w)):
                out[o + c] = src[a + c]
    return -1


def route_pack(rows: np.ndarray, payload: np.ndarray, k: int, holder: np.ndarray, base: np.ndarray,
               mul: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Route delta rows of global ids ``rows`` (``payload[t]``: row ``rows[t]``'s delta, uint8
    ``[n, width]``) to every parity member's holder.

    ``holder[i, c]`` / ``base[i, c]``: holder (rank in a communicator of ``size``) and base slot
    of parity member ``i`` of the stripes of residue class ``c``; slot of stripe ``s`` =
    ``(s // S) * mul + base[i, s % S]``. Returns ``(dest, wire, counts)``: the holder of each wire
    row (sorted), uint8 ``[r * n, 8 + width]`` rows ``[word | payload]``, rows per holder."""
    rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
    payload = np.ascontiguousarray(payload, dtype=np.uint8)
    if payload.ndim != 2 or payload.shape[0] != rows.size:
        raise ValueError("one payload row per row id")
    r = holder.shape[0]
    dest = np.empty(r * rows.size, np.int64)
    wire = np.empty((r * rows.size, WORD + payload.shape[1]), np.uint8)
    counts = np.empty(size, np.int64)
    bad = _route_pack(rows, payload, np.int64(k), holder, base, np.int64(mul), np.int64(size), dest, wire,
                      counts)
    if bad >= 0:
        raise IndexError(f"row {int(rows[bad])}: a negative id, or its parity holder is outside the "
                         f"communicator of {size}")
    return dest, wire, counts


@njit(cache=True, inline="always")
def _mac_row(p, p0, d, d0, w, c, gfni):
    """p[p0:p0+w] ^= c * d[d0:d0+w], inlined into the row loop: a call per row to the general
    ``gf256._mac_at`` cost ~5x the row's work (measured 26 against 5 ns a 68-byte XOR row)."""
    if c == 1:  # xor code: a plain loop that LLVM vectorises
        a, b = np.uint64(p0), np.uint64(d0)  # unsigned: no wraparound check, so it vectorises
        for x in range(np.uint64(w)):
            p[a + x] ^= d[b + x]
        return
    if c == 0:
        return
    done = 0
    if _CPU_GFNI:  # compile-time constant: no GFNI instruction is generated without it
        if gfni:  # run-time choice (``gf256.use_gfni``)
            mat = GF_AFFINE[c]
            while done + 64 <= w:
                _gfni_mac64(p, p0 + done, d, d0 + done, mat)
                done += 64
            if w - done >= 32:
                _gfni_mac32(p, p0 + done, d, d0 + done, mat)
                done += 32
    m = GF_MASKS[c]
    m0, m1, m2, m3 = m[0], m[1], m[2], m[3]
    m4, m5, m6, m7 = m[4], m[5], m[6], m[7]
    a, b = np.uint64(p0 + done), np.uint64(d0 + done)
    for x in range(np.uint64(w - done)):
        p[a + x] ^= _mul_masked(d[b + x], m0, m1, m2, m3, m4, m5, m6, m7)


@njit(cache=True, inline="always")
def _word_at(wire, t):
    word = np.int64(0)
    for b in range(WORD):
        word |= np.int64(wire[t, b]) << (8 * b)
    return word


@njit(cache=True, inline="always")
def _bad(word, n_par, coef):
    return word < 0 or (word >> 12) >= n_par or ((word >> 8) & 0xF) >= coef.shape[0] \
        or (word & 0xFF) >= coef.shape[1]


# The row loops report a bad word by returning its index instead of raising: a ``raise`` inside
# the loop stops LLVM from vectorising the row's bytes (measured 32 against 5 ns a row). No software
# prefetch: a source's rows arrive in ascending slot order, and prefetching 8 rows ahead (as the
# embedding kernels do) cost 6 ns a row on the laptop's cache-resident parity arrays.

@njit(cache=True)
def _apply_wire(parity, wire, coef, gfni):
    n_par, w = parity.shape
    rw = wire.shape[1]
    p = parity.reshape(-1)
    d = wire.reshape(-1)
    n = wire.shape[0]
    for t in range(n):
        if t + 8 < n:
            ahead = _word_at(wire, t + 8) >> 12
            if 0 <= ahead < n_par:
                prefetch_row(parity, ahead)
        word = _word_at(wire, t)
        if _bad(word, n_par, coef):
            return t
        _mac_row(p, (word >> 12) * w, d, t * rw + WORD, w, coef[(word >> 8) & 0xF, word & 0xFF], gfni)
    return -1


@njit(cache=True)
def _apply_words(parity, words, payload, coef, gfni):
    n_par, w = parity.shape
    p = parity.reshape(-1)
    d = payload.reshape(-1)
    n = words.size
    for t in range(n):
        word = words[t]
        if _bad(word, n_par, coef):
            return t
        _mac_row(p, (word >> 12) * w, d, t * w, w, coef[(word >> 8) & 0xF, word & 0xFF], gfni)
    return -1


def _check(bad: int, word: int) -> None:
    if bad >= 0:
        raise IndexError(f"parity delta word {word:#x} (row {bad}) names a slot outside the parity "
                         f"array or a member outside the code; the rows before it were applied")


def gf_apply_wire(parity: np.ndarray, wire: np.ndarray, coef: np.ndarray) -> None:
    """``parity[slot] ^= coef[i, j] * payload`` for every wire row ``[word | payload]``
    (``parity``: uint8 ``[n, width]``; ``wire``: uint8 ``[m, 8 + width]``; ``coef``: the code's
    ``(r, k)`` parity rows)."""
    if parity.ndim != 2 or wire.ndim != 2 or wire.shape[1] != WORD + parity.shape[1]:
        raise ValueError("wire rows must be [8-byte word | one parity row]")
    if not (parity.flags.c_contiguous and wire.flags.c_contiguous):
        raise ValueError("parity and wire must be C-contiguous")
    if coef.dtype != np.uint8 or coef.ndim != 2:
        raise ValueError("coef: the code's (r, k) uint8 parity rows")
    if wire.shape[0]:
        bad = _apply_wire(parity, wire, coef, gfni_active())
        _check(bad, int(wire_words(wire[bad:bad + 1])[0]) if bad >= 0 else 0)


def gf_apply_words(parity: np.ndarray, words: np.ndarray, payload: np.ndarray, coef: np.ndarray) -> None:
    """``parity[slot] ^= coef[i, j] * payload[t]`` for every ``words[t]`` (the wire rows split)."""
    payload = np.ascontiguousarray(payload, dtype=np.uint8)
    words = np.ascontiguousarray(words, dtype=np.int64).reshape(-1)
    if parity.ndim != 2 or payload.ndim != 2 or payload.shape != (words.size, parity.shape[1]):
        raise ValueError("one payload row of the parity's width per word")
    if not parity.flags.c_contiguous:
        raise ValueError("parity must be C-contiguous")
    if coef.dtype != np.uint8 or coef.ndim != 2:
        raise ValueError("coef: the code's (r, k) uint8 parity rows")
    if words.size:
        bad = _apply_words(parity, words, payload, coef, gfni_active())
        _check(bad, int(words[bad]) if bad >= 0 else 0)


def wire_words(wire: np.ndarray) -> np.ndarray:
    """The int64 words of wire rows (a copy: the rows are not 8-byte aligned)."""
    return np.ascontiguousarray(wire[:, :WORD]).view(np.int64).reshape(-1)
