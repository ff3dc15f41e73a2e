"""Helpers for tests that launch real runs through the ``mpiec`` CLI (mpiexec underneath)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, seconds: float, out: Path) -> None:
        self.proc, self.seconds, self.out = proc, seconds, out
        self.code, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    @property
    def files(self) -> list[Path]:
        return sorted(self.out.glob("*.h5"))

    def result(self):
        from mpiec.results import read_result

        assert len(self.files) == 1, f"one result file expected in {self.out}: {self.stdout}{self.stderr}"
        return read_result(self.files[0])


def mpiec(args: list[str], out: Path | None = None, timeout: float = 120) -> Run:
    cmd = [sys.executable, "-P", "-m", "mpiec", *args]
    if out is not None:
        cmd += ["--out", str(out)]
    t0 = time.monotonic()
    popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        stdout, stderr = popen.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(popen.pid, signal.SIGTERM)  # the launcher then kills its ranks
        stdout, stderr = popen.communicate(timeout=30)
        raise AssertionError(f"mpiec {' '.join(args)} did not end within {timeout} s:\n"
                             f"{stdout}{stderr}") from None
    proc = subprocess.CompletedProcess(cmd, popen.returncode, stdout, stderr)
    return Run(proc, time.monotonic() - t0, out or Path("."))


def worker_processes(marker: str) -> list[str]:
    """Command lines of live processes mentioning ``marker`` (a run's output path)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def event_details(result, kind: str) -> list[str]:
    """The details of a result's events of ``kind``, in file order."""
    from mpiec.results import decode

    ev = result.events
    return [decode(d) for k, d in zip(ev["kind"], ev["detail"], strict=True) if decode(k) == kind]


def story(run: Run) -> str:
    """What a run said about its failures and recoveries, and the events it recorded: the message of
    an assertion on a recovery's outcome, so that a rare outcome says which path it took."""
    from mpiec.results import decode

    said = [line for line in run.stdout.splitlines()
            if any(w in line for w in ("recover", "grow", "lost", "fail", "died", "kill"))]
    ev = run.result().events
    rows = zip(ev["step"], ev["kind"], ev["detail"], strict=True)
    events = [f"{int(s)} {decode(k)}: {decode(d)[:160]}" for s, k, d in rows]
    return "\n".join(["console:", *said, "events:", *events, "stderr:", run.stderr[-2000:]])


def resumed_at(result) -> list[int]:
    """The steps the recoveries of a run resumed at (its ``restore_end`` events)."""
    return [int(d.rsplit(" ", 1)[1]) for d in event_details(result, "restore_end")
            if d.startswith("resume at step ")]
