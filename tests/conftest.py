"""Fixtures shared across test folders.

``smoke_reproduction``: ``mpiec reproduce all --smoke`` run once per session (real tiny runs, about
eight), for the command's end-to-end test (tests/runs/test_reproduce_smoke.py) and the papers'
smoke tests (tests/reproduce), which read its experiments back through ``run_experiment(...,
reuse=True)`` instead of running the same experiments a second time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

#: the page given to --page before the run: an earlier reproduction page with a hand-written section
OLD_PAGE_BODY = "old tables\n\n## Readings\n\nkept by hand\n"


@dataclass(frozen=True)
class SmokeReproduction:
    out: Path  # --out: reproduce.json, the pages, PAPER/EXPERIMENT/ folders
    page: Path  # --page
    code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def smoke_reproduction(tmp_path_factory) -> SmokeReproduction:
    from mpiec.reproduce.page import MARKER, TITLE

    d = tmp_path_factory.mktemp("reproduce-smoke")
    page = d / "page.md"
    page.write_text(f"{TITLE}\n\n{MARKER}\n\n{OLD_PAGE_BODY}")
    cmd = [sys.executable, "-P", "-m", "mpiec", "reproduce", "all", "--smoke", "--page", str(page),
           "--out", str(d / "r")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=560)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the launcher then ends its ranks
        stdout, stderr = proc.communicate(timeout=30)
        raise AssertionError(f"mpiec reproduce all --smoke did not end within 560 s:\n{stdout}{stderr}") \
            from None
    return SmokeReproduction(d / "r", page, proc.returncode, stdout, stderr)
