"""Loading sets of result files.

Owns how paths and directories are turned into a list of runs. Invariants:
directories are searched recursively for ``*.h5`` (hidden temporary files of
an unfinished writer never match); each file is read once; the order is
deterministic (creation time, then path); a bad file raises
``ResultFileError`` naming it, or with ``skip_bad=True`` is reported on stderr
and skipped — never skipped silently; a crashed run's file is left out with a line too.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from mpiec.errors import ResultFileError
from mpiec.results import RunResult, read_result

__all__ = ["bench_manifest", "find_result_files", "load_results", "repeat_of"]

_REPEAT = re.compile(r"-r(\d+)$")


def repeat_of(r: RunResult) -> int:
    """The repeat (round) of a run of ``mpiec bench --repeat``: the ``-r<i>`` of its output name (0 for
    a run that is not a repeat)."""
    output = r.config.get("output")
    name = str(output.get("name") or "") if isinstance(output, dict) else ""
    m = _REPEAT.search(name or r.name)
    return int(m.group(1)) if m else 0


#: bench.json's per-run keys that the analysis reads, and the types it needs them to have
_RUN_KEYS: dict[str, tuple[type, ...]] = {"path": (str, type(None)), "repeat": (int,),
                                          "order": (int, type(None)), "kill_shift_steps": (int, float)}


def bench_manifest(directory: str | Path) -> dict:
    """``bench.json`` of a bench directory ({} where there is none or it cannot be read).

    One that is there but malformed (not JSON, not an object, ``runs`` not a list of objects, or a
    run's ``path``/``repeat``/``order``/``kill_shift_steps`` of the wrong type) raises
    ``ResultFileError`` naming the file and the problem: a row built from it would be wrong."""
    path = Path(directory) / "bench.json"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):  # none, or unreadable (a UnicodeDecodeError is a ValueError)
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ResultFileError(f"{path}: malformed (not JSON: {exc})") from None
    if not isinstance(doc, dict):
        raise ResultFileError(f"{path}: malformed (a JSON {type(doc).__name__}, not an object)")
    runs = doc.get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ResultFileError(f"{path}: malformed ('runs' is not a list of objects)")
    for i, r in enumerate(runs):
        for key, types in _RUN_KEYS.items():
            value = r.get(key)
            if key in r and (isinstance(value, bool) or not isinstance(value, types)):
                raise ResultFileError(f"{path}: malformed (run {i}'s {key!r} is {value!r})")
    return doc


def find_result_files(paths_or_dirs: str | Path | Iterable[str | Path]) -> list[Path]:
    """Files named directly, plus ``*.h5`` found recursively under directories.

    Raises ``ResultFileError`` for a path that does not exist.
    """
    if isinstance(paths_or_dirs, str | Path):
        paths_or_dirs = [paths_or_dirs]
    found: list[Path] = []
    seen: set[Path] = set()
    for item in paths_or_dirs:
        p = Path(item)
        if p.is_dir():
            candidates = sorted(q for q in p.rglob("*.h5") if q.is_file())
        elif p.exists():
            candidates = [p]
        else:
            raise ResultFileError(f"result path {p}: does not exist")
        for q in candidates:
            key = q.resolve()
            if key not in seen:
                seen.add(key)
                found.append(q)
    return found


def load_results(
    paths_or_dirs: str | Path | Iterable[str | Path],
    *,
    skip_bad: bool = False,
    stream: TextIO | None = None,
    keep_crashed: bool = False,
) -> list[RunResult]:
    """Read every result file, sorted by ``created`` then path.

    ``skip_bad=True`` reports each unreadable file as one line on ``stream``
    (stderr by default) instead of raising. The file of a run that crashed (summary ``crashed``: a
    rank died of an exception) is left out with one line on ``stream``, unless ``keep_crashed``:
    it measured a bug, not a strategy. An empty list is returned when no
    file is found (callers decide whether that is an error).
    """
    out: list[RunResult] = []
    for path in find_result_files(paths_or_dirs):
        try:
            result = read_result(path)
        except ResultFileError as exc:
            if not skip_bad:
                raise
            print(f"mpiec: warning: skipping {exc}", file=stream or sys.stderr)
            continue
        if result.summary.get("crashed") and not keep_crashed:
            why = result.summary.get("crash_reason", "")
            print(f"mpiec: warning: skipping {path}: the run crashed ({why}); it measured nothing",
                  file=stream or sys.stderr)
            continue
        out.append(result)
    out.sort(key=lambda r: (r.created, str(r.path)))
    return out
