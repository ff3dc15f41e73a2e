"""dlrm.py: layout, init, forward semantics, gradients vs central finite differences."""

import numpy as np
import pytest

from mpiec.model import dlrm
from mpiec.model.dlrm import DLRMShape

SHAPE = DLRMShape(n_dense=5, n_tables=4, dim=3, bottom=(7,), top=(6, 5))


def _inputs(shape, bsz, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    dense = rng.random((bsz, shape.n_dense)).astype(dtype)
    emb = (rng.normal(size=(bsz, shape.n_tables, shape.dim)) * 0.5).astype(dtype)
    y = (rng.random(bsz) < 0.4).astype(dtype)
    return dense, emb, y


def test_layout_and_init():
    # bottom 5->7->3, top (3 + 10)->6->5->1
    assert dlrm.n_params(SHAPE) == (5 * 7 + 7) + (7 * 3 + 3) + (13 * 6 + 6) + (6 * 5 + 5) + (5 + 1)
    p = dlrm.init_params(SHAPE, 3)
    assert p.dtype == np.float32 and p.shape == (dlrm.n_params(SHAPE),)
    np.testing.assert_array_equal(p, dlrm.init_params(SHAPE, 3))
    assert not np.array_equal(p, dlrm.init_params(SHAPE, 4))
    views = dlrm.layer_views(SHAPE, p)
    assert [w.shape for w, _ in views] == [(7, 5), (3, 7), (6, 13), (5, 6), (1, 5)]
    assert np.shares_memory(views[2][0], p)
    big = DLRMShape(13, 26, 16, (512, 256), (512,))
    w, b = dlrm.layer_views(big, dlrm.init_params(big, 0))[1]
    assert w.std() == pytest.approx(np.sqrt(2 / (512 + 256)), rel=0.02)
    assert b.std() == pytest.approx(np.sqrt(1 / 256), rel=0.2)


def test_forward_matches_direct_formula():
    dense, emb, y = _inputs(SHAPE, 6)
    p = dlrm.init_params(SHAPE, 1)
    (w0, b0), (w1, b1), (w2, b2), (w3, b3), (w4, b4) = dlrm.layer_views(SHAPE, p)
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    x = relu(relu(dense @ w0.T + b0) @ w1.T + b1)
    z = np.concatenate([x[:, None, :], emb], axis=1)
    dots = np.einsum("bik,bjk->bij", z, z)
    inter = np.stack([dots[:, i, j] for i in range(5) for j in range(i)], axis=1)
    r = np.concatenate([x, inter], axis=1)
    logit = (relu(relu(r @ w2.T + b2) @ w3.T + b3) @ w4.T + b4)[:, 0]
    ref = 1 / (1 + np.exp(-logit))
    np.testing.assert_allclose(dlrm.predict(SHAPE, p, dense, emb), ref, rtol=1e-5)
    loss, probs, _, _ = dlrm.forward_backward(SHAPE, p, dense, emb, y, 10.0)
    np.testing.assert_allclose(probs, ref, rtol=1e-5)
    bce = -(y * np.log(ref) + (1 - y) * np.log(1 - ref)).sum()
    assert loss == pytest.approx(bce, rel=1e-5)


def test_gradients_match_central_differences():
    shape = SHAPE
    dense, emb, y = _inputs(shape, 7, seed=2, dtype=np.float64)
    p = dlrm.init_params(shape, 5).astype(np.float64)
    scale = 11.0
    _, _, g, ge = dlrm._forward_backward(shape, p, dense, emb, y, scale)

    def f(pp, ee):
        return dlrm._forward_backward(shape, pp, dense, ee, y, scale)[0] / scale

    eps = 1e-6
    num = np.empty_like(p)
    for i in range(p.size):
        d = np.zeros_like(p)
        d[i] = eps
        num[i] = (f(p + d, emb) - f(p - d, emb)) / (2 * eps)
    assert np.abs(g).max() > 1e-3
    np.testing.assert_allclose(g, num, atol=1e-8 * np.abs(num).max() + 1e-10, rtol=1e-5)
    nume = np.empty_like(emb)
    for idx in np.ndindex(emb.shape):
        d = np.zeros_like(emb)
        d[idx] = eps
        nume[idx] = (f(p, emb + d) - f(p, emb - d)) / (2 * eps)
    np.testing.assert_allclose(ge, nume, atol=1e-8 * np.abs(nume).max() + 1e-10, rtol=1e-5)


def test_float32_gradients_agree_with_float64():
    dense, emb, y = _inputs(SHAPE, 16, seed=3)
    p = dlrm.init_params(SHAPE, 1)
    l32, _, g32, ge32 = dlrm.forward_backward(SHAPE, p, dense, emb, y, 16.0)
    l64, _, g64, ge64 = dlrm._forward_backward(
        SHAPE, p.astype(np.float64), dense.astype(np.float64), emb.astype(np.float64),
        y.astype(np.float64), 16.0,
    )  # fmt: skip
    assert g32.dtype == np.float32 and ge32.dtype == np.float32
    assert l32 == pytest.approx(l64, rel=1e-5)
    np.testing.assert_allclose(g32, g64, atol=1e-5 * np.abs(g64).max())
    np.testing.assert_allclose(ge32, ge64, atol=1e-5 * np.abs(ge64).max())


def test_scale_and_batch_split_give_the_global_mean_gradient():
    dense, emb, y = _inputs(SHAPE, 12, seed=4)
    p = dlrm.init_params(SHAPE, 2)
    _, _, g_all, ge_all = dlrm.forward_backward(SHAPE, p, dense, emb, y, 12.0)
    _, _, ga, gea = dlrm.forward_backward(SHAPE, p, dense[:5], emb[:5], y[:5], 12.0)
    _, _, gb, geb = dlrm.forward_backward(SHAPE, p, dense[5:], emb[5:], y[5:], 12.0)
    np.testing.assert_allclose(ga + gb, g_all, atol=1e-6 * np.abs(g_all).max())
    np.testing.assert_allclose(np.concatenate([gea, geb]), ge_all, rtol=1e-5, atol=1e-9)


def test_deterministic_and_stable_for_extreme_logits():
    dense, emb, y = _inputs(SHAPE, 8, seed=5)
    p = dlrm.init_params(SHAPE, 1)
    r1 = dlrm.forward_backward(SHAPE, p, dense, emb, y, 8.0)
    r2 = dlrm.forward_backward(SHAPE, p.copy(), dense.copy(), emb.copy(), y, 8.0)
    assert r1[0] == r2[0]
    for a, b in zip(r1[1:], r2[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    big = p.copy()
    dlrm.layer_views(SHAPE, big)[-1][1][:] = 200.0  # final bias: logit ~ +200
    loss, probs, g, _ = dlrm.forward_backward(SHAPE, big, dense, emb, y, 8.0)
    assert np.isfinite(loss) and np.isfinite(g).all()
    assert loss == pytest.approx(200.0 * (1 - y).sum(), rel=0.02)  # no overflow to inf


def test_rejects_wrong_shapes_and_dtypes():
    dense, emb, y = _inputs(SHAPE, 4)
    p = dlrm.init_params(SHAPE, 1)
    with pytest.raises(ValueError):
        dlrm.forward_backward(SHAPE, p.astype(np.float64), dense, emb, y, 4.0)
    with pytest.raises(ValueError):
        dlrm.forward_backward(SHAPE, p, dense, emb[:, :3], y, 4.0)
    with pytest.raises(ValueError):
        dlrm.forward_backward(SHAPE, p, dense, emb, y[:3], 4.0)


# -- embedding bags (multi-hot, sum pooling) -------------------------------------------

BAGS = (2, 1, 3, 1)  # ids per sample of each of SHAPE's 4 tables


def _bag_inputs(bsz, n_rows, seed, dtype):
    """Pulled rows, a [B, sum(BAGS)] index into them (repeats included) and the bounds."""
    rng = np.random.default_rng(seed)
    rows = (rng.normal(size=(n_rows, SHAPE.dim)) * 0.5).astype(dtype)
    bounds = np.concatenate([[0], np.cumsum(BAGS)]).astype(np.int64)
    index = rng.integers(0, n_rows, size=(bsz, int(bounds[-1])))
    index[0, 3] = index[0, 4]  # an id twice in one bag
    index[1, 0] = index[2, 5]  # a row in bags of two tables
    return rows, index, bounds


def test_pool_bags_is_the_sum_of_each_tables_rows():
    rows, index, bounds = _bag_inputs(5, 9, 0, np.float32)
    emb = dlrm.pool_bags(rows, index, bounds)
    assert emb.shape == (5, 4, SHAPE.dim) and emb.dtype == np.float32
    for b in range(5):
        for t in range(4):
            ref = rows[index[b, bounds[t]:bounds[t + 1]]].astype(np.float64).sum(axis=0)
            np.testing.assert_allclose(emb[b, t], ref, rtol=1e-6)
    g = np.random.default_rng(1).normal(size=emb.shape).astype(np.float32)
    grows = dlrm.pool_bags_backward(g, index, bounds, rows.shape[0])
    ref = np.zeros((9, SHAPE.dim))
    for b in range(5):
        for c in range(index.shape[1]):
            ref[index[b, c]] += g[b, np.searchsorted(bounds, c, side="right") - 1]
    np.testing.assert_allclose(grows, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="bounds"):
        dlrm.pool_bags(rows, index, np.array([0, 2, 2, 7], dtype=np.int64))
    with pytest.raises(ValueError, match="index out of range"):
        dlrm.pool_bags(rows[:2], index, bounds)


def test_multi_hot_gradients_match_central_differences():
    """d(loss/scale) / d(pulled row): through the sum pooling, a row in several bags included."""
    rows, index, bounds = _bag_inputs(6, 10, 2, np.float64)
    dense, _, y = _inputs(SHAPE, 6, seed=3, dtype=np.float64)
    p = dlrm.init_params(SHAPE, 5).astype(np.float64)
    scale = 9.0
    _, _, g, grows = dlrm.forward_backward_bags(SHAPE, p, dense, rows, index, bounds, y, scale)

    def f(pp, rr):
        return dlrm.forward_backward_bags(SHAPE, pp, dense, rr, index, bounds, y, scale)[0] / scale

    eps = 1e-6
    num = np.empty_like(rows)
    for idx in np.ndindex(rows.shape):
        d = np.zeros_like(rows)
        d[idx] = eps
        num[idx] = (f(p, rows + d) - f(p, rows - d)) / (2 * eps)
    assert np.abs(grows).max() > 1e-3
    np.testing.assert_allclose(grows, num, atol=1e-8 * np.abs(num).max() + 1e-10, rtol=1e-5)
    nump = np.empty_like(p)
    for i in range(p.size):
        d = np.zeros_like(p)
        d[i] = eps
        nump[i] = (f(p + d, rows) - f(p - d, rows)) / (2 * eps)
    np.testing.assert_allclose(g, nump, atol=1e-8 * np.abs(nump).max() + 1e-10, rtol=1e-5)


def test_one_hot_bags_are_bit_identical_to_the_one_hot_path():
    """One id per table: pooling is rows[index] and its backward the scatter-add the trainer used."""
    from mpiec.kernels.embedding import scatter_add_rows

    rng = np.random.default_rng(7)
    rows = rng.normal(size=(30, SHAPE.dim)).astype(np.float32)
    rows[3, 1] = -0.0  # a negative zero stays one
    index = rng.integers(0, 30, size=(17, SHAPE.n_tables))
    index[0, 0] = 3
    bounds = np.arange(SHAPE.n_tables + 1, dtype=np.int64)
    emb = dlrm.pool_bags(rows, index, bounds)
    assert emb.tobytes() == rows[index.ravel()].reshape(17, SHAPE.n_tables, SHAPE.dim).tobytes()
    dense, _, y = _inputs(SHAPE, 17, seed=8)
    p = dlrm.init_params(SHAPE, 3)
    loss, probs, g, ge = dlrm.forward_backward(SHAPE, p, dense, emb, y, 17.0)
    old = np.zeros_like(rows)
    scatter_add_rows(ge.reshape(-1, SHAPE.dim), index.ravel(), old)
    loss_b, probs_b, g_b, grows = dlrm.forward_backward_bags(SHAPE, p, dense, rows, index, bounds, y, 17.0)
    assert loss_b == loss and probs_b.tobytes() == probs.tobytes() and g_b.tobytes() == g.tobytes()
    assert grows.tobytes() == old.tobytes()
    assert dlrm.pool_bags_backward(ge, index, bounds, 30).tobytes() == old.tobytes()
