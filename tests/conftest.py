"""Fixtures shared across test folders.

``compiled_sources`` (every session, automatically): the repository's Python sources byte-compiled
into their ``__pycache__`` once, so the thousands of processes the suite starts (ranks, CLI calls)
load bytecode instead of compiling ~60 modules each: with ``PYTHONDONTWRITEBYTECODE`` set (as in
the CI image) no import writes it, and every rank compiled mpiec from source (~5 % of a launch's CPU).
Python checks each ``.pyc`` against its source's mtime, so an edited module is never served stale.

``warm_kernel_cache`` (every session that selects an ``mpirun`` test, automatically): the kernels
every rank warms up (``mpiec.worker.warm_up``) compiled once into numba's cache in this process
before the first launch; on a fresh clone the first run's ranks each compiled them at once (4 ranks
x the compile on 2 cores: past a run's 90 s limit at load ~50). A warm cache makes it a ~0.3 s load.

``smoke_reproduction``: ``mpiec reproduce all --smoke`` run once per session (real tiny runs, about
eight), for the command's end-to-end test (tests/runs/test_reproduce_smoke.py) and the papers'
smoke tests (tests/reproduce), which read its experiments back through ``run_experiment(...,
reuse=True)`` instead of running the same experiments a second time.
"""

from __future__ import annotations

import compileall
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

#: the folders of the repository whose modules the suite's processes import (the package's three
#: roots and the example plug-ins installed beside it)
SOURCE_DIRS = ("mpiec", "kernels", "analysis", "examples")
ROOT = Path(__file__).resolve().parent.parent

#: the page given to --page before the run: an earlier reproduction page with a hand-written section
OLD_PAGE_BODY = "old tables\n\n## Readings\n\nkept by hand\n"


@dataclass(frozen=True)
class SmokeReproduction:
    out: Path  # --out: reproduce.json, the pages, PAPER/EXPERIMENT/ folders
    page: Path  # --page
    code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session", autouse=True)
def compiled_sources() -> None:
    """Byte-compile the repository's modules (a no-op for those already compiled and unchanged).
    Atomic per file (``py_compile`` writes and renames), so parallel sessions (pytest-xdist) may race."""
    for name in SOURCE_DIRS:
        if (ROOT / name).is_dir():
            compileall.compile_dir(ROOT / name, quiet=2)


@pytest.fixture(scope="session", autouse=True)
def warm_kernel_cache(request: pytest.FixtureRequest) -> None:
    """The ranks' kernels in numba's cache before the session's first launch (none without one)."""
    if any(item.get_closest_marker("mpirun") for item in request.session.items):
        from mpiec.worker import warm_up

        warm_up()


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
