"""Row tracking: modified-row bitsets, access counters and row folds.

Owns: the per-shard bookkeeping of Check-N-Run (which rows changed since a
checkpoint), CPR-MFU (how often each row was accessed) and the runtime's shard
check (a 32-bit XOR fold per row, ``fold_rows``).

Invariants:

* a bitset over ``n`` rows is a uint64 array of ``ceil(n / 64)`` words, bit
  ``s % 64`` of word ``s // 64`` standing for row ``s``; bits past ``n`` stay 0;
* counters are a caller-owned integer array (one per row), only ever incremented
  or reset here; selections are deterministic (ties go to the lower row id);
* a selection of rows (``bitset_rows``, ``bitset_rows_kept``) is ascending, and ``take_rows``
  copies the selected rows in that order: the bytes of numpy's ``table[slots]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

__all__ = [
    "bitset_clear",
    "bitset_count",
    "bitset_new",
    "bitset_or",
    "bitset_rows",
    "bitset_rows_kept",
    "bitset_set",
    "bitset_test",
    "counters_add",
    "fold_rows",
    "take_rows",
    "top_fraction",
]


def bitset_new(n_rows: int) -> np.ndarray:
    """An empty bitset for n_rows rows."""
    return np.zeros((n_rows + 63) // 64, dtype=np.uint64)


@njit(cache=True)
def bitset_set(bits, slots):
    """Set the bits of every row in slots (duplicates allowed)."""
    for i in range(slots.size):
        s = slots[i]
        bits[s >> 6] |= np.uint64(1) << np.uint64(s & 63)


@njit(cache=True)
def bitset_test(bits, slots):
    """Boolean array: is row slots[i] set."""
    out = np.empty(slots.size, dtype=np.bool_)
    for i in range(slots.size):
        s = slots[i]
        out[i] = (bits[s >> 6] >> np.uint64(s & 63)) & np.uint64(1) != 0
    return out


@njit(cache=True)
def _popcount64(x):
    # SWAR popcount: LLVM turns it into popcnt where the CPU has it
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True)
def bitset_count(bits):
    """Number of set rows."""
    n = 0
    for w in range(bits.size):
        n += _popcount64(bits[w])
    return np.int64(n)


@njit(cache=True)
def bitset_rows(bits):
    """Ids of the set rows, ascending (int64)."""
    out = np.empty(bitset_count(bits), dtype=np.int64)
    t = 0
    for w in range(bits.size):
        x = bits[w]
        while x != 0:  # one step per set bit (tzcnt), not per bit
            out[t] = w * 64 + trailing_zeros(x)
            t += 1
            x &= x - np.uint64(1)
    return out


@njit(cache=True)
def bitset_rows_kept(bits, keep):
    """Ids of the set rows ``s`` with ``keep[s] >= 0`` (e.g. a shard's global ids: its padding
    slots are -1), ascending (int64): ``rows[keep[rows] >= 0]`` of ``bitset_rows`` in one pass."""
    out = np.empty(bitset_count(bits), dtype=np.int64)
    t = 0
    for w in range(bits.size):
        x = bits[w]
        while x != 0:
            s = w * 64 + trailing_zeros(x)
            out[t] = s
            t += keep[s] >= 0  # written always, kept only when the row is real: no branch
            x &= x - np.uint64(1)
    return out[:t].copy() if t < out.size else out


@njit(cache=True)
def _take_rows(table, slots, out):
    w = table.shape[1]
    for i in range(slots.size):
        s = slots[i]
        for c in range(w):
            out[i, c] = table[s, c]


def take_rows(table: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """``table[slots]`` (a new array) for ascending ``slots`` of a 2-D C-contiguous ``table``:
    one block copy when the slots are one run (a baseline's rows: memory-copy speed), else a
    row loop without numpy's fancy-indexing machinery."""
    n = slots.size
    if n and int(slots[-1]) - int(slots[0]) + 1 == n:
        return table[int(slots[0]):int(slots[-1]) + 1].copy()
    out = np.empty((n, table.shape[1]), dtype=table.dtype)
    _take_rows(table, slots, out)
    return out


@njit(cache=True)
def bitset_clear(bits):
    """Clear every bit."""
    bits[:] = 0


@njit(cache=True)
def bitset_or(dst, src):
    """dst |= src (e.g. one-shot differential: rows changed since the baseline)."""
    for w in range(dst.size):
        dst[w] |= src[w]


@njit(cache=True)
def counters_add(counts, slots):
    """counts[slots[i]] += 1 for every i (duplicates count each time)."""
    for i in range(slots.size):
        counts[slots[i]] += 1


@njit(cache=True)
def top_fraction(counts, fraction):
    """Ids (ascending) of the ceil(fraction * n) most-accessed rows.

    Ties at the threshold go to the lower row ids, so the selection is a pure
    function of the counts.
    """
    n = counts.size
    m = int(np.ceil(fraction * n))
    m = max(0, min(n, m))
    if m == 0:
        return np.empty(0, dtype=np.int64)
    thr = np.partition(counts, n - m)[n - m]  # m-th largest
    above = 0
    for s in range(n):
        if counts[s] > thr:
            above += 1
    ties = m - above
    out = np.empty(m, dtype=np.int64)
    t = 0
    for s in range(n):
        c = counts[s]
        if c > thr:
            out[t] = s
            t += 1
        elif c == thr and ties > 0:
            out[t] = s
            t += 1
            ties -= 1
    return out


@njit(cache=True)
def fold_rows(words: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = the XOR of the 32-bit words of row ``rows[i]`` of ``words`` (a C-contiguous
    uint32 view of a table), without copying the rows."""
    for i in range(rows.size):
        r = rows[i]
        x = np.uint32(0)
        for j in range(words.shape[1]):
            x ^= words[r, j]
        out[i] = x
