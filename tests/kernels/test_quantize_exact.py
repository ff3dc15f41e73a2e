"""The quantizers' bytes are those of the kernels before the adaptive and k-means rewrite.

Except the adaptive range search itself, which now computes its loss in float32 (as fbgemm's
does; ``test_quantize_paths`` holds it to its row-by-row float32 reference): ``_reference`` takes
the ranges from ``Q.adaptive_range``, and the previous float64 search below is kept to show the
float32 one as good (``test_float32_search_is_as_good_as_the_float64_one``).

The previous implementation is kept below verbatim as the slow reference (``_reference``: its
lane-wise range search, binary-search assignment, Lloyd's iterations, fp16 codebooks sorted by
numpy, and the fused pack of codes and errors). Every method and width on random rows and a set
of edge rows (constant, all-zero and mixed-sign-zero rows, dim 1 and 2, fp16-range extremes,
float32 subnormals, rows on a quantization grid, two-valued rows, ties) must give the same packed
codes, fp16 scales, biases and codebooks, and per-row errors, byte for byte."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpiec.kernels import quantize as Q
from numba import njit

# ---- the previous implementation, verbatim (numba's cache off; quantize_rows is _reference) ----


@njit(nogil=True)
def _uniform_loss(x, r, levels, lo, hi):
    # L2 error of asymmetric quantization of row r over [lo, hi] (float32 params); the scalar
    # reference of _pair_loss (tests compare the two)
    dim = x.shape[1]
    scale = (hi - lo) / levels
    s = 0.0
    if scale <= 0:
        for c in range(dim):
            d = x[r, c] - lo
            s += d * d
        return math.sqrt(s)
    inv = 1.0 / scale
    for c in range(dim):
        q = math.floor((x[r, c] - lo) * inv + 0.5)
        q = min(max(q, 0.0), levels)
        d = x[r, c] - (q * scale + lo)
        s += d * d
    return math.sqrt(s)


LANES = 64  # rows the range search runs side by side (one SIMD lane each, per-row sums in order)


@njit(nogil=True)
def _lane_params(lo, hi, levels, nb, p, k):
    """``p[k]``, ``p[k+1]``, ``p[k+2]`` = bias, scale, 1/scale of each lane's range
    ``[lo, hi]``. A scale <= 0 becomes (lo, 0, 0): then q = 0 and d = x - (0 * 0 + lo) = x - lo
    exactly, the scalar loss's degenerate branch, with no branch in the lanes' loop."""
    b, s, i = p[k], p[k + 1], p[k + 2]
    for j in range(nb):  # selects, no branches: vectorizes (1/0 = inf is computed, never kept)
        scale = (hi[j] - lo[j]) / levels
        pos = scale > 0
        b[j] = lo[j]
        s[j] = scale if pos else 0.0
        i[j] = 1.0 / scale if pos else 0.0


@njit(nogil=True, inline="always")
def _two_terms(x, b1, s1, i1, b2, s2, i2, levels, e1, e2):
    # one column's squared error added to each of the two ranges' sums (the scalar loss's
    # operations: float(math.floor) is its int64 floor widened back; clamps as selects, q is
    # never NaN for finite rows)
    q = float(math.floor((x - b1) * i1 + 0.5))
    q = q if q > 0.0 else 0.0
    q = q if q < levels else levels
    d = x - (q * s1 + b1)
    e1 += d * d
    q = float(math.floor((x - b2) * i2 + 0.5))
    q = q if q > 0.0 else 0.0
    q = q if q < levels else levels
    d = x - (q * s2 + b2)
    e2 += d * d
    return e1, e2


@njit(nogil=True)
def _pair_loss(xt, nb, levels, p, acc):
    """The L2 losses of two ranges per lane, every lane's sum in column order (the scalar
    ``_uniform_loss``'s order, so each is bit-identical to it): ``p[0..2]`` bias, scale, 1/scale
    of range 1, ``p[3..5]`` of range 2, per lane; ``acc[0]``, ``acc[1]`` receive the losses."""
    dim = xt.shape[0]
    a1 = acc[0]
    a2 = acc[1]
    b1, s1, i1, b2, s2, i2 = p[0], p[1], p[2], p[3], p[4], p[5]
    for j in range(nb):
        a1[j] = 0.0
        a2[j] = 0.0
    c = 0
    while c + 4 <= dim:  # four columns a pass: the lane's parameters are loaded once for four
        v0, v1, v2, v3 = xt[c], xt[c + 1], xt[c + 2], xt[c + 3]
        for j in range(nb):  # lanes are independent: the loop vectorizes across rows
            e1 = a1[j]
            e2 = a2[j]
            e1, e2 = _two_terms(v0[j], b1[j], s1[j], i1[j], b2[j], s2[j], i2[j], levels, e1, e2)
            e1, e2 = _two_terms(v1[j], b1[j], s1[j], i1[j], b2[j], s2[j], i2[j], levels, e1, e2)
            e1, e2 = _two_terms(v2[j], b1[j], s1[j], i1[j], b2[j], s2[j], i2[j], levels, e1, e2)
            e1, e2 = _two_terms(v3[j], b1[j], s1[j], i1[j], b2[j], s2[j], i2[j], levels, e1, e2)
            a1[j] = e1
            a2[j] = e2
        c += 4
    while c < dim:
        v0 = xt[c]
        for j in range(nb):
            a1[j], a2[j] = _two_terms(v0[j], b1[j], s1[j], i1[j], b2[j], s2[j], i2[j], levels,
                                      a1[j], a2[j])
        c += 1
    for j in range(nb):
        a1[j] = math.sqrt(a1[j])
        a2[j] = math.sqrt(a2[j])


@njit(nogil=True)
def adaptive_range(x, bits, n_bins, ratio):
    """Greedy range search per row; returns (lo, hi) float64 arrays.

    Rows are searched ``LANES`` at a time, side by side (a row per lane, transposed to float64
    once): every lane takes exactly the scalar search's steps, its losses summed in the same
    order, so the ranges are bit-identical to a row-by-row search (``_uniform_loss``); a lane
    whose search ended idles until the block's last one ends."""
    n, dim = x.shape
    levels = float((1 << bits) - 1)
    lo_out = np.empty(n)
    hi_out = np.empty(n)
    xt = np.empty((dim, LANES))
    p = np.empty((6, LANES))
    acc = np.empty((2, LANES))
    clo = np.empty(LANES)
    chi = np.empty(LANES)
    tmp = np.empty(LANES)
    cur = np.empty(LANES)
    best = np.empty(LANES)
    step = np.empty(LANES)
    thr = np.empty(LANES)
    active = np.zeros(LANES, np.bool_)
    for r0 in range(0, n, LANES):
        nb = min(LANES, n - r0)
        for j in range(nb):
            r = r0 + j
            xmin = float(x[r, 0])
            xmax = xmin
            for c in range(dim):
                v = float(x[r, c])
                xt[c, j] = v
                xmin = min(xmin, v)
                xmax = max(xmax, v)
            step[j] = (xmax - xmin) / n_bins
            thr[j] = n_bins * (1.0 - ratio) * step[j]
            clo[j], chi[j] = xmin, xmax
            lo_out[r], hi_out[r], best[j] = xmin, xmax, np.inf
            active[j] = clo[j] + thr[j] < chi[j]
        _lane_params(clo, chi, levels, nb, p, 0)
        _lane_params(clo, chi, levels, nb, p, 3)
        _pair_loss(xt, nb, levels, p, acc)
        for j in range(nb):
            cur[j] = acc[0, j]
        while True:
            more = False
            for j in range(nb):
                more |= active[j]
            if not more:
                break
            for j in range(nb):
                tmp[j] = clo[j] + step[j]
            _lane_params(tmp, chi, levels, nb, p, 0)  # range 1: the low end moved up a bin
            for j in range(nb):
                tmp[j] = chi[j] - step[j]
            _lane_params(clo, tmp, levels, nb, p, 3)  # range 2: the high end moved down a bin
            _pair_loss(xt, nb, levels, p, acc)
            for j in range(nb):  # the scalar search's step in selects: no branch to mispredict
                act = active[j]
                l1 = acc[0, j]
                l2 = acc[1, j]
                c0 = cur[j]
                lo, hi = clo[j], chi[j]
                local = act & (c0 < l1) & (c0 < l2) & (c0 < best[j])  # a local optimum, best so far
                lo_out[r0 + j] = lo if local else lo_out[r0 + j]
                hi_out[r0 + j] = hi if local else hi_out[r0 + j]
                best[j] = c0 if local else best[j]
                first = l1 < l2
                nlo = lo + step[j] if first else lo
                nhi = hi if first else hi - step[j]
                clo[j] = nlo if act else lo
                chi[j] = nhi if act else hi
                cur[j] = (l1 if first else l2) if act else c0
                active[j] = act & (nlo + thr[j] < nhi)
    return lo_out, hi_out


@njit(nogil=True)
def _assign(v, cent):
    # nearest centroid of sorted centroids via binary search on midpoints
    lo = 0
    hi = cent.size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if v > 0.5 * (cent[mid] + cent[mid + 1]):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True)
def _kmeans_1d(vals, n_cent, iters):
    # Lloyd's algorithm in 1-D, init on the uniform grid over [min, max]
    cent = np.empty(n_cent)
    _kmeans_1d_into(vals, iters, cent, np.empty(n_cent), np.empty(n_cent), np.empty(n_cent))
    return cent


@njit(nogil=True)
def _kmeans_1d_into(vals, iters, cent, sums, cnt, prev):
    """Lloyd's algorithm in 1-D into ``cent`` (init on the uniform grid over [min, max]), the
    buffers the caller's: ``sums``, ``cnt``, ``prev`` of ``cent``'s size.

    Stops early at a fixed point: an iteration that leaves every centroid as it found it would
    do so again at every later one (its assignment, sums and means only depend on the
    centroids), so the centroids are those of all ``iters`` iterations, bit for bit. The sort
    runs only when an emptied centroid fell out of order (sorting a sorted array is a no-op)."""
    n_cent = cent.size
    vmin = vals.min()
    vmax = vals.max()
    for i in range(n_cent):
        cent[i] = vmin + (vmax - vmin) * i / (n_cent - 1)
    for _ in range(iters):
        sums[:] = 0
        cnt[:] = 0
        for v in vals:
            a = _assign(v, cent)
            sums[a] += v
            cnt[a] += 1
        same = True
        for i in range(n_cent):
            prev[i] = cent[i]
            if cnt[i] > 0:
                cent[i] = sums[i] / cnt[i]
        ordered = True
        for i in range(n_cent - 1):
            if cent[i] > cent[i + 1]:
                ordered = False
                break
        if not ordered:
            cent.sort()
        for i in range(n_cent):
            if cent[i] != prev[i]:
                same = False
                break
        if same:
            break


@njit(nogil=True)
def _kmeans_rows(x, n_cent, iters, per_table, book):
    n = x.shape[0]
    if per_table:
        book[0, :] = _kmeans_1d(x.reshape(-1).astype(np.float64), n_cent, iters)
    else:
        for r in range(n):
            book[r, :] = _kmeans_1d(x[r].astype(np.float64), n_cent, iters)


@njit(nogil=True)
def _kmeans_book(x, dim, iters, book):
    """Per-row codebooks of the first ``dim`` columns of ``x`` into ``book`` (n, n_cent):
    ``_kmeans_rows`` without a temporary per row."""
    n_cent = book.shape[1]
    vals = np.empty(dim)
    sums = np.empty(n_cent)
    cnt = np.empty(n_cent)
    prev = np.empty(n_cent)
    for r in range(x.shape[0]):
        for c in range(dim):
            vals[c] = x[r, c]
        _kmeans_1d_into(vals, iters, book[r], sums, cnt, prev)


@njit(nogil=True)
def _row_extremes(x, dim, lo, hi, amax):
    """float32 min, max and max |x| of each row's first ``dim`` columns (a tie between signed
    zeros keeps the one met first)."""
    for r in range(x.shape[0]):
        a = x[r, 0]
        b = a
        m = abs(a)
        for c in range(1, dim):
            v = x[r, c]
            if v < a:
                a = v
            if v > b:
                b = v
            if abs(v) > m:
                m = abs(v)
        lo[r] = a
        hi[r] = b
        amax[r] = m


@njit(nogil=True, inline="always")
def _put_code(packed, r, code, bits, acc, nacc, o):
    # append ``code`` to row r's little-endian bit stream; full bytes are written out
    acc |= np.uint64(code) << np.uint64(nacc)
    nacc += bits
    while nacc >= 8:
        packed[r, o] = np.uint8(acc & np.uint64(0xFF))
        acc >>= np.uint64(8)
        nacc -= 8
        o += 1
    return acc, nacc, o


@njit(nogil=True)
def _quant_uniform_pack(x, dim, levels, scale, bias, bits, dscale, dbias, packed, err):
    """``_quant_uniform``, ``pack_bits`` and ``row_l2_error(x, dequantize(...))`` in one pass
    over each row (the same operations in the same order, so the bytes and errors are those of
    the three kernels): codes of the first ``dim`` columns of ``x`` from the widened fp16
    ``scale``/``bias``, packed into ``packed``; the row's L2 error against the float32
    dequantization ``code * dscale + dbias`` into ``err`` (skipped when ``err`` is empty)."""
    want_err = err.size > 0
    for r in range(x.shape[0]):
        s = float(scale[r])
        b = float(bias[r])
        ds = dscale[r]
        db = dbias[r]
        acc = np.uint64(0)
        nacc = 0
        o = 0
        e = 0.0
        for c in range(dim):
            if s > 0:
                q = math.floor((x[r, c] - b) / s + 0.5)
                q = min(max(q, 0.0), levels)
            else:
                q = 0.0
            code = np.uint8(q)
            acc, nacc, o = _put_code(packed, r, code, bits, acc, nacc, o)
            if want_err:
                d = float(x[r, c]) - float(np.float32(code) * ds + db)
                e += d * d
        if nacc > 0:
            packed[r, o] = np.uint8(acc)
        if want_err:
            err[r] = math.sqrt(e)


@njit(nogil=True)
def _kmeans_pack(x, dim, book, dbook, bits, packed, err):
    """``_kmeans_codes``, ``pack_bits`` and the row error against ``dbook`` (the float32
    codebook a restore uses) in one pass, as ``_quant_uniform_pack``."""
    want_err = err.size > 0
    for r in range(x.shape[0]):
        k = r if book.shape[0] > 1 else 0
        cent = book[k]
        acc = np.uint64(0)
        nacc = 0
        o = 0
        e = 0.0
        for c in range(dim):
            code = np.uint8(_assign(float(x[r, c]), cent))
            acc, nacc, o = _put_code(packed, r, code, bits, acc, nacc, o)
            if want_err:
                d = float(x[r, c]) - float(dbook[k, code])
                e += d * d
        if nacc > 0:
            packed[r, o] = np.uint8(acc)
        if want_err:
            err[r] = math.sqrt(e)


def _reference(
    rows: np.ndarray,
    dim: int,
    method: str,
    bits: int,
    *,
    n_bins: int = 200,
    ratio: float = 0.16,
    kmeans_iters: int = 20,
    per_table: bool = False,
    errors: bool = True,
) -> tuple[Q.QuantizedRows, np.ndarray]:
    """Quantize the first ``dim`` columns of float32 ``rows`` (n, >= dim), e.g. a shard's rows
    ``[weights | optimizer state]`` without copying the weights out, and (``errors``) each
    row's L2 error against what a restore yields, ``row_l2_error(w, dequantize(q))`` (else an
    empty array). Codes, packing and errors in one pass per row (``_quant_uniform_pack``,
    ``_kmeans_pack``); the bytes are those of the separate kernels."""
    if method not in Q.METHODS:
        raise ValueError(f"unknown quantizer {method!r} ({', '.join(Q.METHODS)})")
    if bits not in Q.BITS:
        raise ValueError(f"bits must be one of {Q.BITS}, got {bits}")
    x = np.asarray(rows)
    if x.dtype != np.float32 or x.ndim != 2 or x.strides[1] != 4:
        x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or not 0 < dim <= x.shape[1]:
        raise ValueError(f"rows must be 2-D with at least dim = {dim} > 0 columns")
    n = x.shape[0]
    packed = np.empty((n, Q.packed_row_bytes(dim, bits)), dtype=np.uint8)
    err = np.empty(n if errors else 0)
    scale = bias = book = None
    if method == "kmeans":
        if per_table:
            book64 = np.empty((1, 1 << bits))
            _kmeans_rows(np.ascontiguousarray(x[:, :dim]), 1 << bits, kmeans_iters, True, book64)
        else:
            book64 = np.empty((n, 1 << bits))
            _kmeans_book(x, dim, kmeans_iters, book64)
        book = book64.astype(np.float16)
        book.sort(axis=1)  # fp16 rounding may merge neighbours; keep sorted for _assign
        _kmeans_pack(x, dim, book.astype(np.float64), book.astype(np.float32), bits, packed, err)
        return Q.QuantizedRows(method, bits, dim, packed, None, None, book), err
    lo32 = np.empty(n, np.float32)
    hi32 = np.empty(n, np.float32)
    amax = np.empty(n, np.float32)
    if method != "adaptive":
        _row_extremes(x, dim, lo32, hi32, amax)
    if method == "symmetric":
        q = (1 << (bits - 1)) - 1
        scale = (amax / np.float32(q)).astype(np.float16)
        # codes -q..q stored as 0..2q: the uniform kernel with bias -q * scale
        s64 = scale.astype(np.float64)
        s32 = scale.astype(np.float32)
        _quant_uniform_pack(x, dim, float(2 * q), s64, -q * s64, bits, s32, -np.float32(q) * s32,
                            packed, err)
    else:
        levels = (1 << bits) - 1
        if method == "asymmetric":
            lo, hi = lo32.astype(np.float64), hi32.astype(np.float64)
        else:
            lo, hi = Q.adaptive_range(x[:, :dim], bits, float(n_bins), float(ratio))
        bias = lo.astype(np.float16)
        scale = ((hi - bias.astype(np.float64)) / levels).astype(np.float16)
        _quant_uniform_pack(x, dim, float(levels), scale.astype(np.float64), bias.astype(np.float64),
                            bits, scale.astype(np.float32), bias.astype(np.float32), packed, err)
    return Q.QuantizedRows(method, bits, dim, packed, scale, bias, book), err


# ---- the inputs ---------------------------------------------------------------------------


def _edge_rows(dim: int, seed: int) -> np.ndarray:
    """Rows that exercise the ties and degenerate cases, ``dim + 1`` columns (a state column)."""
    rng = np.random.default_rng(seed)
    rows = [
        np.full(dim, 0.25),                                  # constant
        np.zeros(dim),                                       # all +0
        -np.zeros(dim),                                      # all -0
        np.where(np.arange(dim) % 2 == 0, 0.0, -0.0),        # +0 and -0 mixed
        np.where(np.arange(dim) % 2 == 0, -0.0, 0.0),
        np.linspace(-1, 1, dim),                             # a grid: rounding ties
        np.linspace(0, 3, dim),
        np.arange(dim) % 4 * 0.5,                            # on a 2-bit grid
        np.where(np.arange(dim) % 3 == 0, 1.0, -1.0),        # two values
        np.where(np.arange(dim) % 5 == 0, 0.125, 0.0),       # a spike over zeros
        rng.choice([-65000.0, 65000.0, 0.0, 1.0], dim),      # fp16-range extremes
        np.full(dim, 65000.0),
        rng.choice([-65500.0, 65500.0], dim),
        rng.choice([1e-45, -1e-45, 3e-40, 0.0], dim),        # float32 subnormals
        rng.choice([6e-8, -6e-8, 3e-8, 0.0], dim),           # fp16 subnormals / ties
        rng.normal(0, 1e-6, dim),
        1.0 + np.arange(dim) * 1.2e-7,                       # a range of a few float32 ulps
        rng.integers(-3, 4, dim).astype(np.float64),         # repeated values
        rng.normal(0, 0.05, dim),
        rng.uniform(-1, 1, dim),
        np.sign(rng.normal(size=dim)) * rng.exponential(1.0, dim),  # heavy tails
        np.array([-1e-9, 1e-9, 1.0, 2.0] * dim)[:dim],       # centroids at fp16 -0 and +0
        np.array([1e-9, -1e-9, -1.0, 1.0, 0.5] * dim)[:dim],
    ]
    x = np.array(rows, dtype=np.float32)
    state = rng.uniform(0, 1, (x.shape[0], 1)).astype(np.float32)
    return np.hstack([x, state])


def _random_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.05, (n, dim + 1)).astype(np.float32)
    x[: n // 4] = rng.uniform(-1, 1, (n // 4, dim + 1))
    x[n // 4: n // 3] = np.round(x[n // 4: n // 3] * 64) / 64  # many exact ties
    x[n // 3: n // 2] *= rng.uniform(1e-3, 1e3, (n // 2 - n // 3, 1)).astype(np.float32)
    return x


def _inputs(dim: int) -> np.ndarray:
    return np.vstack([_edge_rows(dim, dim), _random_rows(150, dim, dim + 1)])


def _same(a: tuple[Q.QuantizedRows, np.ndarray], b: tuple[Q.QuantizedRows, np.ndarray]) -> None:
    (qa, ea), (qb, eb) = a, b
    assert qa.packed.tobytes() == qb.packed.tobytes()
    for name in ("scale", "bias", "codebook"):
        x, y = getattr(qa, name), getattr(qb, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert ea.tobytes() == eb.tobytes()


# ---- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", Q.METHODS)
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("dim", [1, 2, 3, 7, 16, 17, 64])
def test_bytes_are_the_previous_kernels(method, bits, dim):
    x = _inputs(dim)
    _same(Q.quantize_rows(x, dim, method, bits), _reference(x, dim, method, bits))
    w = np.ascontiguousarray(x[:, :dim])
    _same(Q.quantize_rows(w, dim, method, bits, errors=False),
          _reference(w, dim, method, bits, errors=False))


def _error_with(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, bits: int) -> np.ndarray:
    """Each row's L2 error quantized over [lo, hi] with fp16 parameters, as quantize_rows does."""
    levels = (1 << bits) - 1
    bias = lo.astype(np.float16).astype(np.float64)
    scale = ((hi - bias) / levels).astype(np.float16).astype(np.float64)
    packed = np.empty((x.shape[0], Q.packed_row_bytes(x.shape[1], bits)), np.uint8)
    err = np.empty(x.shape[0])
    _quant_uniform_pack(x, x.shape[1], float(levels), scale, bias, bits, scale.astype(np.float32),
                        bias.astype(np.float32), packed, err)
    return err


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_float32_search_is_as_good_as_the_float64_one(bits):
    x = np.ascontiguousarray(np.vstack([_inputs(16), _random_rows(3000, 16, 7)])[:, :16])
    new = _error_with(x, *Q.adaptive_range(x, bits, 200.0, 0.16), bits)
    old = _error_with(x, *adaptive_range(x, bits, 200.0, 0.16), bits)
    plain = _error_with(x, x.min(axis=1).astype(np.float64), x.max(axis=1).astype(np.float64), bits)
    assert np.all(np.isfinite(new))
    # the same search in another precision: most rows land on the same range, the rest on a
    # neighbouring local optimum; neither is better over the rows, and both beat [min, max]
    same = np.mean(new == old)
    assert same > 0.95, same
    assert abs(new.sum() / old.sum() - 1) < 0.002, (new.sum(), old.sum())
    assert new.sum() < plain.sum()


@pytest.mark.parametrize("n_bins,ratio", [(200, 0.16), (50, 0.5), (1000, 0.05), (3, 0.9)])
def test_adaptive_other_search_settings(n_bins, ratio):
    x = _inputs(16)
    for bits in (2, 8):
        _same(Q.quantize_rows(x, 16, "adaptive", bits, n_bins=n_bins, ratio=ratio),
              _reference(x, 16, "adaptive", bits, n_bins=n_bins, ratio=ratio))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("iters", [0, 1, 3, 20])
def test_kmeans_iterations_and_per_table(bits, iters):
    x = _inputs(16)
    _same(Q.quantize_rows(x, 16, "kmeans", bits, kmeans_iters=iters),
          _reference(x, 16, "kmeans", bits, kmeans_iters=iters))
    _same(Q.quantize_rows(x, 16, "kmeans", bits, kmeans_iters=iters, per_table=True),
          _reference(x, 16, "kmeans", bits, kmeans_iters=iters, per_table=True))


def test_many_random_rows():
    x = _random_rows(4000, 16, 99)
    for method, bits in (("adaptive", 2), ("adaptive", 4), ("adaptive", 8), ("kmeans", 2),
                         ("kmeans", 4), ("kmeans", 8)):
        _same(Q.quantize_rows(x, 16, method, bits), _reference(x, 16, method, bits))


@njit
def _halves(d):
    out = np.empty(d.size, np.uint16)
    u = d.view(np.uint64)
    for i in range(d.size):
        out[i] = Q._half_bits(u[i])
    back = np.empty(d.size)
    for i in range(d.size):
        back[i] = Q._half_value(out[i])
    return out, back


def test_fp16_rounding_is_numpys():
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    v = h[np.isfinite(h)].astype(np.float64)
    v = np.sort(v)
    mid = (v[:-1] + v[1:]) / 2  # the ties, and the doubles either side of them
    rng = np.random.default_rng(5)
    d = np.concatenate([v, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
                        rng.normal(0, 1, 200_000), rng.normal(0, 1e-5, 200_000),
                        rng.uniform(-7e4, 7e4, 100_000), [65519.99, 65520.0, 1e300, -1e300, 0.0,
                                                          -0.0, 2.0**-25, 2.0**-26, 5e-324]])
    bits, back = _halves(np.ascontiguousarray(d))
    with np.errstate(over="ignore"):  # 1e300 and the doubles from 65520 up round to inf
        ref = d.astype(np.float16)
    assert bits.tobytes() == ref.view(np.uint16).tobytes()
    fin = np.isfinite(back)
    assert back[fin].tobytes() == ref.astype(np.float64)[fin].tobytes()


def test_zero_bins_raise_as_before():
    x = _inputs(16)
    with pytest.raises(ZeroDivisionError):
        _reference(x, 16, "adaptive", 4, n_bins=0)
    with pytest.raises(ZeroDivisionError):
        Q.quantize_rows(x, 16, "adaptive", 4, n_bins=0)


def test_zero_rows():
    for method in Q.METHODS:
        q, err = Q.quantize_rows(np.empty((0, 17), np.float32), 16, method, 4)
        assert q.packed.shape == (0, 8) and err.shape == (0,)


def test_kmeans_rows_with_wide_exponent_spans():
    """Rows whose values span more binades than float64 sums them exactly in any order (the
    kernel's column-order fallback) beside rows just inside the span, every width."""
    rng = np.random.default_rng(5)
    x = rng.normal(0, 0.05, (400, 17)).astype(np.float32)
    scale = np.float32(2.0) ** rng.integers(-40, 1, (400, 17)).astype(np.float32)
    x[:200] *= scale[:200]                      # most rows far outside the exact span
    x[200:300, 0] = np.float32(2.0 ** -20)      # spans near the limit, either side
    x[200:300, 1] = np.float32(2.0 ** 5) * np.sign(x[200:300, 1])
    x[300:, 2] = np.float32(1e-44)              # a float32 subnormal beside normal values
    for bits in (2, 3, 4, 8):
        for iters in (1, 20):
            _same(Q.quantize_rows(x, 16, "kmeans", bits, kmeans_iters=iters),
                  _reference(x, 16, "kmeans", bits, kmeans_iters=iters))


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130, 700])
def test_kmeans_lanes_freed_and_refilled(n):
    """Rows of every iteration count shuffled together, so lanes free up in place at every
    position and, once the rows run out, the last lanes fill the holes: every row count around
    the lane count (64), iteration limits that stop rows early or not."""
    rng = np.random.default_rng(n)
    pool = np.vstack([_edge_rows(16, 3), _random_rows(2 * n, 16, n)])
    x = np.ascontiguousarray(pool[rng.permutation(pool.shape[0])[:n]])
    for bits in (2, 3, 4, 8):
        for iters in (2, 3, 20):
            _same(Q.quantize_rows(x, 16, "kmeans", bits, kmeans_iters=iters),
                  _reference(x, 16, "kmeans", bits, kmeans_iters=iters))


def test_kmeans_midpoints_rounded_down_to_float32():
    """The finishing count compares float32 values with each fp16 midpoint rounded down to
    float32 (``Q._below32``): the same comparisons as against the float64 midpoint, for every
    float32 near it. Midpoints of every kind of fp16 pair: random, subnormal, zero (both signs),
    the largest, neighbours, far apart (midpoints no float32 holds), equal."""
    rng = np.random.default_rng(11)
    h = rng.integers(0, 0x7C00, 20000).astype(np.uint16) | (rng.integers(0, 2, 20000) << 15).astype(np.uint16)
    special = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0x3C01,
                        0xBC00, 0x6400, 0x0002], np.uint16)
    a = np.concatenate([h, np.repeat(special, special.size)]).view(np.float16).astype(np.float64)
    b = np.concatenate([np.roll(h, 1), np.tile(special, special.size)]).view(np.float16).astype(np.float64)
    b[:2000] = np.nextafter(a[:2000].astype(np.float16), np.float16(np.inf)).astype(np.float64)  # neighbours
    mids = 0.5 * (a + b)
    inexact = 0
    for m in mids:
        f = np.float32(Q._below32(m))
        assert f <= m and np.nextafter(f, np.float32(np.inf)) > m
        inexact += float(f) != m
        up, down = np.float32(np.inf), np.float32(-np.inf)
        near = [np.float32(m), f, np.nextafter(f, up), np.nextafter(f, down),
                np.nextafter(np.float32(m), up), np.nextafter(np.float32(m), down)]
        for v in near:
            assert (float(v) > m) == (v > f), (m, v, f)
    assert inexact > 1000  # many midpoints are not float32 values: the rounding is exercised
