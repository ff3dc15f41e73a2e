"""DLRM's dot interaction, forward and backward, in 16-lane SIMD blocks of samples.

Owns the interaction kernels ``interact_fwd`` / ``interact_bwd`` that ``dlrm.py`` calls.
``Z = [x, e_1 .. e_T]`` (``n = T + 1`` vectors of ``d`` per sample); the forward writes the
``P = n (n - 1) / 2`` dots strictly below the diagonal in row-major pair order ``(1,0), (2,0),
(2,1), ...``; the backward gives ``grad Z`` from the gradient of those dots.

Invariants (what makes the results bit-identical to a scalar loop over samples):

* a dot is ``z_i0 z_j0 + z_i1 z_j1 + ...`` summed left to right in ``k`` (plain IEEE ``fmul`` and
  ``fadd``: no fused multiply-add, no reassociation);
* in the backward, every element of ``grad Z`` receives its contributions in increasing pair
  order, starting from ``+0``: ``gZ_i = ((0 + g_(i,0) z_0) + g_(i,1) z_1) + ...`` then ``+ g_(i',i)
  z_i'`` for ``i' = i + 1, ..`` -- one chain per element over ``m != i`` in increasing ``m``;
* samples are independent: the lanes of a block are samples, and a partial last block is padded
  with zeros that are never written back.

Layout: a block of 16 samples is transposed to ``zt[n, d, 16]`` (samples innermost, one
``<16 x float>`` register per ``(vector, k)``) with 16 x 16 in-register transposes (LLVM
``shufflevector``) where ``d`` is a multiple of 16, scalar loops otherwise; the products run
through small LLVM intrinsics so that the accumulators stay in registers.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["LANES", "interact_bwd", "interact_fwd"]

LANES = 16  # samples per block: one AVX-512 register of float32
_UNROLL = 16  # columns per pass of the backward (independent add chains in registers)
_F32 = ir.FloatType()
_VT = ir.VectorType(_F32, LANES)


def _vec_ptr(context, builder, aty, arr, offset):
    """``<16 x float>*`` at flat element ``offset`` of a C-contiguous float32 array."""
    a = context.make_array(aty)(context, builder, value=arr)
    return builder.bitcast(builder.gep(a.data, [offset]), _VT.as_pointer())


def _is_f32c(a) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.float32 and a.layout == "C"


def _transpose_masks() -> list[tuple[int, list[int], list[int]]]:
    """Per stage ``h`` (1, 2, 4, 8): the shuffle masks of the low and the high row of a pair.

    Stage ``h`` swaps bit ``h`` of the row index with bit ``h`` of the column index; the four
    stages together transpose a 16 x 16 matrix."""
    out = []
    for h in (1, 2, 4, 8):
        lo = [LANES + c - h if c & h else c for c in range(LANES)]
        hi = [LANES + c if c & h else c + h for c in range(LANES)]
        out.append((h, lo, hi))
    return out


_MASKS = _transpose_masks()


@intrinsic
def _transpose16(typingctx, src, s_off, s_stride, dst, d_off, d_stride):
    """``dst.flat[d_off + c * d_stride + r] = src.flat[s_off + r * s_stride + c]`` for
    ``r, c < 16``: a 16 x 16 float32 tile transposed in registers (exact: moves only)."""
    if not (_is_f32c(src) and _is_f32c(dst)):
        return None

    def codegen(context, builder, sig, args):
        src_, so, ss, dst_, do, ds = args
        rows = []
        for r in range(LANES):
            off = builder.add(so, builder.mul(ss, ss.type(r)))
            rows.append(builder.load(_vec_ptr(context, builder, sig.args[0], src_, off), align=4))
        i32 = ir.IntType(32)
        for h, lo, hi in _MASKS:
            mlo = ir.Constant(ir.VectorType(i32, LANES), lo)
            mhi = ir.Constant(ir.VectorType(i32, LANES), hi)
            new = list(rows)
            for r in range(LANES):
                if r & h:
                    continue
                a, b = rows[r], rows[r + h]
                new[r] = builder.shuffle_vector(a, b, mlo)
                new[r + h] = builder.shuffle_vector(a, b, mhi)
            rows = new
        for r in range(LANES):
            off = builder.add(do, builder.mul(ds, ds.type(r)))
            builder.store(rows[r], _vec_ptr(context, builder, sig.args[3], dst_, off), align=4)
        return context.get_dummy_value()

    return types.void(src, types.intp, types.intp, dst, types.intp, types.intp), codegen


@intrinsic
def _pair_dots(typingctx, zt, ob, zi, zj, d, oo, width):
    """``width`` pairs ``(i, j), (i, j + 1), ..`` at once: ``ob.flat[oo + 16 u ..] = sum_k
    zt.flat[zi + 16 k ..] * zt.flat[zj + 16 (u d + k) ..]`` (16 lanes), ``k = 0 .. d - 1`` left to
    right (``fmul``, ``fadd``); ``z_i`` is loaded once for the ``width`` independent chains."""
    if not (_is_f32c(zt) and _is_f32c(ob) and isinstance(width, types.IntegerLiteral)):
        return None
    w = width.literal_value

    def codegen(context, builder, sig, args):
        zt_, ob_, zi_, zj_, d_, oo_, _ = args
        pi = _vec_ptr(context, builder, sig.args[0], zt_, zi_)
        pj = [_vec_ptr(context, builder, sig.args[0], zt_,
                       builder.add(zj_, builder.mul(d_, d_.type(LANES * u)))) for u in range(w)]
        zi0 = builder.load(pi, align=4)
        accs = [cgutils.alloca_once_value(builder, builder.fmul(zi0, builder.load(p, align=4)))
                for p in pj]
        with cgutils.for_range(builder, builder.sub(d_, d_.type(1))) as loop:
            k = builder.add(loop.index, loop.index.type(1))
            zik = builder.load(builder.gep(pi, [k]), align=4)
            for u in range(w):
                prod = builder.fmul(zik, builder.load(builder.gep(pj[u], [k]), align=4))
                builder.store(builder.fadd(builder.load(accs[u]), prod), accs[u])
        po = _vec_ptr(context, builder, sig.args[1], ob_, oo_)
        for u in range(w):
            builder.store(builder.load(accs[u]), builder.gep(po, [oo_.type(u)]), align=4)
        return context.get_dummy_value()

    return types.void(zt, ob, types.intp, types.intp, types.intp, types.intp, width), codegen


@intrinsic
def _grad_vector(typingctx, zt, gzt, gbt, i, n, d):
    """``gZ_i = sum over m != i, increasing, of g_(max(i, m), min(i, m)) z_m`` from ``+0`` (16
    lanes; ``g`` of pair ``(a, b)`` is ``gbt[a (a - 1) / 2 + b]``): the contributions of the pairs
    of ``i`` in pair order, as the pair-by-pair scatter adds them. Columns in chunks of
    ``_UNROLL`` whose accumulators stay in registers; nothing but ``gZ_i`` is stored."""
    if not (_is_f32c(zt) and _is_f32c(gzt) and _is_f32c(gbt)):
        return None

    def codegen(context, builder, sig, args):
        zt_, gzt_, gbt_, i_, n_, d_ = args
        one = i_.type(1)
        pz = _vec_ptr(context, builder, sig.args[0], zt_, i_.type(0))
        pg = _vec_ptr(context, builder, sig.args[1], gzt_, i_.type(0))
        pb = _vec_ptr(context, builder, sig.args[2], gbt_, i_.type(0))
        zero = ir.Constant(_VT, [0.0] * LANES)
        tri_i = builder.udiv(builder.mul(i_, builder.sub(i_, one)), i_.type(2))  # pair (i, 0)

        def columns(k0, width):
            accs = [cgutils.alloca_once_value(builder, zero) for _ in range(width)]

            def add(m, pair):
                g = builder.load(builder.gep(pb, [pair]), align=4)
                v0 = builder.add(builder.mul(m, d_), k0)
                for u in range(width):
                    zm = builder.load(builder.gep(pz, [builder.add(v0, v0.type(u))]), align=4)
                    builder.store(builder.fadd(builder.load(accs[u]), builder.fmul(g, zm)), accs[u])

            with cgutils.for_range(builder, i_) as ml:  # m < i: pairs (i, m)
                add(ml.index, builder.add(tri_i, ml.index))
            with cgutils.for_range(builder, builder.sub(n_, builder.add(i_, one))) as ml:  # m > i
                m = builder.add(builder.add(i_, one), ml.index)
                add(m, builder.add(builder.udiv(builder.mul(m, builder.sub(m, one)), m.type(2)), i_))
            v0 = builder.add(builder.mul(i_, d_), k0)
            for u in range(width):
                builder.store(builder.load(accs[u]), builder.gep(pg, [builder.add(v0, v0.type(u))]),
                              align=4)

        U = _UNROLL
        with cgutils.for_range(builder, builder.udiv(d_, d_.type(U))) as kl:
            columns(builder.mul(kl.index, kl.index.type(U)), U)
        full = builder.mul(builder.udiv(d_, d_.type(U)), d_.type(U))
        with cgutils.for_range(builder, builder.sub(d_, full)) as kl:
            columns(builder.add(full, kl.index), 1)
        return context.get_dummy_value()

    return types.void(zt, gzt, gbt, types.intp, types.intp, types.intp), codegen


@njit(cache=True)
def _load_block(x, emb, b0, m, zt, tile):  # pragma: no cover - jitted
    """``zt[i, k, s] = Z[b0 + s, i, k]`` (``Z = [x, emb]``) for ``s < m``, zero lanes beyond."""
    T = emb.shape[1]
    d = emb.shape[2]
    if m == LANES and d % LANES == 0 and x.shape[1] == d:
        for k0 in range(0, d, LANES):
            _transpose16(x, b0 * d + k0, d, zt, k0 * LANES, LANES)
            for i in range(T):
                _transpose16(emb, (b0 * T + i) * d + k0, T * d, zt, ((i + 1) * d + k0) * LANES, LANES)
        return
    zt[:] = 0
    for s in range(m):
        for k in range(d):
            zt[0, k, s] = x[b0 + s, k]
        for i in range(T):
            for k in range(d):
                zt[i + 1, k, s] = emb[b0 + s, i, k]


@njit(cache=True)
def interact_fwd(x, emb, out, c0):  # pragma: no cover - jitted
    """``out[b, c0 + p]`` = dot of the ``p``-th strictly-lower pair ``(i, j)`` of ``Z = [x, emb]``.

    ``x`` [B, d], ``emb`` [B, T, d], ``out`` [B, >= c0 + P]: C-contiguous float32."""
    bsz, T, d = emb.shape
    n = T + 1
    P = n * (n - 1) // 2
    zt = np.empty((n, d, LANES), dtype=np.float32)
    ob = np.empty((P, LANES), dtype=np.float32)
    tile = np.empty((LANES, LANES), dtype=np.float32)
    for b0 in range(0, bsz, LANES):
        m = min(LANES, bsz - b0)
        _load_block(x, emb, b0, m, zt, tile)
        p = 0
        for i in range(1, n):
            j = 0
            while j + 4 <= i:
                _pair_dots(zt, ob, i * d * LANES, j * d * LANES, d, p * LANES, 4)
                j += 4
                p += 4
            while j < i:
                _pair_dots(zt, ob, i * d * LANES, j * d * LANES, d, p * LANES, 1)
                j += 1
                p += 1
        q0 = 0
        w = out.shape[1]
        if m == LANES:
            while q0 + LANES <= P:
                _transpose16(ob, q0 * LANES, LANES, out, b0 * w + c0 + q0, w)
                q0 += LANES
        for s in range(m):
            for q in range(q0, P):
                out[b0 + s, c0 + q] = ob[q, s]


@njit(cache=True)
def interact_bwd(x, emb, gdot, c0, gx, gemb):  # pragma: no cover - jitted
    """Backward of ``interact_fwd``: adds ``grad Z_0`` into ``gx`` [B, d] and writes ``grad Z_1..T``
    to ``gemb`` [B, T, d] from the dots' gradient ``gdot[:, c0 : c0 + P]`` (C-contiguous)."""
    bsz, T, d = emb.shape
    n = T + 1
    P = n * (n - 1) // 2
    zt = np.empty((n, d, LANES), dtype=np.float32)
    gzt = np.empty((n, d, LANES), dtype=np.float32)
    gbt = np.empty((P, LANES), dtype=np.float32)
    tile = np.empty((LANES, LANES), dtype=np.float32)
    fast_d = d % LANES == 0
    for b0 in range(0, bsz, LANES):
        m = min(LANES, bsz - b0)
        _load_block(x, emb, b0, m, zt, tile)
        q0 = 0
        w = gdot.shape[1]
        if m == LANES:
            while q0 + LANES <= P:
                _transpose16(gdot, b0 * w + c0 + q0, w, gbt, q0 * LANES, LANES)
                q0 += LANES
        else:
            gbt[:] = 0
        for s in range(m):
            for q in range(q0, P):
                gbt[q, s] = gdot[b0 + s, c0 + q]
        for i in range(n):
            _grad_vector(zt, gzt, gbt, i, n, d)
        if m == LANES and fast_d:
            for k0 in range(0, d, LANES):
                _transpose16(gzt, k0 * LANES, LANES, tile, 0, LANES)
                for s in range(LANES):
                    for c in range(LANES):
                        gx[b0 + s, k0 + c] += tile[s, c]
                for i in range(T):
                    _transpose16(gzt, ((i + 1) * d + k0) * LANES, LANES,
                                 gemb, (b0 * T + i) * d + k0, T * d)
            continue
        for s in range(m):
            for k in range(d):
                gx[b0 + s, k] += gzt[0, k, s]
            for i in range(T):
                for k in range(d):
                    gemb[b0 + s, i, k] = gzt[i + 1, k, s]
