"""Erasure codes over embedding rows: ``xor``, ``rs`` (Cauchy Reed-Solomon) and ``sum``.

Owns: the one interface the ``ecrm`` strategy uses to protect a stripe of ``k``
data members with ``r`` parity members, and the measurement of the ``sum``
code's rounding drift.

Data model. A *member* is a C-contiguous uint8 array of shape
``(n_rows, row_bytes)``: row ``t`` of every member belongs to the same stripe
row, so data member ``j`` row ``t`` and parity member ``i`` row ``t`` are
coded together. Members are separate arrays (one per data member, as a server
holds them); nothing here needs all members at once except ``encode`` and
``decode``, which take lists with ``None`` for what is not at hand. Member
indices are ``0..k-1`` for data and ``k..k+r-1`` for parity ("stripe index").

Invariants:

* GF codes (``xor``, ``rs``) are exact on raw bytes: after any sequence of
  ``update`` calls, in any order, parity equals ``encode`` of the current
  data byte for byte, and ``decode`` returns the lost bytes exactly;
* ``rs`` parity bytes equal ISA-L's (``gf_gen_cauchy1_matrix``, poly 0x11D);
* ``sum`` keeps ECRM's float parity (``P = sum_j x_j`` of the rows read as
  float32, accumulated in float32 or float64); it is *not* exact -- see
  :func:`measure_sum_drift`. Its parity arrays have shape
  ``(n_rows, row_bytes // 4)`` and the accumulator dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit
from numba.typed import List

from .gf256 import (
    cauchy_matrix,
    combine,
    gf_combine_rows,
    gf_mac_rows,
    gf_mac_rows2,
    gf_mat_inv,
    gf_matmul,
    systematic_generator,
)

__all__ = [
    "Code",
    "DecodeError",
    "GFCode",
    "SumCode",
    "make_code",
    "measure_sum_drift",
]


class DecodeError(ValueError):
    """More members lost than the code tolerates, or inconsistent inputs."""


def _check_member(a: np.ndarray, what: str) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (n_rows, row_bytes)")
    if a.dtype != np.uint8:
        if not a.flags.c_contiguous:
            raise ValueError(f"{what}: must be C-contiguous")
        a = a.view(np.uint8).reshape(a.shape[0], -1)
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: must be C-contiguous")
    return a


def _as_rows(rows) -> np.ndarray:
    return np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)


class Code:
    """Common interface of the three codes; see the module docstring for the data model."""

    name: str
    k: int
    r: int

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Parity members of whole data members (k arrays of equal shape)."""
        raise NotImplementedError

    def delta(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """The update payload between two versions of the same rows."""
        raise NotImplementedError

    def update(
        self,
        parity: Sequence[np.ndarray] | np.ndarray,
        j: int,
        rows: np.ndarray,
        delta_or_old: np.ndarray,
        new: np.ndarray | None = None,
        *,
        parity_index: int | None = None,
    ) -> None:
        """Apply a row-sparse change of data member ``j`` to parity, in place.

        ``rows``: the stripe rows changed; ``delta_or_old[t]`` is the delta
        (``delta()``) of row ``rows[t]``, or its old bytes when ``new`` is
        given. ``parity`` is the list of the r parity members, or -- with
        ``parity_index=i`` -- the single parity member ``i`` a holder keeps.
        """
        raise NotImplementedError

    def decode(
        self,
        members: Sequence[np.ndarray | None],
        parity: Sequence[np.ndarray | None] | None,
        lost: Sequence[int],
        rows: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Rebuild the members ``lost`` (stripe indices) from what is at hand.

        ``members``: k entries, None where not available; ``parity``: r
        entries (or None). With ``rows`` only those stripe rows are rebuilt
        (degraded reads): each result then has ``len(rows)`` rows.
        """
        raise NotImplementedError

    def _parity_list(self, parity, parity_index):
        if parity_index is None:
            if isinstance(parity, np.ndarray):
                raise ValueError("pass a list of r parity members, or parity_index=")
            if len(parity) != self.r:
                raise ValueError(f"expected {self.r} parity members, got {len(parity)}")
            return list(enumerate(parity))
        if not 0 <= parity_index < self.r:
            raise ValueError(f"parity_index {parity_index} out of range 0..{self.r - 1}")
        return [(parity_index, parity)]


class GFCode(Code):
    """A systematic linear code over GF(2^8) given by its (r, k) parity rows."""

    def __init__(self, name: str, parity_rows: np.ndarray) -> None:
        self.name = name
        self.r, self.k = parity_rows.shape
        self.parity_rows = np.ascontiguousarray(parity_rows, dtype=np.uint8)
        self.generator = systematic_generator(self.parity_rows)

    def __repr__(self) -> str:
        return f"GFCode({self.name!r}, k={self.k}, r={self.r})"

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        data = self._data(data)
        parity = [np.empty_like(data[0]) for _ in range(self.r)]
        self.encode_into(data, parity)
        return parity

    def encode_into(self, data: Sequence[np.ndarray], parity: Sequence[np.ndarray]) -> None:
        """Like encode, writing into preallocated parity members."""
        data = self._data(data)
        par = [_check_member(p, "parity") for p in parity]
        if len(par) != self.r or any(p.shape != data[0].shape for p in par):
            raise ValueError(f"need {self.r} parity members of shape {data[0].shape}")
        combine(self.parity_rows, data, par)

    def delta(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        return np.bitwise_xor(_check_member(old, "old"), _check_member(new, "new"))

    def update(self, parity, j, rows, delta_or_old, new=None, *, parity_index=None) -> None:
        if not 0 <= j < self.k:
            raise ValueError(f"data member {j} out of range 0..{self.k - 1}")
        rows = _as_rows(rows)
        d = _check_member(delta_or_old, "delta_or_old")
        if d.shape[0] != rows.size:
            raise ValueError("one delta row per row id")
        n = None if new is None else _check_member(new, "new")
        if n is not None and n.shape != d.shape:
            raise ValueError("old and new must have the same shape")
        for i, p in self._parity_list(parity, parity_index):
            p = _check_member(p, "parity")
            if p.shape[1] != d.shape[1]:
                raise ValueError("row_bytes of parity and delta differ")
            if rows.size and (rows.min() < 0 or rows.max() >= p.shape[0]):
                raise ValueError("row id out of range")
            c = self.parity_rows[i, j]
            if n is None:
                gf_mac_rows(p, rows, d, c)
            else:
                gf_mac_rows2(p, rows, d, n, c)

    def decode(self, members, parity, lost, rows=None) -> list[np.ndarray]:
        k, r = self.k, self.r
        if len(members) != k:
            raise ValueError(f"expected {k} data entries (None where missing)")
        parity = [None] * r if parity is None else list(parity)
        if len(parity) != r:
            raise ValueError(f"expected {r} parity entries (None where missing)")
        lost = [int(x) for x in lost]
        if any(not 0 <= x < k + r for x in lost):
            raise ValueError(f"lost index out of range 0..{k + r - 1}")
        if not lost:
            return []
        have = [(i, m) for i, m in enumerate(list(members) + parity) if m is not None]
        have = [(i, m) for i, m in have if i not in lost]
        data_have = [x for x in have if x[0] < k]
        par_have = [x for x in have if x[0] >= k]
        chosen = (data_have + par_have)[:k]  # prefer data: fewer multiplications
        if len(chosen) < k:
            raise DecodeError(
                f"{self.name}(k={k}, r={r}): {len(chosen)} members at hand, need {k}"
            )
        idx = np.array([i for i, _ in chosen], dtype=np.int64)
        srcs = [_check_member(m, f"member {i}") for i, m in chosen]
        shape = srcs[0].shape
        if any(s.shape != shape for s in srcs):
            raise ValueError("members of different shapes")
        # every stripe member as a combination of the chosen ones: G * S^-1
        inv = gf_mat_inv(np.ascontiguousarray(self.generator[idx]))
        coef = np.ascontiguousarray(gf_matmul(self.generator[np.array(lost)], inv))
        if rows is None:
            out = [np.empty(shape, dtype=np.uint8) for _ in lost]
            combine(coef, srcs, out)
        else:
            rows = _as_rows(rows)
            if rows.size and (rows.min() < 0 or rows.max() >= shape[0]):
                raise ValueError("row id out of range")
            out = [np.empty((rows.size, shape[1]), dtype=np.uint8) for _ in lost]
            gf_combine_rows(coef, _list(srcs), rows, _list(out))
        return out

    def _data(self, data):
        if len(data) != self.k:
            raise ValueError(f"expected {self.k} data members, got {len(data)}")
        data = [_check_member(d, f"data member {j}") for j, d in enumerate(data)]
        if any(d.shape != data[0].shape for d in data):
            raise ValueError("data members of different shapes")
        return data


def _list(arrays):
    out = List()
    for a in arrays:
        out.append(a)
    return out


# ---------------------------------------------------------------------------
# sum code (ECRM's float parity)


@njit(cache=True)
def sum_encode(data, out):
    """out[t, c] = sum over members of data[j][t, c] (float32 inputs), in member order."""
    n = out.shape[0]
    w = out.shape[1]
    for t in range(n):
        o = out[t]
        o[:] = 0
        for j in range(len(data)):
            x = data[j][t]
            for c in range(w):
                o[c] += x[c]


@njit(cache=True)
def sum_update_rows(parity, rows, delta):
    """parity[rows[t]] += delta[t]."""
    w = parity.shape[1]
    for t in range(rows.size):
        r = rows[t]
        for c in range(w):
            parity[r, c] += delta[t, c]


@njit(cache=True)
def sum_update_rows2(parity, rows, old, new, zero):
    """parity[rows[t]] += new[t] - old[t], the difference taken in zero's (parity's) dtype."""
    w = parity.shape[1]
    for t in range(rows.size):
        r = rows[t]
        for c in range(w):
            # adding a typed zero promotes float32 inputs to a float64 accumulator
            parity[r, c] += (new[t, c] + zero) - (old[t, c] + zero)


@njit(cache=True)
def sum_decode_rows(parity, others, rows, out):
    """out[t] = float32(parity[rows[t]] - sum of the other members' rows)."""
    w = parity.shape[1]
    acc = np.empty(w, dtype=parity.dtype)
    for t in range(rows.size):
        row = rows[t]
        acc[:] = parity[row]
        for j in range(len(others)):
            x = others[j][row]
            for c in range(w):
                acc[c] -= x[c]
        for c in range(w):
            out[t, c] = np.float32(acc[c])


class SumCode(Code):
    """ECRM's float parity, r = 1: P = sum of the data rows read as float32."""

    def __init__(self, k: int, dtype=np.float32) -> None:
        self.name = "sum"
        self.k = k
        self.r = 1
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError("sum code accumulates in float32 or float64")

    def __repr__(self) -> str:
        return f"SumCode(k={self.k}, dtype={self.dtype.name})"

    @staticmethod
    def _f32(a: np.ndarray, what: str) -> np.ndarray:
        if a.dtype == np.float32 and a.ndim == 2 and a.flags.c_contiguous:
            return a
        a = _check_member(a, what)
        if a.shape[1] % 4:
            raise ValueError(f"{what}: row_bytes must be a multiple of 4 for the sum code")
        return a.view(np.float32)

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(data) != self.k:
            raise ValueError(f"expected {self.k} data members, got {len(data)}")
        f = [self._f32(d, f"data member {j}") for j, d in enumerate(data)]
        if any(x.shape != f[0].shape for x in f):
            raise ValueError("data members of different shapes")
        out = np.empty(f[0].shape, dtype=self.dtype)
        sum_encode(_list(f), out)
        return [out]

    def delta(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        return self._f32(new, "new").astype(self.dtype) - self._f32(old, "old").astype(self.dtype)

    def update(self, parity, j, rows, delta_or_old, new=None, *, parity_index=None) -> None:
        if not 0 <= j < self.k:
            raise ValueError(f"data member {j} out of range 0..{self.k - 1}")
        rows = _as_rows(rows)
        ((_, p),) = self._parity_list(parity, parity_index)
        if p.dtype != self.dtype or p.ndim != 2 or not p.flags.c_contiguous:
            raise ValueError(f"sum parity must be C-contiguous 2-D {self.dtype.name}")
        if rows.size and (rows.min() < 0 or rows.max() >= p.shape[0]):
            raise ValueError("row id out of range")
        if new is None:
            d = delta_or_old
            if d.dtype not in (np.float32, np.float64):
                d = self._f32(d, "delta")
            if d.shape != (rows.size, p.shape[1]):
                raise ValueError("delta shape must be (len(rows), parity width)")
            sum_update_rows(p, rows, np.ascontiguousarray(d))
        else:
            a, b = self._f32(delta_or_old, "old"), self._f32(new, "new")
            if a.shape != b.shape or a.shape != (rows.size, p.shape[1]):
                raise ValueError("old/new shape must be (len(rows), parity width)")
            sum_update_rows2(p, rows, a, b, self.dtype.type(0))

    def decode(self, members, parity, lost, rows=None) -> list[np.ndarray]:
        k = self.k
        if len(members) != k:
            raise ValueError(f"expected {k} data entries (None where missing)")
        lost = [int(x) for x in lost]
        if not lost:
            return []
        p = None if parity is None else parity[0]
        missing = {j for j in range(k) if members[j] is None} | {x for x in lost if x < k}
        if p is None or k in lost:
            missing.add(k)
        if len(missing) > 1:
            raise DecodeError(f"sum(k={k}): {len(missing)} members missing, tolerates 1")
        if lost != [lost[0]]:
            raise DecodeError("sum code rebuilds one member at a time")
        x = lost[0]
        if x == k:  # the parity itself: re-encode
            par = self.encode(members)[0]
            return [par if rows is None else par[_as_rows(rows)]]
        others = [self._f32(members[j], f"member {j}") for j in range(k) if j != x]
        n_rows = p.shape[0]
        rows_ = np.arange(n_rows, dtype=np.int64) if rows is None else _as_rows(rows)
        out = np.empty((rows_.size, p.shape[1]), dtype=np.float32)
        if not others:  # k = 1: replication
            out[:] = p[rows_]
        else:
            sum_decode_rows(p, _list(others), rows_, out)
        return [out.view(np.uint8)]


def make_code(name: str, k: int, r: int = 1, dtype=np.float32) -> Code:
    """The code ``name`` ("xor", "rs" or "sum") for k data and r parity members.

    ``dtype`` is the accumulator of the ``sum`` code (float32 or float64);
    GF codes ignore it (they work on bytes).
    """
    if not 1 <= k <= 255:
        raise ValueError(f"k must be in 1..255, got {k}")
    if name == "xor":
        if r != 1:
            raise ValueError("the xor code has r = 1")
        return GFCode("xor", np.ones((1, k), dtype=np.uint8))
    if name == "rs":
        if not 1 <= r or k + r > 256:
            raise ValueError(f"rs needs r >= 1 and k + r <= 256, got k={k}, r={r}")
        return GFCode("rs", cauchy_matrix(k, r))
    if name == "sum":
        if r != 1:
            raise ValueError("the sum code has r = 1")
        return SumCode(k, dtype)
    raise ValueError(f"unknown code {name!r} (xor, rs, sum)")


def measure_sum_drift(
    k: int = 4,
    n_rows: int = 1024,
    dim: int = 64,
    n_updates: int = 2000,
    rows_per_update: int = 64,
    dtype=np.float32,
    scale: float = 0.05,
    step: float = 1e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Rounding drift of the ``sum`` code after many updates and after a decode.

    Simulates ``n_updates`` row-sparse float32 updates (``w -= step * g``,
    g ~ N(0, 1)) on k members of N(0, scale) rows, applying ``P += new - old``
    each time, then compares the incrementally updated parity with a fresh
    re-encode and decodes member 0 from the drifted parity. Returns max
    absolute and max relative errors (relative to the largest magnitude
    involved) and the fraction of decoded float32 values that are bit-exact.
    """
    rng = np.random.default_rng(seed)
    code = make_code("sum", k, 1, dtype=dtype)
    data = [rng.normal(0, scale, (n_rows, dim)).astype(np.float32) for _ in range(k)]
    (par,) = code.encode(data)
    for _ in range(n_updates):
        j = int(rng.integers(k))
        rows = np.unique(rng.integers(0, n_rows, rows_per_update))
        old = data[j][rows]
        new = (old - np.float32(step) * rng.standard_normal(old.shape, dtype=np.float32)).astype(
            np.float32
        )
        data[j][rows] = new
        code.update([par], j, rows, old, new)
    (fresh,) = code.encode(data)
    err = np.abs(par.astype(np.float64) - fresh.astype(np.float64))
    mag = max(float(np.abs(fresh).max()), np.finfo(np.float64).tiny)
    (dec,) = code.decode([None] + data[1:], [par], [0])
    dec = dec.view(np.float32)
    derr = np.abs(dec.astype(np.float64) - data[0].astype(np.float64))
    dmag = max(float(np.abs(data[0]).max()), np.finfo(np.float64).tiny)
    return {
        "parity_max_abs": float(err.max()),
        "parity_max_rel": float(err.max() / mag),
        "decode_max_abs": float(derr.max()),
        "decode_max_rel": float(derr.max() / dmag),
        "decode_exact_fraction": float(np.mean(dec.view(np.uint32) == data[0].view(np.uint32))),
    }
