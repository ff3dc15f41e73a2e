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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = [
    "METHODS",
    "QuantizedRows",
    "adaptive_range",
    "dequantize",
    "pack_bits",
    "packed_row_bytes",
    "quantize",
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


@njit(cache=True, nogil=True)
def _uniform_loss(x, r, levels, lo, hi):
    # L2 error of asymmetric quantization of row r over [lo, hi] (float32 params)
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


@njit(cache=True, nogil=True)
def adaptive_range(x, bits, n_bins, ratio):
    """Greedy range search per row; returns (lo, hi) float64 arrays."""
    n, dim = x.shape
    levels = float((1 << bits) - 1)
    lo_out = np.empty(n)
    hi_out = np.empty(n)
    for r in range(n):
        xmin = float(x[r, 0])
        xmax = xmin
        for c in range(dim):
            v = float(x[r, c])
            xmin = min(xmin, v)
            xmax = max(xmax, v)
        step = (xmax - xmin) / n_bins
        thr = n_bins * (1.0 - ratio) * step
        cur_lo, cur_hi = xmin, xmax
        cur = _uniform_loss(x, r, levels, xmin, xmax)
        best_lo, best_hi, best = xmin, xmax, np.inf
        while cur_lo + thr < cur_hi:
            l1 = _uniform_loss(x, r, levels, cur_lo + step, cur_hi)
            l2 = _uniform_loss(x, r, levels, cur_lo, cur_hi - step)
            if cur < l1 and cur < l2 and cur < best:  # a local optimum, best so far
                best_lo, best_hi, best = cur_lo, cur_hi, cur
            if l1 < l2:
                cur_lo, cur = cur_lo + step, l1
            else:
                cur_hi, cur = cur_hi - step, l2
        lo_out[r] = best_lo
        hi_out[r] = best_hi
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


@njit(cache=True, nogil=True)
def _kmeans_1d(vals, n_cent, iters):
    # Lloyd's algorithm in 1-D, init on the uniform grid over [min, max]
    vmin = vals.min()
    vmax = vals.max()
    cent = np.empty(n_cent)
    for i in range(n_cent):
        cent[i] = vmin + (vmax - vmin) * i / (n_cent - 1)
    sums = np.empty(n_cent)
    cnt = np.empty(n_cent)
    for _ in range(iters):
        sums[:] = 0
        cnt[:] = 0
        for v in vals:
            a = _assign(v, cent)
            sums[a] += v
            cnt[a] += 1
        for i in range(n_cent):
            if cnt[i] > 0:
                cent[i] = sums[i] / cnt[i]
        cent.sort()
    return cent


@njit(cache=True, nogil=True)
def _kmeans_rows(x, n_cent, iters, per_table, book):
    n = x.shape[0]
    if per_table:
        book[0, :] = _kmeans_1d(x.reshape(-1).astype(np.float64), n_cent, iters)
    else:
        for r in range(n):
            book[r, :] = _kmeans_1d(x[r].astype(np.float64), n_cent, iters)


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
    if method not in METHODS:
        raise ValueError(f"unknown quantizer {method!r} ({', '.join(METHODS)})")
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError("x must be a non-empty 2-D (n, dim) array")
    n, dim = x.shape
    codes = np.empty((n, dim), dtype=np.uint8)
    scale = bias = book = None
    if method == "symmetric":
        q = (1 << (bits - 1)) - 1
        scale = (np.abs(x).max(axis=1) / np.float32(q)).astype(np.float16)
        # codes -q..q stored as 0..2q: the uniform kernel with bias -q * scale
        s64 = scale.astype(np.float64)
        _quant_uniform(x, float(2 * q), s64, -q * s64, codes)
    elif method in ("asymmetric", "adaptive"):
        levels = (1 << bits) - 1
        if method == "asymmetric":
            lo = x.min(axis=1).astype(np.float64)
            hi = x.max(axis=1).astype(np.float64)
        else:
            lo, hi = adaptive_range(x, bits, float(n_bins), float(ratio))
        bias = lo.astype(np.float16)
        scale = ((hi - bias.astype(np.float64)) / levels).astype(np.float16)
        _quant_uniform(x, float(levels), scale.astype(np.float64), bias.astype(np.float64), codes)
    else:
        book64 = np.empty((1 if per_table else n, 1 << bits))
        _kmeans_rows(x, 1 << bits, kmeans_iters, per_table, book64)
        book = book64.astype(np.float16)
        book.sort(axis=1)  # fp16 rounding may merge neighbours; keep sorted for _assign
        _kmeans_codes(x, book.astype(np.float64), codes)
    packed = np.empty((n, packed_row_bytes(dim, bits)), dtype=np.uint8)
    pack_bits(codes, bits, packed)
    return QuantizedRows(method, bits, dim, packed, scale, bias, book)


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
