"""A rank's BLAS settings: one thread, the AVX-512 GEMM kernels where OpenBLAS misses them, and
whatever the user set kept."""

from __future__ import annotations

from mpiec.blas import configure, cpu_info, openblas_coretype

FLAGS = {"fpu", "avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
ZEN5 = f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nflags\t\t: {' '.join(sorted(FLAGS))}\n"


def test_cpu_info_reads_the_first_cpu(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(ZEN5 + "processor\t: 1\nvendor_id\t: Other\n")
    assert cpu_info(str(f)) == ("AuthenticAMD", 26, FLAGS)
    assert cpu_info(str(tmp_path / "missing")) == ("", -1, set())


def test_only_cpus_openblas_does_not_recognise_get_skylakex():
    avx512 = {"avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
    assert openblas_coretype("AuthenticAMD", 26, avx512) == "SkylakeX"
    assert openblas_coretype("AuthenticAMD", 26, {"avx2"}) == ""  # no AVX-512: OpenBLAS's choice
    assert openblas_coretype("AuthenticAMD", 25, avx512) == ""  # Zen 4: recognised
    assert openblas_coretype("GenuineIntel", 6, avx512) == ""


def test_configure_keeps_what_the_user_set(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(ZEN5)
    env = {"OMP_NUM_THREADS": "4"}
    chosen = configure(env, str(f))
    assert env["OMP_NUM_THREADS"] == "4" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert env["OPENBLAS_CORETYPE"] == "SkylakeX" and "OMP_NUM_THREADS" not in chosen
    env = {"OPENBLAS_CORETYPE": "Haswell"}
    configure(env, str(f))
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
