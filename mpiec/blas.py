"""A rank's BLAS settings, made before numpy loads OpenBLAS (``configure`` first, then numpy).

Owns two choices, each only where the user's environment leaves it open (a variable already
set is kept):

* **one thread** (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
  ``NUMBA_NUM_THREADS`` = 1): ranks already share the cores, and threaded BLAS under
  oversubscription is several times slower (8.7 ms against 69 ms per laptop step);
* **the AVX-512 GEMM kernels on CPUs OpenBLAS does not recognise** (``OPENBLAS_CORETYPE =
  SkylakeX``): numpy's OpenBLAS (0.3.31, ``DYNAMIC_ARCH``) runs its Haswell (AVX2) kernels on an
  AMD family 26 core (Zen 5), which has AVX-512; its SkylakeX kernels run the laptop model's
  ``forward_backward`` 1.40x faster there (8 interleaved pairs of processes, 512 samples: median
  0.847 against 1.220 ms, ratios 1.37-1.50). Zen 4 (family 25) and Intel's AVX-512 cores are
  recognised by OpenBLAS itself and left alone.

Invariant: every rank of a run on one kind of CPU makes the same choice, so the GEMMs of all
trainers round alike and a run stays bit-for-bit reproducible (the checksum depends on the
GEMM kernel, as it always did on the machine's CPU).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
AVX512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"}  # what OpenBLAS's SkylakeX kernels use


def cpu_info(path: str = "/proc/cpuinfo") -> tuple[str, int, set[str]]:
    """(vendor, family, flags) of the first CPU in ``path``; ("", -1, set()) where unreadable."""
    vendor, family, flags = "", -1, set[str]()
    try:
        text = Path(path).read_text()
    except OSError:
        return vendor, family, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "cpu family" and family < 0:
            family = int(value.strip() or -1)
        elif key == "flags" and not flags:
            flags = set(value.split())
        if vendor and family >= 0 and flags:
            break
    return vendor, family, flags


def openblas_coretype(vendor: str, family: int, flags: set[str]) -> str:
    """The ``OPENBLAS_CORETYPE`` to force on this CPU, or "" to leave OpenBLAS's own choice."""
    if vendor == "AuthenticAMD" and family >= 26 and AVX512 <= flags:
        return "SkylakeX"
    return ""


def configure(environ: MutableMapping[str, str] | None = None,
              cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """Set the module docstring's defaults in ``environ`` (``os.environ``); returns what it set."""
    env = os.environ if environ is None else environ
    chosen = {var: "1" for var in THREAD_VARS if var not in env}
    if "OPENBLAS_CORETYPE" not in env:
        core = openblas_coretype(*cpu_info(cpuinfo))
        if core:
            chosen["OPENBLAS_CORETYPE"] = core
    env.update(chosen)
    return chosen


__all__ = ["configure", "cpu_info", "openblas_coretype"]
