"""GF(2^8) arithmetic and bulk multiply-accumulate kernels.

Owns: the field (polynomial 0x11D, generator 2 -- ISA-L's field), its tables,
ISA-L's systematic Cauchy generator (``gf_gen_cauchy1_matrix``), small-matrix
inversion, and the bulk kernels every GF code is built from:
``dst ^= c * src`` over byte arrays, whole or row-sparse.

Invariants:

* every bulk kernel is exact and byte-wise: the result depends only on the
  bytes, never on what they encode (float32 weights, optimizer state, ...);
* ``gf_mac`` with ``c == 0`` is a no-op and with ``c == 1`` a plain XOR, so the
  ``xor`` code costs no multiplications;
* two interchangeable implementations of ``c * src``: a portable one
  (byte lanes, shift/mask/xor, auto-vectorised by LLVM) and, where the CPU has
  GFNI, one ``vgf2p8affineqb`` per 32 bytes (multiplication by a constant is a
  GF(2)-linear map, i.e. an 8x8 bit matrix -- what ISA-L does on GFNI CPUs).
  Both give identical bytes (tested).

The GFNI/portable choice is made at run time, on every call, not frozen into
the compiled code: the GFNI kernels take it as an argument (``gfni``) and the
Python entry points pass the current choice (``gfni_active()``), so numba's
on-disk cache (``cache=True``) holds one kernel that serves both paths.
``MPIEC_NO_GFNI=1`` at import selects the portable path, ``use_gfni(False/True)``
switches in a running process. Whether the CPU has GFNI (``CPU_HAS_GFNI``) is a
compile-time constant; numba keys its cache on the CPU's features, so a cache
built on a GFNI machine is never loaded on one without.
"""

from __future__ import annotations

import os

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

POLY = 0x11D
GENERATOR = 2


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    exp = np.zeros(512, dtype=np.uint8)
    log = np.zeros(256, dtype=np.int32)
    x = 1
    for i in range(255):
        exp[i] = x
        log[x] = i
        x <<= 1
        if x & 0x100:
            x ^= POLY
    # doubled so exp[log a + log b] never needs a modulo
    exp[255:510] = exp[0:255]
    return exp, log


GF_EXP, GF_LOG = _build_tables()


def _build_mul() -> np.ndarray:
    a = np.arange(256)
    s = GF_LOG[a][:, None] + GF_LOG[a][None, :]
    t = GF_EXP[s].astype(np.uint8)
    t[0, :] = 0
    t[:, 0] = 0
    return t


GF_MUL = _build_mul()  # GF_MUL[a, b] = a * b
GF_INV = np.zeros(256, dtype=np.uint8)
GF_INV[1:] = GF_EXP[(255 - GF_LOG[1:]) % 255]


def _build_masks() -> np.ndarray:
    # MASKS[c, b] = 0xFF if bit b of c is set: branch-free selection in the portable kernel
    c = np.arange(256)[:, None]
    b = np.arange(8)[None, :]
    return np.where((c >> b) & 1, 0xFF, 0).astype(np.uint8)


GF_MASKS = _build_masks()


def _build_affine() -> np.ndarray:
    # vgf2p8affineqb computes bit i of y as parity(A.byte[7 - i] & x); bit j of
    # that byte is bit i of c * x^j (column j of the multiply-by-c matrix).
    out = np.zeros(256, dtype=np.uint64)
    for c in range(256):
        q = 0
        for i in range(8):
            row = 0
            for j in range(8):
                if (int(GF_MUL[c, 1 << j]) >> i) & 1:
                    row |= 1 << j
            q |= row << (8 * (7 - i))
        out[c] = q
    return out


GF_AFFINE = _build_affine()


def _cpu_has_gfni() -> bool:
    try:
        feats = _llvm.get_host_cpu_features()
    except Exception:  # noqa: BLE001 - any failure means: do not use it
        return False
    from numba.core import config

    # numba compiling for a generic CPU must not see the intrinsic
    if config.CPU_NAME not in (None, "host"):
        return False
    return bool(feats.get("gfni", False)) and bool(feats.get("avx", False))


def _env_disables_gfni() -> bool:
    return os.environ.get("MPIEC_NO_GFNI", "") not in ("", "0")


CPU_HAS_GFNI: bool = _cpu_has_gfni()  # compile-time: the GFNI code exists only where it can run
_CPU_GFNI = CPU_HAS_GFNI
_ACTIVE = [CPU_HAS_GFNI and not _env_disables_gfni()]  # run-time choice, read on every call
HAVE_GFNI: bool = _ACTIVE[0]  # the choice at import (MPIEC_NO_GFNI); gfni_active() is the live one


def gfni_active() -> bool:
    """Whether the GF kernels use GFNI now (``False``: the portable path)."""
    return _ACTIVE[0]


def use_gfni(flag: bool | None = None) -> bool:
    """Choose the GF multiply path at run time; ``None``: as at import (``MPIEC_NO_GFNI``).

    Returns the path now in use. ``True`` on a CPU without GFNI raises ``ValueError``.
    """
    if flag is None:
        flag = CPU_HAS_GFNI and not _env_disables_gfni()
    if flag and not CPU_HAS_GFNI:
        raise ValueError("this CPU (or numba's target CPU) has no GFNI")
    _ACTIVE[0] = bool(flag)
    return _ACTIVE[0]


def path_name() -> str:
    """``"GFNI"`` or ``"portable"``: the path the kernels take now (for labels)."""
    return "GFNI" if _ACTIVE[0] else "portable"


# ---------------------------------------------------------------------------
# scalar and small-matrix arithmetic


@njit(cache=True)
def gf_matmul(a, b):
    """Matrix product over GF(2^8) of uint8 matrices (small: generator-sized)."""
    n, m = a.shape
    p = b.shape[1]
    out = np.zeros((n, p), dtype=np.uint8)
    for i in range(n):
        for t in range(m):
            c = a[i, t]
            if c != 0:
                for j in range(p):
                    out[i, j] ^= GF_MUL[c, b[t, j]]
    return out


@njit(cache=True)
def gf_mat_inv(m):
    """Inverse of a square uint8 matrix over GF(2^8) (Gauss-Jordan).

    Raises ValueError if the matrix is singular.
    """
    n = m.shape[0]
    a = m.copy()
    inv = np.zeros((n, n), dtype=np.uint8)
    for i in range(n):
        inv[i, i] = 1
    for col in range(n):
        piv = -1
        for row in range(col, n):
            if a[row, col] != 0:
                piv = row
                break
        if piv < 0:
            raise ValueError("singular matrix over GF(2^8)")
        if piv != col:
            for j in range(n):
                t = a[col, j]
                a[col, j] = a[piv, j]
                a[piv, j] = t
                t = inv[col, j]
                inv[col, j] = inv[piv, j]
                inv[piv, j] = t
        s = GF_INV[a[col, col]]
        for j in range(n):
            a[col, j] = GF_MUL[s, a[col, j]]
            inv[col, j] = GF_MUL[s, inv[col, j]]
        for row in range(n):
            if row != col:
                f = a[row, col]
                if f != 0:
                    for j in range(n):
                        a[row, j] ^= GF_MUL[f, a[col, j]]
                        inv[row, j] ^= GF_MUL[f, inv[col, j]]
    return inv


@njit(cache=True)
def cauchy_matrix(k, r):
    """ISA-L's Cauchy parity rows: (r, k) with entry [i, j] = 1 / ((k + i) ^ j)."""
    if k < 1 or r < 0 or k + r > 256:
        raise ValueError("need 1 <= k and k + r <= 256")
    out = np.empty((r, k), dtype=np.uint8)
    for i in range(r):
        for j in range(k):
            out[i, j] = GF_INV[(k + i) ^ j]
    return out


@njit(cache=True)
def systematic_generator(parity_rows):
    """(k + r, k) generator [I_k; parity_rows]."""
    r, k = parity_rows.shape
    g = np.zeros((k + r, k), dtype=np.uint8)
    for j in range(k):
        g[j, j] = 1
    g[k:, :] = parity_rows
    return g


# ---------------------------------------------------------------------------
# bulk kernels


def _gfni_codegen(n_src, n_vec=1):
    # dst[off:off+32*n_vec] ^= M * (xor of the n_src sources at off); M is the 8x8
    # bit matrix of "multiply by c", broadcast to the four qwords of a ymm register.
    def codegen(context, builder, signature, args):
        # args: dst, doff, (src, soff) * n_src, mat
        m = args[-1]
        vt = ir.VectorType(ir.IntType(8), 32)
        vp = vt.as_pointer()

        def ptr(pos):
            base = context.make_array(signature.args[pos])(context, builder, value=args[pos]).data
            return builder.bitcast(builder.gep(base, [args[pos + 1]]), vp)

        q = ir.Constant(ir.VectorType(ir.IntType(64), 4), None)
        for i in range(4):
            q = builder.insert_element(q, m, ir.Constant(ir.IntType(32), i))
        q = builder.bitcast(q, vt)
        fnty = ir.FunctionType(vt, [vt, vt, ir.IntType(8)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.vgf2p8affineqb.256")
        dp0 = ptr(0)
        sp0 = [ptr(2 + 2 * s) for s in range(n_src)]
        for v in range(n_vec):
            at = [ir.Constant(ir.IntType(64), v)]
            x = builder.load(builder.gep(sp0[0], at), align=1)
            for s in range(1, n_src):
                x = builder.xor(x, builder.load(builder.gep(sp0[s], at), align=1))
            y = builder.call(fn, [x, q, ir.Constant(ir.IntType(8), 0)])
            dp = builder.gep(dp0, at)
            builder.store(builder.xor(builder.load(dp, align=1), y), dp, align=1)
        return context.get_dummy_value()

    return codegen


@intrinsic
def _gfni_mac32(typingctx, dst, doff, src, soff, mat):
    """dst[doff:doff+32] ^= c * src[soff:soff+32], c given as its GFNI bit matrix."""
    sig = types.void(dst, types.intp, src, types.intp, types.uint64)
    return sig, _gfni_codegen(1)


@intrinsic
def _gfni_mac64(typingctx, dst, doff, src, soff, mat):
    """dst[doff:doff+64] ^= c * src[soff:soff+64] (two ymm per step)."""
    sig = types.void(dst, types.intp, src, types.intp, types.uint64)
    return sig, _gfni_codegen(1, 2)


@intrinsic
def _gfni_mac64x(typingctx, dst, doff, a, aoff, b, boff, mat):
    """dst[doff:doff+64] ^= c * (a[aoff:aoff+64] ^ b[boff:boff+64])."""
    sig = types.void(dst, types.intp, a, types.intp, b, types.intp, types.uint64)
    return sig, _gfni_codegen(2, 2)


@intrinsic
def _gfni_mac32x(typingctx, dst, doff, a, aoff, b, boff, mat):
    """dst[doff:doff+32] ^= c * (a[aoff:aoff+32] ^ b[boff:boff+32])."""
    sig = types.void(dst, types.intp, a, types.intp, b, types.intp, types.uint64)
    return sig, _gfni_codegen(2)


@njit(cache=True, inline="always")
def _mul_masked(v, m0, m1, m2, m3, m4, m5, m6, m7):
    # c * v = xor of (x^b * v) over the set bits b of c (masks m_b = 0xFF or 0);
    # x * v is a shift plus a conditional 0x1D -- byte lanes that LLVM vectorises.
    acc = v & m0
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    acc ^= v & m1
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    acc ^= v & m2
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    acc ^= v & m3
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    acc ^= v & m4
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    acc ^= v & m5
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    acc ^= v & m6
    v = np.uint8((v << 1) ^ ((0 - (v >> 7)) & 0x1D))
    return acc ^ (v & m7)


@njit(cache=True)
def _mac_portable(dst, doff, src, soff, n, c):
    # c * v = xor of (x^b * v) over the set bits b of c; x * v is a shift plus a
    # conditional 0x1D -- all in byte lanes, so LLVM vectorises the loop.
    m = GF_MASKS[c]
    m0, m1, m2, m3 = m[0], m[1], m[2], m[3]
    m4, m5, m6, m7 = m[4], m[5], m[6], m[7]
    # unsigned indices: numba skips its negative-index wraparound, which
    # would otherwise stop LLVM from vectorising offset loops
    d0, s0 = np.uint64(doff), np.uint64(soff)
    for i in range(np.uint64(n)):
        v = src[s0 + i]
        dst[d0 + i] ^= _mul_masked(v, m0, m1, m2, m3, m4, m5, m6, m7)


@njit(cache=True)
def _mac2_portable(dst, doff, a, aoff, b, boff, n, c):
    # dst ^= c * (a ^ b), same scheme as _mac_portable
    m = GF_MASKS[c]
    m0, m1, m2, m3 = m[0], m[1], m[2], m[3]
    m4, m5, m6, m7 = m[4], m[5], m[6], m[7]
    d0, a0, b0 = np.uint64(doff), np.uint64(aoff), np.uint64(boff)
    for i in range(np.uint64(n)):
        v = a[a0 + i] ^ b[b0 + i]
        dst[d0 + i] ^= _mul_masked(v, m0, m1, m2, m3, m4, m5, m6, m7)


@njit(cache=True)
def _mac_at(dst, doff, src, soff, n, c, gfni):
    """dst[doff:doff+n] ^= c * src[soff:soff+n] on 1-D uint8 arrays (GFNI if ``gfni``)."""
    if c == 0:
        return
    if c == 1:
        d0, s0 = np.uint64(doff), np.uint64(soff)
        for i in range(np.uint64(n)):
            dst[d0 + i] ^= src[s0 + i]
        return
    done = 0
    if _CPU_GFNI:  # compile-time constant: no GFNI instruction is generated without it
        if gfni:  # run-time choice
            mat = GF_AFFINE[c]
            n64 = n - n % 64
            while done < n64:
                _gfni_mac64(dst, doff + done, src, soff + done, mat)
                done += 64
            if n - done >= 32:
                _gfni_mac32(dst, doff + done, src, soff + done, mat)
                done += 32
    _mac_portable(dst, doff + done, src, soff + done, n - done, c)


@njit(cache=True)
def _mac2_at(dst, doff, a, aoff, b, boff, n, c, gfni):
    """dst[doff:doff+n] ^= c * (a[aoff:aoff+n] ^ b[boff:boff+n]) (GFNI if ``gfni``)."""
    if c == 0:
        return
    if c == 1:
        d0, a0, b0 = np.uint64(doff), np.uint64(aoff), np.uint64(boff)
        for i in range(np.uint64(n)):
            dst[d0 + i] ^= a[a0 + i] ^ b[b0 + i]
        return
    done = 0
    if _CPU_GFNI:
        if gfni:
            mat = GF_AFFINE[c]
            n64 = n - n % 64
            while done < n64:
                _gfni_mac64x(dst, doff + done, a, aoff + done, b, boff + done, mat)
                done += 64
            if n - done >= 32:
                _gfni_mac32x(dst, doff + done, a, aoff + done, b, boff + done, mat)
                done += 32
    _mac2_portable(dst, doff + done, a, aoff + done, b, boff + done, n - done, c)


def mac_at(dst, doff, src, soff, n, c) -> None:
    """dst[doff:doff+n] ^= c * src[soff:soff+n] on 1-D uint8 arrays (path: ``gfni_active()``)."""
    _mac_at(dst, doff, src, soff, n, c, _ACTIVE[0])


def gf_mac(dst, src, c) -> None:
    """dst ^= c * src over 1-D contiguous uint8 arrays of equal size."""
    _mac_at(dst, 0, src, 0, dst.size, c, _ACTIVE[0])


def gf_mac2(dst, a, b, c) -> None:
    """dst ^= c * (a ^ b): a parity update straight from old and new bytes."""
    _mac2_at(dst, 0, a, 0, b, 0, dst.size, c, _ACTIVE[0])


@njit(cache=True)
def gf_mac_portable(dst, src, c):
    """Portable-only dst ^= c * src (reference for the GFNI path; benchmarks)."""
    if c != 0:
        _mac_portable(dst, 0, src, 0, dst.size, c)


def gf_mac_rows(parity, rows, delta, c) -> None:
    """parity[rows[t]] ^= c * delta[t] for every t (2-D C-contiguous uint8)."""
    _gf_mac_rows(parity, rows, delta, c, _ACTIVE[0])


def gf_mac_rows2(parity, rows, old, new, c) -> None:
    """parity[rows[t]] ^= c * (old[t] ^ new[t]) for every t."""
    _gf_mac_rows2(parity, rows, old, new, c, _ACTIVE[0])


@njit(cache=True)
def _gf_mac_rows(parity, rows, delta, c, gfni):
    w = parity.shape[1]
    if c == 1:  # xor code: a plain 2-D loop vectorises best
        for t in range(rows.size):
            r = rows[t]
            for col in range(w):
                parity[r, col] ^= delta[t, col]
        return
    p = parity.reshape(-1)
    d = delta.reshape(-1)
    for t in range(rows.size):
        _mac_at(p, rows[t] * w, d, t * w, w, c, gfni)


@njit(cache=True)
def _gf_mac_rows2(parity, rows, old, new, c, gfni):
    w = parity.shape[1]
    if c == 1:
        for t in range(rows.size):
            r = rows[t]
            for col in range(w):
                parity[r, col] ^= old[t, col] ^ new[t, col]
        return
    p = parity.reshape(-1)
    a = old.reshape(-1)
    b = new.reshape(-1)
    for t in range(rows.size):
        _mac2_at(p, rows[t] * w, a, t * w, b, t * w, w, c, gfni)


# -- fused multi-output combine (encode / full decode), GFNI ------------------


def _gfni_dot_codegen(nontemporal):
    # 64 bytes of one output: dst[off:off+64] = xor_j M_j * src_j[off:off+64]; the
    # sources are raw addresses (int64 array), the accumulators stay in registers,
    # the output is written once (no zeroing pass, no read-modify-write).
    def codegen(context, builder, signature, args):
        dptr, sptrs, mats, off = args
        i64 = ir.IntType(64)
        vt = ir.VectorType(ir.IntType(8), 32)
        vp = vt.as_pointer()
        sarr = context.make_array(signature.args[1])(context, builder, value=sptrs)
        marr = context.make_array(signature.args[2])(context, builder, value=mats)
        k = builder.extract_value(sarr.shape, 0)
        zero = ir.Constant(vt, None)
        acc0 = cgutils.alloca_once_value(builder, zero)
        acc1 = cgutils.alloca_once_value(builder, zero)
        fnty = ir.FunctionType(vt, [vt, vt, ir.IntType(8)])
        aff = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.vgf2p8affineqb.256")
        with cgutils.for_range(builder, k) as loop:
            j = loop.index
            addr = builder.add(builder.load(builder.gep(sarr.data, [j])), off)
            p0 = builder.inttoptr(addr, vp)
            x0 = builder.load(p0, align=1)
            x1 = builder.load(builder.gep(p0, [i64(1)]), align=1)
            m = builder.load(builder.gep(marr.data, [j]))
            q = ir.Constant(ir.VectorType(i64, 4), None)
            for t in range(4):
                q = builder.insert_element(q, m, ir.Constant(ir.IntType(32), t))
            q = builder.bitcast(q, vt)
            y0 = builder.call(aff, [x0, q, ir.Constant(ir.IntType(8), 0)])
            y1 = builder.call(aff, [x1, q, ir.Constant(ir.IntType(8), 0)])
            builder.store(builder.xor(builder.load(acc0), y0), acc0)
            builder.store(builder.xor(builder.load(acc1), y1), acc1)
        d0 = builder.inttoptr(builder.add(dptr, off), vp)
        d1 = builder.gep(d0, [i64(1)])
        for dp, acc in ((d0, acc0), (d1, acc1)):
            st = builder.store(builder.load(acc), dp, align=32 if nontemporal else 1)
            if nontemporal:
                st.set_metadata("nontemporal",
                                builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return codegen


@intrinsic
def _gfni_dot64(typingctx, dptr, sptrs, mats, off):
    """Write 64 bytes at address dptr+off: xor over j of mats[j] * (bytes at sptrs[j]+off)."""
    sig = types.void(types.int64, sptrs, mats, types.int64)
    return sig, _gfni_dot_codegen(False)


@intrinsic
def _gfni_dot64_nt(typingctx, dptr, sptrs, mats, off):
    """_gfni_dot64 with non-temporal stores; dptr+off must be 32-byte aligned."""
    sig = types.void(types.int64, sptrs, mats, types.int64)
    return sig, _gfni_dot_codegen(True)


@intrinsic
def _load_u8(typingctx, addr):
    """The byte at a raw address."""
    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(8).as_pointer()))

    return types.uint8(types.int64), codegen


@intrinsic
def _store_u8(typingctx, addr, val):
    """Store one byte at a raw address."""
    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return context.get_dummy_value()

    return types.void(types.int64, types.uint8), codegen


_TILE = 4096  # bytes per tile: k source tiles stay in L1/L2 while the m outputs are formed
_NT_MIN = 8 << 20  # outputs at least this large bypass the caches (streaming stores)


@njit(cache=True)
def _combine_ptrs(coef, mats, sptrs, dptrs, n):
    """dst_i[:n] = sum_j coef[i, j] * src_j[:n] on raw addresses (GFNI path).

    Tiled: for each tile every output is formed in registers from the k source
    tiles (read from memory once, then from cache) and stored once. Large
    outputs whose addresses agree modulo 32 use non-temporal stores: the
    parity is not read back soon, and streaming stores save the write-allocate
    read of every output line.
    """
    m, k = coef.shape
    head = 0
    nt = n * m >= _NT_MIN
    if nt:
        a0 = dptrs[0] % 32
        for i in range(m):
            if dptrs[i] % 32 != a0:
                nt = False
        head = (32 - a0) % 32
    if head > n:
        head = n
    body = (n - head) - (n - head) % 64
    for t in range(head):  # scalar head (alignment), bytes [0, head)
        for i in range(m):
            acc = np.uint8(0)
            for j in range(k):
                acc ^= GF_MUL[coef[i, j], _load_u8(sptrs[j] + t)]
            _store_u8(dptrs[i] + t, acc)
    for a in range(head, head + body, _TILE):
        b = min(head + body, a + _TILE)
        for i in range(m):
            mi = mats[i]
            di = dptrs[i]
            if nt:
                for off in range(a, b, 64):
                    _gfni_dot64_nt(di, sptrs, mi, off)
            else:
                for off in range(a, b, 64):
                    _gfni_dot64(di, sptrs, mi, off)
    for t in range(head + body, n):  # scalar tail
        for i in range(m):
            acc = np.uint8(0)
            for j in range(k):
                acc ^= GF_MUL[coef[i, j], _load_u8(sptrs[j] + t)]
            _store_u8(dptrs[i] + t, acc)


def combine(coef: np.ndarray, srcs, dsts) -> None:
    """dsts[i][:] = sum_j coef[i, j] * srcs[j] over whole C-contiguous uint8 arrays.

    Encode and full decode are this operation with different matrices. Uses the
    fused GFNI kernel where available, the blocked portable one otherwise.
    The arrays must stay alive during the call (they do: the caller holds them).
    """
    coef = np.ascontiguousarray(coef, dtype=np.uint8)
    n = srcs[0].size
    if any(s.size != n for s in srcs) or any(d.size != n for d in dsts):
        raise ValueError("all members must have the same size")
    if not _ACTIVE[0]:
        from numba.typed import List

        sl, dl = List(), List()
        for s in srcs:
            sl.append(s.reshape(-1))
        for d in dsts:
            dl.append(d.reshape(-1))
        _gf_combine(coef, sl, dl, False)
        return
    sptrs = np.array([s.ctypes.data for s in srcs], dtype=np.int64)
    dptrs = np.array([d.ctypes.data for d in dsts], dtype=np.int64)
    mats = np.ascontiguousarray(GF_AFFINE[coef])
    _combine_ptrs(coef, mats, sptrs, dptrs, n)


_BLOCK = 8192  # bytes per block: m accumulators of this size stay in L1/L2


def gf_combine(coef, srcs, dsts) -> None:
    """dsts[i] = sum_j coef[i, j] * srcs[j] over whole 1-D arrays.

    srcs and dsts are typed lists of equally sized 1-D uint8 arrays. Blocked so
    that each source byte is read from memory once and each output written once
    (encode and decode are the same operation with different matrices).
    """
    _gf_combine(coef, srcs, dsts, _ACTIVE[0])


def gf_combine_rows(coef, srcs, rows, dsts) -> None:
    """dsts[i][t] = sum_j coef[i, j] * srcs[j][rows[t]] (2-D arrays; degraded reads)."""
    _gf_combine_rows(coef, srcs, rows, dsts, _ACTIVE[0])


@njit(cache=True)
def _gf_combine(coef, srcs, dsts, gfni):
    m, k = coef.shape
    n = srcs[0].size
    for a in range(0, n, _BLOCK):
        b = min(n, a + _BLOCK)
        for i in range(m):
            d = dsts[i]
            d[a:b] = 0
            for j in range(k):
                _mac_at(d, a, srcs[j], a, b - a, coef[i, j], gfni)


@njit(cache=True)
def _gf_combine_rows(coef, srcs, rows, dsts, gfni):
    m, k = coef.shape
    w = srcs[0].shape[1]
    for i in range(m):
        d = dsts[i].reshape(-1)
        d[:] = 0
        for j in range(k):
            s = srcs[j].reshape(-1)
            c = coef[i, j]
            for t in range(rows.size):
                _mac_at(d, t * w, s, rows[t] * w, w, c, gfni)
