"""Counter-based hashing RNG: every random number is a pure function of its coordinates.

This module owns the random numbers of mpiec's data and model layers. A value is
addressed by ``(seed, stream, key)``: ``seed`` is the run seed, ``stream`` a small
integer naming *what* is drawn (a table, a layer, a label stream) and ``key`` a
``uint64`` counter (a sample index, a row id times the row width plus a column).

Invariants:

* Pure: the same ``(seed, stream, key)`` gives the same bits on any rank, process,
  platform and batch composition (only exact ``uint64`` arithmetic and
  correctly-rounded conversions are involved for ``hash_u64``/``hash_uniform``).
* splitmix64: ``hash_u64 = mix64(base(seed, stream) + key * GOLDEN)`` where
  ``mix64`` is the splitmix64 finalizer. Different ``(seed, stream)`` pairs give
  different bases, i.e. the same sequence shifted by a pseudo-random 64-bit
  offset, so streams do not overlap for any realistic key range.
* ``hash_uniform`` uses the top 53 bits: values are in ``[0, 1)``.

The scalar ``mix64_nb``/``base_nb`` twins are numba-jitted and bit-identical
to the numpy versions (tested); the synthetic generator uses them in its kernel.
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = [
    "GOLDEN",
    "stream_base",
    "mix64",
    "hash_u64",
    "hash_uniform",
    "hash_normal",
    "init_embedding_rows",
]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_MASK64 = (1 << 64) - 1
_INV53 = 1.0 / 9007199254740992.0  # 2**-53


def _mix64_int(z: int) -> int:
    """splitmix64 finalizer on a Python int (exact, used for scalar bases)."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def stream_base(seed: int, stream: int) -> np.uint64:
    """The 64-bit base of the counter sequence for ``(seed, stream)``."""
    s = _mix64_int(int(seed) & _MASK64)
    b = _mix64_int(s ^ ((int(stream) * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & _MASK64))
    return np.uint64(b)


def mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, elementwise on a ``uint64`` array (returns a new array)."""
    z = np.asarray(z, dtype=np.uint64)
    z = z ^ (z >> _S30)
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def hash_u64(seed: int, stream: int, keys: np.ndarray) -> np.ndarray:
    """64 random bits per key: a pure function of ``(seed, stream, key)``."""
    k = np.asarray(keys).astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        return mix64(k * GOLDEN + stream_base(seed, stream))


def hash_uniform(seed: int, stream: int, keys: np.ndarray) -> np.ndarray:
    """A float64 uniform in ``[0, 1)`` per key (top 53 bits of ``hash_u64``)."""
    return (hash_u64(seed, stream, keys) >> _S11).astype(np.float64) * _INV53


def hash_normal(seed: int, stream: int, keys: np.ndarray) -> np.ndarray:
    """A float64 standard normal per key (Box-Muller on two hashed uniforms).

    The two uniforms come from keys ``2*key`` and ``2*key + 1`` of the same stream,
    so each key owns its own pair and results never depend on neighbours.
    """
    k = np.asarray(keys).astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        k2 = k * np.uint64(2)
    u1 = hash_uniform(seed, stream, k2)
    u2 = hash_uniform(seed, stream, k2 + np.uint64(1))
    r = np.sqrt(-2.0 * np.log1p(-u1))  # 1 - u1 in (0, 1]: log is finite
    return r * np.cos(2.0 * np.pi * u2)


def init_embedding_rows(
    seed: int, table: int, card: int, row_ids: np.ndarray, dim: int
) -> np.ndarray:
    """Initial values of embedding rows, as facebookresearch/dlrm: U(-1/sqrt(card), 1/sqrt(card)).

    Row ``r``, column ``c`` of table ``table`` is a pure function of
    ``(seed, table, r, c)``: any rank can (re)initialize any subset of rows.
    Returns ``float32[len(row_ids), dim]``.
    """
    rows = np.asarray(row_ids, dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= card):
        raise ValueError(f"row ids must be in [0, {card}) for table {table}")
    out = np.empty((rows.size, dim), dtype=np.float32)
    bound = 1.0 / np.sqrt(float(card))
    cols = np.arange(dim, dtype=np.uint64)
    step = max(1, (1 << 20) // max(dim, 1))  # bound the float64 temporaries
    for s in range(0, rows.size, step):
        keys = rows[s : s + step].astype(np.uint64)[:, None] * np.uint64(dim) + cols
        u = hash_uniform(seed, 0x10000 + int(table), keys)
        out[s : s + step] = bound * (2.0 * u - 1.0)
    return out


# ---------------------------------------------------------------- numba twins


@nb.njit(inline="always", cache=True)
def mix64_nb(z: np.uint64) -> np.uint64:  # pragma: no cover - jitted
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@nb.njit(inline="always", cache=True)
def hash_nb(base: np.uint64, key: np.uint64) -> np.uint64:  # pragma: no cover - jitted
    return mix64_nb(key * np.uint64(0x9E3779B97F4A7C15) + base)


@nb.njit(inline="always", cache=True)
def uniform_nb(h: np.uint64) -> float:  # pragma: no cover - jitted
    return float(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@nb.njit(cache=True)
def hash_u64_nb(base: np.uint64, keys: np.ndarray) -> np.ndarray:  # pragma: no cover - jitted
    """``hash_u64`` inside jitted code, given ``base = stream_base(seed, stream)``."""
    out = np.empty(keys.size, dtype=np.uint64)
    for i in range(keys.size):
        out[i] = hash_nb(base, np.uint64(keys[i]))
    return out
