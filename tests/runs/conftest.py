"""Fixtures shared by the tests that launch real runs.

``failure_free``: the failure-free ``none`` run the MPI tests compare a recovered run's
``param_checksum`` with, launched once per session for each set of arguments that can change what it
trains, instead of once per test module (it was eight identical ``tiny`` runs, three kill-matrix
ones and the contract's). ``layout.servers`` and ``layout.spares`` are left out of the key: the
checksum hashes the model in global row order, so it does not depend on the number of servers
(docs/results-schema.md, ``param_checksum``), and spares train nothing.

``failure_free_run``: the whole run (its result file, its output), for the tests that check more
than its summary; test_run's complete-result test reads the plain ``tiny`` reference that way
instead of launching the same run again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from run_helpers import Run, mpiec
from session_once import made, once, shared_root

_LAYOUT_ONLY = ("layout.servers=", "layout.spares=")


def _key(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` without the ``--set`` pairs that only change the layout."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--set" and i + 1 < len(args) and args[i + 1].startswith(_LAYOUT_ONLY):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return tuple(out)


@pytest.fixture(scope="session")
def failure_free_run(tmp_path_factory) -> Callable[..., Run]:
    """``failure_free_run(*args)``: ``mpiec run *args`` with the default strategy (``none``, checked),
    no kill, run once per session for equal arguments (once for all pytest-xdist workers:
    ``session_once``); ``layout_free=True``: any earlier such run whose arguments differ only in the
    layout (for its checksum)."""
    root = shared_root(tmp_path_factory)

    def launch(args: tuple[str, ...]) -> Run:
        assert "--strategy" not in args, "the reference is the default strategy's (none)"
        run = mpiec(["run", *args], out=tmp_path_factory.mktemp("failure-free"))
        assert run.code == 0, run.stdout + run.stderr
        assert run.result().attrs["strategy"] == "none", "the default strategy is no longer none"
        return run

    def get(*args: str, layout_free: bool = False) -> Run:
        if layout_free:
            same = [run for _, run in made(root, lambda key: key[0] == "failure-free"
                                            and _key(tuple(key[1])) == _key(args))]
            if same:
                return same[0]
        return once(root, ["failure-free", list(args)], lambda: launch(args))

    return get


@pytest.fixture(scope="session")
def failure_free(failure_free_run) -> Callable[..., dict[str, Any]]:
    """``failure_free(*args)``: the summary of a failure-free run of ``args``, layout sets aside."""
    return lambda *args: failure_free_run(*args, layout_free=True).result().summary
