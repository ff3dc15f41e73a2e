"""The GFNI/portable switch is a run-time choice: both paths in one process, any numba cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from mpiec.kernels import gf256
from mpiec.kernels.codes import make_code
from numba.typed import List


def _everything(seed: int = 3) -> list[np.ndarray]:
    """Every GF entry point on the same inputs: what each path must reproduce byte for byte."""
    rng = np.random.default_rng(seed)
    n = 4096 * 3 + 77  # GFNI body, 32-byte step and portable tail
    src, other = (rng.integers(0, 256, n, dtype=np.uint8) for _ in range(2))
    out = []
    for c in (0x8E, 1, 0):
        for fn, args in ((gf256.gf_mac, (src,)), (gf256.gf_mac2, (src, other))):
            dst = rng.integers(0, 256, n, dtype=np.uint8)
            fn(dst, *args, c)
            out.append(dst)
        dst = rng.integers(0, 256, n, dtype=np.uint8)
        gf256.mac_at(dst, 5, src, 9, n - 20, c)
        out.append(dst)
    parity = rng.integers(0, 256, (300, 96), dtype=np.uint8)
    rows = rng.permutation(300)[:120].astype(np.int64)
    old, new = (rng.integers(0, 256, (120, 96), dtype=np.uint8) for _ in range(2))
    gf256.gf_mac_rows(parity, rows, old, 0x35)
    gf256.gf_mac_rows2(parity, rows, old, new, 0xC3)
    out.append(parity)
    coef = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    srcs = [rng.integers(0, 256, n, dtype=np.uint8) for _ in range(4)]
    fused = [np.empty(n, np.uint8) for _ in range(3)]
    gf256.combine(coef, srcs, fused)
    blocked = [np.empty(n, np.uint8) for _ in range(3)]
    gf256.gf_combine(coef, List(srcs), List(blocked))
    members = [s[: n // 77 * 77].reshape(-1, 77) for s in srcs]
    picked = [np.empty((50, 77), np.uint8) for _ in range(3)]
    gf256.gf_combine_rows(coef, List(members), rows[:50] % members[0].shape[0], List(picked))
    out += fused + blocked + picked
    rs = make_code("rs", 4, 2)
    data = [rng.integers(0, 256, (64, 68), dtype=np.uint8) for _ in range(4)]
    par = rs.encode(data)
    rs.update(par, 2, np.arange(10, dtype=np.int64), data[2][:10], rng.integers(0, 256, (10, 68), np.uint8))
    out += par + rs.decode([None, data[1], None, data[3]], par, [0, 2])
    return out


def _reference(seed: int = 3) -> list[np.ndarray]:
    """The same through the multiplication table alone."""
    mul = gf256.GF_MUL
    rng = np.random.default_rng(seed)
    n = 4096 * 3 + 77
    src, other = (rng.integers(0, 256, n, dtype=np.uint8) for _ in range(2))
    out = []
    for c in (0x8E, 1, 0):
        out.append(rng.integers(0, 256, n, dtype=np.uint8) ^ mul[c][src])
        out.append(rng.integers(0, 256, n, dtype=np.uint8) ^ mul[c][src ^ other])
        dst = rng.integers(0, 256, n, dtype=np.uint8)
        dst[5:n - 15] ^= mul[c][src[9:n - 11]]
        out.append(dst)
    parity = rng.integers(0, 256, (300, 96), dtype=np.uint8)
    rows = rng.permutation(300)[:120].astype(np.int64)
    old, new = (rng.integers(0, 256, (120, 96), dtype=np.uint8) for _ in range(2))
    parity[rows] ^= mul[0x35][old]
    parity[rows] ^= mul[0xC3][old ^ new]
    out.append(parity)
    coef = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    srcs = [rng.integers(0, 256, n, dtype=np.uint8) for _ in range(4)]
    comb = [np.bitwise_xor.reduce([mul[coef[i, j]][srcs[j]] for j in range(4)]) for i in range(3)]
    members = [s[: n // 77 * 77].reshape(-1, 77) for s in srcs]
    picked = [c[: n // 77 * 77].reshape(-1, 77)[rows[:50] % members[0].shape[0]] for c in comb]
    return out + comb + comb + picked


def test_every_kernel_gives_the_table_bytes_on_both_paths_in_one_process(gfni):
    assert gf256.use_gfni(gfni) is gfni and gf256.gfni_active() is gfni
    assert gf256.path_name() == ("GFNI" if gfni else "portable")
    got = _everything()
    want = _reference()
    for a, b in zip(got[: len(want)], want, strict=False):
        assert np.array_equal(a, b)
    gf256.use_gfni(False)
    portable = _everything()
    assert all(np.array_equal(a, b) for a, b in zip(got, portable, strict=True))  # rs too


def test_the_switch_is_read_on_every_call(restore_path):
    assert gf256.use_gfni(None) == (gf256.CPU_HAS_GFNI and not os.environ.get("MPIEC_NO_GFNI"))
    assert gf256.use_gfni(False) is False and gf256.path_name() == "portable"
    if not gf256.CPU_HAS_GFNI:
        with pytest.raises(ValueError, match="no GFNI"):
            gf256.use_gfni(True)
        assert not gf256.gfni_active()


def _python(code: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "MPIEC_NO_GFNI"}
    full.update(env)
    proc = subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


@pytest.mark.slow  # three processes compile the kernels into a cold cache: not the fast tier
def test_a_warm_cache_does_not_keep_the_switch(tmp_path):
    """Issue 10, item 14: the cache built without MPIEC_NO_GFNI serves a run with it, and back.

    The kernels' table alone (--no-mpi --no-checkpoint): the parity pipeline started two ranks
    compiling into the same cold cache from each of the three probes, and the checkpoint paths
    compile kernels the switch does not touch (~45 s of CPU for the test before, on an idle core)."""
    probe = """
        import numpy as np
        from mpiec.kernels import gf256
        from mpiec.benchmarks.kernels_cli import main
        p = np.zeros((8, 64), np.uint8); d = np.full((8, 64), 3, np.uint8)
        gf256.gf_mac_rows(p, np.arange(8), d, 0x8E)
        assert (p == gf256.GF_MUL[0x8E][3]).all()
        print(gf256.gfni_active(), gf256.HAVE_GFNI)
        main(["--quick", "--sizes", "4KiB", "--repeat", "1", "--no-mpi", "--no-checkpoint"])
    """
    cache = str(tmp_path / "numba-cache")
    first = _python(probe, NUMBA_CACHE_DIR=cache).splitlines()  # builds the cache
    assert first[0] == f"{gf256.CPU_HAS_GFNI} {gf256.CPU_HAS_GFNI}"
    assert any(f.endswith(".nbi") for _, _, fs in os.walk(cache) for f in fs)
    off = _python(probe, NUMBA_CACHE_DIR=cache, MPIEC_NO_GFNI="1").splitlines()
    assert off[0] == "False False"
    assert "GF multiply path: portable" in off[1] and "gf mac [portable]" in "\n".join(off)
    again = _python(probe, NUMBA_CACHE_DIR=cache).splitlines()
    assert again[0] == first[0] and again[1].split(";")[1] == first[1].split(";")[1]


def test_the_gfni_code_is_compiled_into_the_same_kernel(tmp_path):
    """Compiled (not run) for a GFNI CPU: one kernel holds both paths, the argument picks one."""
    code = """
        from numba import types
        from mpiec.kernels import gf256
        gf256._CPU_GFNI = True  # as on a GFNI CPU; compile only, never run here
        u8 = types.Array(types.uint8, 1, "C")
        sig = (u8, types.intp, u8, types.intp, types.intp, types.uint8, types.boolean)
        gf256._mac_at.compile(sig)
        asm = gf256._mac_at.inspect_asm(sig)
        print("vgf2p8affineqb" in asm, len(gf256._mac_at.signatures))
    """
    out = _python(code, NUMBA_CACHE_DIR=str(tmp_path / "c"), NUMBA_CPU_NAME="icelake-server",
                  NUMBA_CPU_FEATURES="+gfni,+avx,+avx2,+sse4.2,+ssse3,+sse4.1,+popcnt")
    assert out == "True 1"
