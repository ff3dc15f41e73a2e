"""Failure paths the recovery core rewrote (issue "Hardening", items 2, 3, 4, 10, 11)."""

from __future__ import annotations

import json

import pytest
from run_helpers import mpiec

from mpiec.results import decode

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(300)]


def test_empty_shards_work(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--steps", "5", "--set", "data.cardinalities=[1]",
                 "--set", "layout.servers=3"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    assert len(run.result().summary["param_checksum"]) == 64


def test_stale_kill_notes_of_another_run_are_ignored(tmp_path):
    stale = tmp_path / ".old.kills"
    stale.mkdir(parents=True)
    (stale / "2.json").write_text(json.dumps({"step": 3, "time": 1.0, "rank": 2, "role": "trainer",
                                              "index": 1, "plan": "trainer:1@step=3"}))
    run = mpiec(["run", "--preset", "tiny", "--steps", "5", "--set", "output.name='old'"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["kills_fired"] == 0 and "kill" not in [decode(k) for k in res.events["kind"]]


def test_only_the_monitor_survives(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--kill",
                 "server:0@step=10;server:1@step=10;trainer:0@step=10;trainer:1@step=10"], out=tmp_path)
    assert run.code == 1
    res = run.result()
    assert res.events["step"].max() <= 10  # not 2147483647
    assert res.summary["steps_completed"] == 10
    assert "committed step 9" in [decode(d) for d in res.events["detail"]]


def test_steps_are_counted_when_every_trainer_dies(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--kill", "trainer:0@step=15;trainer:1@step=15"], out=tmp_path)
    assert run.code == 1
    s = run.result().summary
    assert s["steps_completed"] == 15 and s["lost_samples"] == 25 * 128


def test_a_kill_during_failure_handling_is_handled(tmp_path):
    """Under ``none`` a second kill while the survivors handle the first: a clean loss, never a crash."""
    # a few ms into the failed step, while the survivors detect and agree (a time after the start
    # of training landed in the lost run's final report on an idle machine: that case is the
    # @end tests' below)
    for delay in ("1ms", "3ms", "6ms"):
        run = mpiec(["run", "--preset", "tiny", "--kill", f"server:0@step=10;trainer:1@step=10+{delay}"],
                    out=tmp_path / delay)
        assert run.code == 1, run.stdout + run.stderr
        assert run.result().summary["lost"]
        assert not list((tmp_path / delay).glob(".*.kills"))


def test_a_diverging_run_stops_with_a_clear_message(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--set", "training.lr=1e30", "--set", "training.dense_lr=1e30"],
                out=tmp_path)
    assert run.code == 1
    assert "training diverged: the loss became non-finite at step" in run.stderr
    s = run.result().summary
    assert s["diverged"] and not s["lost"] and s["steps_completed"] < 40


def _late(run) -> tuple[list[str], list[str]]:
    """(kill plans fired, slots that died in the final report) of a run's result file."""
    ev = run.result().events
    kinds = [decode(k) for k in ev["kind"]]
    kills = [decode(d) for k, d in zip(kinds, ev["detail"], strict=True) if k == "kill"]
    late = [f"{decode(r)}:{i}" for k, r, i in zip(kinds, ev["role"], ev["role_index"], strict=True)
            if k == "report_death"]
    return kills, late


def test_a_server_dying_in_the_final_report_leaves_a_lost_result_file(tmp_path):
    """A death after training, during the gather of the final reports: the survivors shrink and
    report without it; its shard is gone, so the run is lost, with a file that says why."""
    run = mpiec(["run", "--preset", "tiny", "--strategy", "ckpt", "--kill", "server:1@end"], out=tmp_path)
    assert run.code == 1, run.stdout + run.stderr
    s = run.result().summary
    assert s["lost"] and s["steps_completed"] == 40 and s["param_checksum"] == ""
    assert "server:1 died during the final report" in s["abort_reason"]
    assert _late(run) == (["server:1@end"], ["server:1"])
    assert s["kills_fired"] == 1 and not list(tmp_path.glob(".*.kills"))


def test_a_spare_dying_in_the_final_report_loses_nothing(failure_free, tmp_path):
    # the failure-free checksum is none's: ecrm trains what none trains (tests/runs/test_contract.py)
    reference = failure_free("--preset", "tiny")["param_checksum"]  # shared: tests/runs/conftest.py
    run = mpiec(["run", "--preset", "tiny", "--strategy", "ecrm", "--set", "layout.spares=1",
                 "--kill", "spare:0@end"], out=tmp_path / "kill")
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert not s["lost"] and s["param_checksum"] == reference
    assert _late(run) == (["spare:0@end"], ["spare:0"])


def test_a_death_in_a_lost_runs_final_report_still_leaves_its_file(tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--kill", "server:0@step=10;trainer:1@end"], out=tmp_path)
    assert run.code == 1, run.stdout + run.stderr
    s = run.result().summary
    assert s["lost"] and s["steps_completed"] == 10 and "does not recover" in s["abort_reason"]
    assert _late(run) == (["server:0@step=10", "trainer:1@end"], ["trainer:1"])
