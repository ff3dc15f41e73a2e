"""Readers for real Criteo data: the Kaggle/Terabyte TSV and facebookresearch/dlrm's ``.npz``.

Owns the conversion of Criteo records into ``Batch`` (see ``source.py``):

* **dense**: the 13 integer counts (at most 18 digits, ``MAX_DENSE_DIGITS``; a longer
  value is an error saying so), missing → 0, negative → 0 (as dlrm), then
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
'<key>' ...``). The TSV is parsed by a numba scanner over 16 MiB blocks of bytes
(about 0.5–1M lines per second); the first malformed line stops it and is then
described in Python (``_bad_line``), so the message names its line number.
Blank lines at the end of the file are ignored (a blank line before data is an
error); a truncated or corrupt ``.gz`` is a ``DataError`` naming the file.
"""

from __future__ import annotations

import gzip
import os
import zipfile
import zlib
from collections.abc import Sequence

import numba as nb
import numpy as np

from mpiec.data.rng import hash_u64
from mpiec.data.source import Batch
from mpiec.errors import DataError

__all__ = ["N_DENSE", "N_CAT", "load_criteo_tsv", "load_criteo_npz", "map_categorical"]

N_DENSE = 13
N_CAT = 26
N_FIELDS = 1 + N_DENSE + N_CAT
_CHUNK_BYTES = 1 << 24
MAX_DENSE_DIGITS = 18  # the scanner's int64 limit for a dense count (Criteo's are at most 10 digits)
_BLANK = b" \t\r\n"

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


def map_categorical(raw: np.ndarray, cardinalities: Sequence[int] | np.ndarray,
                    cat_mapping: str) -> np.ndarray:
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
        if not line.strip(_BLANK):
            return DataError(f"{where}: blank line (only blank lines at the end of the file are allowed)")
        fields = line.rstrip(b"\r\n").split(b"\t")
        if len(fields) != N_FIELDS:
            return DataError(f"{where}: expected {N_FIELDS} tab-separated fields, found {len(fields)}")
        if fields[0] not in (b"0", b"1"):
            return DataError(f"{where}: label must be 0 or 1, found {fields[0][:20]!r}")
        for j in range(N_DENSE):
            v = fields[1 + j]
            if v and not _is_int(v):
                return DataError(f"{where}: dense feature I{j + 1} is not an integer: {v[:20]!r}")
            if len(v.lstrip(b"+-")) > MAX_DENSE_DIGITS:
                return DataError(f"{where}: dense feature I{j + 1} has {len(v.lstrip(b'+-'))} digits, "
                                 f"more than the {MAX_DENSE_DIGITS} this reader takes: {v[:24]!r}")
        for j in range(N_CAT):
            v = fields[1 + N_DENSE + j]
            if v and (len(v) > 16 or any(_HEX[c] == 255 for c in v)):
                return DataError(
                    f"{where}: categorical feature C{j + 1} is not hex (<= 16 digits): {v[:20]!r}"
                )
    return DataError(f"{path}:{lineno0}: malformed line")  # not reached


@nb.njit(cache=True)
def _scan(buf, end, final, max_n, labels, dense, raw):  # pragma: no cover - jitted
    """Parse complete lines of ``buf[:end]`` into the output arrays.

    Returns ``(n_lines, next_pos, bad)``: ``bad`` is the byte offset of the first
    malformed line (-1 if none; parsing stops there). A last line without a newline
    is parsed only if ``final``.
    """
    pos = 0
    n = 0
    while pos < end and n < max_n:
        ls = pos
        le = pos
        while le < end and buf[le] != 10:
            le += 1
        if le == end and not final:
            break
        nxt = le + 1
        if le > ls and buf[le - 1] == 13:  # CRLF
            le -= 1
        field = 0
        a = ls
        ok = True
        while ok:
            b = a
            while b < le and buf[b] != 9:
                b += 1
            if field >= 40:
                ok = False
                break
            if field == 0:
                ok = b == a + 1 and (buf[a] == 48 or buf[a] == 49)
                labels[n] = buf[a] - 48 if ok else 0
            elif field <= 13:
                v = np.int64(0)
                neg = False
                c = a
                if c < b and (buf[c] == 45 or buf[c] == 43):
                    neg = buf[c] == 45
                    c += 1
                    ok = c < b
                if b - c > 18:
                    ok = False
                while ok and c < b:
                    d = np.int64(buf[c]) - 48
                    if d < 0 or d > 9:
                        ok = False
                    v = v * 10 + d
                    c += 1
                dense[n, field - 1] = -v if neg else v
            else:
                if b - a > 16:
                    ok = False
                v = np.uint64(0)
                for c in range(a, b):
                    h = _HEX[buf[c]]
                    if h == 255:
                        ok = False
                    v = (v << np.uint64(4)) | np.uint64(h)
                raw[n, field - 14] = v
            field += 1
            if b >= le:
                break
            a = b + 1
        if not ok or field != 40:
            return n, ls, ls
        n += 1
        pos = nxt
    return n, pos, -1


def _read_block(f, path: str) -> bytes:
    """The next block of the file; a truncated or corrupt ``.gz`` is a ``DataError`` naming it."""
    try:
        return f.read(_CHUNK_BYTES)
    except EOFError:
        raise DataError(f"{path}: the compressed file is truncated (it ends before the end of "
                        "its gzip stream)") from None
    except (OSError, zlib.error) as e:
        what = " ".join(str(e).split()) or type(e).__name__
        raise DataError(f"{path}: cannot be read ({what})") from None


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
    left = None if max_lines is None else int(max_lines)
    try:
        f = _open(p)
    except OSError as e:
        raise DataError(f"{p}: cannot open: {e.strerror or e}") from None
    with f:
        carry = b""
        final = False
        while not final and (left is None or left > 0):
            block = _read_block(f, p)
            final = not block
            data = carry + block
            if not data:
                break
            buf = np.frombuffer(data, dtype=np.uint8)
            cap = int(np.count_nonzero(buf == 10)) + 1
            if left is not None:
                cap = min(cap, left)
            labels = np.empty(cap, dtype=np.uint8)
            dense_i = np.empty((cap, N_DENSE), dtype=np.int64)
            raw = np.empty((cap, N_CAT), dtype=np.uint64)
            n, nxt, bad = _scan(buf, buf.size, final, cap, labels, dense_i, raw)
            if bad >= 0:
                if data[bad:].strip(_BLANK):
                    line = data[bad:].split(b"\n", 1)[0]
                    raise _bad_line(p, lineno + n, [line])
                # blank lines so far: the end of the file if nothing but blank lines follows
                nxt = len(data) if final else bad
            carry = data[nxt:]
            lineno += n
            if left is not None:
                left -= n
            if n:
                np.maximum(dense_i[:n], 0, out=dense_i[:n])
                parts_d.append(np.log1p(dense_i[:n].astype(np.float64)).astype(np.float32))
                parts_i.append(map_categorical(raw[:n], card, cat_mapping))
                parts_l.append(labels[:n].astype(np.float32))
    if not parts_l:
        raise DataError(f"{p}: no samples")
    return Batch(np.concatenate(parts_d), np.concatenate(parts_i), np.concatenate(parts_l))


def load_criteo_npz(
    path: str | os.PathLike, cardinalities: Sequence[int], cat_mapping: str = "mod"
) -> Batch:
    """Read the ``.npz`` of facebookresearch/dlrm's preprocessing (``X_int``, ``X_cat``, ``y``)."""
    card = _check_cards(cardinalities)
    p = os.fspath(path)
    if os.path.isdir(p):
        raise DataError(f"{p}: is a directory, not an .npz file")
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
