"""The bench's comparison: the failure-free and the failure table, verdicts, recovery table, renderers."""

from __future__ import annotations

import csv
import io

import pytest
from mpiec.analysis import comparison_table, comparison_tables, load_results, summary_rows
from mpiec.analysis.tables import DASH, Table


@pytest.fixture(scope="module")
def tables(bench_dir):
    return {t.title.split(":")[0]: t for t in comparison_tables(load_results(bench_dir))}


def rows_by_strategy(table):
    return {row[0]: dict(zip(table.header, row, strict=True)) for row in table.rows}


def test_three_tables_one_row_per_run_of_their_kind(tables):
    assert list(tables) == ["failure-free", "under failures", "recovery breakdown"]
    strategies = ["none", "ckpt", "cpr", "ecrm"]
    assert sorted(rows_by_strategy(tables["failure-free"])) == sorted(strategies)
    assert sorted(rows_by_strategy(tables["under failures"])) == sorted(strategies)
    assert sorted(rows_by_strategy(tables["recovery breakdown"])) == ["ckpt", "cpr", "ecrm"]  # none: lost


def test_failure_table_title_names_the_scenario(bench_dir):
    titles = [t.title for t in comparison_tables(load_results(bench_dir))]
    assert "under failures: server:1@step=20" in titles


def test_failure_free_table_values(tables):
    ff = rows_by_strategy(tables["failure-free"])
    assert ff["ckpt"]["overhead %"] == "+20.0" and ff["none"]["overhead %"] == "baseline"
    assert ff["ckpt"]["ckpt interval"] == "10 (young, 1.25 s)" and ff["cpr"]["ckpt interval"] == "10 (pls)"
    assert ff["ecrm"]["ckpt interval"] == DASH
    assert ff["ckpt"]["ETTR"] == "0.900" and ff["ckpt"]["stall s"] == "0.40"
    assert ff["ecrm"]["RSS MiB (Δ)"].endswith(" (+120)") and ff["ecrm"]["protection B"] == "2.9 MiB"


def test_failure_table_says_who_lost_data_and_who_lost_time(tables):
    f = rows_by_strategy(tables["under failures"])
    assert f["none"]["lossless"] == "run lost" and f["none"]["ETTR"] == "0.000"
    assert f["ckpt"]["lossless"] == "yes" and f["ckpt"]["ΔAUC"] == "+0.0000"
    assert f["cpr"]["lossless"] == "no" and f["cpr"]["lost samples"] == "160"
    assert f["cpr"]["ΔAUC"] == "-0.0049" and f["cpr"]["PLS"] == "0.050"
    assert f["ckpt"]["time lost s"] == "0.90" and f["ecrm"]["time lost s"] == "0.37"
    notes = tables["under failures"].verdicts
    assert "lost the run: none (strategy none does not recover from failures)" in notes
    assert "lost data: cpr (160 samples, ΔAUC -0.0049)" in notes
    assert "lost time only: ckpt (0.90 s), ecrm (0.37 s)" in notes


def test_recovery_table_phases_add_up(tables):
    t = tables["recovery breakdown"]
    for row in t.rows:
        cells = dict(zip(t.header, row, strict=True))
        phases = [float(cells[h]) for h in t.header[2:-1]]
        assert sum(phases) == pytest.approx(float(cells["time lost s"]), abs=2e-3)


def test_text_fits_120_columns_and_is_aligned(bench_dir):
    text = comparison_table(load_results(bench_dir))
    assert max(len(line) for line in text.splitlines()) <= 120
    for block in text.split("\n\n"):
        _title, header, sep, *_ = block.splitlines()
        assert len(header) <= len(sep) + 1 and set(sep) <= {"-", " "}


def test_markdown_and_csv_renderers():
    t = Table("demo", ["name", "n"], [["a|b", "1"], ["c", DASH]], right={1}, notes=["a note"])
    md = t.markdown().splitlines()
    assert md[0] == "### demo"
    assert md[2] == "| name | n |" and md[3] == "| :--- | ---: |"
    assert md[4] == "| a\\|b | 1 |"  # a pipe in a cell does not open a column
    assert md[-1] == "* a note"
    rows = list(csv.reader(io.StringIO(t.csv())))
    assert rows == [["name", "n"], ["a|b", "1"], ["c", ""]]
    assert "(no runs)" in Table("empty", ["x"], []).text()


def test_summary_rows_have_the_comparison_figures(bench_dir):
    rows = {r["run"]: r for r in summary_rows(load_results(bench_dir))}
    cpr = rows["cpr-kill"]
    assert cpr["lossless"] is False and cpr["twin_run"] == "cpr-ff"
    assert cpr["delta_auc"] == pytest.approx(-0.0049)
    assert cpr["recovery_restore_s"] == pytest.approx(0.1)
    assert rows["ckpt-ff"]["interval_steps"] == 10 and rows["ckpt-ff"]["interval_rule"] == "young"


def test_a_long_abort_reason_is_cut_in_the_verdict(tmp_path, make_run):
    make_run(tmp_path / "e.h5", "ecrm", kill_at=3, lost=True,
             summary={"abort_reason": "stripe 0 " + "x" * 200})
    failures = comparison_tables(load_results(tmp_path))[1]
    (line,) = [n for n in failures.verdicts if n.startswith("lost the run")]
    assert line.startswith("lost the run: ecrm (stripe 0 xx") and line.endswith("…)") and len(line) < 100
