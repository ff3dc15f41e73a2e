"""A full file system under real runs (hardening issue, item 7): on a small tmpfs.

The result file on a full disk ends in one line naming the file and ENOSPC, a non-zero exit and no
temporary file left (before: a monitor traceback from inside h5py). Checkpoints to a full
``strategy.dir`` are reported (before: exit 0, empty step directories, no word): a warning line per
failed write on the console, ``checkpoint_fail`` events naming the file and ENOSPC, the summary's
``checkpoints_failed`` and, when none ever committed, ``unprotected`` and a console line saying so.

Mounting needs root (or CAP_SYS_ADMIN); elsewhere these tests skip, and the unit tests of
``tests/test_checkpoint.py`` / ``tests/test_results.py`` cover the same paths through a fault seam.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from run_helpers import mpiec

from mpiec.results import decode

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(300)]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs("64k")``: a fresh tmpfs of that size under ``tmp_path``; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a {size} tmpfs here (needs root or CAP_SYS_ADMIN): "
                        f"{(done.stderr or done.stdout).strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_the_result_file_on_a_full_disk_is_one_line_and_no_temp_file(tmpfs):
    out = tmpfs("16k")  # a tiny run's result file is ~25 kB
    run = mpiec(["run", "--preset", "tiny", "--timeout", "90"], out=out, timeout=200)
    text = run.stdout + run.stderr
    assert run.code != 0, text
    assert "Traceback" not in text and "HDF5" not in text, text
    lines = [line for line in text.splitlines() if "cannot write" in line]
    assert len(lines) == 1 and "No space left on device [ENOSPC]" in lines[0], text
    assert str(out) in lines[0] and ".h5" in lines[0]
    assert not [p.name for p in out.iterdir() if p.name.endswith((".tmp", ".h5"))]


def test_every_checkpoint_failing_is_reported_and_the_run_is_called_unprotected(tmpfs, tmp_path):
    ck = tmpfs("64k") / "ck"  # no part of a tiny checkpoint fits (a server's table alone is ~280 kB)
    run = mpiec(["run", "--preset", "tiny", "--strategy", "ckpt", "--set", "strategy.interval=10",
                 "--set", f'strategy.dir="{ck}"', "--timeout", "90"], out=tmp_path / "out", timeout=200)
    assert run.code == 0, run.stdout + run.stderr  # the run itself completed
    text = run.stdout + run.stderr  # the launcher relays the ranks' stderr with their stdout
    warned = [line for line in text.splitlines() if line.startswith("[mpiec] warning: checkpoint of step 9")]
    assert warned and all("ENOSPC" in line for line in warned), text
    assert "warning: every checkpoint failed (3: steps 9, 19, 29): the run was unprotected" in text
    res = run.result()
    s = res.summary
    assert s["checkpoints_failed"] == 3 and s["unprotected"] is True and s["checkpoints"] == 0
    fails = [e for e in res.event_list() if e["kind"] == "checkpoint_fail"]
    assert {e["step"] for e in fails} == {9, 19, 29}
    assert all("No space left on device [ENOSPC]" in e["detail"] for e in fails)
    assert list(ck.iterdir()) == []  # no step directory that looks like a checkpoint
    assert decode(res.events["kind"][0])  # the file reads


def test_a_disk_that_fills_up_counts_the_failed_checkpoints(tmpfs, tmp_path):
    ck = tmpfs("1m") / "ck"  # the first checkpoint (~800 kB) fits, the next ones do not
    run = mpiec(["run", "--preset", "tiny", "--strategy", "ckpt", "--set", "strategy.interval=10",
                 "--set", f'strategy.dir="{ck}"', "--timeout", "90"], out=tmp_path / "out", timeout=200)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["checkpoints"] == 1 and s["checkpoints_failed"] == 2 and s["unprotected"] is False
    assert "2 checkpoint(s) failed (steps 19, 29); 1 committed, the newest after step 9" in run.stdout
    # the monitor abandoned the failed steps once every part answered: their written parts are gone
    from mpiec.storage.checkpoint import CheckpointStore

    store = CheckpointStore(ck)
    assert store.complete_steps() == [9]
    assert sorted(p.name for p in ck.iterdir() if p.is_dir()) == [store.step_dir(9).name]
