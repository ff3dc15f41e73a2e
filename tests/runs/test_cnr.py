"""``cnr`` (Check-N-Run) under real kills: lossless chain restores in every differential mode,
quantized restores that report their error, a corrupted diff named, a kill during a write."""

from __future__ import annotations

import pytest
from run_helpers import mpiec

from mpiec.results import decode

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(600)]

# checkpoints after steps 4, 9, 14, ...; the kill at step 23 rolls back to 19 (or 14)
TINY = ["--preset", "tiny", "--strategy", "cnr", "--set", "layout.spares=1", "--set", "strategy.interval=5"]


@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free("--preset", "tiny")  # shared: tests/runs/conftest.py


@pytest.mark.parametrize("diff", ["one-shot", "consecutive", "intermittent"])
def test_server_kill_restores_the_chain_losslessly(diff, reference, tmp_path):
    run = mpiec(["run", *TINY, "--set", f"strategy.diff='{diff}'", "--kill", "server:1@step=23"],
                out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference["param_checksum"]
    assert s["recoveries"] == 1 and s["restores"] == 1 and s["reexecuted_steps"] >= 1
    assert s["cnr_diff"] == diff and s["cnr_bits"] == 32 and s["restore_row_error_max"] == 0
    kinds = [decode(k) for k in res.checkpoints["kind"]]
    assert kinds[0] == "baseline" and "diff" in kinds and set(kinds) <= {"baseline", "diff"}
    assert set(res.checkpoints["bits"]) == {32}
    if diff == "intermittent":  # diffs grow until 1 + S_1 + ... + S_i <= (i + 1) S_i
        assert kinds.count("baseline") >= 2
    else:
        assert kinds.count("baseline") == 1
    assert s["write_reduction"] > 1 and s["capacity_bytes"] > 0 and s["full_checkpoint_bytes"] > 0
    ck = res.checkpoints
    assert all(ck["rows"] > 0) and int(ck["rows"].sum()) == s["rows_saved"]
    base = [kind == "baseline" for kind in kinds]
    assert ck["rows"][base].min() > ck["rows"][[not b for b in base]].max()  # a diff holds fewer rows
    # background writes (mode async): the stall is the snapshot, a part of the total
    assert all(ck["stall_s"] > 0) and all(ck["seconds"] > ck["stall_s"])
    assert s["checkpoint_interval_steps"] == 5 and s["checkpoint_interval_rule"] == "given"


def test_adaptive_4_bit_completes_and_reports_the_restore_error(reference, tmp_path):
    run = mpiec(["run", *TINY, "--set", "strategy.diff='consecutive'", "--set",
                 "strategy.quantization='adaptive'", "--set", "strategy.bits=4",
                 "--kill", "server:1@step=23"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert not s["lost"] and s["steps_completed"] == 40 and s["restores"] == 1
    assert s["cnr_quantization"] == "adaptive" and s["cnr_bits"] == 4 and set(res.checkpoints["bits"]) == {4}
    assert 0 < s["restore_row_error_mean"] <= s["restore_row_error_max"] < 1
    assert s["restore_error_servers"] >= 1 and s["quant_row_error_max"] > 0
    assert s["param_checksum"] != reference["param_checksum"]  # a quantized restore is not exact
    assert abs(s["final_auc"] - reference["final_auc"]) < 0.1 and s["final_logloss"] > 0
    assert s["cnr_optimizer_state"] == "fp32 unquantized"
    assert s["write_reduction"] > 2  # 4-bit weights and the diffs


def test_kill_during_a_background_write_uses_the_previous_checkpoint(reference, tmp_path):
    """Writes capped at 0.5 MB/s take longer than the interval: a write is in flight at the kill."""
    run = mpiec(["run", *TINY, "--set", "strategy.diff='consecutive'", "--set", "strategy.bandwidth_mb_s=0.5",
                 "--kill", "server:0@step=22"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["param_checksum"] == reference["param_checksum"] and s["emulated_bandwidth"]


def test_corrupted_diff_is_named_and_an_older_checkpoint_restored(reference, tmp_path):
    """A run keeps its whole consecutive chain; one byte of a middle diff is flipped; ``--resume``
    names that diff, falls back to the checkpoint before it and ends with the failure-free checksum."""
    ck = tmp_path / "ck"
    first = mpiec(["run", *TINY, "--set", "strategy.diff='consecutive'", "--set", "strategy.keep=100",
                   "--set", f"strategy.dir='{ck}'", "--steps", "30"], out=tmp_path / "first")
    assert first.code == 0, first.stdout + first.stderr
    steps = sorted(int(p.parent.name.split("-")[1]) for p in ck.glob("step-*/MANIFEST.json"))
    assert steps == [4, 9, 14, 19, 24]
    bad = ck / "step-000000014" / "server-1.table.npy"
    data = bytearray(bad.read_bytes())
    data[-7] ^= 0xFF
    bad.write_bytes(bytes(data))
    run = mpiec(["run", "--resume", str(ck), "--steps", "40"], out=tmp_path / "resumed")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    failed = [decode(e["detail"]) for e in res.events if decode(e["kind"]) == "restore_failed"]
    named = [d for d in failed if "corrupted chain: diff 14" in d]
    assert named, failed
    assert "server-1.table.npy: corrupted" in run.stderr + " ".join(failed)
    assert res.summary["resumed_from_step"] == 9
    assert res.summary["param_checksum"] == reference["param_checksum"]
