"""Embedding kernels against numpy references; fused == plain bit for bit."""

import numpy as np
import pytest
from mpiec.kernels import embedding as E


def test_unique_inverse_both_paths():
    rng = np.random.default_rng(0)
    for ids in (rng.integers(0, 1000, 5000), rng.integers(-(2**40), 2**40, 3000),
                np.array([7]), np.array([], dtype=np.int64)):
        u, inv = E.unique_inverse(ids)
        u2, inv2 = np.unique(ids, return_inverse=True)
        assert np.array_equal(u, u2) and np.array_equal(inv, inv2.reshape(-1))
        assert u.dtype == np.int64 and inv.dtype == np.int64


def test_gather_scatter_bag():
    rng = np.random.default_rng(1)
    table = rng.normal(size=(50, 9)).astype(np.float32)
    slots = rng.integers(0, 50, 20)
    out = np.empty((20, 8), np.float32)
    E.gather_rows(table, slots, 8, out)
    assert np.array_equal(out, table[slots, :8])
    src = rng.normal(size=(30, 8)).astype(np.float32)
    index = rng.integers(0, 5, 30)
    acc = np.zeros((5, 8), np.float32)
    E.scatter_add_rows(src, index, acc)
    want = np.zeros((5, 8), np.float32)
    for i in range(30):  # the same increasing-i order
        want[index[i]] += src[i]
    assert np.array_equal(acc, want)
    rows = rng.normal(size=(10, 8)).astype(np.float32)
    idx = rng.integers(0, 10, 12)
    offsets = np.array([0, 3, 3, 12])
    bags = np.full((3, 8), 99, np.float32)
    E.embedding_bag_sum(rows, idx, offsets, bags)
    want = np.zeros((3, 8), np.float32)
    for b in range(3):
        for p in range(offsets[b], offsets[b + 1]):
            want[b] += rows[idx[p]]
    assert np.array_equal(bags, want)


def _ref_sum_squares(g):
    # documented order: 8 lanes (column % 8), combined ((0+4)+(2+6))+((1+5)+(3+7))
    lanes = np.zeros((g.shape[0], 8), np.float32)
    full = g.shape[1] - g.shape[1] % 8
    for c in range(full):
        lanes[:, c % 8] += g[:, c] * g[:, c]
    for c in range(full, g.shape[1]):
        lanes[:, c - full] += g[:, c] * g[:, c]
    l_ = lanes
    return ((l_[:, 0] + l_[:, 4]) + (l_[:, 2] + l_[:, 6])) + ((l_[:, 1] + l_[:, 5]) + (l_[:, 3] + l_[:, 7]))


@pytest.mark.parametrize("dim", [64, 13])
def test_optimizers_match_reference_and_fused(dim):
    rng = np.random.default_rng(dim)
    n, m = 200, 40
    lr, eps = 0.05, 1e-8
    slots = rng.choice(n, m, replace=False)
    grads = rng.normal(size=(m, dim)).astype(np.float32)
    # SGD, s = 0
    t0 = rng.normal(size=(n, dim)).astype(np.float32)
    a, b = t0.copy(), t0.copy()
    E.sgd_apply(a, slots, grads, lr)
    want = t0.copy()
    want[slots] -= np.float32(lr) * grads
    assert np.array_equal(a.view(np.uint32), want.view(np.uint32))
    delta = np.empty((m, dim * 4), np.uint8)
    E.sgd_apply_delta(b, slots, grads, lr, delta)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert np.array_equal(delta, t0[slots].view(np.uint8) ^ b[slots].view(np.uint8))
    # row-wise Adagrad, s = 1
    t1 = rng.normal(size=(n, dim + 1)).astype(np.float32)
    t1[:, dim] = np.abs(t1[:, dim])
    a, b = t1.copy(), t1.copy()
    E.adagrad_apply(a, slots, grads, lr, eps)
    want = t1.copy()
    acc = want[slots, dim] + _ref_sum_squares(grads) / np.float32(dim)
    want[slots, dim] = acc
    mult = np.float32(lr) / (np.sqrt(acc) + np.float32(eps))
    want[slots, :dim] -= mult[:, None] * grads
    assert np.array_equal(a.view(np.uint32), want.view(np.uint32))
    delta = np.empty((m, (dim + 1) * 4), np.uint8)
    E.adagrad_apply_delta(b, slots, grads, lr, eps, delta)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert np.array_equal(delta, t1[slots].view(np.uint8) ^ b[slots].view(np.uint8))
    assert delta.any()


@pytest.mark.parametrize("adagrad", [True, False])
@pytest.mark.parametrize("want_delta", [True, False])
def test_fused_optimizers_keep_the_rows_before(adagrad, want_delta):
    rng = np.random.default_rng(7)
    n, m, dim = 300, 57, 16
    slots = np.sort(rng.choice(n, m, replace=False))
    grads = rng.normal(size=(m, dim)).astype(np.float32)
    t0 = rng.normal(size=(n, dim + adagrad)).astype(np.float32)
    if adagrad:
        t0[:, dim] = np.abs(t0[:, dim])
    plain, fused = t0.copy(), t0.copy()
    old = np.full((m, t0.shape[1]), np.nan, np.float32)
    delta = np.empty((m, t0.shape[1] * 4), np.uint8) if want_delta else None
    if adagrad:
        E.adagrad_apply(plain, slots, grads, 0.05, 1e-8)
        E.adagrad_apply_delta(fused, slots, grads, 0.05, 1e-8, delta, old)
    else:
        E.sgd_apply(plain, slots, grads, 0.05)
        E.sgd_apply_delta(fused, slots, grads, 0.05, delta, old)
    assert np.array_equal(plain.view(np.uint32), fused.view(np.uint32))
    assert np.array_equal(old.view(np.uint32), t0[slots].view(np.uint32))
    if want_delta:
        assert np.array_equal(delta, t0[slots].view(np.uint8) ^ fused[slots].view(np.uint8))
    with pytest.raises(ValueError, match="old_out"):
        E.sgd_apply_delta(fused, slots, grads, 0.05, None, np.empty((m, 3), np.float32))


@pytest.mark.parametrize("dim", [1, 7, 8, 13, 64, 100])
def test_simd_sum_squares_same_bits(dim):
    g = np.random.default_rng(dim).normal(size=(30, dim)).astype(np.float32)
    a = np.array([E.row_sum_squares(g, i, dim) for i in range(30)], np.float32)
    b = np.array([E._row_sum_squares_v(g, i, dim) for i in range(30)], np.float32)
    assert np.array_equal(a.view(np.uint32), _ref_sum_squares(g).view(np.uint32))
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
