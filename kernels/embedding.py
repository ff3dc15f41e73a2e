"""Embedding kernels for trainers and servers: ids, gather/scatter, pooling, optimizers.

Owns: the per-step array work of the training loop that is not the MLP.

Row layout of a server table: float32 ``table[n, dim + s]``, the first ``dim``
columns are the weights, the next ``s`` optimizer state (``s = 0`` for SGD,
``s = 1`` for row-wise Adagrad: one float32 accumulator per row). A row's raw
bytes, ``(dim + s) * 4`` of them, are what the erasure codes protect.

Invariants:

* bit-reproducible: every reduction runs in a fixed order (increasing index),
  all optimizer arithmetic is float32 with no fused multiply-add and no
  reassociation, so a result depends only on the inputs;
* the fused ``*_apply_delta`` kernels give exactly the table of the plain ones
  and ``delta_out[i] = old_bytes XOR new_bytes`` of row ``slots[i]`` and/or
  ``old_out[i]``, the row before the update;
* slots passed to the optimizers are unique within a call (the caller
  de-duplicates and sums gradients first, in a fixed order).

Row-wise Adagrad follows fbgemm/DLRM: ``acc += mean(g * g)`` (the fixed 8-lane sum of
``row_sum_squares``, then divided by dim), ``m = lr / (sqrt(acc) + eps)``, ``w -= m * g``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "adagrad_apply",
    "adagrad_apply_delta",
    "embedding_bag_sum",
    "gather_rows",
    "group_by_owner",
    "scatter_add_rows",
    "sgd_apply",
    "sgd_apply_delta",
    "unique_inverse",
]


@njit(cache=True)
def _unique_dense(ids, lo, span):
    # direct addressing: mark, number in value order, look up -- O(n + span), no sort
    slot = np.zeros(span, dtype=np.int32)
    for i in range(ids.size):
        slot[ids[i] - lo] = 1
    n = 0
    for v in range(span):
        if slot[v]:
            slot[v] = n
            n += 1
    uniq = np.empty(n, dtype=np.int64)
    inverse = np.empty(ids.size, dtype=np.int64)
    for i in range(ids.size):
        u = slot[ids[i] - lo]
        inverse[i] = u
        uniq[u] = ids[i]
    return uniq, inverse


@njit(cache=True)
def _unique_from_order(ids, order):
    inverse = np.empty(ids.size, dtype=np.int64)
    uniq = np.empty(ids.size, dtype=np.int64)
    n = -1
    prev = 0
    for t in range(ids.size):
        i = order[t]
        v = ids[i]
        if n < 0 or v != prev:
            n += 1
            uniq[n] = v
            prev = v
        inverse[i] = n
    return uniq[: n + 1].copy(), inverse


@intrinsic
def _popcount64(typingctx, x):
    """Number of set bits of a uint64 (``llvm.ctpop``: one POPCNT)."""
    if x != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(64)])
        return builder.call(fn, [args[0]])

    return types.uint64(types.uint64), codegen


@intrinsic
def _ctz64(typingctx, x):
    """Index of the lowest set bit of a non-zero uint64 (``llvm.cttz``: one TZCNT)."""
    if x != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.cttz", [ir.IntType(64), ir.IntType(1)])
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])

    return types.uint64(types.uint64), codegen


@njit(cache=True)
def _unique_bitmap(ids, lo, span):
    # one bit per value: mark, rank words by a prefix popcount, number in value order; the
    # bitmap (span / 8 bytes) stays in cache where the int32 slot table of _unique_dense does not
    nw = (span + 63) >> 6
    words = np.zeros(nw, dtype=np.uint64)
    one = np.uint64(1)
    for i in range(ids.size):
        v = ids[i] - lo
        words[v >> 6] |= one << np.uint64(v & 63)
    rank = np.empty(nw, dtype=np.int64)
    n = 0
    for w in range(nw):
        rank[w] = n
        n += np.int64(_popcount64(words[w]))
    uniq = np.empty(n, dtype=np.int64)
    u = 0
    for w in range(nw):
        x = words[w]
        while x:
            uniq[u] = lo + (w << 6) + np.int64(_ctz64(x))
            u += 1
            x &= x - one
    inverse = np.empty(ids.size, dtype=np.int64)
    for i in range(ids.size):
        v = ids[i] - lo
        below = words[v >> 6] & ((one << np.uint64(v & 63)) - one)
        inverse[i] = rank[v >> 6] + np.int64(_popcount64(below))
    return uniq, inverse


def unique_inverse(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uniq sorted ascending, inverse) with ``uniq[inverse] == ids``; int64.

    Same result as ``np.unique(ids, return_inverse=True)``. Ids spanning a
    range up to ~16x their count (the usual case for a shard's row ids) take a
    sort-free direct-addressing path, ids spanning up to ~1024x their count (a
    trainer's batch over all tables) a sort-free bitmap; others use numpy's SIMD sort.
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    lo = int(ids.min())
    span = int(ids.max()) - lo + 1
    if span <= 16 * ids.size + 65536 and ids.size < 2**31:
        return _unique_dense(ids, lo, span)
    if span <= 1024 * ids.size + (1 << 20):
        return _unique_bitmap(ids, lo, span)
    return _unique_from_order(ids, np.argsort(ids))


@njit(cache=True)
def group_by_owner(slots, owner, inverse, n_owners):
    """Rows grouped by owner, stably: ``(slots_grouped, counts[n_owners], inverse_grouped)``.

    ``slots_grouped = slots[order]`` with ``order`` = ``np.argsort(owner, kind="stable")``
    (a counting sort: the same permutation), ``counts[o]`` the rows of owner ``o``, and
    ``inverse_grouped[i] = position of inverse[i] in the grouped order``.
    """
    n = owner.size
    counts = np.zeros(n_owners, dtype=np.int64)
    for i in range(n):
        counts[owner[i]] += 1
    start = np.empty(n_owners, dtype=np.int64)
    acc = 0
    for o in range(n_owners):
        start[o] = acc
        acc += counts[o]
    pos = np.empty(n, dtype=np.int64)
    grouped = np.empty(n, dtype=slots.dtype)
    for i in range(n):
        o = owner[i]
        p = start[o]
        start[o] = p + 1
        pos[i] = p
        grouped[p] = slots[i]
    inv = np.empty(inverse.size, dtype=np.int64)
    for i in range(inverse.size):
        inv[i] = pos[inverse[i]]
    return grouped, counts, inv


@njit(cache=True)
def gather_rows(table, slots, dim, out):
    """out[i] = table[slots[i], :dim]."""
    n = slots.size
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch_row(table, slots[i + PREFETCH_AHEAD])
        s = slots[i]
        for c in range(dim):
            out[i, c] = table[s, c]


@njit(cache=True)
def scatter_add_rows(src, index, out):
    """out[index[i]] += src[i], in increasing i (fixed float summation order)."""
    dim = src.shape[1]
    for i in range(index.size):
        t = index[i]
        for c in range(dim):
            out[t, c] += src[i, c]


@njit(cache=True)
def embedding_bag_sum(rows, index, offsets, out):
    """out[b] = sum of rows[index[p]] for p in offsets[b]..offsets[b+1]-1, in order."""
    dim = out.shape[1]
    for b in range(offsets.size - 1):
        for c in range(dim):
            out[b, c] = 0
        for p in range(offsets[b], offsets[b + 1]):
            t = index[p]
            for c in range(dim):
                out[b, c] += rows[t, c]


@njit(cache=True)
def sgd_apply(table, slots, grads, lr):
    """table[slots[i], :dim] -= lr * grads[i] (float32; dim = grads.shape[1])."""
    lr32 = np.float32(lr)
    dim = grads.shape[1]
    for i in range(slots.size):
        s = slots[i]
        for c in range(dim):
            table[s, c] = table[s, c] - lr32 * grads[i, c]


LANES = 8  # the sum of squares runs in 8 interleaved float32 lanes (lane = column % 8)


@njit(cache=True, inline="always")
def _finish_lanes(g, i, full, dim, a0, a1, a2, a3, a4, a5, a6, a7):
    # the last dim % 8 columns go to lanes 0.., then the fixed reduction tree
    rem = dim - full
    if rem > 0:
        x = g[i, full]
        a0 += x * x
    if rem > 1:
        x = g[i, full + 1]
        a1 += x * x
    if rem > 2:
        x = g[i, full + 2]
        a2 += x * x
    if rem > 3:
        x = g[i, full + 3]
        a3 += x * x
    if rem > 4:
        x = g[i, full + 4]
        a4 += x * x
    if rem > 5:
        x = g[i, full + 5]
        a5 += x * x
    if rem > 6:
        x = g[i, full + 6]
        a6 += x * x
    return ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))


@njit(cache=True)
def row_sum_squares(g, i, dim):
    """sum(g[i, :dim] ** 2) in float32, in the fixed order the optimizers use.

    Lane ``l`` accumulates columns ``l, l + 8, ...`` in increasing order (the
    tail columns ``dim - dim % 8 ..`` go to lanes 0, 1, ...), then the lanes
    are combined as ``((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))``.
    Fixed, hence bit-reproducible; and it is SIMD-friendly where one running
    sum would be a dim-long latency chain per row.
    """
    z = np.float32(0.0)
    a0, a1, a2, a3, a4, a5, a6, a7 = z, z, z, z, z, z, z, z
    full = dim - dim % LANES
    for c in range(0, full, LANES):
        x0, x1, x2, x3 = g[i, c], g[i, c + 1], g[i, c + 2], g[i, c + 3]
        x4, x5, x6, x7 = g[i, c + 4], g[i, c + 5], g[i, c + 6], g[i, c + 7]
        a0 += x0 * x0
        a1 += x1 * x1
        a2 += x2 * x2
        a3 += x3 * x3
        a4 += x4 * x4
        a5 += x5 * x5
        a6 += x6 * x6
        a7 += x7 * x7
    return _finish_lanes(g, i, full, dim, a0, a1, a2, a3, a4, a5, a6, a7)


@intrinsic
def _sumsq_lanes8(typingctx, g, i, nchunks):
    """The 8 lane sums of squares of row ``i`` of a C-contiguous float32 2-D array.

    Lane ``l`` = ``g[i, l]**2 + g[i, l + 8]**2 + ...`` over ``nchunks`` chunks of
    8 columns, accumulated in increasing column order from 0 -- exactly the
    scalar lanes of :func:`row_sum_squares`, as one ``<8 x float>`` register
    (plain IEEE fmul/fadd, no fast-math flags, so no contraction or reassociation).
    """
    if not (isinstance(g, types.Array) and g.ndim == 2 and g.dtype == types.float32
            and g.layout == "C"):
        return None
    f32 = ir.FloatType()
    vt = ir.VectorType(f32, 8)
    ret = types.UniTuple(types.float32, 8)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        stride = builder.extract_value(a.strides, 0)
        i8p = ir.IntType(8).as_pointer()
        base = builder.gep(builder.bitcast(a.data, i8p), [builder.mul(args[1], stride)])
        vbase = builder.bitcast(base, vt.as_pointer())
        acc = cgutils.alloca_once_value(builder, ir.Constant(vt, None))
        with cgutils.for_range(builder, args[2]) as loop:
            x = builder.load(builder.gep(vbase, [loop.index]), align=4)
            builder.store(builder.fadd(builder.load(acc), builder.fmul(x, x)), acc)
        v = builder.load(acc)
        items = [builder.extract_element(v, ir.Constant(ir.IntType(32), t)) for t in range(8)]
        return context.make_tuple(builder, ret, items)

    return ret(g, types.intp, types.intp), codegen


@njit(cache=True)
def _row_sum_squares_v(g, i, dim):
    # row_sum_squares with the full chunks in one SIMD register (same bits)
    full = dim - dim % LANES
    a0, a1, a2, a3, a4, a5, a6, a7 = _sumsq_lanes8(g, i, full // LANES)
    return _finish_lanes(g, i, full, dim, a0, a1, a2, a3, a4, a5, a6, a7)


@njit(cache=True)
def adagrad_apply(table, slots, grads, lr, eps):
    """Row-wise Adagrad; the accumulator is column ``dim`` of the row."""
    lr32 = np.float32(lr)
    eps32 = np.float32(eps)
    dim = grads.shape[1]
    inv_dim = np.float32(dim)
    n = slots.size
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch_row(table, slots[i + PREFETCH_AHEAD])
        s = slots[i]
        acc = table[s, dim] + row_sum_squares(grads, i, dim) / inv_dim
        table[s, dim] = acc
        m = lr32 / (np.float32(np.sqrt(acc)) + eps32)
        for c in range(dim):
            table[s, c] = table[s, c] - m * grads[i, c]


@intrinsic
def f32_bits(typingctx, x):
    """The IEEE bits of a float32 as uint32 (a register bitcast: no reload from memory)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def prefetch_row(typingctx, arr, row):
    """Software-prefetch every cache line of row ``row`` of a C-contiguous 2-D array.

    Random rows of a table much larger than the caches are latency-bound;
    fetching a few rows ahead keeps several misses in flight.
    """
    if not isinstance(arr, types.Array) or arr.ndim != 2:
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        i8p = ir.IntType(8).as_pointer()
        base = builder.bitcast(a.data, i8p)
        stride = builder.extract_value(a.strides, 0)
        start = builder.gep(base, [builder.mul(args[1], stride)])
        fnty = ir.FunctionType(ir.VoidType(), [i8p, ir.IntType(32), ir.IntType(32), ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        i32 = ir.IntType(32)
        # one prefetch per 64-byte line, rows are at most a few hundred bytes
        with cgutils.for_range(builder, builder.udiv(builder.add(stride, stride.type(63)),
                                                     stride.type(64))) as loop:
            ptr = builder.gep(start, [builder.mul(loop.index, stride.type(64))])
            builder.call(fn, [ptr, i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, types.intp), codegen


PREFETCH_AHEAD = 8  # rows ahead; covers DRAM latency at ~10-20 ns of work per row


@njit(cache=True)
def _sgd_delta_kernel(table, slots, grads, lr, delta, old_out):
    # delta (n, w) uint32 or (0, w): not wanted; old_out (n, w) float32 or (0, w): not wanted
    lr32 = np.float32(lr)
    dim = grads.shape[1]
    w_all = table.shape[1]
    n = slots.size
    want_delta = delta.shape[0] > 0
    keep = old_out.shape[0] > 0
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch_row(table, slots[i + PREFETCH_AHEAD])
        s = slots[i]
        if keep:  # the row before the update, copied while it is in cache (the undo record)
            for c in range(w_all):
                old_out[i, c] = table[s, c]
        for c in range(dim):
            old = table[s, c]
            new = old - lr32 * grads[i, c]
            table[s, c] = new
            if want_delta:
                delta[i, c] = f32_bits(old) ^ f32_bits(new)
        if want_delta:
            for c in range(dim, w_all):
                delta[i, c] = 0  # optimizer state does not change under SGD


@njit(cache=True)
def _adagrad_delta_kernel(table, slots, grads, lr, eps, delta, old_out):
    # delta (n, w) uint32 or (0, w): not wanted; old_out (n, w) float32 or (0, w): not wanted
    lr32 = np.float32(lr)
    eps32 = np.float32(eps)
    dim = grads.shape[1]
    w_all = table.shape[1]
    inv_dim = np.float32(dim)
    n = slots.size
    want_delta = delta.shape[0] > 0
    keep = old_out.shape[0] > 0
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch_row(table, slots[i + PREFETCH_AHEAD])
        s = slots[i]
        if keep:  # the row before the update, copied while it is in cache (the undo record)
            for c in range(w_all):
                old_out[i, c] = table[s, c]
        old_acc = table[s, dim]
        acc = old_acc + _row_sum_squares_v(grads, i, dim) / inv_dim
        table[s, dim] = acc
        m = lr32 / (np.float32(np.sqrt(acc)) + eps32)
        if want_delta:
            delta[i, dim] = f32_bits(old_acc) ^ f32_bits(acc)
            for c in range(dim):
                old = table[s, c]
                new = old - m * grads[i, c]
                table[s, c] = new
                delta[i, c] = f32_bits(old) ^ f32_bits(new)
            for c in range(dim + 1, w_all):
                delta[i, c] = 0
        else:
            for c in range(dim):
                table[s, c] = table[s, c] - m * grads[i, c]


def _table_checked(table: np.ndarray) -> None:
    if table.dtype != np.float32 or table.ndim != 2 or not table.flags.c_contiguous:
        raise ValueError("table must be a C-contiguous float32 (n, dim + s) array")


def _delta_views(table: np.ndarray, delta_out: np.ndarray | None, m: int) -> np.ndarray:
    _table_checked(table)
    row_bytes = table.shape[1] * 4
    if delta_out is None:
        return np.empty((0, table.shape[1]), np.uint32)
    if delta_out.shape != (m, row_bytes) or delta_out.dtype != np.uint8:
        raise ValueError(f"delta_out must be uint8 ({m}, {row_bytes})")
    if not delta_out.flags.c_contiguous:
        raise ValueError("delta_out must be C-contiguous")
    return delta_out.view(np.uint32)


def _old_view(table: np.ndarray, old_out: np.ndarray | None, m: int) -> np.ndarray:
    if old_out is None:
        return np.empty((0, table.shape[1]), np.float32)
    if old_out.shape != (m, table.shape[1]) or old_out.dtype != np.float32 or not old_out.flags.c_contiguous:
        raise ValueError(f"old_out must be C-contiguous float32 ({m}, {table.shape[1]})")
    return old_out


def sgd_apply_delta(
    table: np.ndarray, slots: np.ndarray, grads: np.ndarray, lr: float, delta_out: np.ndarray | None,
    old_out: np.ndarray | None = None,
) -> None:
    """sgd_apply plus ``delta_out[i] = old XOR new`` bytes of row ``slots[i]`` and (``old_out``)
    a copy of the row before the update; either output may be None."""
    _sgd_delta_kernel(table, slots, grads, lr, _delta_views(table, delta_out, slots.size),
                      _old_view(table, old_out, slots.size))


def adagrad_apply_delta(
    table: np.ndarray,
    slots: np.ndarray,
    grads: np.ndarray,
    lr: float,
    eps: float,
    delta_out: np.ndarray | None,
    old_out: np.ndarray | None = None,
) -> None:
    """adagrad_apply plus ``delta_out[i] = old XOR new`` bytes of row ``slots[i]`` and
    (``old_out``) a copy of the row before the update, taken while the kernel has it in cache
    (a separate ``table[slots]`` gather misses the cache a second time); either output may be
    None. The table is adagrad_apply's, bit for bit."""
    d = _delta_views(table, delta_out, slots.size)
    grads = np.ascontiguousarray(grads, dtype=np.float32)  # no-op for the usual C float32
    _adagrad_delta_kernel(table, slots, grads, lr, eps, d, _old_view(table, old_out, slots.size))
