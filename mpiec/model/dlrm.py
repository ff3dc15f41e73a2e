"""DLRM in numpy (facebookresearch/dlrm's architecture): dense-parameter layout, forward and backward.

Owns the model math the trainers run every step, MPI-free: the bottom MLP on the
dense features, the dot interaction with the embedding vectors (looked up by the
runtime), the top MLP, and binary cross-entropy.

Invariants:

* All dense parameters live in ONE flat ``float32`` vector (the buffer the runtime
  all-reduces). Layout: bottom layers then top layers, each layer as its weight
  ``W[out, in]`` (row-major) followed by its bias ``b[out]``; ``layer_views`` gives
  the ``(W, b)`` views into any such vector.
* Layers: bottom ``n_dense -> bottom... -> dim`` with ReLU after every layer
  (including the last, as dlrm); top ``dim + (T+1)T/2 -> top... -> 1``, ReLU after
  the hidden layers, sigmoid at the end.
* Interaction: ``Z = [x, e_1 .. e_T]`` (``T+1`` vectors), the pairwise dots
  ``Z Z^T`` strictly below the diagonal in row-major order (``(1,0), (2,0), (2,1),
  ...``), concatenated after ``x``.
* Embedding bags (MLPerf DLRMv2's multi-hot features): ``e_t`` is the **sum** of the rows
  of table ``t``'s ids in the sample; ``pool_bags`` forms it from the pulled rows and a
  ``[B, n_ids]`` index (table ``t`` = columns ``bounds[t] .. bounds[t+1] - 1``), in column
  order with the first row copied, so one-hot bags are exact copies (the same bits as
  ``rows[index]``); ``pool_bags_backward`` adds ``grad e_t`` to every row of the bag, in
  increasing (sample, column), the order of one-hot's scatter-add.
* ``forward_backward`` returns gradients of ``loss_sum / scale``; the runtime passes
  the global batch size as ``scale`` so that the sum of the trainers' gradients is
  the exact global-mean gradient. The loss is binary cross-entropy computed from
  the logit ``z``, ``softplus(z) - y z`` in its stable form. facebookresearch/dlrm
  instead applies torch's ``BCELoss`` to the probability ``sigmoid(z)``, which in
  float32 saturates for logits above about 16.6 (``ln 2^24``: ``1 - p`` cannot get
  smaller than ``2^-24``, and once ``p`` rounds to 1 torch clamps the log at -100);
  the softplus form stays accurate there and agrees with torch's wherever that is
  accurate (2.4e-7 on the same weights). Everything is ``float32`` (BLAS ``sgemm``)
  except the returned ``loss_sum`` (a float64 sum). Same inputs, same BLAS threads
  and kernels → same bits.
* The float32 MLP's elementwise passes (bias and ReLU, the ReLU mask of the backward, the bias
  gradient's column sums) run in ``elementwise.py``'s one-pass kernels, with numpy's bits.
* The float32 interaction runs in ``interaction.py``'s SIMD kernels, which give exactly the
  bits of the scalar ``_interact_fwd`` / ``_interact_bwd`` here (the reference, and the path of
  other dtypes: float64 in the gradient tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numba as nb
import numpy as np

from mpiec.data.rng import hash_normal
from mpiec.model.elementwise import bias_relu, column_sums, relu_mask
from mpiec.model.interaction import interact_bwd, interact_fwd

__all__ = [
    "DLRMShape",
    "n_params",
    "layer_dims",
    "layer_views",
    "init_params",
    "forward_backward",
    "forward_backward_bags",
    "pool_bags",
    "pool_bags_backward",
    "predict",
]


@dataclass(frozen=True)
class DLRMShape:
    """Sizes of a DLRM: features, tables, embedding dim, hidden widths of both MLPs."""

    n_dense: int
    n_tables: int
    dim: int
    bottom: tuple[int, ...]
    top: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "bottom", tuple(int(w) for w in self.bottom))
        object.__setattr__(self, "top", tuple(int(w) for w in self.top))
        if self.n_dense < 1 or self.n_tables < 1 or self.dim < 1:
            raise ValueError("DLRMShape: n_dense, n_tables and dim must be >= 1")
        if any(w < 1 for w in self.bottom + self.top):
            raise ValueError("DLRMShape: layer widths must be >= 1")

    @property
    def n_interactions(self) -> int:
        return (self.n_tables + 1) * self.n_tables // 2

    @property
    def top_in(self) -> int:
        return self.dim + self.n_interactions


def layer_dims(shape: DLRMShape) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(fan_in, fan_out)`` of the bottom and of the top layers."""
    b = [shape.n_dense, *shape.bottom, shape.dim]
    t = [shape.top_in, *shape.top, 1]
    return list(zip(b[:-1], b[1:], strict=True)), list(zip(t[:-1], t[1:], strict=True))


@lru_cache(maxsize=64)
def _offsets(shape: DLRMShape) -> tuple[tuple[int, int, int, int], ...]:
    """``(w_offset, b_offset, fan_in, fan_out)`` per layer, bottom then top."""
    bot, top = layer_dims(shape)
    out = []
    o = 0
    for fi, fo in bot + top:
        out.append((o, o + fi * fo, fi, fo))
        o += fi * fo + fo
    return tuple(out)


def n_params(shape: DLRMShape) -> int:
    """Length of the flat dense-parameter vector."""
    w, b, fi, fo = _offsets(shape)[-1]
    return b + fo


def layer_views(shape: DLRMShape, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(W[out, in], b[out])`` views into ``flat`` for every layer, bottom then top."""
    if flat.shape != (n_params(shape),):
        raise ValueError(f"parameter vector has shape {flat.shape}, expected ({n_params(shape)},)")
    return [
        (flat[w : w + fi * fo].reshape(fo, fi), flat[b : b + fo])
        for w, b, fi, fo in _offsets(shape)
    ]


def init_params(shape: DLRMShape, seed: int) -> np.ndarray:
    """Deterministic dlrm-style initialization of the flat vector.

    ``W ~ N(0, sqrt(2 / (fan_in + fan_out)))``, ``b ~ N(0, sqrt(1 / fan_out))``, drawn
    from ``rng.hash_normal`` (stream ``0x20000 + layer``), so every rank gets the same.
    """
    flat = np.empty(n_params(shape), dtype=np.float32)
    for layer, (w, b, fi, fo) in enumerate(_offsets(shape)):
        z = hash_normal(seed, 0x20000 + layer, np.arange(fi * fo + fo, dtype=np.uint64))
        flat[w:b] = z[: fi * fo] * np.sqrt(2.0 / (fi + fo))
        flat[b : b + fo] = z[fi * fo :] * np.sqrt(1.0 / fo)
    return flat


_IBLOCK = 64  # samples per block of the interaction kernels (buffers stay in L1/L2)


@nb.njit(cache=True)
def _load_block(x, emb, b0, m, zt):  # pragma: no cover - jitted
    """``zt[i, k, s] = Z[b0 + s, i, k]`` with ``Z = [x, emb]``: samples innermost."""
    T = emb.shape[1]
    d = emb.shape[2]
    for s in range(m):
        for k in range(d):
            zt[0, k, s] = x[b0 + s, k]
        for i in range(T):
            for k in range(d):
                zt[i + 1, k, s] = emb[b0 + s, i, k]


@nb.njit(cache=True)
def _interact_fwd(x, emb, out):  # pragma: no cover - jitted
    """``out[b, p]`` = dot of the p-th strictly-lower pair ``(i, j)`` of ``Z = [x, emb]``.

    Blocks of samples with the sample index innermost: the inner loops vectorize over
    samples without reassociation; each dot sums the ``d`` products in order.
    """
    bsz, T, d = emb.shape
    n = T + 1
    zt = np.empty((n, d, _IBLOCK), dtype=emb.dtype)
    acc = np.empty(_IBLOCK, dtype=emb.dtype)
    for b0 in range(0, bsz, _IBLOCK):
        m = min(_IBLOCK, bsz - b0)
        _load_block(x, emb, b0, m, zt)
        p = 0
        for i in range(1, n):
            for j in range(i):
                for s in range(m):
                    acc[s] = zt[i, 0, s] * zt[j, 0, s]
                for k in range(1, d):
                    for s in range(m):
                        acc[s] += zt[i, k, s] * zt[j, k, s]
                for s in range(m):
                    out[b0 + s, p] = acc[s]
                p += 1


@nb.njit(cache=True)
def _interact_bwd(x, emb, gdot, gx, gemb):  # pragma: no cover - jitted
    """Backward of ``_interact_fwd``: for each pair ``p = (i, j)`` in order,
    ``gZ_i += g_p Z_j`` and ``gZ_j += g_p Z_i``; adds ``gZ_0`` into ``gx`` [B, d] and
    writes ``gZ_1..T`` to ``gemb`` [B, T, d]."""
    bsz, T, d = emb.shape
    n = T + 1
    zt = np.empty((n, d, _IBLOCK), dtype=emb.dtype)
    gzt = np.empty((n, d, _IBLOCK), dtype=emb.dtype)
    gb = np.empty(_IBLOCK, dtype=emb.dtype)
    for b0 in range(0, bsz, _IBLOCK):
        m = min(_IBLOCK, bsz - b0)
        _load_block(x, emb, b0, m, zt)
        gzt[:] = 0
        p = 0
        for i in range(1, n):
            for j in range(i):
                for s in range(m):
                    gb[s] = gdot[b0 + s, p]
                for k in range(d):
                    for s in range(m):
                        gzt[i, k, s] += gb[s] * zt[j, k, s]
                        gzt[j, k, s] += gb[s] * zt[i, k, s]
                p += 1
        for s in range(m):
            for k in range(d):
                gx[b0 + s, k] += gzt[0, k, s]
            for i in range(T):
                for k in range(d):
                    gemb[b0 + s, i, k] = gzt[i + 1, k, s]


def _check(shape: DLRMShape, params, dense, emb) -> int:
    if params.dtype != np.float32 or params.shape != (n_params(shape),):
        raise ValueError(f"params must be float32[{n_params(shape)}]")
    if dense.dtype != np.float32 or emb.dtype != np.float32:
        raise ValueError("dense and emb must be float32")
    bsz = dense.shape[0]
    if dense.shape != (bsz, shape.n_dense):
        raise ValueError(f"dense has shape {dense.shape}, expected (B, {shape.n_dense})")
    if emb.shape != (bsz, shape.n_tables, shape.dim):
        raise ValueError(
            f"emb has shape {emb.shape}, expected ({bsz}, {shape.n_tables}, {shape.dim})"
        )
    return bsz


def _forward(shape: DLRMShape, layers, dense, emb):
    """Forward pass; returns the logits and what the backward pass needs."""
    n_bot = len(shape.bottom) + 1
    dt = layers[0][0].dtype
    acts = [np.ascontiguousarray(dense, dtype=dt)]
    h = acts[0]
    for W, b in layers[:n_bot]:
        h = h @ W.T
        bias_relu(h, b, relu=True)
        acts.append(h)
    x = h  # [B, dim]
    bsz, T, d = emb.shape
    R = np.empty((bsz, shape.top_in), dtype=dt)
    R[:, :d] = x
    if dt == np.float32:
        interact_fwd(x, np.ascontiguousarray(emb, dtype=dt), R, d)
    else:
        _interact_fwd(x, np.ascontiguousarray(emb, dtype=dt), R[:, d:])
    tacts = [R]
    h = R
    top = layers[n_bot:]
    for k, (W, b) in enumerate(top):
        h = h @ W.T
        bias_relu(h, b, relu=k < len(top) - 1)
        tacts.append(h)
    return h[:, 0], acts, tacts


def predict(shape: DLRMShape, params: np.ndarray, dense: np.ndarray, emb: np.ndarray) -> np.ndarray:
    """Click probabilities ``float32[B]``."""
    _check(shape, params, dense, emb)
    logit, _, _ = _forward(shape, layer_views(shape, params), dense, emb)
    return _sigmoid(logit)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(z))
    one = z.dtype.type(1)
    return np.where(z >= 0, one / (one + e), e / (one + e))


def forward_backward(
    shape: DLRMShape,
    params: np.ndarray,
    dense: np.ndarray,
    emb: np.ndarray,
    labels: np.ndarray,
    scale: float,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Loss, probabilities and gradients of ``loss_sum / scale`` for one local batch.

    Returns ``(loss_sum, probs float32[B], grad_params float32[P], grad_emb
    float32[B, T, dim])``; ``loss_sum`` is the sum over the batch of the BCE.
    """
    _check(shape, params, dense, emb)
    return _forward_backward(shape, params, dense, emb, labels, scale)


def _forward_backward(shape, params, dense, emb, labels, scale):
    """The computation in the dtype of ``params`` (float64 for the gradient tests)."""
    bsz = dense.shape[0]
    if labels.shape != (bsz,):
        raise ValueError(f"labels has shape {labels.shape}, expected ({bsz},)")
    if not scale > 0:
        raise ValueError("scale must be > 0")
    layers = layer_views(shape, params)
    logit, acts, tacts = _forward(shape, layers, dense, emb)
    dt = params.dtype
    y = np.asarray(labels, dtype=dt)
    # BCE from the logit: softplus(z) - y z, stable
    loss = np.maximum(logit, 0.0) - logit * y + np.log1p(np.exp(-np.abs(logit)))
    loss_sum = float(np.sum(loss, dtype=np.float64))
    probs = _sigmoid(logit)
    grad = np.empty_like(params)
    glayers = layer_views(shape, grad)
    n_bot = len(shape.bottom) + 1
    inv = dt.type(1.0 / scale)
    # top MLP backward
    delta = ((probs - y) * inv)[:, None]  # d(loss/scale)/d logit, [B, 1]
    top, gtop = layers[n_bot:], glayers[n_bot:]
    for k in range(len(top) - 1, -1, -1):
        W, _ = top[k]
        gW, gb = gtop[k]
        np.matmul(delta.T, tacts[k], out=gW)
        column_sums(delta, gb)
        delta = delta @ W
        if k > 0:
            relu_mask(delta, tacts[k])
    # delta = dL/dR; split into x part and interaction part
    d = shape.dim
    dx = delta[:, :d].copy()
    grad_emb = np.empty(emb.shape, dtype=dt)
    x = acts[-1]
    if dt == np.float32:
        interact_bwd(x, np.ascontiguousarray(emb, dtype=dt), np.ascontiguousarray(delta), d, dx, grad_emb)
    else:
        _interact_bwd(x, np.ascontiguousarray(emb, dtype=dt), delta[:, d:], dx, grad_emb)
    # bottom MLP backward (ReLU after every layer)
    delta = dx
    bot, gbot = layers[:n_bot], glayers[:n_bot]
    for k in range(n_bot - 1, -1, -1):
        W, _ = bot[k]
        gW, gb = gbot[k]
        relu_mask(delta, acts[k + 1])
        np.matmul(delta.T, acts[k], out=gW)
        column_sums(delta, gb)
        if k > 0:
            delta = delta @ W
    return loss_sum, probs, grad, grad_emb


# -- embedding bags (sum pooling) ---------------------------------------------------


@nb.njit(cache=True)
def _pool(rows, index, bounds, out):  # pragma: no cover - jitted
    """``out[b, t] = rows[index[b, c0]] + rows[index[b, c0 + 1]] + ...`` over the columns of
    table ``t`` (``c0 = bounds[t]``), left to right; the first row is copied."""
    bsz = index.shape[0]
    n_tables = bounds.size - 1
    d = rows.shape[1]
    for b in range(bsz):
        for t in range(n_tables):
            c0 = bounds[t]
            r = index[b, c0]
            for k in range(d):
                out[b, t, k] = rows[r, k]
            for c in range(c0 + 1, bounds[t + 1]):
                r = index[b, c]
                for k in range(d):
                    out[b, t, k] += rows[r, k]


@nb.njit(cache=True)
def _pool_backward(gemb, index, bounds, out):  # pragma: no cover - jitted
    """``out[index[b, c]] += gemb[b, t]`` for every column ``c`` of table ``t``, in
    increasing ``(b, c)`` (a fixed float summation order)."""
    bsz = index.shape[0]
    n_tables = bounds.size - 1
    d = gemb.shape[2]
    for b in range(bsz):
        for t in range(n_tables):
            for c in range(bounds[t], bounds[t + 1]):
                r = index[b, c]
                for k in range(d):
                    out[r, k] += gemb[b, t, k]


def _check_bags(rows: np.ndarray, index: np.ndarray, bounds: np.ndarray) -> None:
    if rows.ndim != 2 or index.ndim != 2 or bounds.ndim != 1 or bounds.size < 2:
        raise ValueError("pool_bags: rows [U, dim], index [B, n_ids] and bounds [T + 1] expected")
    if bounds[0] != 0 or bounds[-1] != index.shape[1] or np.any(np.diff(bounds) < 1):
        raise ValueError(f"pool_bags: bounds {bounds} do not cut {index.shape[1]} columns into "
                         "non-empty bags")
    if index.size and (index.min() < 0 or index.max() >= rows.shape[0]):
        raise ValueError(f"pool_bags: index out of range for {rows.shape[0]} rows")


def pool_bags(rows: np.ndarray, index: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sum-pooled embedding bags ``[B, T, dim]`` (dtype of ``rows``): ``out[b, t]`` is the sum
    of ``rows[index[b, c]]`` over table ``t``'s columns ``bounds[t] .. bounds[t+1] - 1``."""
    index = np.ascontiguousarray(index, dtype=np.int64)
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    _check_bags(rows, index, bounds)
    out = np.empty((index.shape[0], bounds.size - 1, rows.shape[1]), dtype=rows.dtype)
    _pool(np.ascontiguousarray(rows), index, bounds, out)
    return out


def pool_bags_backward(grad_emb: np.ndarray, index: np.ndarray, bounds: np.ndarray,
                       n_rows: int) -> np.ndarray:
    """Gradient of the pulled rows ``[n_rows, dim]`` from that of the pooled bags ``[B, T, dim]``
    (every row of a bag gets the bag's gradient; a row in several bags, the sum)."""
    index = np.ascontiguousarray(index, dtype=np.int64)
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    if grad_emb.shape[:2] != (index.shape[0], bounds.size - 1):
        raise ValueError(f"pool_bags_backward: gradient of shape {grad_emb.shape} for index "
                         f"{index.shape} and {bounds.size - 1} tables")
    out = np.zeros((int(n_rows), grad_emb.shape[2]), dtype=grad_emb.dtype)
    _check_bags(out, index, bounds)
    _pool_backward(np.ascontiguousarray(grad_emb), index, bounds, out)
    return out


def forward_backward_bags(
    shape: DLRMShape,
    params: np.ndarray,
    dense: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    bounds: np.ndarray,
    labels: np.ndarray,
    scale: float,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """``forward_backward`` on sum-pooled bags of ``rows``: returns ``(loss_sum, probs,
    grad_params, grad_rows [U, dim])`` (what ``pool_bags`` and ``pool_bags_backward`` give)."""
    emb = pool_bags(rows, index, bounds)
    if params.dtype == np.float32:
        _check(shape, params, dense, emb)
    loss_sum, probs, grad, grad_emb = _forward_backward(shape, params, dense, emb, labels, scale)
    return loss_sum, probs, grad, pool_bags_backward(grad_emb, index, bounds, rows.shape[0])
