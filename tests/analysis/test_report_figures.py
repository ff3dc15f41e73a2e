"""The report's figures say what its tables say: n.s. differences are drawn as intervals without a value,
the paired estimates are the table's, the baseline has no overhead against itself, an empty figure is not
written, and wide tables scroll inside the HTML page."""

from __future__ import annotations

import re

import pytest
from mpiec.analysis import load_results, plots, report
from mpiec.analysis.metrics import compare
from mpiec.analysis.tables import comparison_tables, runs_table
from synthetic import write_run
from test_analysis_repeats import write_repeats

pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'mpiec[test]')")

#: A noisy variant whose mean overhead is large but whose interval holds 0 (the +78 % "n.s." case).
NOISY = [300.0, 1100.0, 200.0, 900.0, 250.0]


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    d = write_repeats(tmp_path_factory.mktemp("noisy") / "rep")
    for i, thr in enumerate(NOISY):
        write_run(d / f"cpr-ff-r{i}.h5", "cpr", throughput=thr,
                  config={"output": {"name": f"tiny-cpr-ff-s1-r{i}"}})
    return d


def _left_panel(results):
    plt = plots.pyplot()
    metrics = compare(results)
    fig = plots._overhead_ettr(plt, metrics, results, plots._colors(metrics))
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    texts = {round(t.xy[1]): t.get_text() for t in ax.texts}  # the row (y) each label is on
    solid = {}  # row -> widths of the filled bars on it
    for patch in ax.patches:
        if patch.get_facecolor()[3] > 0:  # a filled bar, not the hatched outline of an interval
            solid.setdefault(round(patch.get_y() + patch.get_height() / 2), []).append(patch.get_width())
    plt.close(fig)
    return rows, texts, solid


def test_the_overhead_panel_draws_the_tables_cells(noisy):
    results = load_results(noisy)
    ff = comparison_tables(results)[0]
    col = ff.header.index("thr. overhead %")
    cells = {r[0]: r[col] for r in ff.rows}
    assert cells["cpr"].startswith("n.s. [") and cells["ecrm"].startswith("n.s. [")  # the premise
    assert cells["ckpt"].startswith("+20.0 [")
    rows, texts, solid = _left_panel(results)
    for v in ("ckpt", "ecrm", "cpr"):
        assert texts[rows.index(v)] == cells[v], v  # the label is the table's own cell
    for v in ("ecrm", "cpr"):  # n.s.: no bar with a confident value
        assert rows.index(v) not in solid, v
    assert solid[rows.index("ckpt")] == [pytest.approx(20.0, abs=0.05)]
    assert texts[rows.index("none")] == "baseline" and rows.index("none") not in solid


def test_single_runs_draw_the_failure_free_tables_overhead(bench_dir):
    results = load_results(bench_dir)
    rows, texts, solid = _left_panel(results)
    assert texts[rows.index("none")] == "baseline" and rows.index("none") not in solid
    assert texts[rows.index("ckpt")] == "+20.0" and solid[rows.index("ckpt")] == [pytest.approx(20.0)]


def test_the_runs_table_shows_no_overhead_of_the_baseline_against_itself(noisy):
    results = load_results(noisy)
    t = runs_table(results)
    col = t.header.index("overhead %")
    by_run = {r[0]: r[col] for r in t.rows}
    assert {by_run[f"none-ff-r{i}"] for i in range(5)} == {"baseline"}
    # the others against their own round's baseline run (the pairing of the tables)
    thr = {r.name: r.summary["throughput_sps"] for r in results}
    for i in range(5):
        want = 100 * (1 - thr[f"cpr-ff-r{i}"] / thr[f"none-ff-r{i}"])
        assert by_run[f"cpr-ff-r{i}"] == f"{want:+.1f}"
    assert "same config and round" in " ".join(t.notes)


def test_a_figure_with_nothing_to_show_is_not_written(tmp_path):
    d = write_repeats(tmp_path / "rep")  # every failure run lossless at ΔAUC 0; nothing written or sent
    written = plots.plot_results(load_results(d), tmp_path / "p", formats=("png",))
    assert {p.stem for p in written} == {"throughput", "overhead_ettr", "auc"}
    assert not (tmp_path / "p" / "auc_vs_lost.png").exists()
    assert not (tmp_path / "p" / "protection.png").exists()


def test_runs_on_one_point_share_a_short_label(tmp_path):
    results = load_results(write_repeats(tmp_path / "rep"))
    ms = [m for m in compare(results) if m.failure]
    label = plots._point_label(ms, plots._labels(compare(results)))
    assert label == "ckpt ×5 (lossless)"


def test_wide_tables_scroll_inside_the_html_page(noisy, tmp_path, monkeypatch):
    from mpiec.analysis import html

    monkeypatch.setattr(html, "matplotlib_available", lambda: False)
    page = html.write_html(load_results(noisy), tmp_path / "p.html").read_text()
    tables = page.count("<table>")
    assert tables >= 3 and page.count('<div class="wide"><table>') == tables
    assert re.search(r"div\.wide \{[^}]*overflow-x: auto", page)


def test_report_writes_only_figures_with_something_to_show(noisy, tmp_path):
    assert report.main([str(noisy), "--plots", str(tmp_path / "p")]) == 0
    assert sorted(p.name for p in (tmp_path / "p").glob("*.png")) == ["auc.png", "overhead_ettr.png",
                                                                      "throughput.png"]
