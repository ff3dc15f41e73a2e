"""CLI: bad input is one clear line and exit code 2, before any rank starts."""

from __future__ import annotations

import subprocess
import sys

import pytest


def mpiec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "mpiec", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args, needle", [
    (["run", "--preset", "tiny", "--set", "training.stesp=3"], "unknown config key 'training.stesp'"),
    (["run", "--preset", "tiny", "--kill", "server:1@stp=3"], "malformed kill plan 'server:1@stp=3'"),
    (["run", "--preset", "tiny", "--kill", "server:7@step=3"], "server:7 does not exist"),
    (["run", "--preset", "tiny", "--strategy", "magic"], "unknown strategy 'magic'"),
    (["bench", "--preset", "tiny", "--strategies", "none,magic"], "unknown strategy 'magic'"),
    (["report", "/nonexistent/dir"], "/nonexistent/dir"),
    (["run", "--preset", "tiny", "--kill", "random:mtbf=1s,max=-1"], "max must be >= 1"),
    (["run", "--preset", "tiny", "--set", "output.name='../x'"], "output.name must be a file name"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path):
    proc = mpiec(*args, "--out", str(tmp_path)) if args[0] in ("run", "bench") else mpiec(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.h5"))


def test_malformed_criteo_line_names_the_line(tmp_path):
    good = "\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 26)
    bad = "\t".join(["1"] + ["x"] * 13 + ["68fd1e64"] * 26)
    f = tmp_path / "day.tsv"
    f.write_text("\n".join([good, good, bad, good]) + "\n")
    proc = mpiec("run", "--preset", "tiny", "--set", "data.source='criteo-tsv'", "--set", f"data.path='{f}'",
                 "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"{f}:3" in lines[0], proc.stderr


def test_help_and_config_commands():
    proc = mpiec("run", "--help")
    assert proc.returncode == 0 and "--kill" in proc.stdout and "server:2@step=300" in proc.stdout
    proc = mpiec("config", "--preset", "tiny", "--ranks")
    assert proc.returncode == 0 and proc.stdout.strip() == "5"
    proc = mpiec("strategies")
    assert proc.returncode == 0 and proc.stdout.startswith("none")


def test_too_small_criteo_file_is_caught_before_ranks_start(tmp_path):
    good = "\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 26)
    f = tmp_path / "small.tsv"
    f.write_text("\n".join([good] * 300) + "\n")  # 30 held-out samples; tiny wants 2000
    proc = mpiec("run", "--preset", "tiny", "--set", "data.source='criteo-tsv'", "--set", f"data.path='{f}'",
                 "--out", str(tmp_path))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "data.eval_samples = 2000" in lines[0] and "only 30 held-out samples" in lines[0]


def test_unwritable_output_is_one_line(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    proc = mpiec("run", "--preset", "tiny", "--out", str(blocker / "sub"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(blocker) in lines[0]


def test_timeout_must_be_positive():
    proc = mpiec("run", "--preset", "tiny", "--timeout", "-1")
    assert proc.returncode == 2 and "must be a number of seconds > 0" in proc.stderr
