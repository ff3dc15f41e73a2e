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
data member ``j``), in the first 8 bytes of its wire row in native byte order (as numpy's view
of the int64 words, which the code before these kernels wrote).

Invariants:

* ``route_pack`` orders the wire rows exactly as a stable sort by holder of the concatenation
  over parity members ``i = 0..r-1`` of the rows in the given order (what the numpy version did),
  so the bytes sent are unchanged;
* the apply kernels are exact and byte-wise (the GFNI and the portable multiply give the same
  bytes, as in ``gf256``); applying the same rows twice leaves parity as it was (XOR), which is
  how a holder undoes a step;
* a word naming a slot outside the parity array, or a member outside the code, raises
  ``IndexError`` instead of writing out of bounds (the rows before it are applied);
* the ``sum`` code does not come here: its float additions do not commute, so its holders keep
  the grouped ``code.update`` order (``ecrm.parity.ParityStore._mac``).

No MPI, no I/O; numba-jitted with ``cache=True``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

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

__all__ = ["gf_apply_wire", "gf_apply_wire_unchecked", "gf_apply_words", "route_pack", "wire_words"]

WORD = 8  # bytes of a row's word on the wire
_AHEAD = 16  # parity rows prefetched ahead in the apply (16 vs 8: 72 vs 75 ns a row drain in a run)


@intrinsic
def _load_word(typingctx, arr, off):
    """The int64 at byte offset ``off`` of a 1-D uint8 array, one unaligned load (wire rows are
    ``8 + width`` bytes, so a word is rarely 8-byte aligned); native byte order, as numpy's view."""
    if not isinstance(arr, types.Array) or arr.dtype != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        ptr = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return types.int64(arr, types.intp), codegen


@intrinsic
def _store_word(typingctx, arr, off, val):
    """Store int64 ``val`` at byte offset ``off`` of a 1-D uint8 array (unaligned)."""
    if not isinstance(arr, types.Array) or arr.dtype != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        ptr = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(64).as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()

    return types.void(arr, types.intp, types.int64), codegen


@njit(cache=True)
def _route_pack(rows, payload, k, holder, base, mul, size):
    n = rows.size
    r, S = holder.shape
    w = payload.shape[1]
    # outputs allocated here: one call from Python per step, not four (each costs a microsecond or
    # more when the process comes back to a cold core)
    dest = np.empty(r * n, np.int64)
    wire = np.empty((r * n, WORD + w), np.uint8)
    counts = np.zeros(size, np.int64)
    hq = np.empty(r * n, np.int64)
    wq = np.empty(r * n, np.int64)
    # pass 1: holder and word of every (parity member, row); rows per holder. Unsigned division
    # (ids are checked >= 0): Python's floor semantics on signed ints cost a third more here.
    uk, uS = np.uint64(k), np.uint64(S)
    for i in range(r):
        for t in range(n):
            if rows[t] < 0:
                return dest, wire, counts, t  # see the apply loops: no raise inside a row loop
            g = np.uint64(rows[t])
            s = g // uk
            res = s % uS
            h = holder[i, res]
            if h < 0 or h >= size:
                return dest, wire, counts, t
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
            _store_word(out, p * rw, wq[q])
            o = np.uint64(p * rw + WORD)  # unsigned offsets: no wraparound check, so the copy vectorises
            a = np.uint64(t * w)
            for c in range(np.uint64(w)):
                out[o + c] = src[a + c]
    return dest, wire, counts, -1


def route_pack(rows: np.ndarray, payload: np.ndarray, k: int, holder: np.ndarray, base: np.ndarray,
               mul: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Route delta rows of global ids ``rows`` (``payload[t]``: row ``rows[t]``'s delta, uint8
    ``[n, width]``) to every parity member's holder.

    ``holder[i, c]`` / ``base[i, c]``: holder (rank in a communicator of ``size``) and base slot
    of parity member ``i`` of the stripes of residue class ``c``; slot of stripe ``s`` =
    ``(s // S) * mul + base[i, s % S]``. Returns ``(dest, wire, counts)``: the holder of each wire
    row (sorted), uint8 ``[r * n, 8 + width]`` rows ``[word | payload]``, rows per holder."""
    if rows.dtype != np.int64 or rows.ndim != 1 or not rows.flags.c_contiguous:
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
    if payload.dtype != np.uint8 or not payload.flags.c_contiguous:
        payload = np.ascontiguousarray(payload, dtype=np.uint8)
    if payload.ndim != 2 or payload.shape[0] != rows.size:
        raise ValueError("one payload row per row id")
    dest, wire, counts, bad = _route_pack(rows, payload, k, holder, base, mul, size)
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
def _bad(word, n_par, coef):
    return word < 0 or (word >> 12) >= n_par or ((word >> 8) & 0xF) >= coef.shape[0] \
        or (word & 0xFF) >= coef.shape[1]


# The row loops report a bad word by returning its index instead of raising: a ``raise`` inside
# the loop stops LLVM from vectorising the row's bytes (measured 32 against 5 ns a row). The parity
# rows are prefetched ``_AHEAD`` rows ahead: in a run the array is cold (11 other ranks share the
# caches), where it took the apply from 54 to 33 ns a row; in a hot loop it costs ~1 ns.

@njit(cache=True)
def _apply_wire(parity, wire, coef, gfni):
    n_par, w = parity.shape
    rw = wire.shape[1]
    p = parity.reshape(-1)
    d = wire.reshape(-1)
    n = wire.shape[0]
    for t in range(n):
        if t + _AHEAD < n:  # parity rows are random rows: keep a few misses in flight
            ahead = _load_word(d, (t + _AHEAD) * rw) >> 12
            if 0 <= ahead < n_par:
                prefetch_row(parity, ahead)
        word = _load_word(d, t * rw)
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
        if t + _AHEAD < n:
            ahead = words[t + _AHEAD] >> 12
            if 0 <= ahead < n_par:
                prefetch_row(parity, ahead)
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


def gf_apply_wire_unchecked(parity: np.ndarray, wire: np.ndarray, coef: np.ndarray) -> None:
    """``gf_apply_wire`` for a caller that made the arrays itself (C-contiguous uint8, wire rows of
    ``8 + parity.shape[1]`` bytes, ``coef`` uint8 ``(r, k)``): no shape checks, a bad word still
    raises ``IndexError`` (the kernel checks every word before it writes)."""
    bad = _apply_wire(parity, wire, coef, gfni_active())
    if bad >= 0:
        _check(bad, int(wire_words(wire[bad:bad + 1])[0]))


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
