"""Row tracking for checkpoint strategies: modified-row bitsets and access counters.

Owns: the per-shard bookkeeping of Check-N-Run (which rows changed since a
checkpoint) and CPR-MFU (how often each row was accessed).

Invariants:

* a bitset over ``n`` rows is a uint64 array of ``ceil(n / 64)`` words, bit
  ``s % 64`` of word ``s // 64`` standing for row ``s``; bits past ``n`` stay 0;
* counters are a caller-owned integer array (one per row), only ever incremented
  or reset here; selections are deterministic (ties go to the lower row id).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "bitset_clear",
    "bitset_count",
    "bitset_new",
    "bitset_or",
    "bitset_rows",
    "bitset_set",
    "bitset_test",
    "counters_add",
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
        b = 0
        while x != 0:
            if x & np.uint64(1):
                out[t] = w * 64 + b
                t += 1
            x >>= np.uint64(1)
            b += 1
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
