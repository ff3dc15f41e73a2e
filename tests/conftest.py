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

``MPIEC_TEST_CPU=FILE`` (opt-in): each test's wall time and CPU time (its own and its waited-for
children's: the ranks a launch started) appended to FILE as ``nodeid<TAB>wall_s<TAB>cpu_s``, to see
where the suite's CPU goes (``--durations`` shows wall time only).

``smoke_reproduction``: ``mpiec reproduce all --smoke`` run once per session (real tiny runs, about
eight), for the command's end-to-end test (tests/runs/test_reproduce_smoke.py) and the papers'
smoke tests (tests/reproduce), which read its experiments back through ``run_experiment(...,
reuse=True)`` instead of running the same experiments a second time.
"""

from __future__ import annotations

import compileall
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import astuple, dataclass
from pathlib import Path

import pytest
from session_once import once, shared_root

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


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    log = os.environ.get("MPIEC_TEST_CPU", "")
    if not log:
        return (yield)
    t0, c0 = time.monotonic(), _cpu_s()
    try:
        return (yield)
    finally:
        with open(log, "a") as f:
            f.write(f"{item.nodeid}\t{time.monotonic() - t0:.2f}\t{_cpu_s() - c0:.2f}\n")


@pytest.fixture(scope="session")
def smoke_reproduction(tmp_path_factory) -> SmokeReproduction:
    """Made once for every pytest-xdist worker (``session_once``; pickled as a tuple: a class of a
    conftest module is not importable by name in another process)."""
    fields = once(shared_root(tmp_path_factory), ["smoke-reproduction"],
                  lambda: astuple(_smoke_reproduction(tmp_path_factory)))
    return SmokeReproduction(*fields)


def _smoke_reproduction(tmp_path_factory) -> SmokeReproduction:
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
