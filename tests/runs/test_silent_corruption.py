"""Silent corruption (``flip:`` plans) in real runs: what a flip does to the model is exactly measurable
against the failure-free twin, because training is deterministic.

* under ``none`` a flipped embedding row persists into the final model (another checksum), and the
  result file says what was hit;
* ``ckpt`` checkpoints the flipped row and restores it faithfully: a kill after the checkpoint ends
  with the checksum of the corrupted run without the kill, not the failure-free one;
* a rollback to a checkpoint older than the flip undoes it, and the flip does not fire again when
  the step is re-executed (a one-off fault): the failure-free checksum;
* a flip in one trainer's dense replica makes the replicas disagree at the end;
* ``ecrm``'s verification detects a flipped row within ``verify_every`` steps; with one parity row
  it cannot say which member is wrong, with Reed-Solomon r = 2 it locates the row and gives back
  the flipped bit: verified at the end of the flip's step, before anything read the row, the run
  ends with the failure-free checksum, and its kept final model (``output.final_model``) shows how
  far the unrepaired flip moved the model under ``none``;
* a flipped gradient message is applied and persists, unless the runtime's message checksums are
  on: the server refuses the message, the step is executed again and the run is lossless;
* the runtime's shard check finds a flipped row before its next update and names it (it does not
  repair it), and finds nothing in a clean run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from mpiec.analysis.metrics import model_difference
from run_helpers import event_details, mpiec, resumed_at

from mpiec.results import decode

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(600)]

TINY = ["--preset", "tiny"]
CKPT = ["--strategy", "ckpt", "--set", "strategy.interval=10", "--set", "layout.spares=1"]
EARLY = "flip:server:1@step=8:bit=22"  # before the checkpoint of step 9 (and 19)
LATE = "flip:server:1@step=22:bit=22"  # after the checkpoint of step 19


@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free(*TINY)["param_checksum"]  # shared: tests/runs/conftest.py


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory):
    """``none`` with the early flip: the model the flip leaves when nothing repairs it."""
    run = mpiec(["run", *TINY, "--kill", EARLY, "--set", "output.final_model=true"],
                out=tmp_path_factory.mktemp("corrupted"))
    assert run.code == 0, run.stdout + run.stderr
    return run


def flipped(args: list[str], tmp_path):
    """``mpiec run`` of tiny with ``args`` (one flip among them), completed: (the run, its summary,
    the flip's note)."""
    run = mpiec(["run", *TINY, *args], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    (hit,) = json.loads(s["corruptions"])
    return run, s, hit


def hits(summary) -> list[dict]:
    """The fired flips' notes, without when they fired."""
    return [{k: v for k, v in n.items() if k != "time"} for n in json.loads(summary["corruptions"])]


def test_a_flipped_row_persists_under_none_and_the_result_says_what_was_hit(corrupted, reference):
    s = corrupted.result().summary
    assert not s["lost"] and s["param_checksum"] and s["param_checksum"] != reference
    (hit,) = json.loads(s["corruptions"])
    assert s["corruptions_planned"] == 1 and json.loads(s["corruptions_unfired"]) == []
    assert hit["plan"] == EARLY and hit["fired"]
    assert (hit["role"], hit["index"], hit["step"]) == ("server", 1, 8)
    assert hit["bit"] == 22 and hit["before"] != hit["after"] and hit["part"] == "weight"
    kinds = [decode(k) for k in corrupted.result().events["kind"]]
    assert kinds.count("corrupted") == 1
    assert "silent corruption: " + EARLY in corrupted.stdout + corrupted.stderr
    assert hit["detected_step"] is None and s["corruptions_detected"] == 0  # nothing under none sees it
    assert hit["located"] is False


def test_a_checkpoint_keeps_the_corruption_and_a_restore_brings_it_back(corrupted, tmp_path):
    run = mpiec(["run", *TINY, *CKPT, "--kill", EARLY, "--kill", "server:0@step=25"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["kills_fired"] == 1 and s["recoveries"] == 1 and s["reexecuted_steps"] > 0
    assert hits(s) == hits(corrupted.result().summary)  # the same element, the same bit, the same values
    assert s["param_checksum"] == corrupted.result().summary["param_checksum"]  # persisted, bit for bit


def test_a_rollback_past_the_flip_undoes_it_and_it_does_not_fire_again(reference, tmp_path):
    run = mpiec(["run", *TINY, *CKPT, "--kill", LATE, "--kill", "server:0@step=25"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["kills_fired"] == 1 and s["reexecuted_steps"] >= 5  # steps 20..24 at least: past step 22
    assert len(json.loads(s["corruptions"])) == 1
    assert s["param_checksum"] == reference


def test_a_flip_in_one_dense_replica_leaves_the_replicas_disagreeing(reference, tmp_path):
    run, s, hit = flipped(["--kill", "flip:trainer:1@step=5:bit=22"], tmp_path)
    assert (hit["role"], hit["index"]) == ("trainer", 1) and "param" in hit
    assert not s["dense_replicas_consistent"]
    assert s["param_checksum"] != reference  # trainer 1's gradients moved trainer 0's replica too


def test_ecrm_with_one_parity_row_detects_the_flip_but_cannot_locate_it(reference, tmp_path):
    run, s, hit = flipped(["--strategy", "ecrm", "--set", "strategy.verify_every=5",
                          "--kill", "flip:server:1@step=10:bit=22"], tmp_path)
    assert (hit["detected_step"], hit["detected_by"]) == (14, "parity_mismatch")  # verified after 4, 9, 14
    assert s["corruptions_detected"] == 1 and s["corruptions_repaired"] == 0 and hit["located"] is False
    assert s["scrub_unlocated"] >= 1 and s["scrub_repaired"] == 0
    assert s["param_checksum"] != reference
    assert "detected at step 14 (parity_mismatch, 4 steps later)" in run.stdout + run.stderr


def test_ecrm_reed_solomon_locates_and_repairs_the_flipped_row(reference, corrupted, tmp_path):
    run, s, hit = flipped(["--strategy", "ecrm", "--set", "layout.servers=4",
                          "--set", "strategy.code='rs'", "--set", "strategy.k=2", "--set", "strategy.r=2",
                          "--set", "strategy.verify_every=1", "--set", "output.final_model=true",
                          "--kill", "flip:server:1@step=10:bit=22"], tmp_path)
    assert hit["detected_step"] == 10 and hit["repaired_step"] == 10 and hit["located"] is True
    assert s["scrub_repaired"] == 1 and s["scrub_unlocated"] == 0 and s["corruptions_repaired"] == 1
    (detail,) = event_details(run.result(), "scrub_repair")
    assert detail.startswith(f"global row {hit['global_row']}: stripe ")
    assert detail.endswith("corrected from the code")
    assert s["param_checksum"] == reference  # the failure-free model, bit for bit
    # the final models kept (output.final_model): the failure-free one here, and under none the
    # flipped row (and whatever it moved since) off it
    (early,) = json.loads(corrupted.result().summary["corruptions"])
    moved = model_difference(corrupted.result(), run.result())
    assert moved["rows_differing"] >= 1 and 0 < moved["max_weight_error"] < 1
    a, b = corrupted.result().final_model, run.result().final_model
    assert not np.array_equal(a.embeddings[early["global_row"]], b.embeddings[early["global_row"]])
    assert model_difference(run.result(), run.result()) == {"rows_differing": 0, "max_weight_error": 0.0,
                                                          "dense_differs": False}


@pytest.mark.parametrize("strategy", [
    ["ckpt"],
    ["cnr", "--set", "strategy.quantization='none'"],
    ["cpr"],  # partial recovery: the replacement's rows are older by design
    ["log"],  # its logs reach back to the newest checkpoint only: a refused part loses the run
], ids=["ckpt", "cnr", "cpr", "log"])
def test_a_flipped_checkpoint_part_is_refused_on_restore_naming_its_file(strategy, reference, tmp_path):
    """Server 1's part of the newest complete checkpoint (step 19; step 9 where the commit of 19 is
    late, on a loaded machine) gets one flipped bit at rest at step 22; server 1 dies at step 25:
    no recovery resumes from the flipped checkpoint; the restore that reads it refuses it (CRC-32),
    naming the file, and the strategy falls back to what it has."""
    run = mpiec(["run", *TINY, "--strategy", *strategy, "--set", "strategy.interval=10",
                 "--set", "layout.spares=1", "--kill", "flip:server:1@step=22:of=checkpoint",
                 "--kill", "server:1@step=25"], out=tmp_path)
    assert run.code in (0, 1), run.stdout + run.stderr
    result = run.result()
    s = result.summary
    (hit,) = json.loads(s["corruptions"])
    flipped = hit["checkpoint_step"]
    assert flipped in (9, 19) and hit["file"] == "server-1.table.npy"
    assert flipped + 1 not in resumed_at(result)  # never restored from the flipped part
    refused = event_details(result, "restore_failed")
    named = [d for d in refused if f"step-{flipped:09d}/server-1.table.npy: corrupted" in d]
    if named or strategy[0] != "cnr":  # cnr names the chain link (a diff or its baseline) instead
        tried = bool(named)
    else:
        tried = any(f"checkpoint {flipped}" in d or f"baseline {flipped}" in d for d in refused)
    if flipped == 19:  # the newest checkpoint when server 1 died: its restore reads the part
        assert tried and (hit["detected_step"], hit["detected_by"]) == (25, "restore_failed"), refused
    if strategy[0] == "log" and tried:
        assert run.code == 1 and s["lost"] and "does not keep the gradients" in s["abort_reason"]
    elif strategy[0] in ("ckpt", "cnr", "log"):
        assert run.code == 0 and s["param_checksum"] == reference  # an older checkpoint, replayed
    else:
        assert run.code == 0 and not s["lost"] and s["param_checksum"]


def test_the_replicas_cross_check_trains_what_a_run_without_it_trains(reference, tmp_path):
    run = mpiec(["run", *TINY, "--set", "failures.dense_check_every=1"], out=tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    assert run.result().summary["param_checksum"] == reference


def test_the_replicas_cross_check_repairs_a_dense_flip_with_three_trainers(reference, tmp_path):
    run, s, hit = flipped(["--set", "layout.trainers=3", "--set", "failures.dense_check_every=1",
                          "--kill", "flip:trainer:1@step=5:bit=22"], tmp_path)
    assert (hit["detected_step"], hit["detected_by"], hit["repaired_step"]) == (5, "replica_mismatch", 5)
    assert s["dense_replicas_consistent"]  # one again: trainer 1 took the majority's replica
    assert s["param_checksum"] != reference  # step 5's gradients were computed with the flipped weight


def test_the_replicas_cross_check_detects_but_cannot_locate_with_two_trainers(tmp_path):
    run, s, hit = flipped(["--set", "failures.dense_check_every=2",
                          "--kill", "flip:trainer:0@step=6:bit=22"], tmp_path)
    assert (hit["detected_step"], hit["detected_by"], hit["repaired_step"]) == (7, "replica_mismatch", None)
    assert not s["dense_replicas_consistent"]
    detail = event_details(run.result(), "replica_mismatch")[0]
    assert "no majority" in detail


def test_the_shard_check_finds_a_flipped_row_before_its_update_and_names_it(tmp_path):
    """Row 0 (the hottest of table 0) flipped at the start of step 8 is found before the next update
    of it (the scan every 1,000 steps never runs in 40): located, not repaired."""
    run, s, hit = flipped(["--set", "failures.shard_check_every=1000",
                           "--kill", "flip:server:0@step=8:row=0,bit=22"], tmp_path)
    assert hit["detected_by"] == "shard_mismatch" and 8 <= hit["detected_step"] <= 12
    assert hit["repaired_step"] is None and s["corruptions_detected"] == 1 and hit["located"] is True
    (detail,) = event_details(run.result(), "shard_mismatch")
    assert detail.startswith("global row 0: 1 row(s) of server:0 changed at rest, found before its update")


GRADIENT = "flip:trainer:1@step=21:of=gradient,bit=30"  # in transit: what server receives, an exponent bit
CHECKSUMS = ["--set", "failures.message_checksums=true"]


def test_a_gradient_message_flip_persists_without_the_checksums(reference, tmp_path):
    run, s, hit = flipped(["--strategy", "ckpt", "--kill", GRADIENT], tmp_path)
    assert hit["fired"] and hit["message"] == "gradient" and hit["before"] != hit["after"]
    assert hit["detected_step"] is None and s["recoveries"] == 0
    assert s["param_checksum"] != reference  # the servers applied the flipped gradient


@pytest.mark.parametrize("strategy", [["--strategy", "ckpt"],
                                      ["--strategy", "ecrm", "--set", "layout.servers=3"]],
                         ids=["ckpt", "ecrm"])
def test_the_checksums_refuse_a_flipped_message_and_the_step_runs_again(strategy, reference, tmp_path):
    run, s, hit = flipped([*strategy, *CHECKSUMS, "--kill", GRADIENT], tmp_path)
    assert (hit["detected_step"], hit["detected_by"], hit["repaired_step"]) == (21, "message_corrupt", 21)
    assert s["param_checksum"] == reference and s["recoveries"] == 1 and s["kills_fired"] == 0
    assert "step 21: the gradient message from trainer 1 (" in run.stdout
    assert set(resumed_at(run.result())) == {21}  # every rank resumed at the refused step


def test_a_detection_outlives_the_server_that_made_it(reference, tmp_path):
    """Both servers die after one of them refused the flipped message: its ``message_corrupt`` event
    was kept on disk when it was recorded, so the result file still says who found the flip."""
    run, s, hit = flipped(["--strategy", "ckpt", "--set", "strategy.interval=10", "--set", "layout.spares=2",
                           *CHECKSUMS, "--kill", GRADIENT, "--kill", "server:0@step=25",
                           "--kill", "server:1@step=25"], tmp_path)
    assert s["kills_fired"] == 2 and s["recoveries"] == 2
    assert (hit["detected_step"], hit["detected_by"], hit["repaired_step"]) == (21, "message_corrupt", 21)
    (detail,) = event_details(run.result(), "message_corrupt")
    assert detail.startswith("step 21: the gradient message from trainer 1 (")
    assert s["param_checksum"] == reference


def test_the_checksums_change_nothing_without_a_flip_and_none_cannot_go_on_after_one(reference, tmp_path):
    # the shard check too, at its strictest: it finds nothing and changes nothing in a clean run
    run = mpiec(["run", *TINY, *CHECKSUMS, "--set", "failures.shard_check_every=1"], out=tmp_path / "clean")
    assert run.code == 0 and run.result().summary["param_checksum"] == reference, run.stdout + run.stderr
    assert not event_details(run.result(), "shard_mismatch")
    run = mpiec(["run", *TINY, *CHECKSUMS, "--kill", GRADIENT], out=tmp_path / "none")
    s = run.result().summary
    assert run.code == 1 and s["lost"] and "strategy none does not recover" in s["abort_reason"]
    (hit,) = json.loads(s["corruptions"])
    assert (hit["detected_step"], hit["repaired_step"]) == (21, None)


@pytest.mark.parametrize("code, checked, repaired", [
    ([], False, False),
    (["--set", "strategy.verify_every=1"], True, False),
    (["--set", "strategy.code='rs'", "--set", "strategy.k=2", "--set", "strategy.r=2",
      "--set", "strategy.verify_every=1"], True, True),
], ids=["ecrm", "xor-verified", "rs-verified"])
def test_a_flipped_parity_row_is_seen_by_the_check_and_located_by_rs(code, checked, repaired, reference,
                                                                      tmp_path):
    run, s, hit = flipped(["--strategy", "ecrm", "--set", "layout.servers=4", *code,
                           "--kill", "flip:server:1@step=12:of=parity"], tmp_path)
    assert hit["fired"] and {"stripe", "parity_member", "parity_row"} <= set(hit)
    seen = (12, "parity_mismatch") if checked else (None, None)
    assert (hit["detected_step"], hit["detected_by"]) == seen
    assert hit["repaired_step"] == (12 if repaired else None)
    assert s["param_checksum"] == reference  # parity is no part of the model (until a rebuild reads it)


def test_without_ulfm_a_refused_message_stops_the_run_naming_it(tmp_path):
    run = mpiec(["run", *TINY, "--strategy", "ckpt", "--set", "failures.mode='emulated'", *CHECKSUMS,
                 "--kill", GRADIENT, "--timeout", "90"], out=tmp_path, timeout=200)
    out = run.stdout + run.stderr
    assert run.code == 3 and "exceeded its time limit" not in out, out  # the job ends, not its limit
    assert "step 21: the gradient message from trainer 1 (" in out and "without ULFM" in out


CHECKS = [["--set", "strategy.verify_every=1"], ["--set", "strategy.scrub_stripes=2000"]]


@pytest.mark.parametrize("check", CHECKS, ids=["verify_every", "scrub_stripes"])
def test_one_parity_row_and_a_fallback_roll_back_past_an_unlocated_flip(check, reference, tmp_path):
    """xor (r = 1) cannot say which member is wrong; with ``fallback = "ckpt"`` the run rolls back to
    a fallback checkpoint from before the last check every stripe passed, and the flip, fired once,
    is gone: the failure-free model."""
    run, s, hit = flipped(["--strategy", "ecrm", *check, "--set", "strategy.fallback='ckpt'",
                           "--set", "strategy.fallback_interval=3", "--kill", "flip:server:1@step=12:bit=22"],
                          tmp_path)
    assert hit["detected_by"] == "parity_mismatch" and hit["detected_step"] >= 12
    assert s["scrub_unlocated"] >= 1 and s["recoveries"] == 1 and s["kills_fired"] == 0
    assert "not located (r = 1): rollback to the newest fallback checkpoint at or before step " in run.stdout
    assert min(resumed_at(run.result())) <= 12 and hit["repaired_step"] is not None
    assert s["param_checksum"] == reference
