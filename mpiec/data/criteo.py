"""Readers for real Criteo data: the Kaggle/Terabyte TSV and facebookresearch/dlrm's ``.npz``.

Owns the conversion of Criteo records into ``Batch`` (see ``source.py``):

* **dense**: the 13 integer counts, missing → 0, negative → 0 (as dlrm), then
  ``log(x + 1)`` as ``float32``. An ``.npz`` whose ``X_int`` is already floating
  point is taken as transformed and only cast.
* **categorical**: the 26 hex values (``int(x, 16)``, up to 16 hex digits),
  missing → raw value 0 (what dlrm's preprocessing does), then mapped onto table
  ``t`` of size ``card_t`` by ``cat_mapping``: ``"mod"`` → ``raw % card_t``
  (missing is id 0), ``"hash"`` → ``hash_u64(0, 0x30000 + t, raw) % card_t`` (a fixed
  hash, independent of the run seed, so a file always maps the same way).
* **labels**: ``0``/``1`` as ``float32``.

Invariant: malformed input never yields a silently wrong ``Batch``; it raises
``DataError("<path>:<line>: <what is wrong>")`` (for ``.npz``: ``<path>: key
'<key>' ...``). The TSV is parsed in chunks of lines with vectorized column
conversions; a chunk that fails a vectorized check is rescanned line by line only
to name the first bad line.
"""

from __future__ import annotations

import gzip
import os
import zipfile
from collections.abc import Iterator, Sequence

import numpy as np

from mpiec.data.rng import hash_u64
from mpiec.data.source import Batch
from mpiec.errors import DataError

__all__ = ["N_DENSE", "N_CAT", "load_criteo_tsv", "load_criteo_npz", "map_categorical"]

N_DENSE = 13
N_CAT = 26
N_FIELDS = 1 + N_DENSE + N_CAT
_CHUNK = 1 << 16

# hex digit value of each byte, 255 for a non-hex byte
_HEX = np.full(256, 255, dtype=np.uint8)
for _c in b"0123456789":
    _HEX[_c] = _c - ord("0")
for _c in b"abcdef":
    _HEX[_c] = _c - ord("a") + 10
    _HEX[_c - 32] = _c - ord("a") + 10


def _check_cards(cardinalities: Sequence[int]) -> np.ndarray:
    card = np.asarray(list(cardinalities), dtype=np.int64)
    if card.shape != (N_CAT,) or (card < 1).any():
        raise ValueError(f"Criteo needs {N_CAT} positive table sizes, got {list(cardinalities)}")
    return card


def map_categorical(raw: np.ndarray, cardinalities: Sequence[int], cat_mapping: str) -> np.ndarray:
    """Map raw categorical values ``uint64[n, 26]`` onto the tables: ``int64[n, 26]``."""
    card = np.asarray(list(cardinalities), dtype=np.uint64)
    raw = np.asarray(raw).astype(np.uint64, copy=False)
    if cat_mapping == "mod":
        return (raw % card).astype(np.int64)
    if cat_mapping == "hash":
        out = np.empty(raw.shape, dtype=np.int64)
        for t in range(raw.shape[1]):
            out[:, t] = (hash_u64(0, 0x30000 + t, raw[:, t]) % card[t]).astype(np.int64)
        return out
    raise ValueError(f'cat_mapping must be "mod" or "hash", got {cat_mapping!r}')


def _open(path: str | os.PathLike):
    p = os.fspath(path)
    if p.endswith(".gz"):
        return gzip.open(p, "rb")
    return open(p, "rb")


def _chunks(f, max_lines: int | None) -> Iterator[list[bytes]]:
    n = 0
    while max_lines is None or n < max_lines:
        want = _CHUNK if max_lines is None else min(_CHUNK, max_lines - n)
        lines = []
        for line in f:
            lines.append(line)
            if len(lines) >= want:
                break
        if not lines:
            return
        n += len(lines)
        yield lines


def _parse_hex(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``S``-dtype column of hex strings → (uint64 values, ok mask). Empty → 0."""
    n = col.shape[0]
    width = col.dtype.itemsize
    if width == 0 or n == 0:
        return np.zeros(n, dtype=np.uint64), np.ones(n, dtype=bool)
    b = np.frombuffer(np.ascontiguousarray(col).tobytes(), dtype=np.uint8).reshape(n, width)
    lens = np.char.str_len(col)
    pos = np.arange(width)
    inside = pos[None, :] < lens[:, None]
    nib = _HEX[b]
    ok = ~((nib == 255) & inside).any(axis=1) & (lens <= 16)
    shift = ((lens[:, None] - 1 - pos[None, :]) * 4).clip(0, 60).astype(np.uint64)
    vals = np.where(inside & (nib != 255), nib.astype(np.uint64) << shift, np.uint64(0))
    return np.bitwise_or.reduce(vals, axis=1), ok


def _is_int(s: bytes) -> bool:
    try:
        int(s)
    except ValueError:
        return False
    return b"." not in s and b"_" not in s and s.strip() == s


def _bad_line(path: str, lineno0: int, lines: list[bytes]) -> DataError:
    """Find the first malformed line of a chunk and describe it."""
    for k, line in enumerate(lines):
        where = f"{path}:{lineno0 + k}"
        fields = line.rstrip(b"\r\n").split(b"\t")
        if len(fields) != N_FIELDS:
            return DataError(f"{where}: expected {N_FIELDS} tab-separated fields, found {len(fields)}")
        if fields[0] not in (b"0", b"1"):
            return DataError(f"{where}: label must be 0 or 1, found {fields[0][:20]!r}")
        for j in range(N_DENSE):
            v = fields[1 + j]
            if v and not _is_int(v):
                return DataError(f"{where}: dense feature I{j + 1} is not an integer: {v[:20]!r}")
        for j in range(N_CAT):
            v = fields[1 + N_DENSE + j]
            if v and (len(v) > 16 or any(_HEX[c] == 255 for c in v)):
                return DataError(f"{where}: categorical feature C{j + 1} is not hex: {v[:20]!r}")
    return DataError(f"{path}:{lineno0}: malformed line")  # not reached


def _parse_chunk(path: str, lineno0: int, lines: list[bytes], card: np.ndarray, cat_mapping: str):
    rows = [line.rstrip(b"\r\n").split(b"\t") for line in lines]
    if any(len(r) != N_FIELDS for r in rows):
        raise _bad_line(path, lineno0, lines)
    arr = np.array(rows, dtype=np.bytes_)  # [n, 40], S<max width>
    lab = arr[:, 0]
    is1 = lab == b"1"
    if not (is1 | (lab == b"0")).all():
        raise _bad_line(path, lineno0, lines)
    dense_s = arr[:, 1 : 1 + N_DENSE]
    dense_s = np.where(dense_s == b"", b"0", dense_s)
    try:
        if (np.char.find(dense_s, b".") >= 0).any():
            raise ValueError
        dense_i = dense_s.astype(np.int64)
    except (ValueError, OverflowError):
        raise _bad_line(path, lineno0, lines) from None
    np.maximum(dense_i, 0, out=dense_i)
    dense = np.log1p(dense_i.astype(np.float64)).astype(np.float32)
    cat_s = arr[:, 1 + N_DENSE :]
    raw = np.empty(cat_s.shape, dtype=np.uint64)
    for t in range(N_CAT):
        raw[:, t], ok = _parse_hex(np.ascontiguousarray(cat_s[:, t]))
        if not ok.all():
            raise _bad_line(path, lineno0, lines)
    ids = map_categorical(raw, card, cat_mapping)
    return dense, ids, is1.astype(np.float32)


def load_criteo_tsv(
    path: str | os.PathLike,
    cardinalities: Sequence[int],
    cat_mapping: str = "mod",
    max_lines: int | None = None,
) -> Batch:
    """Read a Criteo Kaggle/Terabyte TSV (optionally ``.gz``) into one ``Batch``.

    Each line: ``label \\t I1..I13 \\t C1..C26``. See the module docstring for the
    conversions; malformed lines raise ``DataError("<path>:<line>: ...")``.
    """
    card = _check_cards(cardinalities)
    if cat_mapping not in ("mod", "hash"):
        raise ValueError(f'cat_mapping must be "mod" or "hash", got {cat_mapping!r}')
    p = os.fspath(path)
    parts_d, parts_i, parts_l = [], [], []
    lineno = 1
    try:
        f = _open(p)
    except OSError as e:
        raise DataError(f"{p}: cannot open: {e.strerror}") from None
    with f:
        for lines in _chunks(f, max_lines):
            d, i, lab = _parse_chunk(p, lineno, lines, card, cat_mapping)
            parts_d.append(d)
            parts_i.append(i)
            parts_l.append(lab)
            lineno += len(lines)
    if not parts_l:
        raise DataError(f"{p}: no samples")
    return Batch(np.concatenate(parts_d), np.concatenate(parts_i), np.concatenate(parts_l))


def load_criteo_npz(
    path: str | os.PathLike, cardinalities: Sequence[int], cat_mapping: str = "mod"
) -> Batch:
    """Read the ``.npz`` of facebookresearch/dlrm's preprocessing (``X_int``, ``X_cat``, ``y``)."""
    card = _check_cards(cardinalities)
    p = os.fspath(path)
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"{p}: not a readable .npz file ({type(e).__name__})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise DataError(f"{p}: not an .npz archive")
    with z:
        arrays = {}
        for key in ("X_int", "X_cat", "y"):
            if key not in z.files:
                raise DataError(f"{p}: key '{key}' is missing (found: {', '.join(z.files)})")
            try:
                arrays[key] = z[key]
            except ValueError:
                raise DataError(f"{p}: key '{key}' holds pickled objects") from None
    X_int, X_cat, y = arrays["X_int"], arrays["X_cat"], arrays["y"]
    y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    if y.ndim != 1:
        raise DataError(f"{p}: key 'y' has shape {y.shape}, expected (n,)")
    n = y.shape[0]
    if X_int.shape != (n, N_DENSE):
        raise DataError(f"{p}: key 'X_int' has shape {X_int.shape}, expected ({n}, {N_DENSE})")
    if X_cat.shape != (n, N_CAT):
        raise DataError(f"{p}: key 'X_cat' has shape {X_cat.shape}, expected ({n}, {N_CAT})")
    if n == 0:
        raise DataError(f"{p}: no samples")
    if y.dtype.kind not in "biuf" or not np.isin(y, (0, 1)).all():
        raise DataError(f"{p}: key 'y' must hold only 0 and 1")
    if X_cat.dtype.kind not in "iu":
        raise DataError(f"{p}: key 'X_cat' must be integer, found {X_cat.dtype}")
    if X_cat.dtype.kind == "i" and (X_cat < 0).any():
        raise DataError(f"{p}: key 'X_cat' has negative values")
    if X_int.dtype.kind == "f":
        if not np.isfinite(X_int).all():
            raise DataError(f"{p}: key 'X_int' has non-finite values")
        dense = X_int.astype(np.float32)
    elif X_int.dtype.kind in "iu":
        dense = np.log1p(np.maximum(X_int.astype(np.float64), 0.0)).astype(np.float32)
    else:
        raise DataError(f"{p}: key 'X_int' must be numeric, found {X_int.dtype}")
    ids = map_categorical(X_cat, card, cat_mapping)
    return Batch(np.ascontiguousarray(dense), ids, y.astype(np.float32))
