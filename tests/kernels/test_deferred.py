"""``mpiec.kernels.defer``: the command line validates strategies without importing numba.

Each test runs in a fresh interpreter: the deferral only applies to modules not yet imported,
and the test process has imported numba long before.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_VALIDATE = """
import sys
from mpiec.cli import defer_kernels, keep_mpi_uninitialised
keep_mpi_uninitialised(); defer_kernels()
from mpiec.launch.resolve import load_config
for name in sys.argv[1:]:
    load_config(preset="tiny", strategy=name)
print("numba" in sys.modules)
"""


def _python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("names", [("ckpt", "cnr", "cpr", "log")])
def test_validating_checkpointing_strategies_does_not_import_numba(names):
    assert _python(_VALIDATE, *names) == "False"


def test_a_deferred_module_loads_on_first_use_and_its_kernels_run():
    code = """
import sys
import numpy as np
from mpiec import kernels
kernels.defer()
from mpiec.kernels import tracking
before = "numba" in sys.modules
bits = tracking.bitset_new(10)
tracking.bitset_set(bits, np.array([1, 7], dtype=np.int64))
print(before, "numba" in sys.modules, int(tracking.bitset_count(bits)))
"""
    assert _python(code) == "False True 2"
