"""The diff extraction's kernels: the set rows that are real, and their rows, as numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from mpiec.kernels import tracking as T


@pytest.mark.parametrize("n, share", [(1, 1.0), (63, 0.5), (64, 1.0), (1000, 0.01), (4099, 0.3), (4099, 1.0)])
def test_kept_rows_and_their_rows(n, share):
    rng = np.random.default_rng(n)
    gids = np.arange(n, dtype=np.int64) * 3
    gids[rng.random(n) < 0.05] = -1  # padding slots
    gids[-1:] = -1
    want = np.sort(rng.choice(n, max(1, int(n * share)), replace=False))
    bits = T.bitset_new(n)
    T.bitset_set(bits, want)
    assert np.array_equal(T.bitset_rows(bits), want)
    kept = T.bitset_rows_kept(bits, gids)
    assert kept.dtype == np.int64 and np.array_equal(kept, want[gids[want] >= 0])
    table = rng.normal(size=(n, 17)).astype(np.float32)
    for slots in (kept, np.arange(n, dtype=np.int64), np.arange(1, n, dtype=np.int64), kept[:0]):
        got = T.take_rows(table, slots)
        assert got.flags.c_contiguous and got.tobytes() == table[slots].tobytes()
        got[...] = 0  # a copy, never a view of the shard
        assert table.any()


def test_high_bits():
    bits = T.bitset_new(128)
    T.bitset_set(bits, np.array([63, 64, 127]))
    assert T.bitset_rows(bits).tolist() == [63, 64, 127]
    assert T.bitset_rows_kept(bits, np.array([0] * 127 + [-1])).tolist() == [63, 64]
