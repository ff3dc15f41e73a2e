"""End-to-end runs through ``mpiec run``: result files, determinism, kills under ``none``.

Every test launches real ranks with mpiexec and is bounded by a timeout.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from run_helpers import mpiec, worker_processes

from mpiec.results import SCHEMA_VERSION, decode

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(240)]


def test_tiny_run_writes_a_complete_result(failure_free_run):
    run = failure_free_run("--preset", "tiny")  # the plain tiny run the recovery tests compare with
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["steps_completed"] == 40 and not s["lost"]
    assert 0.5 < s["final_auc"] <= 1.0 and s["throughput_sps"] > 0
    assert 0.78 <= s["teacher_auc"] <= 0.82
    assert len(s["param_checksum"]) == 64
    assert s["dense_replicas_consistent"]
    assert res.attrs["strategy"] == "none" and res.attrs["schema_version"] == SCHEMA_VERSION
    assert res.config["preset"] == "tiny"
    tl = res.timeline
    assert np.array_equal(tl["step"], np.arange(40)) and np.all(np.diff(tl["t_end"]) > 0)
    assert np.all(tl["loss"] > 0) and np.all(tl["samples"] == 128)
    assert list(res.eval["step"]) == [19, 39]
    roles = sorted(decode(r) for r in res.ranks["role"])
    assert roles == ["monitor", "server", "server", "trainer", "trainer"]
    assert "step" in run.stdout and "result" in run.stdout


def test_same_config_same_checksum_other_seed_differs(tmp_path):
    runs = [mpiec(["run", "--preset", "tiny", "--steps", "15", "--set", f"training.seed={seed}"],
                  out=tmp_path / f"r{i}") for i, seed in enumerate((3, 3, 4))]
    sums = [r.result().summary["param_checksum"] for r in runs]
    assert sums[0] == sums[1] != sums[2]


def test_checksum_does_not_depend_on_the_number_of_trainers(tmp_path):
    """One global batch of 96 over 4 virtual shards (the default), held by 1, 2 or 4 trainers
    (and 3 servers for the 4 trainers): one checksum; a plain all-reduce would differ."""
    runs = [mpiec(["run", "--preset", "tiny", "--steps", "12", "--set", f"layout.trainers={t}",
                   "--set", f"training.batch_size={96 // t}", "--set", f"layout.servers={s}"],
                  out=tmp_path / f"t{t}") for t, s in ((1, 2), (2, 2), (4, 3))]
    results = [r.result() for r in runs]
    assert [int(r.config["layout"]["trainers"]) for r in results] == [1, 2, 4]
    assert len({r.summary["param_checksum"] for r in results}) == 1


def test_checksum_does_not_depend_on_timing(tmp_path):
    """Emulated mode takes other code paths and timings; the trained parameters are identical."""
    a = mpiec(["run", "--preset", "tiny", "--steps", "12"], out=tmp_path / "a")
    b = mpiec(["run", "--preset", "tiny", "--steps", "12", "--set", "failures.mode='emulated'"],
              out=tmp_path / "b")
    assert a.result().summary["param_checksum"] == b.result().summary["param_checksum"]


def test_server_kill_under_none_loses_the_run_cleanly(tmp_path):
    """With a spare too: it must leave its wait and exit like everyone else."""
    run = mpiec(["run", "--preset", "tiny", "--kill", "server:1@step=10", "--set", "layout.spares=1"],
                out=tmp_path, timeout=90)
    # lost (exit 1) by itself, not ended by its time limit (a crash, exit 3): no wall-time bound,
    # which a busy machine breaks
    assert run.code == 1, run.stdout + run.stderr
    res = run.result()
    kinds = [decode(k) for k in res.events["kind"]]
    assert "kill" in kinds and "detect" in kinds
    kill = res.events[kinds.index("kill")]
    assert decode(kill["role"]) == "server" and kill["role_index"] == 1 and kill["step"] == 10
    assert res.summary["lost"] and res.summary["steps_completed"] == 10
    assert res.summary["param_checksum"] == "" and res.summary["kills_fired"] == 1
    detects = res.events[[k == "detect" for k in kinds]]
    assert len(detects) == 5 and set(detects["step"]) == {10}  # every survivor, the agreed step
    assert "spare" in [decode(r) for r in res.ranks["role"]]
    time.sleep(0.5)
    assert worker_processes(str(tmp_path)) == []


def test_trainer_time_kill_under_none(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--steps", "100000", "--kill", "trainer:0@time=2"],
                out=tmp_path, timeout=90)
    assert run.code == 1, run.stdout + run.stderr  # lost by itself, not at its time limit (exit 3)
    res = run.result()
    assert res.summary["lost"] and 0 < res.summary["steps_completed"] < 100000
    assert "kill" in [decode(k) for k in res.events["kind"]]
    assert worker_processes(str(tmp_path)) == []


def test_emulated_kill_is_labelled(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--kill", "server:0@step=5", "--set", "failures.mode='emulated'"],
                out=tmp_path, timeout=90)
    assert run.code != 0
    res = run.result()
    assert res.attrs["failure_mode"] == "emulated" and not res.attrs["ulfm"]
    assert res.summary["lost"] and res.summary["emulated"] and res.summary["steps_completed"] == 5
    detects = res.events[[decode(k) == "detect" for k in res.events["kind"]]]
    assert set(detects["step"]) == {5} and 3 not in set(detects["rank"])  # the victim detects nothing


def test_criteo_tsv_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(3000):
        dense = [str(int(v)) if v >= 0 else "" for v in rng.integers(-1, 50, 13)]
        cats = [f"{int(v):08x}" if v else "" for v in rng.integers(0, 2**32, 26) * (rng.random(26) > 0.05)]
        lines.append("\t".join([str(i % 4 == 0 and 1 or 0), *dense, *cats]))
    f = tmp_path / "day_0.tsv"
    f.write_text("\n".join(lines) + "\n")
    run = mpiec(["run", "--preset", "tiny", "--steps", "10", "--set", "data.source='criteo-tsv'",
                 "--set", f"data.path='{f}'", "--set", "data.eval_samples=200"], out=tmp_path / "out")
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["steps_completed"] == 10 and np.isnan(s["teacher_auc"]) and 0 <= s["final_auc"] <= 1
