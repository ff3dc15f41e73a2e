"""GF(2^8) field, the three codes: ISA-L parity, erasure decoding, delta updates, sum drift."""

import itertools

import numpy as np
import pytest
from mpiec.kernels import gf256
from mpiec.kernels.codes import DecodeError, make_code, measure_sum_drift

KS = (1, 2, 4, 8, 16, 32)
RS = (1, 2, 3, 4)


# -- independent slow pure-Python GF(2^8), poly 0x11D -----------------------------
def py_mul(a: int, b: int) -> int:
    p = 0
    while b:
        if b & 1:
            p ^= a
        a <<= 1
        if a & 0x100:
            a ^= 0x11D
        b >>= 1
    return p


def py_inv(a: int) -> int:
    return next(x for x in range(1, 256) if py_mul(a, x) == 1)


def test_field_tables_match_pure_python():
    rng = np.random.default_rng(1)
    for a, b in rng.integers(0, 256, (500, 2)):
        assert gf256.GF_MUL[a, b] == py_mul(int(a), int(b))
    assert all(py_mul(a, int(gf256.GF_INV[a])) == 1 for a in range(1, 256))


def test_rs_k4_r2_parity_equals_pure_python_cauchy():
    k, r = 4, 2
    rng = np.random.default_rng(2)
    data = [rng.integers(0, 256, (3, 40), dtype=np.uint8) for _ in range(k)]
    parity = make_code("rs", k, r).encode(data)
    for i in range(r):
        coef = [py_inv((k + i) ^ j) for j in range(k)]
        for t in range(3):
            for c in range(40):
                want = 0
                for j in range(k):
                    want ^= py_mul(coef[j], int(data[j][t, c]))
                assert parity[i][t, c] == want


@pytest.mark.parametrize("c", [0, 1, 2, 0x1D, 0x8E, 0xFF])
def test_mac_paths_agree(c):
    rng = np.random.default_rng(c)
    src = rng.integers(0, 256, 1000, dtype=np.uint8)  # not a multiple of 32: tail path
    other = rng.integers(0, 256, 1000, dtype=np.uint8)
    dst = rng.integers(0, 256, 1000, dtype=np.uint8)
    want = dst ^ gf256.GF_MUL[c][src]
    a, b, x = dst.copy(), dst.copy(), dst.copy()
    gf256.gf_mac(a, src, c)
    gf256.gf_mac_portable(b, src, c)
    gf256.gf_mac2(x, src, other, c)
    assert np.array_equal(a, want) and np.array_equal(b, want)
    assert np.array_equal(x, dst ^ gf256.GF_MUL[c][src ^ other])


def test_mat_inv_and_singular():
    m = gf256.cauchy_matrix(4, 4)
    eye = gf256.gf_matmul(m, gf256.gf_mat_inv(m))
    assert np.array_equal(eye, np.eye(4, dtype=np.uint8))
    with pytest.raises(ValueError):
        gf256.gf_mat_inv(np.ones((2, 2), dtype=np.uint8))


def _patterns(k, r, rng, limit=12):
    n = k + r
    pats = []
    for e in range(1, r + 1):
        combos = list(itertools.combinations(range(n), e))
        if len(combos) > limit:
            combos = [combos[i] for i in rng.choice(len(combos), limit, replace=False)]
        pats += combos
    return pats


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("r", RS)
def test_rs_decodes_every_erasure_pattern(k, r):
    rng = np.random.default_rng(100 * k + r)
    code = make_code("rs", k, r)
    data = [rng.integers(0, 256, (9, 68), dtype=np.uint8) for _ in range(k)]
    parity = code.encode(data)
    full = data + parity
    rows = np.array([8, 0, 3])
    for lost in _patterns(k, r, rng):
        members = [None if j in lost else data[j] for j in range(k)]
        par = [None if k + i in lost else parity[i] for i in range(r)]
        out = code.decode(members, par, lost)
        assert all(np.array_equal(o, full[x]) for o, x in zip(out, lost, strict=True)), lost
        out = code.decode(members, par, lost, rows=rows)
        assert all(np.array_equal(o, full[x][rows]) for o, x in zip(out, lost, strict=True))


@pytest.mark.parametrize("k", (1, 3, 8))
def test_xor_code(k):
    rng = np.random.default_rng(k)
    code = make_code("xor", k, 1)
    data = [rng.integers(0, 256, (5, 16), dtype=np.uint8) for _ in range(k)]
    (p,) = code.encode(data)
    assert np.array_equal(p, np.bitwise_xor.reduce(np.stack(data), axis=0))
    for x in range(k + 1):
        members = [None if j == x else data[j] for j in range(k)]
        (out,) = code.decode(members, [None if x == k else p], [x])
        assert np.array_equal(out, (data + [p])[x])


def test_too_many_erasures():
    code = make_code("rs", 4, 2)
    d = [np.zeros((2, 8), np.uint8)] * 4
    p = code.encode(d)
    with pytest.raises(DecodeError):
        code.decode([None, None, None, d[3]], p, [0, 1, 2])


@pytest.mark.parametrize(("name", "k", "r"), [("rs", 4, 2), ("rs", 16, 4), ("xor", 8, 1), ("rs", 1, 3)])
def test_random_delta_updates_equal_reencode(name, k, r):
    rng = np.random.default_rng(7)
    code = make_code(name, k, r)
    n_rows, row_bytes = 64, 260  # 64 float32 weights + 1 Adagrad accumulator
    data = [rng.integers(0, 256, (n_rows, row_bytes), dtype=np.uint8) for _ in range(k)]
    parity = code.encode(data)
    for step in range(2000):
        j = int(rng.integers(k))
        rows = np.unique(rng.integers(0, n_rows, int(rng.integers(1, 6))))
        new = rng.integers(0, 256, (rows.size, row_bytes), dtype=np.uint8)
        old = data[j][rows]
        if step % 3 == 0:  # three ways: delta, old/new, one parity member at a time
            code.update(parity, j, rows, code.delta(old, new))
        elif step % 3 == 1:
            code.update(parity, j, rows, old, new)
        else:
            for i in range(r):
                code.update(parity[i], j, rows, old, new, parity_index=i)
        data[j][rows] = new
    assert all(np.array_equal(a, b) for a, b in zip(parity, code.encode(data), strict=True))


def test_sum_code_float32_members_and_decode():
    rng = np.random.default_rng(3)
    code = make_code("sum", 3, 1, dtype=np.float64)
    data = [rng.normal(0, 1, (6, 8)).astype(np.float32) for _ in range(3)]
    (p,) = code.encode([d.view(np.uint8) for d in data])
    assert p.dtype == np.float64 and p.shape == (6, 8)
    np.testing.assert_allclose(p, sum(d.astype(np.float64) for d in data), rtol=1e-12)
    rows = np.array([1, 4])
    new = rng.normal(0, 1, (2, 8)).astype(np.float32)
    code.update([p], 1, rows, data[1][rows], new)
    data[1][rows] = new
    (out,) = code.decode([data[0], None, data[2]], [p], [1], rows=rows)
    np.testing.assert_allclose(out.view(np.float32), new, atol=1e-6)
    with pytest.raises(DecodeError):
        code.decode([None, None, data[2]], [p], [0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_drift_is_reported(dtype):
    m = measure_sum_drift(k=4, n_rows=256, n_updates=300, dtype=dtype)
    assert set(m) >= {"parity_max_abs", "parity_max_rel", "decode_max_abs", "decode_max_rel"}
    assert all(np.isfinite(v) and v >= 0 for v in m.values())
    if dtype == np.float32:
        # float32 parity drifts (rounding) but stays small: the point is to measure it
        assert 0 < m["parity_max_abs"] < 1e-4
        assert m["decode_exact_fraction"] < 1
    assert m["decode_max_rel"] < 1e-4


def test_bad_arguments():
    with pytest.raises(ValueError):
        make_code("lrc", 4, 2)
    with pytest.raises(ValueError):
        make_code("xor", 4, 2)
    code = make_code("rs", 2, 1)
    p = code.encode([np.zeros((3, 4), np.uint8)] * 2)
    with pytest.raises(ValueError):
        code.update(p, 0, np.array([3]), np.zeros((1, 4), np.uint8))


@pytest.mark.parametrize("n", [0, 1, 31, 64, 100, 4096 * 3 + 77, 5 << 20])
def test_fused_combine_matches_blocked(n):
    # the fused (GFNI) combine, with scalar head/tail, misaligned outputs and, at
    # 5 MiB x 2 outputs, the streaming-store path, against the blocked kernel
    from numba.typed import List

    rng = np.random.default_rng(n)
    for k, m in ((4, 2), (1, 1), (3, 4)):
        src = [rng.integers(0, 256, n, dtype=np.uint8) for _ in range(k)]
        coef = rng.integers(0, 256, (m, k)).astype(np.uint8)
        want = [np.zeros(n, np.uint8) for _ in range(m)]
        sl, dl = List(src), List(want)
        gf256.gf_combine(coef, sl, dl)
        got = [np.full(n, 7, np.uint8) for _ in range(m)]
        gf256.combine(coef, src, got)
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)), (k, m)
        if n > 10:
            buf = np.zeros(n + 5, np.uint8)
            got = [buf[3 : 3 + n]] + [np.empty(n, np.uint8) for _ in range(m - 1)]
            gf256.combine(coef, src, got)
            assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
