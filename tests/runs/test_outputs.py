"""Result files of launched runs: concurrent runs never claim each other's file (issue 10, item 1)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from run_helpers import mpiec

from mpiec.results import read_result

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(300)]


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-P", "-m", "mpiec", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _reported(stdout: str) -> list[str]:
    return re.findall(r"^result file: (.+)$", stdout, re.MULTILINE)


def test_two_runs_started_together_each_report_their_own_file(tmp_path):
    """The issue's reproduction: same folder, same second, automatic names, one with a kill."""
    first = _start(["run", "--preset", "tiny", "--steps", "15", "--out", str(tmp_path)])
    second = mpiec(["run", "--preset", "tiny", "--steps", "15", "--kill", "trainer:1@step=5"],
                   out=tmp_path, timeout=200)
    out, err = first.communicate(timeout=200)
    assert first.returncode == 0, out + err
    assert second.code == 1, second.stdout + second.stderr  # lost under 'none', and says so
    mine, theirs = _reported(second.stdout), _reported(out)
    assert len(mine) == 1 and len(theirs) == 1 and mine != theirs
    lost, done = read_result(mine[0]), read_result(theirs[0])
    assert lost.summary["lost"] and lost.config["failures"]["kill"] == ["trainer:1@step=5"]
    assert not done.summary["lost"] and done.config["failures"]["kill"] == []
    assert len(list(tmp_path.glob("*.h5"))) == 2
    assert not list(tmp_path.glob(".*.lock"))  # both claims released


def test_a_taken_explicit_name_is_refused_before_any_rank_starts(tmp_path):
    first = _start(["run", "--preset", "tiny", "--steps", "15", "--set", "output.name='shared'",
                    "--out", str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / ".shared.h5.lock").exists():
            assert time.monotonic() < deadline and first.poll() is None, "the first run claimed no name"
            time.sleep(0.05)
        second = mpiec(["run", "--preset", "tiny", "--steps", "15", "--set", "output.name='shared'"],
                       out=tmp_path, timeout=60)
        assert second.code == 2, second.stdout + second.stderr
        assert "claimed by another run" in second.stderr and "result file:" not in second.stdout
        assert "launching" not in second.stdout
    finally:
        out, err = first.communicate(timeout=200)
    assert first.returncode == 0, out + err
    assert _reported(out) == [str((tmp_path / "shared.h5").resolve())]
    assert not (tmp_path / ".shared.h5.lock").exists()


def test_two_benches_into_one_folder_keep_every_result(tmp_path):
    args = ["bench", "--preset", "tiny", "--steps", "8", "--strategies", "none", "--scenario", "none",
            "--quiet", "--no-report"]
    first = _start([*args, "--out", str(tmp_path)])
    second = mpiec(args, out=tmp_path, timeout=200)
    out, err = first.communicate(timeout=200)
    assert first.returncode == 0 and second.code == 0, out + err + second.stdout + second.stderr
    names = sorted(p.name for p in tmp_path.glob("*.h5"))
    assert names == ["tiny-none-ff-s1-2.h5", "tiny-none-ff-s1.h5"]


@pytest.mark.kill
def test_a_run_that_recovered_by_spawn_prints_nothing_alarming(tmp_path):
    """Issue 12, items 16-17: a successful spawn recovery ended with PRRTE's 20-line "exited improperly"
    block (the spawned job ends without MPI_Finalize, as every rank after a failure) or "LAUNCHER JOB
    OBJECT NOT FOUND", and sometimes "stopping: peer failure ... during final hold"."""
    run = mpiec(["run", "--preset", "tiny", "--strategy", "ckpt", "--set", "layout.replacement='spawn'",
                 "--kill", "server:1@step=15"], out=tmp_path, timeout=200)
    assert run.code == 0, run.stdout + run.stderr
    assert "spawned -> server:1" in run.stdout
    text = run.stdout + run.stderr
    for needle in ("exited improperly", "exiting\nimproperly", "LAUNCHER JOB OBJECT NOT FOUND", "stopping:",
                   "Traceback", "MPI_Abort"):
        assert needle not in text, text
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".kills")] == []
