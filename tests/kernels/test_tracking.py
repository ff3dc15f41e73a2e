"""Modified-row bitsets and access counters."""

import numpy as np
from mpiec.kernels import tracking as T


def test_bitset_roundtrip():
    rng = np.random.default_rng(0)
    n = 1000
    bits = T.bitset_new(n)
    slots = rng.integers(0, n, 300)
    T.bitset_set(bits, slots)
    want = np.unique(slots)
    assert T.bitset_count(bits) == want.size
    assert np.array_equal(T.bitset_rows(bits), want)
    assert np.array_equal(T.bitset_test(bits, np.array([want[0], n - 1])),
                          [True, (n - 1) in set(want.tolist())])
    other = T.bitset_new(n)
    T.bitset_set(other, np.array([n - 1, 0]))
    T.bitset_or(bits, other)
    assert np.array_equal(T.bitset_rows(bits), np.union1d(want, [0, n - 1]))
    T.bitset_clear(bits)
    assert T.bitset_count(bits) == 0 and T.bitset_rows(bits).size == 0


def test_counters_top_fraction():
    counts = np.zeros(10, np.int64)
    T.counters_add(counts, np.array([1, 1, 2, 3, 3, 3, 9, 9]))
    assert counts.tolist() == [0, 2, 1, 3, 0, 0, 0, 0, 0, 2]
    assert T.top_fraction(counts, 0.2).tolist() == [1, 3]  # tie 1 vs 9: lower id wins
    assert T.top_fraction(counts, 0.3).tolist() == [1, 3, 9]
    assert T.top_fraction(counts, 0.0).size == 0
    assert T.top_fraction(counts, 1.0).tolist() == list(range(10))


def test_fold_rows_is_the_xor_of_each_rows_words():
    table = np.random.default_rng(5).standard_normal((9, 6)).astype(np.float32)
    rows = np.array([8, 0, 3, 3], dtype=np.int64)
    out = np.empty(rows.size, np.uint32)
    T.fold_rows(table.view(np.uint32), rows, out)
    assert np.array_equal(out, np.bitwise_xor.reduce(table[rows].view(np.uint32), axis=1))
