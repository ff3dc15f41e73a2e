"""The fused quantizer paths give the bytes of the separate kernels, bit for bit.

``quantize_rows`` codes, packs and measures the error in one pass per row, the range search
runs rows side by side, k-means stops at a fixed point: each is compared here with the
row-by-row reference (the scalar loss ``_uniform_loss``, ``_quant_uniform`` + ``pack_bits`` +
``dequantize`` + ``row_l2_error``, Lloyd's algorithm for all its iterations)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpiec.kernels import quantize as Q
from numba import njit


def _rows(seed: int, n: int = 300, dim: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.05, (max(n, 8), dim + 1)).astype(np.float32)
    x[:5] = rng.uniform(-1, 1, (5, dim + 1))
    x[5] = 0.25  # a constant row
    x[6, :dim] = np.linspace(-1, 1, dim)
    x[7, min(3, dim - 1)] = 0.0
    return x[:n]


@njit
def _scalar_range(x, bits, n_bins, ratio):
    """The greedy search row by row, in float32 (fbgemm's ``param_search_greedy``)."""
    n, dim = x.shape
    f32 = np.float32
    levels = f32((1 << bits) - 1)
    min_bins = f32(n_bins) * (f32(1.0) - f32(ratio))
    lo_out = np.empty(n)
    hi_out = np.empty(n)
    for r in range(n):
        xmin = x[r, 0]
        xmax = xmin
        for c in range(dim):
            xmin = min(xmin, x[r, c])
            xmax = max(xmax, x[r, c])
        step = (xmax - xmin) / f32(n_bins)
        thr = min_bins * step
        cur_lo, cur_hi = xmin, xmax
        cur = Q._uniform_loss(x, r, levels, xmin, xmax)
        best_lo, best_hi, best = xmin, xmax, f32(np.inf)
        steps = 0
        while cur_lo + thr < cur_hi:
            steps += 1
            l1 = Q._uniform_loss(x, r, levels, cur_lo + step, cur_hi)
            l2 = Q._uniform_loss(x, r, levels, cur_lo, cur_hi - step)
            if cur < l1 and cur < l2 and cur < best:
                best_lo, best_hi, best = cur_lo, cur_hi, cur
            before = (cur_lo, cur_hi)
            if l1 < l2:
                cur_lo, cur = cur_lo + step, l1
            else:
                cur_hi, cur = cur_hi - step, l2
            if (cur_lo, cur_hi) == before or steps >= math.ceil(n_bins) + 2:
                break  # a step that moves nothing in float32, or the step cap
        lo_out[r] = best_lo
        hi_out[r] = best_hi
    return lo_out, hi_out


def _stuck_rows() -> np.ndarray:
    """Rows whose range is a few float32 ulps of their values: a search step moves nothing."""
    x = np.full((70, 16), 1000.0, np.float32)
    x[:, 3] = np.nextafter(np.float32(1000.0), np.float32(2000.0))
    x[1::2, 5] = np.nextafter(np.float32(1000.0), np.float32(0.0))
    x[2:, 9] += np.arange(68, dtype=np.float32) * np.float32(6.1e-5)
    return x


def test_a_search_whose_step_moves_nothing_ends():
    x = _stuck_rows()
    for bits in (2, 4):
        lo, hi = Q.adaptive_range(x, bits, 200.0, 0.16)
        rlo, rhi = _scalar_range(x, bits, 200.0, 0.16)
        assert lo.tobytes() == rlo.tobytes() and hi.tobytes() == rhi.tobytes()
        assert np.all(lo >= x.min(axis=1)) and np.all(hi <= x.max(axis=1))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 127, 128, 129, 300])
def test_side_by_side_range_search_is_the_scalar_one(bits, n):
    x = np.ascontiguousarray(_rows(bits * 7 + n, n)[:, :16])
    lo, hi = Q.adaptive_range(x, bits, 200.0, 0.16)
    rlo, rhi = _scalar_range(x, bits, 200.0, 0.16)
    assert lo.tobytes() == rlo.tobytes() and hi.tobytes() == rhi.tobytes()


def _kmeans_reference(vals: np.ndarray, n_cent: int, iters: int) -> np.ndarray:
    """Lloyd's algorithm for all its iterations, sorting every time (the kernel before)."""
    vmin, vmax = vals.min(), vals.max()
    cent = np.array([vmin + (vmax - vmin) * i / (n_cent - 1) for i in range(n_cent)])
    for _ in range(iters):
        sums, cnt = np.zeros(n_cent), np.zeros(n_cent)
        for v in vals:
            a = Q._assign(v, cent)
            sums[a] += v
            cnt[a] += 1
        for i in range(n_cent):
            if cnt[i] > 0:
                cent[i] = sums[i] / cnt[i]
        cent.sort()
    return cent


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_kmeans_fixed_point_stop_is_exact(bits):
    x = _rows(bits, 40)
    book = np.empty((40, 1 << bits))
    Q._kmeans_book(x, 16, 20, book)
    for r in range(40):
        ref = _kmeans_reference(x[r, :16].astype(np.float64), 1 << bits, 20)
        assert book[r].tobytes() == ref.tobytes()


@pytest.mark.parametrize("method", Q.METHODS)
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("dim", [16, 7, 1])
def test_fused_pass_is_the_separate_kernels(method, bits, dim):
    rows = _rows(dim * 10 + bits, 130, dim)
    w = np.ascontiguousarray(rows[:, :dim])
    q, err = Q.quantize_rows(rows, dim, method, bits)
    # the separate kernels: codes, then pack, then dequantize and the error
    codes = np.empty(w.shape, np.uint8)
    if method == "kmeans":
        Q._kmeans_codes(w, q.codebook.astype(np.float64), codes)
    elif method == "symmetric":
        qm = (1 << (bits - 1)) - 1
        s64 = q.scale.astype(np.float64)
        Q._quant_uniform(w, float(2 * qm), s64, -qm * s64, codes)
    else:
        Q._quant_uniform(w, float((1 << bits) - 1), q.scale.astype(np.float64),
                         q.bias.astype(np.float64), codes)
    packed = np.empty_like(q.packed)
    Q.pack_bits(codes, bits, packed)
    assert packed.tobytes() == q.packed.tobytes()
    assert err.tobytes() == Q.row_l2_error(w, Q.dequantize(q)).tobytes()
    q2 = Q.quantize(w, method, bits)
    assert q2.packed.tobytes() == q.packed.tobytes()
    for name in ("scale", "bias", "codebook"):
        a, b = getattr(q, name), getattr(q2, name)
        assert (a is None and b is None) or a.tobytes() == b.tobytes()


def test_empty_rows():
    q, err = Q.quantize_rows(np.empty((0, 17), np.float32), 16, "adaptive", 4)
    assert q.packed.shape == (0, 8) and err.shape == (0,)
