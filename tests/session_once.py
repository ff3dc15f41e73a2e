"""Session results made once for every pytest-xdist worker of a session (``once``).

With ``pytest -n 2`` each worker is a process of its own, so a session fixture runs once per
worker: the failure-free references (tests/runs/conftest.py) and the smoke reproduction
(tests/conftest.py) would be launched twice. ``once`` makes a value under a file lock in the folder
the workers share (their basetemps are its children) and pickles it there; the other workers wait on
the lock and load it. Without xdist the folder is the session's basetemp: the same, one process.

Invariants: a value is made at most once per session and key; a ``make`` that raises stores
nothing (the next caller tries again, and fails the same way with its own message); the lock is
``fcntl.flock`` (released by the kernel if a worker dies holding it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def shared_root(tmp_path_factory: Any) -> Path:
    """The session's folder every worker sees (a worker's basetemp is ``ROOT/popen-gwN``)."""
    base = Path(tmp_path_factory.getbasetemp())
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "once"
    root.mkdir(exist_ok=True)
    return root


def _name(key: Any) -> str:
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def once(root: Path, key: Any, make: Callable[[], T]) -> T:
    """``make()`` once per session for ``key`` (JSON-able) across workers; the others load it."""
    name = _name(key)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"{name}.pickle"
        if done.exists():
            return pickle.loads(done.read_bytes())
        value = make()
        tmp = root / f"{name}.pickle.tmp"
        tmp.write_bytes(pickle.dumps(value))
        tmp.rename(done)
        (root / f"{name}.key").write_text(json.dumps(key))
        return value


def made(root: Path, want: Callable[[Any], bool]) -> Iterator[tuple[Any, Any]]:
    """(key, value) of every value made so far in this session, by any worker, whose key ``want``
    accepts (only those are unpickled)."""
    for k in sorted(root.glob("*.key")):
        try:
            key = json.loads(k.read_text())
            if want(key):
                yield key, pickle.loads(k.with_suffix(".pickle").read_bytes())
        except (OSError, ValueError, pickle.UnpicklingError):
            continue
