"""A run past its time limit shows where each rank was (``mpiec.launch.stacks``): every thread's stack,
dumped by ``faulthandler`` on ``SIGUSR1`` into the launcher's folder, read back bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mpiec.launch import stacks


def test_a_rank_dumps_where_it_waits_and_the_report_names_it(tmp_path):
    code = ("import time\nfrom mpiec.launch import stacks\nstacks.arm_from_env(False)\n"
            "def waits_here():\n    time.sleep(60)\nwaits_here()\n")
    env = {**os.environ, stacks.ENV: str(tmp_path), "OMPI_COMM_WORLD_RANK": "3"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        dump = tmp_path / f"00003-{proc.pid}.txt"
        deadline = time.monotonic() + 60
        while not dump.exists() and time.monotonic() < deadline:  # armed once its file exists
            time.sleep(0.05)
        time.sleep(0.2)  # registered right after the file opened
        proc.send_signal(stacks.SIGNAL)
        while "waits_here" not in dump.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None  # a dump, not a death
    finally:
        proc.kill()
        proc.wait()
    lines = stacks.report(tmp_path)
    assert lines[0].startswith("[mpiec] where each rank was at the time limit (1 dumped")
    assert lines[1] == f"--- rank 3 (pid {proc.pid})"
    assert any("waits_here" in line for line in lines)


def test_without_the_launchers_folder_nothing_is_armed(tmp_path, monkeypatch):
    monkeypatch.delenv(stacks.ENV, raising=False)
    before = signal.getsignal(stacks.SIGNAL)
    stacks.arm_from_env(False)
    assert signal.getsignal(stacks.SIGNAL) == before


def test_the_report_is_bounded(tmp_path: Path):
    for r in range(stacks.MAX_RANKS + 2):
        (tmp_path / f"{r:05d}-{100 + r}.txt").write_text("\n".join(f"  line {i}" for i in range(100)))
    (tmp_path / "spawned-7.txt").write_text("  spawned line")
    (tmp_path / "00099-9.txt").write_text("")  # a rank that never dumped: left out
    lines = stacks.report(tmp_path)
    n = stacks.MAX_RANKS + 3
    assert lines[0].startswith(f"[mpiec] where each rank was at the time limit ({n} dumped")
    headers = [line for line in lines if line.startswith("--- ")]
    assert headers[0] == "--- rank 0 (pid 100)" and headers[-1] == "--- ... and 3 more ranks"
    assert len(headers) == stacks.MAX_RANKS + 1
    assert f"    ... {100 - stacks.MAX_LINES} more lines" in lines
    assert stacks.report(tmp_path / "none") == []
