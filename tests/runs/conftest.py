"""Fixtures shared by the tests that launch real runs.

``failure_free``: the failure-free ``none`` run the MPI tests compare a recovered run's
``param_checksum`` with, launched once per session for each set of arguments that can change what it
trains, instead of once per test module (it was eight identical ``tiny`` runs, three kill-matrix
ones and the contract's). ``layout.servers`` and ``layout.spares`` are left out of the key: the
checksum hashes the model in global row order, so it does not depend on the number of servers
(docs/results-schema.md, ``param_checksum``), and spares train nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from run_helpers import mpiec

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
def failure_free(tmp_path_factory) -> Callable[..., dict[str, Any]]:
    """``failure_free(*args)``: the summary of ``mpiec run *args --strategy none`` (no kill), run once
    per session for equal arguments (layout sets aside)."""
    cache: dict[tuple[str, ...], dict[str, Any]] = {}

    def get(*args: str) -> dict[str, Any]:
        key = _key(args)
        if key not in cache:
            run = mpiec(["run", *args, "--strategy", "none"], out=tmp_path_factory.mktemp("failure-free"))
            assert run.code == 0, run.stdout + run.stderr
            cache[key] = run.result().summary
        return cache[key]

    return get
