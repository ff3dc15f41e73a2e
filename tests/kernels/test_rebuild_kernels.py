"""kernels.rebuild: a lost row formed in place equals GFCode.decode / encode byte for byte; take_rows."""

from __future__ import annotations

import numpy as np
import pytest
from mpiec.kernels.codes import make_code
from mpiec.kernels.gf256 import gf_mat_inv, gf_matmul
from mpiec.kernels.rebuild import combine_into, pending_rows, take_rows


@pytest.mark.parametrize(("name", "k", "r", "lost"), [("xor", 1, 1, 0), ("xor", 3, 1, 1), ("rs", 2, 2, 0),
                                                     ("rs", 4, 2, 3), ("rs", 3, 3, 4), ("rs", 1, 2, 0)])
@pytest.mark.parametrize("n", [1, 3, 2049, 5000])
def test_combine_into_matches_decode(name: str, k: int, r: int, lost: int, n: int, gfni: bool) -> None:
    rng = np.random.default_rng(n + k)
    w = 68
    code = make_code(name, k, r)
    data = [rng.integers(0, 256, (n, w), dtype=np.uint8) for _ in range(k)]
    parity = code.encode(data)
    members = data + parity
    chosen = [x for x in range(k + r) if x != lost][:k]
    ref = members[lost]
    g = code.generator
    coef = gf_matmul(g[[lost]], gf_mat_inv(np.ascontiguousarray(g[np.array(chosen)])))[0]
    # the sources as blocks of one receive buffer, in a shuffled order, after some padding rows
    order = rng.permutation(k)
    buf = np.concatenate([rng.integers(0, 256, (5, w), dtype=np.uint8)] + [members[chosen[j]] for j in order])
    offs = np.empty(k, dtype=np.int64)
    offs[order] = 5 + np.arange(k) * n
    dst = rng.integers(0, 256, (n + 7, w), dtype=np.uint8)
    keep = dst.copy()
    slots = rng.permutation(n + 7)[:n].astype(np.int64)
    done = np.zeros(n + 7, dtype=bool)
    combine_into(coef, buf, offs, dst, slots, done)  # on the path the ``gfni`` fixture switched on
    assert np.array_equal(dst[slots], ref)
    untouched = np.setdiff1d(np.arange(n + 7), slots)
    assert np.array_equal(dst[untouched], keep[untouched])
    assert done[slots].all() and not done[untouched].any()


def test_take_rows_data_and_parity() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, (50, 68), dtype=np.uint8)
    parity = rng.integers(0, 256, (30, 68), dtype=np.uint8)
    idx = np.array([3, -1, 49, -30, 0, -5], dtype=np.int64)
    out = np.empty((idx.size, 68), dtype=np.uint8)
    take_rows(data, parity, idx, out)
    expect = np.stack([data[i] if i >= 0 else parity[-1 - i] for i in idx])
    assert np.array_equal(out, expect)
    out2 = np.empty((2, 68), dtype=np.uint8)
    take_rows(np.empty((0, 68), np.uint8), parity, np.array([-2, -3], dtype=np.int64), out2)
    assert np.array_equal(out2, parity[[1, 2]])


def test_pending_rows_distinct_not_done() -> None:
    done = np.zeros(20, dtype=bool)
    done[[2, 5]] = True
    seen = np.zeros(20, dtype=bool)
    out = pending_rows(np.array([5, 7, 2, 7, 3, 19, 3], dtype=np.int32), done, seen)
    assert out.tolist() == [7, 3, 19] and not seen.any()
