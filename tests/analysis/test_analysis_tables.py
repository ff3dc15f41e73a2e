"""Comparison table, overhead, phase breakdown, events."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpiec.analysis import (
    comparison_table,
    format_events,
    format_phase_breakdown,
    load_results,
    phase_breakdown,
    summary_rows,
)
from mpiec.analysis.tables import phase_table, runs_table


def by_strategy(rows):
    return {r["strategy"]: r for r in rows}


def test_overhead_vs_none(runs_dir):
    rows = by_strategy(summary_rows(load_results(runs_dir)))
    assert rows["none"]["overhead_pct"] == pytest.approx(0.0)
    assert rows["ecrm"]["overhead_pct"] == pytest.approx(10.0)
    assert rows["cpr"]["overhead_pct"] == pytest.approx(20.0)
    assert rows["ecrm"]["baseline_run"] == "none"


def test_baseline_prefers_clean_run_with_same_seed(tmp_path, make_run):
    make_run(tmp_path / "a.h5", "none", seed=1, throughput=10.0, kill_at=5, lost=True)
    make_run(tmp_path / "b.h5", "none", seed=2, throughput=500.0)
    make_run(tmp_path / "c.h5", "none", seed=1, throughput=1000.0)
    make_run(tmp_path / "d.h5", "ecrm", seed=1, throughput=900.0)
    rows = {r["run"]: r for r in summary_rows(load_results(tmp_path))}
    assert rows["d"]["baseline_run"] == "c"
    assert rows["d"]["overhead_pct"] == pytest.approx(10.0)


def test_runs_table_layout_and_markers(runs_dir):
    t = runs_table(load_results(runs_dir))
    title, header, sep, *lines = t.text().splitlines()
    assert title == "runs"
    assert "samples/s" in header and "overhead %" in header and "protection B" in header
    assert len(t.rows) == 3
    table = lines[:3]  # the notes follow
    # aligned: every row is as wide as the separator (trailing blanks stripped)
    assert all(len(ln) <= len(sep) for ln in table)
    cpr = next(ln for ln in table if "cpr" in ln)
    ecrm = next(ln for ln in table if "ecrm" in ln)
    assert "(emulated)" in cpr and "(emulated)" not in ecrm
    assert "+20.0" in cpr and "+10.0" in ecrm
    assert "0.250" in ecrm and "3.0 MiB" in ecrm
    none = next(ln for ln in table if ln.startswith("none"))
    assert "—" in none  # no recovery latency
    assert "baseline" in none and "+0.0" not in none  # no overhead against itself
    # numeric column right-aligned: throughput ends at the same column
    col_end = header.index("samples/s") + len("samples/s")
    assert all(ln[col_end - 1].isdigit() for ln in table)


def test_no_baseline_prints_dash(tmp_path, make_run):
    make_run(tmp_path / "x.h5", "ecrm")
    text = comparison_table(load_results(tmp_path))
    row = text.splitlines()[3]
    assert row.startswith("ecrm") and "—" in row and "+" not in row
    assert "no such 'none' run here" in text


def test_partial_marker(tmp_path):
    from mpiec.results import ResultWriter

    w = ResultWriter(tmp_path / "p.h5", {"config": {}, "strategy": "cnr", "seed": 0,
                                         "failure_mode": "ulfm", "ulfm": True})
    w.flush_partial()
    assert "(partial)" in comparison_table(load_results(tmp_path))


def test_phase_breakdown_excludes_warmup(runs_dir):
    r = load_results(runs_dir / "none.h5")[0]
    shares = phase_breakdown(r)  # default warm-up: 10 steps of 50
    assert shares["compute"] == pytest.approx(0.6)
    assert shares["data"] == pytest.approx(0.1)
    assert shares["comm"] == pytest.approx(0.2)
    assert shares["other"] == pytest.approx(0.0, abs=1e-9)
    with_warmup = phase_breakdown(r, warmup=0)  # includes the 1 s warm-up steps
    assert with_warmup["compute"] < 0.5
    assert set(shares) == {"data", "compute", "comm", "wait", "server", "strategy", "other"}


def test_phase_breakdown_empty(tmp_path, make_run):
    make_run(tmp_path / "e.h5", "none", steps=2)
    r = load_results(tmp_path)[0]
    assert all(math.isnan(v) for v in phase_breakdown(r, warmup=2).values())
    assert "—" in format_phase_breakdown(r, warmup=2)


def test_printable_breakdowns_and_events(runs_dir):
    rs = load_results(runs_dir)
    line = format_phase_breakdown(rs[0])
    assert "compute 60.0%" in line
    assert len(phase_table(rs).splitlines()) == 2 + 3
    ecrm = next(r for r in rs if r.strategy == "ecrm")
    ev = format_events(ecrm)
    assert "kill" in ev and "server[1]" in ev and "server:1@step=20" in ev
    none = next(r for r in rs if r.strategy == "none")
    assert format_events(none).endswith("no events")


def test_other_share_is_never_negative(tmp_path):
    """t_server overlaps t_wait (measured on the servers): it must not push "other" below 0."""
    from mpiec.results import TIMELINE_DTYPE, ResultWriter

    w = ResultWriter(tmp_path / "o.h5", {"config": {}, "strategy": "none", "seed": 0,
                                         "failure_mode": "ulfm", "ulfm": True})
    tl = np.zeros(20, TIMELINE_DTYPE)
    tl["step"] = np.arange(20)
    tl["dt"] = 0.1
    tl["t_end"] = np.cumsum(tl["dt"])
    tl["samples"] = 64
    tl["t_compute"], tl["t_wait"], tl["t_server"] = 0.05, 0.04, 0.035  # server inside the wait
    w.add_steps(tl)
    w.close({"lost": False})
    r = load_results(tmp_path / "o.h5")[0]
    shares = phase_breakdown(r, warmup=0)
    assert shares["server"] == pytest.approx(0.35) and shares["wait"] == pytest.approx(0.4)
    assert shares["other"] == pytest.approx(0.1)
    tl["t_compute"] = 0.07  # trainer phases that add up to a little more than the step
    w2 = ResultWriter(tmp_path / "p.h5", {"config": {}, "strategy": "none", "seed": 0,
                                          "failure_mode": "ulfm", "ulfm": True})
    w2.add_steps(tl)
    w2.close({"lost": False})
    shares = phase_breakdown(load_results(tmp_path / "p.h5")[0], warmup=0)
    assert shares["other"] == 0.0
    assert "-" not in phase_table(load_results(tmp_path)).split("\n", 2)[2].replace("—", "")


def test_a_kill_that_did_not_fire_is_shown_under_the_failure_table(tmp_path):
    """A bench compares strategies under the same failures: a run whose planned kill never fired says so."""
    import json

    from mpiec.analysis import load_results
    from mpiec.analysis.tables import comparison_table
    from synthetic import write_run

    write_run(tmp_path / "a.h5", "none", throughput=1000.0)
    write_run(tmp_path / "b.h5", "ckpt", throughput=900.0, kill_at=20,
              kill_plan=["server:1@step=20", "server:0@step=30"],
              summary={"kills_planned": 2, "kills_unfired": json.dumps(
                  [{"kill": "server:0@step=30", "why": "no rank holds server:0 any more"}])})
    text = " ".join(comparison_table(load_results(tmp_path)).split())
    assert "NOT the same failures: b: 1 of 2 planned kill(s) did not fire (server:0@step=30: no rank" in text
