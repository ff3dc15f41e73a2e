"""The derived figures: twin and baseline pairing, lossless, ΔAUC, ETTR, recovery split, intervals."""

from __future__ import annotations

import json

import pytest
from mpiec.analysis import compare, load_results
from mpiec.analysis.metrics import RECOVERY_PHASES, interval_label, recovery_means, twin_for
from synthetic import SAMPLES, recovery, wall_time


def by_run(results):
    return {m.run: m for m in compare(results)}


def test_failure_runs_are_paired_with_their_failure_free_twin(bench_dir):
    m = by_run(load_results(bench_dir))
    for s in ("none", "ckpt", "cpr", "ecrm"):
        assert m[f"{s}-ff"].failure is False and m[f"{s}-ff"].twin_run is None
        assert m[f"{s}-kill"].failure is True and m[f"{s}-kill"].twin_run == f"{s}-ff"
    assert m["none-kill"].lossless is None  # lost: it has a twin but no checksum to compare


def test_twin_needs_same_variant_seed_and_config(tmp_path, make_run):
    make_run(tmp_path / "ff1.h5", "ckpt", seed=1, kill_plan=[])
    make_run(tmp_path / "ff2.h5", "ckpt", seed=2, kill_plan=[])
    make_run(tmp_path / "ff10.h5", "ckpt", seed=2, kill_plan=[], variant="ckpt:interval=10")
    make_run(tmp_path / "ffspare.h5", "ckpt", seed=3, kill_plan=[], config={"layout": {"spares": 2}})
    make_run(tmp_path / "k2.h5", "ckpt", seed=2, kill_at=20, kill_plan=["server:1@step=20"])
    make_run(tmp_path / "k10.h5", "ckpt", seed=2, kill_at=20, kill_plan=["server:1@step=20"],
             variant="ckpt:interval=10")
    make_run(tmp_path / "k3.h5", "ckpt", seed=3, kill_at=20, kill_plan=["server:1@step=20"],
             config={"layout": {"spares": 1}})
    m = by_run(load_results(tmp_path))
    assert m["k2"].twin_run == "ff2"
    assert m["k10"].twin_run == "ff10"
    assert m["k3"].twin_run is None and m["k3"].lossless is None and m["k3"].delta_auc is None


def test_a_planned_kill_that_never_fired_is_still_a_failure_run(tmp_path, make_run):
    make_run(tmp_path / "ff.h5", "ecrm", kill_plan=[])
    make_run(tmp_path / "late.h5", "ecrm", kill_plan=["server:0@step=999"])
    rs = load_results(tmp_path)
    m = by_run(rs)
    assert m["late"].failure and m["late"].kills == 0 and m["late"].twin_run == "ff"
    ff = next(r for r in rs if r.name == "ff")
    assert twin_for(ff, rs) is None


def test_lossless_and_deltas(bench_dir):
    m = by_run(load_results(bench_dir))
    assert m["ckpt-kill"].lossless is True and m["ecrm-kill"].lossless is True
    assert m["ckpt-kill"].delta_auc == 0.0 and m["ckpt-kill"].delta_logloss == 0.0
    cpr = m["cpr-kill"]
    assert cpr.lossless is False
    twin_auc = 0.70 + 49 / 10000  # the synthetic run's last evaluation (step 49)
    assert cpr.delta_auc == pytest.approx(0.7 - twin_auc)
    assert cpr.delta_logloss == pytest.approx(0.01)
    assert m["none-kill"].lost and m["none-kill"].lossless is None and m["none-kill"].delta_auc is None


def test_lost_samples_and_pls(bench_dir):
    m = by_run(load_results(bench_dir))
    samples = 50 * SAMPLES
    # written without ettr: cpr's pls counts as lost samples, as the runtime counts it now
    assert m["cpr-kill"].lost_samples == round(0.05 * samples) and m["cpr-kill"].pls == 0.05
    assert m["ckpt-kill"].lost_samples == 0 and m["ckpt-kill"].pls == 0.0
    lost = m["none-kill"]  # a lost run: PLS is the share of the planned samples never trained
    assert lost.lost_samples == 29 * SAMPLES
    assert lost.pls == pytest.approx(29 / (21 + 29))


def test_ettr_and_goodput_from_the_summary_or_recomputed(bench_dir):
    m = by_run(load_results(bench_dir))
    assert (m["ckpt-ff"].ettr, m["ckpt-ff"].goodput_sps) == (0.9, 800.0)  # as recorded
    wall = wall_time(50)
    ckpt = m["ckpt-kill"]  # recomputed: 1 − time lost / wall, kept samples / wall
    assert ckpt.time_lost_s == pytest.approx(0.9)
    assert ckpt.ettr == pytest.approx(1 - 0.9 / wall)
    assert ckpt.goodput_sps == pytest.approx(50 * SAMPLES / wall)
    cpr = m["cpr-kill"]
    assert cpr.ettr == pytest.approx(1 - 0.6 / wall)
    assert cpr.goodput_sps == pytest.approx((50 * SAMPLES - cpr.lost_samples) / wall)
    assert m["none-kill"].ettr == 0.0 and m["none-kill"].goodput_sps == 0.0


def test_recovery_split_means_and_time_lost_per_failure(tmp_path, make_run):
    recs = [recovery(2.0, detection=0.1, restore=0.3), recovery(6.0, detection=0.3, restore=0.1, reexec=0.4)]
    make_run(tmp_path / "r.h5", "ckpt", kill_at=10, recoveries=recs)
    r = load_results(tmp_path)[0]
    means = recovery_means(r)
    assert means["detection_s"] == pytest.approx(0.2) and means["restore_s"] == pytest.approx(0.2)
    assert means["reexec_s"] == pytest.approx(0.2)
    assert sum(means[p] for p in RECOVERY_PHASES) == pytest.approx(means["time_lost_s"])
    m = compare([r])[0]
    assert m.recoveries == 2
    assert m.time_lost_per_failure_s == pytest.approx(sum(x["time_lost_s"] for x in recs) / 2)
    make_run(tmp_path / "n.h5", "none")
    assert recovery_means(load_results(tmp_path / "n.h5")[0]) == {}


def test_overhead_memory_and_protection_bytes(bench_dir, tmp_path, make_run):
    m = by_run(load_results(bench_dir))
    assert m["ckpt-ff"].overhead_pct == pytest.approx(20.0)
    assert m["ckpt-ff"].baseline_run == "none-ff"  # the clean none run, not the lost one
    assert m["ckpt-ff"].memory_overhead_mb == pytest.approx(20.0)
    assert m["ecrm-ff"].memory_overhead_mb == pytest.approx(120.0)
    assert m["ckpt-kill"].memory_overhead_mb is None  # no ranks recorded
    assert m["ecrm-ff"].protection_bytes == 3_000_000  # parity_bytes, no protection_bytes key
    assert m["ckpt-ff"].protection_bytes == 4_000_000
    # a stale stored value (monitors before v4 missed bytes recorded only as checkpoint rows, like
    # ecsnap's snapshots) is not trusted: checkpoint bytes (here the rows' default) + parity bytes
    make_run(tmp_path / "p.h5", "ecsnap", summary={"protection_bytes": 0, "parity_bytes": 3},
             checkpoints=[(9, "snapshot", 500), (19, "snapshot", 700)])
    assert compare(load_results(tmp_path / "p.h5"))[0].protection_bytes == 1203


def test_checkpoint_interval_recorded_or_measured(bench_dir, tmp_path, make_run):
    rs = {r.name: r for r in load_results(bench_dir)}
    assert interval_label(rs["ckpt-ff"]) == (10, 1.25, "young")
    assert interval_label(rs["cpr-ff"]) == (10, None, "pls")
    assert interval_label(rs["ckpt-kill"]) == (10, None, "measured")  # only its checkpoints say
    assert interval_label(rs["ecrm-ff"]) == (None, None, "")
    make_run(tmp_path / "t.h5", "ckpt", summary={"checkpoint_interval": "7 steps"})
    assert interval_label(load_results(tmp_path / "t.h5")[0]) == (7, None, "given")


def test_as_row_is_flat(bench_dir):
    row = next(m for m in compare(load_results(bench_dir)) if m.run == "ckpt-kill").as_row()
    assert row["run"] == "ckpt-kill" and "recovery" not in row
    assert row["recovery_detection_s"] == pytest.approx(0.1)
    assert all(not isinstance(v, dict | list) for v in row.values())


def test_a_repeats_twin_is_the_failure_free_run_of_its_round(tmp_path, make_run):
    """Repeated benches: the run next to it in time, not the first failure-free run found."""
    for i in range(3):
        make_run(tmp_path / f"tiny-ckpt-ff-s1-r{i}.h5", "ckpt", kill_plan=[])
    make_run(tmp_path / "tiny-ckpt-server-s1-r2.h5", "ckpt", kill_at=20, kill_plan=["server:1@step=20"])
    m = by_run(load_results(tmp_path))
    assert m["tiny-ckpt-server-s1-r2"].twin_run == "tiny-ckpt-ff-s1-r2"


def test_the_final_models_say_how_many_rows_a_flip_moved_and_by_how_much(tmp_path, make_run):
    import math

    import numpy as np
    from mpiec.analysis.tables import DASH, corruption_table

    dense = np.ones(3, np.float32)
    emb = np.zeros((5, 2), np.float32)
    moved = emb.copy()
    moved[3, 1] = 0.25
    moved[4, 0] = -0.0  # bitwise another weight: a row that differs, by 0
    flip = json.dumps([{"step": 4, "detected_step": None, "repaired_step": None}])
    make_run(tmp_path / "ff.h5", "none", kill_plan=[], final_model=(dense, emb), checksum="a")
    make_run(tmp_path / "flip.h5", "none", kill_plan=["flip:server:1@step=4"], checksum="b",
             final_model=(dense, moved), summary={"corruptions": flip})
    nan = moved.copy()
    nan[0, 0] = np.inf
    make_run(tmp_path / "inf.h5", "none", kill_plan=["flip:server:0@step=4"], checksum="c",
             final_model=(dense, nan), summary={"corruptions": flip}, variant="none")
    make_run(tmp_path / "none.h5", "none", kill_plan=["flip:server:1@step=4"], checksum="d",
             summary={"corruptions": flip})
    m = by_run(load_results(tmp_path))
    assert (m["flip"].rows_differing, m["flip"].max_weight_error, m["flip"].dense_differs) == (2, 0.25, False)
    assert m["inf"].rows_differing == 3 and math.isnan(m["inf"].max_weight_error)
    assert m["none"].rows_differing is None and m["none"].max_weight_error is None  # no model kept
    assert m["ff"].rows_differing is None  # no twin
    assert corruption_table([m["flip"]]).rows[0][7:9] == ["2", "0.25"]
    assert corruption_table([m["inf"]]).rows[0][7:9] == ["3", "nan"]
    assert corruption_table([m["none"]]).rows[0][7:9] == [DASH, DASH]
