"""Crash notes: a rank that dies of an exception says so, so the run is reported as a crash.

A rank that raises (a plug-in hook, a factory that returned no agent, a bug) prints its traceback
and dies by ``SIGKILL`` like a killed rank (``faults.die_now``: a plain exit could leave its peers
waiting). To its peers that death looks like any failure, and without a word the monitor would
plan a recovery for it ("no spare left for server 1") and end the run *lost*. So before dying the
rank leaves a note beside the result file (``.STEM.<run>.crash/<pid>.json``: its rank, slot and
the exception's one-line text). Owns the notes' place, format and wording. Invariants:

* a note is written before the process dies (atomically: never read half-written), so whoever
  learns of the death can find it: the monitor's recovery plan aborts on any note ("crashed"),
  the result file then says ``crashed`` (not ``lost``), the launcher exits 3 naming the rank (also
  when no result file was written), and survivors that lost the monitor say it crashed instead of
  blaming a network partition;
* a failure's consequences are not crashes: a ``PeerFailure`` and the errors that only follow
  one (``CONSEQUENCES``) write no note;
* writing a note never raises: a note that cannot be written leaves the old behaviour.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

#: how much of an exception's message a note keeps (the traceback itself is on the console)
MESSAGE_CHARS = 300


def crash_notes_dir(out_path: Path, run_id: str) -> Path:
    """Where the ranks of one run leave their crash notes (the run's token keeps runs apart)."""
    return out_path.parent / f".{out_path.stem}.{run_id or 'start'}.crash"


def exception_text(exc: BaseException) -> str:
    """``Type: message`` on one line, at most ``MESSAGE_CHARS`` characters of the message."""
    message = " ".join(str(exc).split())
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def write_crash_note(out_path: Path, run_id: str, rank: int, slot: str, exc: BaseException,
                     step: int = -1) -> None:
    """Leave this process's crash note (``rank``: its rank in the original world; ``slot`` as
    ``server:0``; ``step``: the step it was in, -1 unknown). Never raises."""
    with contextlib.suppress(Exception):
        d = crash_notes_dir(out_path, run_id)
        d.mkdir(parents=True, exist_ok=True)
        from mpiec.errors import MpiecError

        # reported: an error the rank already printed as its one line (a result file it cannot write,
        # bad input): no traceback to point at, and the launcher must not repeat the line
        rec = {"rank": rank, "slot": slot, "pid": os.getpid(), "step": step, "error": exception_text(exc),
               "reported": isinstance(exc, MpiecError)}
        tmp = d / f".{os.getpid()}.tmp"
        tmp.write_text(json.dumps(rec))
        tmp.replace(d / f"{os.getpid()}.json")  # atomic: a reader never sees half a note


def read_crash_notes(directory: Path) -> list[dict[str, Any]]:
    """The notes in ``directory`` (none if it does not exist), lowest rank first; unreadable ones
    are left out (a note is a courtesy: its absence only loses the wording)."""
    notes = []
    with contextlib.suppress(OSError):
        for f in sorted(directory.glob("*.json")):
            try:
                rec = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and "error" in rec:
                notes.append(rec)
    return sorted(notes, key=lambda n: (int(n.get("rank", -1)), str(n.get("slot", ""))))


def run_crash_notes(out_path: Path, run_id: str) -> list[dict[str, Any]]:
    """The crash notes of run ``run_id`` writing ``out_path``."""
    return read_crash_notes(crash_notes_dir(out_path, run_id))


def notes_beside(path: Path) -> list[dict[str, Any]]:
    """Every crash note of any run of ``path``'s name (the launcher: it does not know the token)."""
    notes: list[dict[str, Any]] = []
    for d in _note_dirs(path):
        notes += read_crash_notes(d)
    return notes


def remove_crash_notes(path: Path) -> None:
    """Remove the crash-note folders of ``path``'s name (after the run: they served their end)."""
    for d in _note_dirs(path):
        shutil.rmtree(d, ignore_errors=True)


def _note_dirs(path: Path) -> list[Path]:
    pattern = re.compile(rf"\.{re.escape(path.stem)}\.(?:[0-9a-f]{{12}}|start)\.crash")
    with contextlib.suppress(OSError):
        return [d for d in path.parent.iterdir()
                if pattern.fullmatch(d.name) and d.is_dir() and not d.is_symlink()]
    return []


def crash_line(notes: list[dict[str, Any]]) -> str:
    """One line naming the crashed rank(s) and the first error: ``rank 3 (server:0) crashed:
    OverflowError: ...`` (``; 2 other ranks crashed too``)."""
    if not notes:
        return ""
    first = notes[0]
    where = f"rank {first.get('rank', '?')} ({first.get('slot', '?')})"
    if isinstance(first.get("step"), int) and first["step"] >= 0:
        where += f" at step {first['step']}"
    more = f"; {len(notes) - 1} other rank(s) crashed too" if len(notes) > 1 else ""
    return f"{where} died of an exception: {first['error']}{more}"


__all__ = ["crash_line", "crash_notes_dir", "exception_text", "notes_beside", "read_crash_notes",
           "remove_crash_notes", "run_crash_notes", "write_crash_note"]
