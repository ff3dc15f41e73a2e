"""Quantizers: error ordering, packed sizes, pack/unpack round trip, greedy search."""

import numpy as np
import pytest
from mpiec.kernels import quantize as Q


@pytest.fixture(scope="module")
def rows():
    return np.random.default_rng(0).normal(0, 0.1, (300, 64)).astype(np.float32)


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_error_ordering(rows, bits):
    err = {m: Q.row_l2_error(rows, Q.dequantize(Q.quantize(rows, m, bits))).mean()
           for m in Q.METHODS}
    assert err["adaptive"] < err["asymmetric"] < err["symmetric"]
    assert err["kmeans"] <= err["adaptive"]


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("method", Q.METHODS)
def test_packed_sizes(rows, bits, method):
    q = Q.quantize(rows[:20], method, bits)
    assert q.packed.shape == (20, -(-64 * bits // 8))
    per_row = {"symmetric": 2, "asymmetric": 4, "adaptive": 4, "kmeans": 2 * 2**bits}[method]
    assert q.row_overhead_bytes == per_row
    assert q.nbytes == 20 * (-(-64 * bits // 8) + per_row)
    y = Q.dequantize(q)
    assert y.shape == (20, 64) and y.dtype == np.float32


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_pack_roundtrip(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 2**bits, (7, 13), dtype=np.uint8)
    packed = np.empty((7, Q.packed_row_bytes(13, bits)), np.uint8)
    Q.pack_bits(codes, bits, packed)
    out = np.empty_like(codes)
    Q.unpack_bits(packed, bits, 13, out)
    assert np.array_equal(out, codes)


def test_adaptive_range_within_bounds(rows):
    lo, hi = Q.adaptive_range(rows[:50], 2, 200.0, 0.16)
    mn, mx = rows[:50].min(axis=1), rows[:50].max(axis=1)
    width = mx - mn
    assert np.all(lo >= mn - 1e-7) and np.all(hi <= mx + 1e-7)
    assert np.all(hi - lo >= (1 - 0.16) * width - 1e-6)
    assert np.any(hi - lo < width)  # the search does shrink Gaussian rows


def test_kmeans_per_table_and_constant_rows():
    x = np.ones((4, 16), np.float32)
    for m in Q.METHODS:
        y = Q.dequantize(Q.quantize(x, m, 4))
        assert np.allclose(y, 1.0, atol=1e-3), m
    q = Q.quantize(np.random.default_rng(1).normal(size=(10, 16)).astype(np.float32),
                   "kmeans", 3, per_table=True)
    assert q.codebook.shape == (1, 8) and q.row_overhead_bytes == 0
    with pytest.raises(ValueError):
        Q.quantize(x, "log", 4)
