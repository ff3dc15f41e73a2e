"""The MLP's fused elementwise passes give numpy's bits (signed zeros, NaN, inf included)."""

from __future__ import annotations

import numpy as np
import pytest

from mpiec.model.elementwise import bias_relu, column_sums, relu_mask


def _awkward(shape: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=shape) * np.exp(rng.normal(size=(shape[0], 1)) * 4)).astype(np.float32)
    flat = a.reshape(-1)
    k = flat.size
    flat[rng.choice(k, max(1, k // 20), replace=False)] = -0.0
    flat[rng.choice(k, max(1, k // 20), replace=False)] = 0.0
    flat[rng.choice(k, max(1, k // 50), replace=False)] = np.nan
    flat[rng.choice(k, max(1, k // 50), replace=False)] = -np.inf
    return a


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


SHAPES = [(512, 64), (512, 32), (512, 16), (512, 1), (3, 367), (1, 2), (1024, 367)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("relu", [True, False])
def test_bias_relu_is_numpys(shape, relu):
    h = _awkward(shape, 1)
    b = _awkward((1, shape[1]), 2)[0].copy()
    b[:: 3] = -0.0
    want = h.copy()
    want += b
    if relu:
        np.maximum(want, 0.0, out=want)
    bias_relu(h, b, relu=relu)
    assert _same(h, want)


@pytest.mark.parametrize("shape", SHAPES)
def test_relu_mask_is_numpys(shape):
    delta, act = _awkward(shape, 3), _awkward(shape, 4)
    want = delta.copy()
    with np.errstate(invalid="ignore"):  # inf * 0: NaN, what the kernel must give too
        want *= act > 0
    relu_mask(delta, act)
    assert _same(delta, want)


@pytest.mark.parametrize("shape", SHAPES)
def test_column_sums_are_numpys(shape):
    a = _awkward(shape, 5)
    a[np.isinf(a)] = 3e38  # overflow to inf mid-sum; NaN columns stay NaN
    a[0, : shape[1] // 2] = -0.0
    a[1:, 0] = -0.0  # a column of -0.0: numpy adds it to +0
    want = np.empty(shape[1], np.float32)
    with np.errstate(over="ignore"):  # 3e38 + 3e38: inf, what the kernel must give too
        np.sum(a, axis=0, out=want)
    got = np.empty(shape[1], np.float32)
    column_sums(a, got)
    assert _same(got, want)


def test_other_dtypes_and_layouts_take_numpy():
    h = np.arange(12, dtype=np.float64).reshape(3, 4) - 6
    want = np.maximum(h + 1.0, 0.0)
    bias_relu(h, np.ones(4), relu=True)
    assert _same(h, want)
    a = np.asfortranarray(_awkward((64, 8), 6))
    out, ref = np.empty(8, np.float32), np.empty(8, np.float32)
    column_sums(a, out)
    np.sum(a, axis=0, out=ref)
    assert _same(out, ref)
