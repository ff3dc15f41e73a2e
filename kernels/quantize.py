"""Row-wise quantizers for Check-N-Run checkpoints.

Owns: quantization of float32 embedding rows to 2, 3, 4 or 8 bits, the bit
packing, dequantization and the row-wise L2 error. Methods:

* ``symmetric``  -- codes ``-q..q`` (q = 2^(bits-1) - 1) times a per-row fp16
  scale ``max|x| / q``; stores the scale (2 bytes per row);
* ``asymmetric`` -- ``2^bits`` levels from a per-row fp16 bias (min) with fp16
  scale ``(max - min) / (2^bits - 1)``; stores scale and bias (4 bytes);
* ``adaptive``   -- asymmetric over a range found by fbgemm's / Check-N-Run's
  greedy search: from ``[min, max]`` shrink by ``(max - min) / n_bins`` on the
  side that lowers the row's L2 error most, stop before the range is below
  ``(1 - ratio)`` of the original, return the best local optimum seen
  (or ``[min, max]`` if none); stores scale and bias (4 bytes);
* ``kmeans``     -- 1-D k-means (Lloyd, deterministic init on the uniform grid)
  with ``2^bits`` fp16 centroids per row (``2 * 2^bits`` bytes per row) or one
  codebook per table (``per_table=True``).

Invariants: a row of ``dim`` values packs into exactly ``ceil(dim * bits / 8)``
bytes, codes little-endian in a bit stream (code ``c`` of a row occupies bits
``c*bits .. c*bits+bits-1``); dequantization uses the stored fp16 parameters,
so ``dequantize(quantize(x))`` is what a restore yields. Values must be finite
and within fp16 range (|x| < 65504), which embedding weights are.

Fast paths, each bit-identical to the row-by-row kernels it replaces (the tests compare
them; ``tests/kernels/test_quantize_exact.py`` keeps the previous implementation verbatim):
``quantize_rows`` codes, packs and measures each row's error in one pass over the rows in
place (``_quant_uniform_pack``, blocks of ``PACK_ROWS``); ``adaptive_range`` searches
``LANES`` rows side by side, every lane taking the scalar search's steps with its loss summed
in the same order; per-row k-means (``_kmeans_rows_pack``) runs ``KLANES`` rows side by side,
a lane taking the next row when its own reached the fixed point of Lloyd's iterations (which
every later iteration would keep), per midpoint a branch-free count and sum of the values above
it (exact sums; column order where a row's exponents span too far), the fp16 codebook rounded
in the kernel as numpy rounds. A row's minimum or maximum that is a zero met with both signs is
the one met first.

Performance rules these kernels follow (each measured): no call with array arguments inside a
per-row or per-step loop (numba increments and decrements every array's reference count
atomically per call); no stores into an output array from a loop whose loads could share
their address's low 12 bits ("4K aliasing": the search ran 2-2.5x slower in some processes);
branch-free lane loops (a ternary around a division kept one from vectorizing); lane arrays
on whole cache lines (``_empty_lines``: numba's 32-byte alignment split k-means' vector
accesses across lines for some heap placements, up to ~20% slower).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

__all__ = [
    "METHODS",
    "QuantizedRows",
    "adaptive_range",
    "dequantize",
    "pack_bits",
    "packed_row_bytes",
    "quantize",
    "quantize_rows",
    "row_l2_error",
    "unpack_bits",
]

METHODS = ("symmetric", "asymmetric", "adaptive", "kmeans")
BITS = (2, 3, 4, 8)


def packed_row_bytes(dim: int, bits: int) -> int:
    """Bytes of one row's packed codes: ceil(dim * bits / 8)."""
    return (dim * bits + 7) // 8


@njit(cache=True, nogil=True)
def pack_bits(codes, bits, out):
    """Pack uint8 codes (n, dim), each < 2^bits, into out (n, ceil(dim*bits/8))."""
    n, dim = codes.shape
    out[:] = 0
    for r in range(n):
        for c in range(dim):
            p = c * bits
            byte = p >> 3
            sh = p & 7
            v = np.uint16(codes[r, c]) << np.uint16(sh)
            out[r, byte] |= np.uint8(v & 0xFF)
            if sh + bits > 8:
                out[r, byte + 1] |= np.uint8(v >> np.uint16(8))


@njit(cache=True, nogil=True)
def unpack_bits(packed, bits, dim, out):
    """Inverse of pack_bits: out (n, dim) uint8."""
    n = packed.shape[0]
    mask = (1 << bits) - 1
    for r in range(n):
        for c in range(dim):
            p = c * bits
            byte = p >> 3
            sh = p & 7
            v = np.uint16(packed[r, byte])
            if sh + bits > 8:
                v |= np.uint16(packed[r, byte + 1]) << np.uint16(8)
            out[r, c] = np.uint8((v >> np.uint16(sh)) & mask)


@intrinsic
def _fma32(typingctx, a, b, c):
    """a * b + c rounded once (``llvm.fma.f32``: one FMA where the CPU has it, libm's exact
    ``fmaf`` where not, so the value is the same on every machine)."""
    if not (a == b == c == types.float32):
        return None

    def codegen(context, builder, signature, args):
        f = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f], ir.FunctionType(f, [f, f, f]))
        return builder.call(fn, list(args))

    return types.float32(types.float32, types.float32, types.float32), codegen


@njit(cache=True, nogil=True)
def _uniform_loss(x, r, levels, lo, hi):
    # squared L2 error of asymmetric quantization of row r over [lo, hi] in float32, the search's
    # objective (x float32; levels, lo, hi float32): the scalar reference of adaptive_range's
    # lanes (tests compare the two). Per value u = x - lo, q = clamp(floor(u / scale + 1/2)),
    # d = u - q * scale, the two multiply-adds fused; scale = (hi - lo) * (1 / levels)
    dim = x.shape[1]
    zero = np.float32(0.0)
    half = np.float32(0.5)
    scale = (hi - lo) * (np.float32(1.0) / levels)
    s = zero
    if scale <= zero:
        for c in range(dim):
            d = x[r, c] - lo
            s = _fma32(d, d, s)
        return s
    inv = np.float32(1.0) / scale
    for c in range(dim):
        u = x[r, c] - lo
        q = np.floor(_fma32(u, inv, half))
        q = min(max(q, zero), levels)
        d = _fma32(-q, scale, u)
        s = _fma32(d, d, s)
    return s


LANES = 128  # rows the range search runs side by side (one SIMD lane each, per-row sums in order)


@njit(cache=True, nogil=True, inline="always")
def _term(x, b, s, i, levels, e, zero, half):
    # one column's squared error added to the range's sum, in float32: the scalar loss's
    # operations, the clamps as selects, the degenerate range (s = i = 0) as q = 0 and
    # d = x - lo exactly (every argument float32: a float64 literal would widen the lane)
    u = x - b
    q = np.floor(_fma32(u, i, half))
    q = q if q > zero else zero
    q = q if q < levels else levels
    d = _fma32(-q, s, u)
    return _fma32(d, d, e)


@njit(cache=True, nogil=True, error_model="numpy")
def adaptive_range(x, bits, n_bins, ratio):
    """Greedy range search per row (fbgemm's / caffe2's ``param_search_greedy``, computed in
    float32 as theirs is); returns (lo, hi) float64 arrays holding float32 values.

    Rows are searched ``LANES`` at a time, side by side (a row per lane, transposed once): every
    lane takes exactly the scalar search's steps, its losses summed in the same order, so the
    ranges are bit-identical to a row-by-row search (``_uniform_loss``); a lane whose search
    ended idles until the block's last one ends. One function, no calls with array arguments
    (each would cost every array an atomic reference count pair per step)."""
    n, dim = x.shape
    if n > 0 and n_bins == 0:  # the numpy error model would divide silently: raise as before
        raise ZeroDivisionError("division by zero")
    f32 = np.float32
    zero = f32(0.0)
    half = f32(0.5)
    levels = f32((1 << bits) - 1)
    rlev = f32(1.0) / levels
    nb32 = f32(n_bins)
    max_steps = int(math.ceil(n_bins)) + 2 if n > 0 else 0
    min_bins = nb32 * (f32(1.0) - f32(ratio))
    lo_out = np.empty(n)
    hi_out = np.empty(n)
    # one buffer, 4096-aligned, laid out so that the loss loop's stores (a1, a2: the first 1 KiB
    # of a page) never share their address's low 12 bits with a load in flight (the lanes'
    # parameters fill the rest of that page, xt starts on the next): such "4K aliasing" stalls
    # a load behind an unrelated store, and heap-placed arrays measured 2-3x slower in some runs
    L = LANES
    rows_xt = -(-dim * L // 1024) * 1024  # xt padded to whole pages
    buf = np.empty(1024 + 8 * L + rows_xt + 10 * L, np.float32)  # alignment, a1..i2, xt, rest
    off = ((4096 - (buf.ctypes.data & 4095)) & 4095) // 4
    a1 = buf[off:off + L]
    a2 = buf[off + L:off + 2 * L]
    b1 = buf[off + 2 * L:off + 3 * L]
    s1 = buf[off + 3 * L:off + 4 * L]
    i1 = buf[off + 4 * L:off + 5 * L]
    b2 = buf[off + 5 * L:off + 6 * L]
    s2 = buf[off + 6 * L:off + 7 * L]
    i2 = buf[off + 7 * L:off + 8 * L]
    o = off + 8 * L
    xt = buf[o:o + dim * L].reshape((dim, L))
    o += rows_xt
    clo = buf[o:o + L]
    chi = buf[o + L:o + 2 * L]
    t1 = buf[o + 2 * L:o + 3 * L]
    t2 = buf[o + 3 * L:o + 4 * L]
    cur = buf[o + 4 * L:o + 5 * L]
    best = buf[o + 5 * L:o + 6 * L]
    step = buf[o + 6 * L:o + 7 * L]
    thr = buf[o + 7 * L:o + 8 * L]
    blo = buf[o + 8 * L:o + 9 * L]
    bhi = buf[o + 9 * L:o + 10 * L]
    active = np.zeros(LANES, np.bool_)
    mn = np.empty(LANES, np.float32)
    mx = np.empty(LANES, np.float32)
    inf = f32(np.inf)
    first = True
    for r0 in range(0, n, LANES):
        nb = min(LANES, n - r0)
        # the block's rows transposed, a column at a time (a row at a time stored 16 values a
        # page apart, and a row read with such stores in flight measured up to 3x slower for some
        # placements of x); each lane's min and max taken column by column (min/max of equal
        # values keep the first: a signed zero)
        for j in range(nb):
            v = f32(x[r0 + j, 0])
            mn[j] = v
            mx[j] = v
        for c in range(dim):
            for j in range(nb):
                v = f32(x[r0 + j, c])
                xt[c, j] = v
                mn[j] = min(mn[j], v)
                mx[j] = max(mx[j], v)
        for j in range(nb):
            xmin = mn[j]
            xmax = mx[j]
            step[j] = (xmax - xmin) / nb32
            thr[j] = min_bins * step[j]
            clo[j], chi[j] = xmin, xmax
            blo[j], bhi[j], best[j] = xmin, xmax, inf
            active[j] = clo[j] + thr[j] < chi[j]
        first = True  # the block's first pass: the loss of [min, max] (both "candidates")
        steps = 0
        while True:
            if not first:
                more = False
                for j in range(nb):
                    more |= active[j]
                if not more:
                    break
                steps += 1
            going = steps < max_steps  # a lane's step count is the block's while it is active
            # candidate 1: the low end moved up a bin; 2: the high end moved down a bin
            if first:
                for j in range(nb):
                    t1[j] = clo[j]
                    t2[j] = chi[j]
            else:
                for j in range(nb):
                    t1[j] = clo[j] + step[j]
                for j in range(nb):
                    t2[j] = chi[j] - step[j]
            # bias, scale, 1/scale of each lane's two ranges; a scale <= 0 becomes (lo, 0, 0):
            # q = 0 and d = x - (0 * 0 + lo) = x - lo exactly, the scalar loss's degenerate
            # branch, with no branch in the lanes' loop (which vectorizes: 1/0 is computed,
            # never kept); written out, not called (see above)
            for j in range(nb):
                scale = (chi[j] - t1[j]) * rlev
                inv = f32(1.0) / scale  # the numpy error model: 1/0 = inf, not kept
                pos = scale > zero
                b1[j] = t1[j]
                s1[j] = scale if pos else zero
                i1[j] = inv if pos else zero
            for j in range(nb):
                scale = (t2[j] - clo[j]) * rlev
                inv = f32(1.0) / scale  # the numpy error model: 1/0 = inf, not kept
                pos = scale > zero
                b2[j] = clo[j]
                s2[j] = scale if pos else zero
                i2[j] = inv if pos else zero
            for j in range(nb):
                a1[j] = zero
            for j in range(nb):
                a2[j] = zero
            c = 0
            while c + 4 <= dim:  # four columns a pass: a lane's parameters loaded once for four
                for j in range(nb):  # lanes are independent: the loop vectorizes across rows
                    v0, v1, v2, v3 = xt[c, j], xt[c + 1, j], xt[c + 2, j], xt[c + 3, j]
                    bb, ss, ii = b1[j], s1[j], i1[j]
                    e = a1[j]
                    e = _term(v0, bb, ss, ii, levels, e, zero, half)
                    e = _term(v1, bb, ss, ii, levels, e, zero, half)
                    e = _term(v2, bb, ss, ii, levels, e, zero, half)
                    e = _term(v3, bb, ss, ii, levels, e, zero, half)
                    a1[j] = e
                    bb, ss, ii = b2[j], s2[j], i2[j]
                    e = a2[j]
                    e = _term(v0, bb, ss, ii, levels, e, zero, half)
                    e = _term(v1, bb, ss, ii, levels, e, zero, half)
                    e = _term(v2, bb, ss, ii, levels, e, zero, half)
                    e = _term(v3, bb, ss, ii, levels, e, zero, half)
                    a2[j] = e
                c += 4
            while c < dim:
                for j in range(nb):
                    v0 = xt[c, j]
                    a1[j] = _term(v0, b1[j], s1[j], i1[j], levels, a1[j], zero, half)
                    a2[j] = _term(v0, b2[j], s2[j], i2[j], levels, a2[j], zero, half)
                c += 1
            if first:
                for j in range(nb):
                    cur[j] = a1[j]
                first = False
                continue
            for j in range(nb):  # the scalar search's step in selects: no branch to mispredict
                act = active[j]
                l1 = a1[j]
                l2 = a2[j]
                c0 = cur[j]
                lo, hi = clo[j], chi[j]
                local = act & (c0 < l1) & (c0 < l2) & (c0 < best[j])  # a local optimum, best so far
                blo[j] = lo if local else blo[j]
                bhi[j] = hi if local else bhi[j]
                best[j] = c0 if local else best[j]
                go1 = l1 < l2
                nlo = lo + step[j] if go1 else lo
                nhi = hi if go1 else hi - step[j]
                clo[j] = nlo if act else lo
                chi[j] = nhi if act else hi
                cur[j] = (l1 if go1 else l2) if act else c0
                # a step too small to move an end in float32 (a row whose range is a few ulps of
                # its values) would loop forever: such a lane ends, as one past max_steps does
                moved = (nlo != lo) | (nhi != hi)
                active[j] = act & moved & going & (nlo + thr[j] < nhi)
        for j in range(nb):  # written once a block: stores to a page-aligned output every step
            lo_out[r0 + j] = blo[j]  # (4K-aliased with the loss loop's loads) cost up to 3x
            hi_out[r0 + j] = bhi[j]
    return lo_out, hi_out


@njit(cache=True, nogil=True)
def _quant_uniform(x, levels, scale, bias, codes):
    # codes = clip(round((x - bias) / scale), 0, levels); scale, bias: the stored
    # fp16 parameters widened to float64, so codes match what dequantize uses
    n, dim = x.shape
    for r in range(n):
        s = float(scale[r])
        b = float(bias[r])
        for c in range(dim):
            if s > 0:
                q = math.floor((x[r, c] - b) / s + 0.5)
                q = min(max(q, 0.0), levels)
            else:
                q = 0.0
            codes[r, c] = np.uint8(q)


@njit(cache=True, nogil=True)
def _dequant_uniform(codes, scale, bias, out):
    n, dim = codes.shape
    for r in range(n):
        s = np.float32(scale[r])
        b = np.float32(bias[r])
        for c in range(dim):
            out[r, c] = np.float32(codes[r, c]) * s + b


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True, inline="always")
def _midpoints(cent, mids):
    # _assign's decision points between neighbouring centroids
    for k in range(cent.size - 1):
        mids[k] = 0.5 * (cent[k] + cent[k + 1])


@njit(cache=True, nogil=True, inline="always")
def _nearest(vals, n, mids, code):
    """``code[c] = _assign(vals[c], cent)`` for ``c < n``, ``mids`` the sorted centroids'
    midpoints: those are non-decreasing (rounding is monotone), so ``v > mids[k]`` holds for a
    prefix of ``k`` and the binary search returns that prefix's length -- counted here without
    a branch, all values at once (the loop over values vectorizes)."""
    for c in range(n):
        code[c] = 0
    for k in range(mids.size):
        t = mids[k]
        for c in range(n):
            code[c] += 1 if vals[c] > t else 0


@njit(cache=True, nogil=True)
def _kmeans_1d(vals, n_cent, iters):
    # Lloyd's algorithm in 1-D, init on the uniform grid over [min, max]
    cent = np.empty(n_cent)
    _kmeans_1d_into(vals, iters, cent, np.empty(n_cent), np.empty(n_cent), np.empty(n_cent),
                    np.empty(n_cent - 1), np.empty(vals.size, np.int64))
    return cent


@njit(cache=True, nogil=True, inline="always")
def _kmeans_1d_into(vals, iters, cent, sums, cnt, prev, mids, code):
    """Lloyd's algorithm in 1-D into ``cent`` (init on the uniform grid over [min, max]), the
    buffers the caller's: ``sums``, ``cnt``, ``prev`` of ``cent``'s size, ``mids`` one less,
    ``code`` of ``vals``' size.

    Stops early at a fixed point: an iteration that leaves every centroid as it found it would
    do so again at every later one (its assignment, sums and means only depend on the
    centroids), so the centroids are those of all ``iters`` iterations, bit for bit. The sort
    runs only when an emptied centroid fell out of order (sorting a sorted array is a no-op),
    so the centroids are sorted at every assignment (``_nearest``'s condition)."""
    n_cent = cent.size
    n = vals.size
    vmin = vals[0]  # vals.min() and vals.max(): the first of equal values (a signed zero)
    vmax = vmin
    for c in range(1, n):
        v = vals[c]
        if v < vmin:
            vmin = v
        if v > vmax:
            vmax = v
    for i in range(n_cent):
        cent[i] = vmin + (vmax - vmin) * i / (n_cent - 1)
    for _ in range(iters):
        _midpoints(cent, mids)
        _nearest(vals, n, mids, code)
        for i in range(n_cent):
            sums[i] = 0.0
            cnt[i] = 0.0
        for c in range(n):  # each centroid's sum in the values' order
            a = code[c]
            sums[a] += vals[c]
            cnt[a] += 1
        # cent[i] = sums[i] / cnt[i] where cnt[i] > 0; the checks without branches (max(cnt, 1)
        # only changes the quotients that are not kept)
        ordered = True
        for i in range(n_cent):
            c0 = cent[i]
            prev[i] = c0
            m = sums[i] / max(cnt[i], 1.0)
            cent[i] = m if cnt[i] > 0 else c0
        for i in range(n_cent - 1):
            ordered &= not cent[i] > cent[i + 1]
        if not ordered:
            cent.sort()
        same = True
        for i in range(n_cent):
            same &= cent[i] == prev[i]
        if same:
            break


@njit(cache=True, nogil=True)
def _kmeans_rows(x, n_cent, iters, per_table, book):
    n = x.shape[0]
    if per_table:
        book[0, :] = _kmeans_1d(x.reshape(-1).astype(np.float64), n_cent, iters)
    else:
        for r in range(n):
            book[r, :] = _kmeans_1d(x[r].astype(np.float64), n_cent, iters)


@njit(cache=True, nogil=True)
def _kmeans_book(x, dim, iters, book):
    """Per-row codebooks of the first ``dim`` columns of ``x`` into ``book`` (n, n_cent):
    ``_kmeans_rows`` without a temporary per row."""
    n_cent = book.shape[1]
    vals = np.empty(dim)
    sums = np.empty(n_cent)
    cnt = np.empty(n_cent)
    prev = np.empty(n_cent)
    mids = np.empty(n_cent - 1)
    code = np.empty(dim, np.int64)
    for r in range(x.shape[0]):
        for c in range(dim):
            vals[c] = x[r, c]
        _kmeans_1d_into(vals, iters, book[r], sums, cnt, prev, mids, code)


_U = np.uint64


@njit(cache=True, nogil=True, inline="always")
def _half_bits(d):
    """The fp16 bits of float64 bits ``d`` (uint64), rounded to nearest even: numpy's
    ``npy_doublebits_to_halfbits`` (what ``astype(np.float16)`` does), bit for bit; its branches
    as selects (every case computed, one kept), so a loop of them vectorizes."""
    sgn = (d >> _U(48)) & _U(0x8000)
    d_exp = d & _U(0x7FF0000000000000)
    sig = d & _U(0x000FFFFFFFFFFFFF)
    # NaN: its significand's top bits, kept a NaN; inf and overflow: inf
    nan = _U(0x7C00) + (sig >> _U(42))
    nan = nan + _U(1) if nan == _U(0x7C00) else nan
    big = nan if (d_exp == _U(0x7FF0000000000000)) & (sig != _U(0)) else _U(0x7C00)
    # subnormal half: the significand aligned to the smallest exponent (998), rounded
    e = d_exp >> _U(52)
    sh = (e - _U(998)) & _U(63)
    sub = (_U(0x0010000000000000) + sig) << sh
    sub = sub + _U(0x0010000000000000) if (sub & _U(0x003FFFFFFFFFFFFF)) != _U(0x0010000000000000) else sub
    sub = sub >> _U(53)
    sub = sub if d_exp >= _U(0x3E60000000000000) else _U(0)
    # normal half
    nrm = sig + _U(0x0000020000000000) if (sig & _U(0x000007FFFFFFFFFF)) != _U(0x0000020000000000) else sig
    nrm = ((d_exp - _U(0x3F00000000000000)) >> _U(42)) + (nrm >> _U(42))
    h = big if d_exp >= _U(0x40F0000000000000) else (sub if d_exp <= _U(0x3F00000000000000) else nrm)
    return np.uint16(sgn + h)


_POW2 = np.array([2.0 ** (max(e, 1) - 25) for e in range(32)])  # an fp16 exponent's scale


@njit(cache=True, nogil=True, inline="always")
def _half_value(h):
    # the float64 value of fp16 bits h (finite: a centroid of finite values below 65520)
    e = (np.int64(h) >> 10) & 0x1F
    m = (np.int64(h) & 0x3FF) + (1024 if e != 0 else 0)
    v = float(m) * _POW2[e]
    v = v if e != 31 else (np.inf if m == 1024 else np.nan)
    return -v if h & 0x8000 else v


KLANES = 64  # rows k-means runs side by side


@intrinsic
def _empty_lines(typingctx, shape, dtype):
    """``np.empty(shape, dtype)`` (C order, small: no overflow check) whose data starts on a
    64-byte boundary, a cache line (numba's ``np.empty`` asks its runtime for 32 bytes): the
    same runtime allocation with another alignment, so the array is an ordinary array, freed
    as any other. (Views cut at a cache line from larger ``np.empty`` buffers are not the same:
    k-means on such views measured ~14% slower than on these arrays, the cause not found;
    see ``_kmeans_rows_pack`` for why the alignment.)"""
    if isinstance(shape, types.Integer):
        nd = 1
    elif isinstance(shape, types.UniTuple) and isinstance(shape.dtype, types.Integer):
        nd = shape.count
    else:
        return None
    if not isinstance(dtype, (types.NumberClass, types.DType)):
        return None
    arrty = types.Array(dtype.dtype, nd, "C")

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        if nd == 1:
            dims = [context.cast(builder, args[0], shape, types.intp)]
        else:
            dims = [context.cast(builder, d, shape.dtype, types.intp)
                    for d in cgutils.unpack_tuple(builder, args[0], nd)]
        item = context.get_abi_sizeof(context.get_data_type(arrty.dtype))
        strides = [ir.Constant(intp, item)]
        for d in reversed(dims[1:]):
            strides.append(builder.mul(strides[-1], d))
        strides.reverse()
        size = builder.mul(strides[0], dims[0])
        meminfo = context.nrt.meminfo_alloc_aligned(builder, size, 64)
        with builder.if_then(cgutils.is_null(builder, meminfo), likely=False):
            context.call_conv.return_user_exc(builder, MemoryError, ("out of memory",))
        data = context.nrt.meminfo_data(builder, meminfo)
        ary = make_array(arrty)(context, builder)
        populate_array(ary, data=builder.bitcast(data, context.get_data_type(arrty.dtype).as_pointer()),
                       shape=cgutils.pack_array(builder, dims, ty=intp),
                       strides=cgutils.pack_array(builder, strides, ty=intp),
                       itemsize=ir.Constant(intp, item), meminfo=meminfo)
        return ary._getvalue()

    return arrty(shape, dtype), codegen


@njit(cache=True, nogil=True, inline="always")
def _half_f64(h):
    """``_half_value(h)`` from bits alone (no table gather, so a lane loop of it vectorizes):
    a normal fp16's sign, exponent and significand moved into a double's fields, a subnormal
    (or zero) ``m * 2^-24``, exponent 31 a double's inf or NaN."""
    hh = np.uint64(h)
    e = (hh >> _U(10)) & _U(0x1F)
    m = hh & _U(0x3FF)
    s = (hh & _U(0x8000)) << _U(48)
    de = _U(0x7FF) if e == _U(31) else e + _U(1008)
    nrm = np.uint64(s | (de << _U(52)) | (m << _U(42))).view(np.float64)
    sub = float(m) * 5.9604644775390625e-08  # 2^-24
    sub = -sub if s != _U(0) else sub
    return nrm if e != _U(0) else sub


@njit(cache=True, nogil=True)
def _kmeans_scratch(dim, bits, L):
    """``_kmeans_finish``'s scratch arrays for blocks of ``L`` rows, each on a cache line
    (``_empty_lines``; see ``_kmeans_rows_pack``)."""
    n_cent = 1 << bits
    kp = -(-(n_cent - 1) // 4) * 4  # midpoints padded to whole groups of 4 (+inf: never below)
    hb = _empty_lines((n_cent, L), np.uint16)
    hw = _empty_lines((n_cent // 4, L), np.uint64)
    md = _empty_lines((kp, L), np.float32)
    code = _empty_lines((dim, L), np.float32)  # (counts below 256: exact)
    h32 = _empty_lines((kp + 1, L), np.float32)
    h32[:] = 0.0
    pk = _empty_lines(((dim * bits + 7) // 8, L), np.uint8)
    acc = _empty_lines(L, np.uint64)
    pz = _empty_lines(L, np.bool_)
    nz = _empty_lines(L, np.bool_)
    dd = _empty_lines((dim, L), np.float32)
    ee = _empty_lines(L, np.float64)
    return hb, hw, md, code, h32, pk, acc, pz, nz, dd, ee


@njit(cache=True, nogil=True, inline="always")
def _below32(m):
    """The largest float32 not above the float64 ``m`` (rounded down): for a float32 ``v``,
    ``v > m`` exactly when ``v > _below32(m)`` (no float32 lies strictly between the two
    roundings of an ``m`` they do not represent). ``m`` is a midpoint of fp16 values: zero or at
    least 2^-25 in magnitude, so its float32 rounding is nonzero and of its sign, and the next
    float32 down is one step of the bits (down for a positive, up for a negative)."""
    f = np.float32(m)
    u = np.float32(f).view(np.uint32)
    u = np.uint32(u + np.uint32(1) if f < np.float32(0.0) else u - np.uint32(1))
    return f if np.float64(f) <= m else u.view(np.float32)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _kmeans_finish(x, dim, bits, fv, fc, frow, nf, book, packed, err, mixed, hb, hw, md, code, h32,
                   pk, acc, pz, nz, dd, ee):
    """The rows ``frow[:nf]`` whose centroids ``fc[:, j]`` (float32 values ``fv[:, j]``) are
    final: their fp16 codebooks (numpy's rounding), codes against them (``_nearest``'s count of
    the fp16 centroids' midpoints), packing and errors, the rows side by side. The count runs
    in float32 (16 lanes a vector), each float64 midpoint rounded down to float32
    (``_below32``: the same comparisons); a value's dequantized centroid is selected during the
    count (the count's comparisons hold for a prefix of the midpoints, so the last one that
    holds names the centroid): no gather. The scratch arrays from ``hb`` on are
    ``_kmeans_scratch``'s (allocated once per call of the caller, not per block). Inlined into
    ``_kmeans_rows_pack`` (numba IR): no call, so no reference counts of its 22 arrays per
    block. A row's codebook and (whole 8-byte words of) packed codes are written a word at a
    time: the fp16 bits of 4 centroids per uint64."""
    n_cent = 1 << bits
    fcu = fc.view(np.uint64)
    kp = md.shape[0]
    nbytes = pk.shape[0]
    for i in range(n_cent):
        for j in range(nf):
            h = _half_bits(fcu[i, j])
            hb[i, j] = h
            h32[i, j] = np.float32(_half_f64(h))
    for k in range(n_cent - 1):
        for j in range(nf):
            m = 0.5 * (np.float64(h32[k, j]) + np.float64(h32[k + 1, j]))
            md[k, j] = _below32(m)
    for k in range(n_cent - 1, kp):
        for j in range(nf):
            md[k, j] = np.inf
    want_err = err.size > 0
    for c in range(dim):  # the count, 4 midpoints a pass (a lane's count and centroid in registers)
        for j in range(nf):
            code[c, j] = np.float32(0.0)
            dd[c, j] = h32[0, j]
        for k0 in range(0, kp, 4):
            for j in range(nf):
                v = fv[c, j]
                a = code[c, j]
                h = dd[c, j]
                for q in range(4):
                    hit = v > md[k0 + q, j]
                    t = h32[k0 + q + 1, j]  # (loaded outside the select: a load in it is a branch)
                    a = a + np.float32(1.0) if hit else a
                    h = t if hit else h
                code[c, j] = a
                dd[c, j] = h
        if want_err:  # the squared error against the float32 codebook, in float32
            for j in range(nf):
                d = fv[c, j] - dd[c, j]
                dd[c, j] = d * d
    # pack_bits' little-endian bit stream, the lanes side by side: a lane's pending bits in
    # acc, its bytes into pk (the byte positions are every lane's, so no branch per lane)
    for j in range(nf):
        acc[j] = 0
    nacc = 0
    o = 0
    for c in range(dim):
        for j in range(nf):
            acc[j] |= np.uint64(code[c, j]) << np.uint64(nacc)
        nacc += bits
        while nacc >= 8:
            for j in range(nf):
                a = acc[j]
                pk[o, j] = np.uint8(a & _U(0xFF))
                acc[j] = a >> _U(8)
            nacc -= 8
            o += 1
    if nacc > 0:
        for j in range(nf):
            pk[o, j] = np.uint8(acc[j])
    for j in range(nf):  # a +0 and a -0 centroid
        pz[j] = False
        nz[j] = False
    for i in range(n_cent):
        for j in range(nf):
            h = hb[i, j]
            pz[j] |= h == 0
            nz[j] |= h == 0x8000
    for w in range(n_cent // 4):  # 4 centroids' bits a word, little-endian as book's bytes
        for j in range(nf):
            hw[w, j] = (np.uint64(hb[4 * w, j]) | (np.uint64(hb[4 * w + 1, j]) << _U(16))
                        | (np.uint64(hb[4 * w + 2, j]) << _U(32)) | (np.uint64(hb[4 * w + 3, j]) << _U(48)))
    bw = book.view(np.uint64)
    for j in range(nf):
        r = frow[j]
        for w in range(n_cent // 4):
            bw[r, w] = hw[w, j]
        mixed[r] = pz[j] and nz[j]
        for k in range(nbytes):
            packed[r, k] = pk[k, j]
    if want_err:
        _lane_sums(dd, nf, dim, err, frow, ee)


@njit(cache=True, nogil=True, error_model="numpy")
def _kmeans_rows_pack(x, dim, iters, bits, book, packed, err, mixed):
    """Per-row k-means of the first ``dim`` columns of ``x`` and the row's codes, packing and
    error: ``_kmeans_book``, the fp16 codebook (``book``: uint16 bits, numpy's rounding) and
    ``_kmeans_pack`` against it, ``KLANES`` rows side by side (a row per SIMD lane).

    Every lane computes ``_kmeans_1d_into``'s centroids, bit for bit. An iteration counts, for
    each midpoint ``k`` of the sorted centroids, the values above it and sums them (``cnt_k``,
    ``sum_k``, one masked add per value and midpoint, no assignment stored): ``_nearest`` gives
    a value the code ``i`` where it is above midpoints ``0..i-1`` only, so centroid ``i`` holds
    ``cnt_{i-1} - cnt_i`` values summing to ``sum_{i-1} - sum_i`` (``cnt_{-1}``, ``sum_{-1}``:
    the row's). That sum is the scalar loop's (each centroid's values added in column order)
    where every sum of the row's values is exact in float64: all are multiples of the smallest
    nonzero value's ulp, below ``dim`` times the largest value's binade, so a row whose
    exponents (``max(e, 1)`` of the float32 exponent field ``e``, nonzero values) span at most
    ``29 - ceil(log2(dim))`` has exact sums in any order and exact differences. A row outside
    that span (rare: ~1e-8 of a value's magnitude beside the largest) is summed in column order
    as the scalar loop does. Then the means, the sort where an emptied centroid fell out of
    order (the same sort on the same values). A lane whose row reached its fixed point (or
    ``iters``) hands the row to ``_kmeans_finish`` (in blocks) and takes the next row, so the
    lanes stay full whatever each row's iteration count (the lane is freed in place and takes
    the next row; only once the rows run out do the last lanes fill the holes). The last,
    confirming iteration of most rows is a test by counts alone, in the round after a full
    iteration: a row whose centroids that iteration left unsorted, and whose counts above the
    new midpoints equal the iteration's (the values above a midpoint are a prefix of the sorted
    values, so equal counts are the same partition: the same sums, in the same order, and the
    same means, an emptied centroid kept), would get its centroids back bit for bit from the
    next iteration, which is the fixed point; so it is finished without the sums and the
    divisions (a lane the test does not finish runs the full iteration next round). The
    centroids are sorted, so their fp16 roundings are too (rounding is monotone) and sorting
    them (the previous ``book.sort(axis=1)``) could only reorder equal values: a +0 and a -0,
    the one case whose bytes a sort may change; such rows are flagged in ``mixed`` for the
    caller to sort as numpy does (their codes and errors are the same)."""
    n = x.shape[0]
    n_cent = 1 << bits
    L = KLANES
    lg = 0
    while (1 << lg) < dim:
        lg += 1
    span = 29 - lg  # the widest exponent span whose sums are exact (see above)
    dp = -(-dim // 8) * 8  # the values padded to whole groups of 8 (-inf: above no midpoint)
    # Every scratch array starts on a cache line (_empty_lines, not np.empty): a row of L = 64
    # lanes is then whole 64-byte lines (512 bytes of float64, 256 of float32, 128 of uint16),
    # so each 64-byte vector load or store of a lane loop touches one line. np.empty's arrays
    # start 0 or 32 bytes into a line as the heap places them, and at 32 half of those
    # accesses touch two lines: that was the 466..567 MB/s spread (4 bits) between calls, not
    # 4K aliasing. Measured over 2000 calls, their addresses recorded: a call's speed followed
    # each 2-D array's address mod 64 (vt +6%, ct, pc, ps, fmd ~+2% each, the others less)
    # and no relation of the arrays' low 12 bits; every array 32 bytes into a line ran ~20%
    # slower than this layout, and every array page-aligned (all the same low 12 bits) as fast.
    vt = _empty_lines((dp, L), np.float64)
    vt[:] = -np.inf
    ct = _empty_lines((n_cent, L), np.float64)
    pv = _empty_lines((n_cent, L), np.float64)
    sm = _empty_lines((n_cent, L), np.float64)
    cn = _empty_lines((n_cent, L), np.float64)
    md = _empty_lines((n_cent, L), np.float64)
    pc = _empty_lines((n_cent, L), np.float64)  # values above midpoint k: count
    ps = _empty_lines((n_cent, L), np.float64)  # and sum
    tot = _empty_lines(L, np.float64)
    exact = _empty_lines(L, np.bool_)
    row = _empty_lines(L, np.int64)
    its = _empty_lines(L, np.int64)
    its[:] = 0
    same = _empty_lines(L, np.bool_)
    ordered = _empty_lines(L, np.bool_)
    tmp = _empty_lines(n_cent, np.float64)
    fv = _empty_lines((dim, L), np.float32)
    fc = _empty_lines((n_cent, L), np.float64)
    frow = _empty_lines(L, np.int64)
    fhb, fhw, fmd, fcode, fh32, fpk, facc, fpz, fnz, fdd, fee = _kmeans_scratch(dim, bits, L)
    fdim = float(dim)
    fr = _empty_lines(L, np.int64)  # lanes freed by finished rows: fr[:nfr]
    pt = _empty_lines((n_cent, L), np.float64)  # the fixed-point test's counts
    elig = _empty_lines(L, np.bool_)  # lanes the test may finish
    elig[:] = False
    test = False
    hole = _empty_lines(L, np.bool_)
    hole[:] = False
    new = _empty_lines(L, np.bool_)  # lanes that took a row this round: nnew of them
    new[:] = False
    nnew = 0
    lmin = _empty_lines(L, np.float64)  # the lanes' row statistics
    lmax = _empty_lines(L, np.float64)
    lamin = _empty_lines(L, np.float64)
    d8 = dim // 8 * 8
    nfr = 0
    nf = 0
    na = 0  # lanes 0..na-1 hold a row still iterating (but the freed lanes fr[:nfr])
    nxt = 0  # the next row to take
    while True:
        # a free lane takes the next row, its values and the grid: a lane freed in place (by a
        # finished row), else the next lane above the active ones
        while nxt < n and (nfr > 0 or na < L):
            if nfr > 0:
                nfr -= 1
                j = fr[nfr]
            else:
                j = na
                na += 1
            # the values and their sum in column order (the other statistics below, lanes side
            # by side); the sum's order also keeps the loop from being vectorized into scatters
            # (vscatterqpd), slower than scalar stores
            s = 0.0
            for c in range(dim):
                v = np.float64(x[nxt, c])
                vt[c, j] = v
                s += v
            tot[j] = s
            new[j] = True
            nnew += 1
            row[j] = nxt
            its[j] = 0
            elig[j] = False
            nxt += 1
        if nnew > 0:
            # the new rows' min, max (the first of equal values) and smallest nonzero |value|,
            # each in column order as a row's scalar loop has them, every lane computed (a
            # vector loop; most lanes took a row) and the new lanes' kept: their grid and
            # exponent span. The values 8 columns a pass (a lane's statistics in registers)
            for j in range(na):
                lmin[j] = vt[0, j]
                lmax[j] = vt[0, j]
                lamin[j] = np.inf
            for c0 in range(0, d8, 8):
                for j in range(na):
                    vmin = lmin[j]
                    vmax = lmax[j]
                    amin = lamin[j]
                    for q in range(8):
                        v = vt[c0 + q, j]
                        vmin = v if v < vmin else vmin
                        vmax = v if v > vmax else vmax
                        av = abs(v)
                        amin = av if (av < amin) & (av != 0.0) else amin
                    lmin[j] = vmin
                    lmax[j] = vmax
                    lamin[j] = amin
            for c in range(d8, dim):
                for j in range(na):
                    v = vt[c, j]
                    lmin[j] = v if v < lmin[j] else lmin[j]
                    lmax[j] = v if v > lmax[j] else lmax[j]
                    av = abs(v)
                    lamin[j] = av if (av < lamin[j]) & (av != 0.0) else lamin[j]
            for j in range(na):
                vmin = lmin[j]
                vmax = lmax[j]
                # the exponent span: the float32 exponent field from the double's (896 apart; a
                # float32 subnormal, a smaller double exponent, has the ulp of field 1), monotone
                # in |value|, so the largest is the largest |value|'s and the smallest the
                # smallest nonzero |value|'s (255 if none: above every field)
                amax = -vmin if -vmin > vmax else vmax
                emax = np.int64((np.uint64(np.float64(amax).view(np.uint64)) >> _U(52)) & _U(0x7FF)) - 896
                emax = emax if emax > 1 else 1
                emin = np.int64((np.uint64(np.float64(lamin[j]).view(np.uint64)) >> _U(52)) & _U(0x7FF)) - 896
                emin = emin if emin > 1 else 1
                emin = emin if emin < 255 else 255
                exact[j] = emax - emin <= span if new[j] else exact[j]
            for i in range(n_cent):
                for j in range(na):
                    g = lmin[j] + (lmax[j] - lmin[j]) * i / (n_cent - 1)
                    ct[i, j] = g if new[j] else ct[i, j]
            for j in range(na):
                new[j] = False
            nnew = 0
        if nfr > 0:  # the rows ran out: the last active lanes fill the freed lanes below them
            for t in range(nfr):
                hole[fr[t]] = True
            h = 0
            while True:
                while h < na and not hole[h]:
                    h += 1
                if h >= na:
                    break
                na -= 1
                if hole[na]:
                    hole[na] = False
                    continue
                for c in range(dim):
                    vt[c, h] = vt[c, na]
                for i in range(n_cent):
                    ct[i, h] = ct[i, na]
                row[h] = row[na]
                its[h] = its[na]
                tot[h] = tot[na]
                exact[h] = exact[na]
                elig[h] = False  # (its counts not moved: the next full iteration decides)
                hole[h] = False
            nfr = 0
        if na == 0:
            break
        if test or iters > 0:  # the midpoints, for the test and for an iteration alike
            for k in range(n_cent - 1):
                for j in range(na):
                    md[k, j] = 0.5 * (ct[k, j] + ct[k + 1, j])
        if test:  # the fixed-point test by counts alone (see above), then the freed lanes refilled
            test = False
            for k in range(n_cent - 1):
                for j in range(na):
                    pt[k, j] = 0.0
                for c0 in range(0, dp, 8):
                    for j in range(na):
                        t = md[k, j]
                        a = pt[k, j]
                        for q in range(8):
                            a = a + 1.0 if vt[c0 + q, j] > t else a
                        pt[k, j] = a
            for j in range(na):
                same[j] = elig[j]
            for k in range(n_cent - 1):
                for j in range(na):
                    same[j] &= pt[k, j] == pc[k, j]
        elif iters > 0:  # one of _kmeans_1d_into's iterations on every lane
            for k in range(n_cent - 1):
                for j in range(na):
                    pc[k, j] = 0.0
                    ps[k, j] = 0.0
                for c0 in range(0, dp, 8):  # 8 values a pass: a lane's count and sum in registers
                    for j in range(na):
                        t = md[k, j]
                        a = pc[k, j]
                        b = ps[k, j]
                        for q in range(8):
                            v = vt[c0 + q, j]
                            hit = v > t
                            a = a + 1.0 if hit else a
                            b = b + v if hit else b
                        pc[k, j] = a
                        ps[k, j] = b
            for j in range(na):
                sm[0, j] = tot[j] - ps[0, j]
                cn[0, j] = fdim - pc[0, j]
            for i in range(1, n_cent - 1):
                for j in range(na):
                    sm[i, j] = ps[i - 1, j] - ps[i, j]
                    cn[i, j] = pc[i - 1, j] - pc[i, j]
            for j in range(na):
                sm[n_cent - 1, j] = ps[n_cent - 2, j]
                cn[n_cent - 1, j] = pc[n_cent - 2, j]
            for j in range(na):
                if not exact[j]:  # the scalar loop's sums, in column order
                    for i in range(n_cent):
                        sm[i, j] = 0.0
                    for c in range(dim):
                        v = vt[c, j]
                        a = 0
                        for k in range(n_cent - 1):
                            a += 1 if v > md[k, j] else 0
                        sm[a, j] += v
            for i in range(n_cent):
                for j in range(na):
                    c0 = ct[i, j]
                    pv[i, j] = c0
                    m = sm[i, j] / max(cn[i, j], 1.0)
                    ct[i, j] = m if cn[i, j] > 0 else c0
            for j in range(na):
                ordered[j] = True
                same[j] = True
            for i in range(n_cent - 1):
                for j in range(na):
                    ordered[j] &= not ct[i, j] > ct[i + 1, j]
            for j in range(na):
                if not ordered[j]:
                    for i in range(n_cent):
                        tmp[i] = ct[i, j]
                    tmp.sort()
                    for i in range(n_cent):
                        ct[i, j] = tmp[i]
            for i in range(n_cent):
                for j in range(na):
                    same[j] &= ct[i, j] == pv[i, j]
            for j in range(na):
                its[j] += 1
                same[j] |= its[j] >= iters  # finished: a fixed point, or iters iterations
            for j in range(na):  # a lane still iterating whose centroids were not sorted
                elig[j] = ordered[j] and not same[j]
                test |= elig[j]
        else:
            for j in range(na):
                same[j] = True
        for j in range(na):  # finished rows to the finishing block, their lanes freed in place
            if same[j]:
                for c in range(dim):
                    fv[c, nf] = np.float32(vt[c, j])
                for i in range(n_cent):
                    fc[i, nf] = ct[i, j]
                frow[nf] = row[j]
                nf += 1
                if nf == L:
                    _kmeans_finish(x, dim, bits, fv, fc, frow, nf, book, packed, err, mixed, fhb, fhw, fmd,
                                   fcode, fh32, fpk, facc, fpz, fnz, fdd, fee)
                    nf = 0
                fr[nfr] = j
                nfr += 1
    if nf > 0:
        _kmeans_finish(x, dim, bits, fv, fc, frow, nf, book, packed, err, mixed, fhb, fhw, fmd,
                       fcode, fh32, fpk, facc, fpz, fnz, fdd, fee)


@njit(cache=True, nogil=True)
def _kmeans_codes(x, book, codes):
    n, dim = x.shape
    for r in range(n):
        cent = book[r if book.shape[0] > 1 else 0]
        for c in range(dim):
            codes[r, c] = _assign(float(x[r, c]), cent)


@njit(cache=True, nogil=True)
def _dequant_book(codes, book, out):
    n, dim = codes.shape
    for r in range(n):
        b = r if book.shape[0] > 1 else 0
        for c in range(dim):
            out[r, c] = book[b, codes[r, c]]


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True, inline="always")
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


@njit(cache=True, nogil=True)
def _pack_block(cb, nb, dim, bits, packed, rows):
    """Codes ``cb[j, :dim]`` (each < 2^bits) into rows ``rows[j]`` of ``packed``, ``j < nb``:
    ``pack_bits``' little-endian bit stream; whole bytes of 8, 4 or 2 codes written directly (the
    same bytes), 3 bits through ``_put_code``. Called once per block of rows (a call per row
    would cost its arrays atomic reference counts per row)."""
    for j in range(nb):
        r = rows[j]
        if bits == 8:
            for c in range(dim):
                packed[r, c] = cb[j, c]
        elif bits == 4:
            for k in range(dim // 2):
                packed[r, k] = cb[j, 2 * k] | (cb[j, 2 * k + 1] << 4)
            if dim & 1:
                packed[r, dim // 2] = cb[j, dim - 1]
        elif bits == 2:
            for k in range(dim // 4):
                packed[r, k] = (cb[j, 4 * k] | (cb[j, 4 * k + 1] << 2) | (cb[j, 4 * k + 2] << 4)
                                | (cb[j, 4 * k + 3] << 6))
            t = dim & 3
            if t:
                k = dim // 4
                v = cb[j, 4 * k]
                if t > 1:
                    v |= cb[j, 4 * k + 1] << 2
                if t > 2:
                    v |= cb[j, 4 * k + 2] << 4
                packed[r, k] = v
        else:
            acc = np.uint64(0)
            nacc = 0
            o = 0
            for c in range(dim):
                acc, nacc, o = _put_code(packed, r, cb[j, c], bits, acc, nacc, o)
            if nacc > 0:
                packed[r, o] = np.uint8(acc)


@njit(cache=True, nogil=True)
def _lane_sums(dd, nb, dim, err, rows, ee):
    """``err[rows[j]] = sqrt(sum(dd[:dim, j]))``, each sum in float64 from 0.0 in column order
    (a row's error loop's order, so bit for bit), the rows side by side (once per block)."""
    for j in range(nb):
        ee[j] = 0.0
    for c in range(dim):
        for j in range(nb):
            ee[j] += dd[c, j]
    for j in range(nb):
        err[rows[j]] = math.sqrt(ee[j])


PACK_ROWS = 64  # rows a block of _quant_uniform_pack


@njit(cache=True, nogil=True, error_model="numpy")
def _quant_uniform_pack(x, dim, levels, scale, bias, bits, dscale, dbias, packed, err):
    """``_quant_uniform``, ``pack_bits`` and ``row_l2_error(x, dequantize(...))`` in one pass
    over each row (the same operations in the same order, so the bytes and errors are those of
    the three kernels): codes of the first ``dim`` columns of ``x`` from the widened fp16
    ``scale``/``bias``, packed into ``packed``; the row's L2 error against the float32
    dequantization ``code * dscale + dbias`` into ``err`` (skipped when ``err`` is empty).

    A row's codes are formed first, all columns at once (the divisions vectorize; the int64
    ``math.floor`` of ``_quant_uniform`` is ``np.floor``: |t| < 2^42 for fp16 parameters and
    values), then packed and measured."""
    want_err = err.size > 0
    qb = np.empty(dim)
    cb = np.empty((PACK_ROWS, dim), np.uint8)
    dd = np.empty((dim, PACK_ROWS), np.float32)
    ee = np.empty(PACK_ROWS)
    rows = np.empty(PACK_ROWS, np.int64)
    n = x.shape[0]
    for r0 in range(0, n, PACK_ROWS):
        nb = min(PACK_ROWS, n - r0)
        for j in range(nb):
            r = r0 + j
            rows[j] = r
            s = float(scale[r])
            b = float(bias[r])
            if s > 0:
                for c in range(dim):
                    q = np.floor((x[r, c] - b) / s + 0.5)
                    q = q if q > 0.0 else 0.0
                    qb[c] = q if q < levels else levels
            else:
                for c in range(dim):
                    qb[c] = 0.0
            for c in range(dim):
                cb[j, c] = np.uint8(qb[c])
            if want_err:  # the squared errors (float32 products), summed below
                ds = dscale[r]
                db = dbias[r]
                for c in range(dim):
                    d = float(x[r, c]) - float(np.float32(cb[j, c]) * ds + db)
                    dd[c, j] = d * d
        _pack_block(cb, nb, dim, bits, packed, rows)
        if want_err:
            _lane_sums(dd, nb, dim, err, rows, ee)


@njit(cache=True, nogil=True)
def _kmeans_pack(x, dim, book, dbook, bits, packed, err):
    """``_kmeans_codes``, ``pack_bits`` and the row error against ``dbook`` (the float32
    codebook a restore uses) in one pass, as ``_quant_uniform_pack``; ``book`` sorted (the codes
    are ``_nearest``'s count of midpoints, ``_assign``'s result)."""
    want_err = err.size > 0
    n_cent = book.shape[1]
    mids = np.empty(n_cent - 1)
    vals = np.empty(dim)
    code = np.empty(dim, np.int64)
    for r in range(x.shape[0]):
        k = r if book.shape[0] > 1 else 0
        if r == 0 or book.shape[0] > 1:
            _midpoints(book[k], mids)
        for c in range(dim):
            vals[c] = x[r, c]
        _nearest(vals, dim, mids, code)
        acc = np.uint64(0)
        nacc = 0
        o = 0
        e = 0.0
        for c in range(dim):
            cd = np.uint8(code[c])
            acc, nacc, o = _put_code(packed, r, cd, bits, acc, nacc, o)
            if want_err:
                d = float(x[r, c]) - float(dbook[k, cd])
                e += d * d
        if nacc > 0:
            packed[r, o] = np.uint8(acc)
        if want_err:
            err[r] = math.sqrt(e)


@njit(cache=True, nogil=True)
def row_l2_error(x, y):
    """Per-row L2 norm of x - y (float64)."""
    n, dim = x.shape
    out = np.empty(n)
    for r in range(n):
        s = 0.0
        for c in range(dim):
            d = float(x[r, c]) - float(y[r, c])
            s += d * d
        out[r] = math.sqrt(s)
    return out


@dataclass
class QuantizedRows:
    """Quantized rows: packed codes plus per-row fp16 parameters.

    ``scale``/``bias`` (n,) for the uniform methods (``bias`` None for
    symmetric); ``codebook`` (n or 1, 2^bits) for k-means.
    """

    method: str
    bits: int
    dim: int
    packed: np.ndarray
    scale: np.ndarray | None = None
    bias: np.ndarray | None = None
    codebook: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        return self.packed.shape[0]

    @property
    def row_overhead_bytes(self) -> int:
        """Per-row parameter bytes (a per-table codebook counts 0 per row)."""
        if self.codebook is not None:
            return self.codebook.shape[1] * 2 if self.codebook.shape[0] > 1 else 0
        return 2 + (0 if self.bias is None else 2)

    @property
    def nbytes(self) -> int:
        """Total stored bytes: packed codes and all parameters."""
        extra = sum(a.nbytes for a in (self.scale, self.bias, self.codebook) if a is not None)
        return self.packed.nbytes + extra


def quantize(
    x: np.ndarray,
    method: str,
    bits: int,
    *,
    n_bins: int = 200,
    ratio: float = 0.16,
    kmeans_iters: int = 20,
    per_table: bool = False,
) -> QuantizedRows:
    """Quantize float32 rows x (n, dim) with ``method`` at ``bits`` bits."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError("x must be a non-empty 2-D (n, dim) array")
    q, _ = quantize_rows(x, x.shape[1], method, bits, n_bins=n_bins, ratio=ratio,
                         kmeans_iters=kmeans_iters, per_table=per_table, errors=False)
    return q


def quantize_rows(
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
) -> tuple[QuantizedRows, np.ndarray]:
    """Quantize the first ``dim`` columns of float32 ``rows`` (n, >= dim), e.g. a shard's rows
    ``[weights | optimizer state]`` without copying the weights out, and (``errors``) each
    row's L2 error against what a restore yields, ``row_l2_error(w, dequantize(q))`` (else an
    empty array). Codes, packing and errors in one pass per row (``_quant_uniform_pack``,
    ``_kmeans_pack``); the bytes are those of the separate kernels."""
    if method not in METHODS:
        raise ValueError(f"unknown quantizer {method!r} ({', '.join(METHODS)})")
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    x = np.asarray(rows)
    if x.dtype != np.float32 or x.ndim != 2 or x.strides[1] != 4:
        x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or not 0 < dim <= x.shape[1]:
        raise ValueError(f"rows must be 2-D with at least dim = {dim} > 0 columns")
    n = x.shape[0]
    packed = np.empty((n, packed_row_bytes(dim, bits)), dtype=np.uint8)
    err = np.empty(n if errors else 0)
    scale = bias = book = None
    if method == "kmeans":
        if per_table:
            book64 = np.empty((1, 1 << bits))
            _kmeans_rows(np.ascontiguousarray(x[:, :dim]), 1 << bits, kmeans_iters, True, book64)
            book = book64.astype(np.float16)
            book.sort(axis=1)  # fp16 rounding may merge neighbours; keep sorted for _assign
            _kmeans_pack(x, dim, book.astype(np.float64), book.astype(np.float32), bits, packed, err)
        else:
            bits16 = np.empty((n, 1 << bits), np.uint16)
            mixed = np.empty(n, np.bool_)
            _kmeans_rows_pack(x, dim, kmeans_iters, bits, bits16, packed, err, mixed)
            book = bits16.view(np.float16)
            if mixed.any():  # a +0 and a -0 centroid: their order is numpy's sort's
                book[mixed] = np.sort(book[mixed], axis=1)
        return QuantizedRows(method, bits, dim, packed, None, None, book), err
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
            lo, hi = adaptive_range(x[:, :dim], bits, float(n_bins), float(ratio))
        bias = lo.astype(np.float16)
        scale = ((hi - bias.astype(np.float64)) / levels).astype(np.float16)
        _quant_uniform_pack(x, dim, float(levels), scale.astype(np.float64), bias.astype(np.float64),
                            bits, scale.astype(np.float32), bias.astype(np.float32), packed, err)
    return QuantizedRows(method, bits, dim, packed, scale, bias, book), err


def dequantize(q: QuantizedRows) -> np.ndarray:
    """float32 rows (n, dim) a restore yields."""
    codes = np.empty((q.n_rows, q.dim), dtype=np.uint8)
    unpack_bits(q.packed, q.bits, q.dim, codes)
    out = np.empty((q.n_rows, q.dim), dtype=np.float32)
    if q.method == "kmeans":
        _dequant_book(codes, q.codebook.astype(np.float32), out)
    elif q.method == "symmetric":
        qmax = (1 << (q.bits - 1)) - 1
        s = q.scale.astype(np.float32)
        _dequant_uniform(codes, s, -np.float32(qmax) * s, out)
    else:
        _dequant_uniform(codes, q.scale.astype(np.float32), q.bias.astype(np.float32), out)
    return out
