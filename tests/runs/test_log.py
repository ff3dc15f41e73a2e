"""``log`` under real kills: only the replacement restores, the logged steps are replayed, the run
ends with the failure-free checksum; a trainer's lost log falls back to a full rollback."""

from __future__ import annotations

import os

import pytest
from run_helpers import mpiec

from mpiec.results import decode

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(400)]

# full checkpoints after steps 4, 9, 14, 19, 24, 29, 34
TINY = ["--preset", "tiny", "--strategy", "log", "--set", "strategy.interval=5"]


@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free("--preset", "tiny")["param_checksum"]  # shared: tests/runs/conftest.py


def log_run(tmp_path, spares: int, kill: str, *sets: str, env: dict | None = None):
    args = ["run", *TINY, "--set", f"layout.spares={spares}", "--kill", kill]
    for s in sets:
        args += ["--set", s]
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        return mpiec(args, out=tmp_path, timeout=300)
    finally:
        os.environ.clear()
        os.environ.update(old)


def events(res, kind):
    return [(int(e["rank"]), decode(e["role"]), int(e["role_index"]), decode(e["detail"]))
            for e in res.events if decode(e["kind"]) == kind]


def replacements(res):
    """(world rank, role, index) of every rank that took a slot (the ``replace`` events)."""
    return {(r, role, i) for r, role, i, _ in events(res, "replace")}


def assert_only_replacements_restored(res, servers: list[int]):
    restores = events(res, "restore")
    assert sorted(i for _, role, i, _ in restores if role == "server") == sorted(servers), restores
    assert all(role == "server" for _, role, _, _ in restores), restores  # no trainer, no survivor
    assert {(r, role, i) for r, role, i, _ in restores} <= replacements(res)
    assert res.summary["reexecuted_steps"] == 0 and res.summary["log_fallbacks"] == 0


def test_server_kill_restores_only_the_replacement_and_replays_losslessly(reference, tmp_path):
    run = log_run(tmp_path, 1, "server:1@step=23")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference
    assert not s["lost"] and s["kills_fired"] == 1 and s["recoveries"] == 1
    assert_only_replacements_restored(res, [1])
    (restore,) = [d for *_, d in events(res, "restore")]
    assert "restored checkpoint 19" in restore and "replays steps 20..22" in restore
    (replay,) = [d for *_, d in events(res, "replay")]
    assert "3 logged steps (20..22)" in replay
    assert s["log_replays"] == 1 and s["log_replayed_steps"] == 3 and s["log_replayed_rows"] > 0
    assert s["log_replay_s"] > 0 and s["recovery_latency_s"] > 0
    assert s["log_memory_peak_bytes"] > 0 and s["log_spilled_bytes"] == 0  # 256 MiB: nothing spills


def test_two_server_kills_in_different_checkpoint_intervals(reference, tmp_path):
    run = log_run(tmp_path, 2, "server:1@step=13;server:0@step=27")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference
    assert s["kills_fired"] == 2 and s["recoveries"] == 2 and s["log_replays"] == 2
    assert_only_replacements_restored(res, [0, 1])
    details = sorted(d for *_, d in events(res, "restore"))
    assert "restored checkpoint 24" in details[0] and "replays steps 25..26" in details[0]
    assert "restored checkpoint 9" in details[1] and "replays steps 10..12" in details[1]


def test_kill_while_the_log_spills(reference, tmp_path):
    """A 50 kB bound: every trainer spills most of each interval; the replay reads it back."""
    run = log_run(tmp_path, 1, "server:0@step=23", "strategy.log_memory_mb=0.05")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference
    assert_only_replacements_restored(res, [0])
    assert s["log_spilled_records"] > 0 and s["log_spilled_bytes"] > 0 and s["log_read_bytes"] > 0
    assert 0 < s["log_memory_peak_bytes"] <= s["log_memory_limit_bytes"] == int(0.05 * 2**20)
    assert not (tmp_path / f"{run.files[0].stem}.ckpt" / "log").exists()  # spill files removed at the end


def test_mid_step_server_kill(reference, tmp_path):
    """Server 1 dies 3 ms into step 22. The survivors agree on the last step *every* one of them
    completed (``agree_min``), C = 21 or 22, which the timing decides, not the strategy:

    * C = 21, step 22 interrupted everywhere (the usual case: the trainers were still exchanging
      with server 1): the replacement replays 20..21, step 22 runs once, after the recovery;
    * C = 21, but a trainer had completed step 22 (its push reached server 1 before the kill) while
      another survivor had not: that trainer undoes 22 (``undo`` event) and executes it again with
      everyone. Its first execution's record may have reached the monitor already: then the
      timeline holds step 22 of epoch 0 and ``reexecuted_steps`` is 1 (1 run in 16 on a loaded
      machine); it is not a fallback, only the replacement restores and replays 20..21;
    * C = 22, every survivor completed step 22: the replacement replays 20..22, nothing is undone.

    Every case ends with the failure-free checksum and a log replay, never a rollback."""
    run = log_run(tmp_path, 1, "server:1@step=22+3ms")  # mid-step, whatever the speed
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 1
    (committed,) = {int(d.rsplit(" ", 1)[1]) for *_, d in events(res, "agree")}
    assert committed in (21, 22)
    (restore,) = [d for *_, d in events(res, "restore")]
    assert f"restored checkpoint 19; replays steps 20..{committed} from the trainers' logs" in restore
    undone = [(role, d) for _, role, _, d in events(res, "undo")]
    assert all(d == "undid step 22" for _, d in undone) and (committed == 21 or not undone)
    tl = res.timeline
    first_run = int(((tl["epoch"] == 0) & (tl["step"] > committed)).sum())  # step 22 before the kill
    assert s["reexecuted_steps"] == first_run <= int(any(role == "trainer" for role, _ in undone))
    restores = events(res, "restore")
    assert [(role, i) for _, role, i, _ in restores] == [("server", 1)]
    assert {(r, role, i) for r, role, i, _ in restores} <= replacements(res) and s["log_fallbacks"] == 0


def test_a_trainer_kill_then_a_server_kill_before_the_next_checkpoint_rolls_back(reference, tmp_path):
    """Trainer 1's replacement logs from step 21 on: the server kill at 23 needs steps 20-22 since
    checkpoint 19, so everyone rolls back to 19 and re-executes (lossless, like ckpt)."""
    run = log_run(tmp_path, 2, "trainer:1@step=21;server:0@step=23")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 2
    assert s["log_fallbacks"] == 1 and s["log_replays"] == 0 and s["reexecuted_steps"] > 0
    (fallback,) = [d for *_, d in events(res, "log_fallback")]
    assert "full rollback" in fallback and "checkpoint 19" in fallback
    restores = events(res, "restore")
    assert sorted((role, i) for _, role, i, _ in restores) == [("server", 0), ("server", 1), ("trainer", 0),
                                                               ("trainer", 1)]
    assert all("rollback" in d and "checkpoint 19" in d for *_, d in restores)


def test_a_trainer_kill_before_the_last_checkpoint_does_not_force_a_rollback(reference, tmp_path):
    run = log_run(tmp_path, 2, "trainer:1@step=11;server:0@step=23")
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.summary["param_checksum"] == reference
    assert_only_replacements_restored(res, [0])
    assert res.summary["log_replays"] == 1


def test_a_corrupted_spill_record_is_named_and_never_replayed(tmp_path):
    run = log_run(tmp_path, 1, "server:0@step=23", "strategy.log_memory_mb=0",
                  env={"MPIEC_LOG_CORRUPT_SPILL": "1"})
    assert run.code == 1, run.stdout + run.stderr  # lost: the runtime cannot roll back at this point
    res = run.result()
    assert res.summary["lost"]
    failed = [d for *_, d in events(res, "rebuild_failed")]
    assert failed and all("corrupted update log" in d and ".spill" in d and "checksum mismatch" in d
                          for d in failed)
