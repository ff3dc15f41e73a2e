"""Repeated benches in the report: grouped rows, medians with intervals, n.s., the trust line, the frame."""

from __future__ import annotations

import pytest
from mpiec.analysis import frame_rows, load_results, report
from mpiec.analysis.metrics import compare
from mpiec.analysis.tables import comparison_table, comparison_tables, group_runs, shares_cores, trust_line
from synthetic import write_run

N = 5
NOISE = [0.0, 12.0, -9.0, 5.0, -4.0]


def write_repeats(d, other: float = 0.01):
    """none, ckpt (20 % slower) and ecrm (as fast as none) failure-free N times each, ckpt under a kill."""
    disturbance = {"other_cpu_share": other, "run_cpu_share": 0.9, "host_load_1m": 2.0, "host_cores": 2,
                   "step_time_spread": 0.1}
    d.mkdir(parents=True)
    for i in range(N):
        for v, thr in (("none", 1000.0), ("ckpt", 800.0), ("ecrm", 1001.0)):
            # each variant its own noise (ecrm's not none's: the pairing must not cancel it)
            write_run(d / f"{v}-ff-r{i}.h5", v, throughput=thr + NOISE[(i + len(v) + (v == "ecrm")) % N],
                      config={"output": {"name": f"tiny-{v}-ff-s1-r{i}"}}, rss_mb=[100.0, 100.0 + i],
                      summary={**disturbance, "server_cpu_s_per_step": 0.002 if v == "ckpt" else 0.001,
                               "trainer_cpu_s_per_step": 0.003})
        write_run(d / f"ckpt-server-r{i}.h5", "ckpt", throughput=700.0 + NOISE[i], kill_at=20,
                  kill_plan=[f"server:1@step={20 + 2 * i}"],
                  config={"output": {"name": f"tiny-ckpt-server-s1-r{i}"}},
                  summary={**disturbance, "time_lost_s": 0.5 + 0.1 * i, "recoveries": 1,
                           "reexecuted_steps": i})
    return d


@pytest.fixture
def repeats(tmp_path):
    return write_repeats(tmp_path / "rep")


def test_repeats_are_grouped_into_one_row_per_variant_with_intervals(repeats):
    results = load_results(repeats)
    tables = comparison_tables(results)
    ff = tables[0]
    assert ff.title.startswith("failure-free (5 rounds: medians (range of 5 runs); vs the baseline paired")
    assert [r[0] for r in ff.rows] == ["none", "ckpt", "ecrm"]
    assert all(r[1] == str(N) for r in ff.rows)
    col = ff.header.index("thr. overhead %")
    assert ff.rows[1][col].startswith("+20.") and "[" in ff.rows[1][col]  # significant: a signed number
    assert ff.rows[2][col].startswith("n.s. [")  # within noise: no sign
    samples = ff.rows[0][ff.header.index("samples/s")]
    assert samples.startswith("1000 (range ") and "[" not in samples  # 5 runs: a range, not a 95 % bracket
    notes = " ".join(ff.notes)
    assert "paired by round" in notes and "t(0.975, n−1)" in notes and "not a 95 % interval" in notes
    fail = tables[1]
    assert [r[0] for r in fail.rows] == ["ckpt"]
    assert "±" in fail.rows[0][fail.header.index("time lost s (mean ± sd)")]
    assert any("(5/5)" in v for v in fail.verdicts)


def test_the_trust_line_says_trustworthy_or_inconclusive_and_disturbed_with_the_share(tmp_path, repeats):
    quiet = comparison_table(load_results(repeats))
    assert "DISTURBED" not in quiet
    (line,) = [x for x in quiet.splitlines() if x.startswith("comparison ")]
    assert line.startswith("comparison NOT trustworthy: effects not resolved by the intervals (throughput "
                           "overhead %: ecrm n.s. [")
    results = load_results(repeats)
    full = trust_line(group_runs(compare(results), results))
    assert "rounds would resolve the largest (ecrm)" in full or "ecrm's effect is within its noise" in full
    busy = comparison_table(load_results(write_repeats(tmp_path / "busy", other=0.45)))
    (line,) = [x for x in busy.splitlines() if x.startswith("comparison ")]
    assert line.startswith("comparison NOT trustworthy: DISTURBED (other processes took 45 % of the CPU")


def test_where_ranks_share_cores_the_cpu_cost_is_the_headline(repeats):
    results = load_results(repeats)
    for r in results:
        r.attrs["n_ranks"] = 7
    groups = group_runs(compare(results), results)
    assert shares_cores(groups) is True
    ff = comparison_tables(results)[0]
    assert ff.header[2] == "ΔCPU server ms/step" and ff.header[4] == "thr. overhead %"
    assert ff.rows[1][0] == "ckpt" and ff.rows[1][2].startswith("+1.00")  # ckpt's server: 1 ms more per step
    assert "share cores" in " ".join(ff.notes)
    assert trust_line(groups).startswith("comparison ")


def test_the_frame_has_one_row_per_run_with_repeat_variant_and_scenario(repeats):
    rows = frame_rows(load_results(repeats))
    assert len(rows) == 4 * N
    assert sorted(r["repeat"] for r in rows if r["variant"] == "none") == list(range(N))
    kinds = {(r["variant"], r["kind"]) for r in rows}
    assert ("ckpt", "failure") in kinds and ("ecrm", "failure-free") in kinds
    assert {r["scenario"] for r in rows if r["kind"] == "failure"} >= {"server:1@step=20"}
    assert all(r["other_cpu_share"] == pytest.approx(0.01) for r in rows)
    pd = pytest.importorskip("pandas")
    from mpiec.analysis import frame

    df = frame(repeats)
    assert isinstance(df, pd.DataFrame) and len(df) == 4 * N
    assert {"repeat", "variant", "scenario", "kind", "throughput_sps"} <= set(df.columns)


def test_report_prints_the_trust_line_once_and_writes_the_intervals_to_csv(repeats, tmp_path, capsys):
    assert report.main([str(repeats)]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("comparison ") for line in out.splitlines()) == 1
    assert "events:" not in out
    written = report.write_report(load_results(repeats), tmp_path / "out")
    csv_text = (tmp_path / "out" / "comparison.csv").read_text()
    assert tmp_path / "out" / "comparison.csv" in written and "n.s. [" in csv_text
