"""The whole tree is ruff-clean (rules in pyproject.toml)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_ruff_clean():
    # through the running interpreter: pytest started by its full path (venv not on PATH) works too
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed for this Python (it is in the test extra)")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
