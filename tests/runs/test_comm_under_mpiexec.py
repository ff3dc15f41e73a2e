"""Runs tests/runs/ulfm_inner.py on 4 real ranks with ULFM (pytest-mpi inside mpiexec)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpiec.launch.launcher import find_mpiexec, mpi_flavour

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(120)]


def test_comm_under_mpiexec(tmp_path):
    exe = find_mpiexec()
    if mpi_flavour(exe) != "openmpi":
        pytest.skip("the ULFM part needs Open MPI")
    inner = Path(__file__).with_name("ulfm_inner.py")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [exe, "--with-ft", "ulfm", "--oversubscribe", "-n", "4", "--output", f"dir={tmp_path}",
           sys.executable, "-P", "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider", str(inner)]
    subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=100, start_new_session=True)
    outputs = {p.parent.name: p.read_text() for p in tmp_path.rglob("stdout")}
    rank0 = next((text for name, text in outputs.items() if name.endswith("0")), "")
    assert "3 passed" in rank0, outputs
