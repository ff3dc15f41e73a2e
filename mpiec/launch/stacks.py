"""Where every rank was when its run hit the time limit: a hang's one look from outside.

Owns the ranks' stack dump. Under ``mpiec run`` each rank registers ``faulthandler`` for
``SIGUSR1`` first thing (``arm_from_env``), into a file of its own in the folder the launcher
names in ``MPIEC_STACKS_DIR`` (its temporary folder: ``RANK-PID.txt``, a process spawned into the
run ``spawned-PID.txt``); a worker started otherwise (``srun``) arms nothing. When a run
exceeds its time limit, the launcher sends ``SIGUSR1`` to mpiexec, which forwards it to every rank
(Open MPI's launcher forwards ``SIGUSR1``), waits ``DUMP_WAIT_S``, ends the job and prints each
rank's file (``report``): who waits on what, instead of a bare "exceeded its time limit".

Invariants: the dump is ``faulthandler``'s (C level, async-signal-safe): it shows every thread's
Python stack while the main thread waits inside MPI without the GIL, and never runs Python code
in the rank; a rank that cannot open its file (a host without the launcher's folder) dumps to its
stderr, which mpiexec relays; the report is bounded (``MAX_RANKS`` files, ``MAX_LINES`` lines each).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import IO

ENV = "MPIEC_STACKS_DIR"
SIGNAL = signal.SIGUSR1
DUMP_WAIT_S = 2.0  # the ranks' dumps: a signal through mpiexec, a few KB each into a local file
MAX_RANKS = 16  # a large job's report names the rest (their files went with the temporary folder)
MAX_LINES = 40  # per rank: the innermost frames of each thread come first

_file: IO[str] | None = None  # kept open: faulthandler writes to its descriptor from the handler


def arm_from_env(spawned: bool) -> None:
    """Dump every thread's stack on ``SIGUSR1`` into ``$MPIEC_STACKS_DIR/NAME.txt`` (this rank's
    name from the launcher's environment; stderr if the file cannot be made); nothing if unset."""
    global _file
    folder = os.environ.get(ENV, "")
    if not folder:
        return
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", ""))
    name = f"spawned-{os.getpid()}" if spawned else f"{int(rank):05d}-{os.getpid()}" if rank.isdigit() \
        else f"pid-{os.getpid()}"
    target: IO[str] = sys.stderr
    try:
        _file = target = open(Path(folder) / f"{name}.txt", "w")  # noqa: SIM115 - open for the process's life
    except OSError:
        pass
    faulthandler.register(SIGNAL, file=target, all_threads=True)


def report(folder: Path) -> list[str]:
    """The lines that show where each rank was, from the dumps in ``folder`` ([] if none)."""
    try:
        files = sorted(folder.glob("*.txt"))
    except OSError:
        return []
    dumps = []
    for f in files:
        try:
            text = f.read_text(errors="replace").rstrip()
        except OSError:
            continue
        if text:  # the import machinery's frames say nothing a reader needs
            dumps.append((f.stem, [line for line in text.splitlines() if "<frozen importlib" not in line]))
    if not dumps:
        return []
    out = [f"[mpiec] where each rank was at the time limit ({len(dumps)} dumped, most recent call first):"]
    for name, lines in dumps[:MAX_RANKS]:
        rank, _, pid = name.rpartition("-")
        out.append(f"--- {'rank ' + str(int(rank)) if rank.isdigit() else rank} (pid {pid})")
        out += lines[:MAX_LINES] + ([f"    ... {len(lines) - MAX_LINES} more lines"] if len(lines) > MAX_LINES
                                    else [])
    if len(dumps) > MAX_RANKS:
        out.append(f"--- ... and {len(dumps) - MAX_RANKS} more ranks")
    return out


__all__ = ["arm_from_env", "report", "ENV", "SIGNAL", "DUMP_WAIT_S"]
