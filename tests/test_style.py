"""The whole tree is ruff-clean (rules in pyproject.toml)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_ruff_clean():
    ruff = shutil.which("ruff") or pytest.fail("ruff is not installed (it is in the test extra)")
    proc = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
