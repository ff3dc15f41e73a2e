"""The MLP's elementwise passes in one numba loop each, bit for bit numpy's.

Owns: a layer's bias add and ReLU (``bias_relu``), the backward's ReLU mask (``relu_mask``)
and the bias gradient (``column_sums``) for C-contiguous float32 ``[B, H]`` arrays. Each
numpy spelling they replace (``h += b; np.maximum(h, 0, out=h)``, ``delta *= act > 0``,
``np.sum(delta, axis=0, out=gb)``) makes two or three passes over the array, with a
temporary, and costs a few microseconds of call overhead each; at the laptop model's sizes
(``[512, 16..367]``) they were ~15 % of ``forward_backward``.

Invariants (``tests/model/test_elementwise.py``): the same bits as the numpy spelling,
signed zeros and NaN included --

* ``np.maximum(v, 0)`` keeps ``v`` when ``v > 0`` or ``v`` is NaN, else gives ``+0`` (``-0.0``
  included: numpy's SIMD maximum returns its second operand for equal ones);
* ``delta *= act > 0`` multiplies by ``1.0`` or ``0.0`` (``-x * 0 = -0``, ``NaN * 0 = NaN``);
* ``np.sum(a, axis=0)`` of a C-contiguous ``[B, H]`` array with ``H >= 2`` adds the rows in
  order to ``+0`` (a column of ``-0.0`` sums to ``+0``); with ``H == 1`` numpy sums the column
  pairwise, so ``column_sums`` leaves that case to numpy.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["bias_relu", "column_sums", "fused", "relu_mask"]


def fused(*arrays: np.ndarray) -> bool:
    """Whether the kernels apply: every array float32 and C-contiguous (else: numpy)."""
    return all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)


@njit(cache=True, nogil=True)
def _bias_relu(h, b, relu):
    n, m = h.shape
    zero = np.float32(0.0)
    for i in range(n):
        for j in range(m):
            v = h[i, j] + b[j]
            if relu:
                v = v if (v > zero) | (v != v) else zero
            h[i, j] = v


def bias_relu(h: np.ndarray, b: np.ndarray, relu: bool) -> None:
    """``h += b`` and (``relu``) ``np.maximum(h, 0, out=h)``, in one pass."""
    if fused(h, b):
        _bias_relu(h, b, relu)
        return
    h += b
    if relu:
        np.maximum(h, 0.0, out=h)


@njit(cache=True, nogil=True)
def _relu_mask(delta, act):
    n, m = delta.shape
    one = np.float32(1.0)
    zero = np.float32(0.0)
    for i in range(n):
        for j in range(m):
            delta[i, j] = delta[i, j] * (one if act[i, j] > zero else zero)


def relu_mask(delta: np.ndarray, act: np.ndarray) -> None:
    """``delta *= act > 0``, in one pass without the boolean temporary."""
    if fused(delta, act) and delta.shape == act.shape:
        _relu_mask(delta, act)
        return
    delta *= act > 0


@njit(cache=True, nogil=True)
def _column_sums(a, out):
    n, m = a.shape
    for j in range(m):
        out[j] = np.float32(0.0)
    for i in range(n):
        for j in range(m):
            out[j] = out[j] + a[i, j]


def column_sums(a: np.ndarray, out: np.ndarray) -> None:
    """``np.sum(a, axis=0, out=out)``."""
    if a.ndim == 2 and a.shape[0] > 0 and a.shape[1] >= 2 and fused(a, out):
        _column_sums(a, out)
        return
    np.sum(a, axis=0, out=out)
