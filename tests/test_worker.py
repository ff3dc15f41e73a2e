"""The rank entry point's start-up (``mpiec.worker``): what a rank loads before its clock starts."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import numba
import numpy as np
from mpiec.worker import load_numba_without_blas
load_numba_without_blas()
assert numba.njit(lambda a: a.sum() + 1)(np.ones(3)) == 4
import numba.np.arraymath as arraymath
print("scipy.linalg" in sys.modules, arraymath._HAVE_BLAS)
import scipy.linalg
print(scipy.linalg.cython_blas.__name__)
"""


def test_a_rank_loads_its_kernels_without_scipy_linalg_and_can_still_import_it():
    """numba's BLAS probe (``import scipy.linalg``, ~0.2 s of CPU a rank) is answered "none" before
    any kernel loads; numba compiles array code all the same (a fresh one: no kernel cache needed,
    the real kernels load in every MPI run), and scipy.linalg imports normally afterwards."""
    proc = subprocess.run([sys.executable, "-P", "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "scipy.linalg.cython_blas"]
