"""The result file of a run that the launcher ended with nobody left to write it.

Owns ``write_stopped_result``: the launcher ends a job when a rank asks it to
(``launcher.write_stop_request``: a recovery by ``MPI_Comm_spawn`` that a death cut) or when the
monitor died while it watched such a recovery (``launcher.monitor_died_in_spawn``: Open MPI can
segfault every survivor of a death inside a spawn, the monitor too). The monitor normally writes
the result (lost) before it asks; when it could not (it crashed first, or the write failed), the
launcher writes a minimal one so such a run always ends as a lost run with its reason on record.

The file says what it is: summary ``written_by = "launcher"`` and ``abort_reason`` starting with
"written by the launcher", no timeline, evaluation or checksum; the kills its victims noted
(their kill notes beside the result) are its ``kill`` events, so ``kills_fired`` counts them.

Invariants: never written over an existing file (``ResultWriter`` publishes with a hard link);
never for a run in which a rank died of a Python exception (its crash note makes it a crash,
judged as such by ``launcher._judge``, not a loss); never raises (the run then ends as a crash
without a result file, as before, and the line says why).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpiec.config import Config

WRITTEN_BY = "launcher"


def kill_notes(path: Path) -> list[dict[str, Any]]:
    """The victims' kill notes of any run writing ``path`` (the launcher does not know the run's
    token: the name is claimed, so these are this run's), oldest first; unreadable ones left out."""
    pattern = re.compile(rf"\.{re.escape(path.stem)}\.[0-9a-f]{{12}}\.kills")
    notes: list[dict[str, Any]] = []
    try:
        dirs = [d for d in path.parent.iterdir() if pattern.fullmatch(d.name) and d.is_dir()]
    except OSError:
        return []
    for d in dirs:
        for f in sorted(d.glob("*.json")):
            try:
                note = json.loads(f.read_text())
                notes.append({"step": int(note["step"]), "time": float(note["time"]),
                              "rank": int(note["rank"]), "role": str(note["role"]),
                              "index": int(note["index"]), "plan": str(note["plan"])})
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return sorted(notes, key=lambda n: n["time"])


def write_stopped_result(cfg: Config, path: Path, reason: str) -> str:
    """Write the minimal lost result of a run the launcher ended for ``reason`` at ``path``; ""
    when written, else one line saying why not (the caller prints it)."""
    from mpiec.errors import ResultFileError
    from mpiec.results import ResultWriter

    mode = "emulated" if cfg.failures.mode == "emulated" else "ulfm"  # a spawn runs under ULFM only
    why = f"written by the launcher (the monitor wrote no result): {reason}"
    try:
        writer = ResultWriter(path, {"config": cfg.to_json(), "strategy": cfg.strategy.name,
                                     "seed": cfg.training.seed, "preset": cfg.preset,
                                     "failure_mode": mode, "ulfm": mode == "ulfm", "variant": cfg.variant})
        kills = kill_notes(path)
        for k in kills:
            writer.add_event(k["step"], k["time"], "kill", k["rank"], k["role"], k["index"], k["plan"])
        last = max((k["step"] for k in kills), default=0)
        writer.add_event(last, max((k["time"] for k in kills), default=0.0), "abort", detail=why[:250])
        writer.close({"lost": True, "abort_reason": why, "written_by": WRITTEN_BY, "kills_fired": len(kills)})
    except (OSError, ResultFileError, ValueError) as exc:
        return f"the launcher could not write the lost run's result file {path}: {exc}"
    return ""


__all__ = ["write_stopped_result", "kill_notes", "WRITTEN_BY"]
