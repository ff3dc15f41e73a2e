"""mpiec bench end to end: a failure-free twin and a failure run per strategy, the same kill for
all, lossless strategies back at their twin's checksum, the report written."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import mpiec

from mpiec.results import read_result

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(400)]


def test_bench_pairs_each_failure_run_with_its_failure_free_twin(tmp_path):
    run = mpiec(["bench", "--preset", "tiny", "--steps", "80", "--strategies", "ckpt", "--scenario", "server",
                 "--quiet"], out=tmp_path, timeout=360)
    assert run.code == 0, run.stdout + run.stderr
    by_name = {p.stem: read_result(p) for p in tmp_path.glob("*.h5")}
    assert set(by_name) == {"tiny-none-ff-s1", "tiny-ckpt-ff-s1", "tiny-ckpt-server-s1"}
    ff, fail = by_name["tiny-ckpt-ff-s1"].summary, by_name["tiny-ckpt-server-s1"].summary
    assert fail["kills_fired"] == 1 and fail["recoveries"] == 1 and not fail["lost"]
    reference = by_name["tiny-none-ff-s1"].summary["param_checksum"]
    assert fail["param_checksum"] == ff["param_checksum"] == reference
    assert 0 < fail["ettr"] < 1 and fail["time_lost_s"] > 0
    (kill,) = [line for line in run.stdout.splitlines() if "failure scenario 'server'" in line]
    assert "server:1@time=" in kill
    assert "lossless" in run.stdout and (tmp_path / "report.html").exists()


def test_bench_replays_a_fault_trace_with_real_kills(tmp_path):
    trace = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "small_trace.json"
    run = mpiec(["bench", "--preset", "tiny", "--steps", "80", "--strategies", "ckpt", "--trace", str(trace),
                 "--no-report", "--quiet"], out=tmp_path, timeout=360)
    assert run.code == 0, run.stdout + run.stderr
    (plan,) = [line for line in run.stdout.splitlines() if line.startswith("under failures: ")]
    kills = plan.removeprefix("under failures: ").split("; ")
    assert len(kills) >= 2 and all("@time=" in k for k in kills), plan
    fail = read_result(tmp_path / "tiny-ckpt-trace-s1.h5")
    assert fail.summary["kills_fired"] == len(kills) and not fail.summary["lost"]
    twin = read_result(tmp_path / "tiny-ckpt-ff-s1.h5")
    assert fail.summary["param_checksum"] == twin.summary["param_checksum"]


def test_a_repeated_bench_interleaves_the_repeats_and_reports_medians(tmp_path):
    run = mpiec(["bench", "--preset", "tiny", "--repeat", "2", "--strategies", "ckpt", "--quiet",
                 "--kill", "server:1@step=20", "--no-report"], out=tmp_path, timeout=360)
    assert run.code == 0, run.stdout + run.stderr
    names = sorted(p.stem for p in tmp_path.glob("*.h5"))
    assert names == sorted(f"tiny-{v}-{k}-s1-r{i}" for v, k in (("none", "ff"), ("ckpt", "ff"),
                                                               ("ckpt", "custom")) for i in (0, 1))
    order = [line for line in run.stdout.splitlines() if line.startswith("[mpiec bench] run ")]
    assert "warm-up run" in run.stdout and len(order) == 6
    assert "none failure-free, repeat 1/2" in order[0] and "none failure-free, repeat 2/2" in order[-1]
    import json

    manifest = json.loads((tmp_path / "bench.json").read_text())
    assert [r["repeat"] for r in manifest["runs"]] == [0, 0, 0, 1, 1, 1]
    shifted = [r for r in manifest["runs"] if r["failure"] and r["repeat"] == 1]
    interval = manifest["intervals"]["ckpt"]
    assert shifted[0]["kill_shift_steps"] == round(interval / 2)
    # 2 rounds: the levels are ranges (never called 95 %), the comparisons paired by round
    assert "2 rounds: medians (range of 2 runs); vs the baseline paired by round" in run.stdout
    assert "comparison " in run.stdout
    summary = read_result(tmp_path / "tiny-ckpt-ff-s1-r0.h5").summary
    assert 0 <= summary["other_cpu_share"] <= 1 and summary["host_cores"] >= 1
