"""The ``mpiec report`` entry point."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from mpiec.analysis import plots, report

from mpiec.errors import ResultFileError


def test_report_prints_tables(runs_dir, capsys):
    assert report.main([str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert "samples/s" in out and "phase breakdown" in out
    assert "ecrm" in out and "events:" not in out  # the events only with --events
    assert report.main([str(runs_dir), "--events"]) == 0
    assert "events:" in capsys.readouterr().out


def test_report_csv(runs_dir, tmp_path, capsys):
    out_csv = tmp_path / "s.csv"
    assert report.main([str(runs_dir), "--csv", str(out_csv), "--no-events"]) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 3
    by = {r["strategy"]: r for r in rows}
    assert float(by["ecrm"]["overhead_pct"]) == pytest.approx(10.0)
    assert by["none"]["recovery_latency_s"] == ""  # nan → empty
    assert by["cpr"]["emulated"] == "True"
    assert "events:" not in capsys.readouterr().out


def test_report_bad_file_raises(runs_dir):
    (runs_dir / "bad.h5").write_bytes(b"nope")
    with pytest.raises(ResultFileError, match="bad.h5"):
        report.main([str(runs_dir)])
    assert report.main([str(runs_dir), "--skip-bad"]) == 0


def test_report_empty_dir(tmp_path):
    with pytest.raises(ResultFileError, match="no result files"):
        report.main([str(tmp_path)])


def test_report_plots_without_matplotlib(runs_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "matplotlib_available", lambda: False)
    assert report.main([str(runs_dir), "--plots", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib" in err[0]
    assert not (tmp_path / "p").exists()


def test_throughput_series(runs_dir):
    from mpiec.analysis import load_results

    r = load_results(runs_dir / "none.h5")[0]
    t, tp = plots.throughput_series(r, window=5)
    assert len(t) == len(tp) == 50
    assert tp[0] == pytest.approx(64.0)  # first step: 64 samples in 1 s
    assert tp[-1] == pytest.approx(640.0)  # steady state: 64 samples per 0.1 s


def test_help_prog(capsys):
    with pytest.raises(SystemExit):
        report.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: mpiec report")


def test_report_never_writes_onto_a_result_or_an_input(runs_dir, tmp_path):
    from mpiec.errors import MpiecError

    first = sorted(runs_dir.glob("*.h5"))[0]
    before = {p: p.read_bytes() for p in runs_dir.glob("*.h5")}
    disguised = tmp_path / "result.csv"
    disguised.write_bytes(first.read_bytes())
    for target, needle in [(runs_dir / "b.h5", ".h5 names are for result files"),
                           (first, ".h5 names are for result files"),
                           (disguised, "existing HDF5 (result) file"),
                           (runs_dir, "is a directory")]:
        with pytest.raises(MpiecError, match=re.escape(needle)):
            report.main([str(runs_dir), "--csv", str(target)])
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(MpiecError, match="is an input of this command"):
        report.main([str(runs_dir), str(text), "--csv", str(text)])
    assert {p: p.read_bytes() for p in runs_dir.glob("*.h5")} == before
    assert disguised.read_bytes() == first.read_bytes() and text.read_text() == "x"


def test_throughput_series_stops_during_an_idle_gap(tmp_path, make_run):
    """A recovery (no step for a while) is drawn as a stop at 0, not as a line across it."""
    import h5py

    path = make_run(tmp_path / "g.h5", "ckpt", steps=30)
    with h5py.File(path, "r+") as f:  # a 2 s pause before step 20
        tl = f["timeline"][()]
        tl["t_end"][20:] += 2.0
        f["timeline"][...] = tl
    from mpiec.analysis import load_results

    r = load_results(path)[0]
    t, tp = plots.throughput_series(r, window=1)
    assert len(t) == 30 + 2
    end = r.timeline["t_end"]
    i = 20  # steps 0-19, then the two points of the stop, then step 20
    assert tp[i] == tp[i + 1] == 0.0
    assert t[i] == pytest.approx(end[19]) and t[i + 1] == pytest.approx(end[20] - 0.1)
    assert np.all(np.diff(t) >= 0) and np.all(tp[:i] > 0) and np.all(tp[i + 2:] > 0)


# -- the whole report: tables, CSV, Markdown, figures and HTML, drawn once -------------------------------

@pytest.fixture(scope="module")
def drawn(bench_dir, tmp_path_factory):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'mpiec[test]')")
    out = tmp_path_factory.mktemp("report")
    paths = {"plots": out / "plots", "html": out / "page.html", "md": out / "t.md", "csv": out / "s.csv"}
    code = report.main([str(bench_dir), "--plots", str(paths["plots"]), "--html", str(paths["html"]),
                        "--markdown", str(paths["md"]), "--csv", str(paths["csv"]), "--no-events"])
    assert code == 0
    return paths


def test_every_figure_in_png_and_pdf(drawn):
    for stem in plots.FIGURES:
        png = (drawn["plots"] / f"{stem}.png").read_bytes()
        pdf = (drawn["plots"] / f"{stem}.pdf").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, stem
        assert pdf[:5] == b"%PDF-", stem


def test_html_page_is_self_contained(drawn):
    page = drawn["html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count('src="data:image/png;base64,') == len(plots.FIGURES)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert re.findall(r'(?:src|href)="(?!data:)', page) == []
    for text in ("failure-free", "under failures: server:1@step=20", "recovery breakdown",
                 "lost data: cpr (160 samples, ΔAUC -0.0049)", "cpr-kill"):
        assert text in page, text


def test_markdown_and_csv_files(drawn, bench_dir):
    md = drawn["md"].read_text()
    assert md.count("### ") == 4 and "| strategy |" in md and "| run |" in md
    rows = list(csv.DictReader(drawn["csv"].open()))
    assert len(rows) == 8 and {r["lossless"] for r in rows} == {"True", "False", ""}


def test_html_without_matplotlib_has_the_tables(runs_dir, tmp_path, monkeypatch):
    from mpiec.analysis import html, load_results

    monkeypatch.setattr(html, "matplotlib_available", lambda: False)
    page = html.write_html(load_results(runs_dir), tmp_path / "p.html").read_text()
    assert "<img" not in page and "matplotlib is not installed" in page
    assert "failure-free" in page and "ecrm" in page


def test_html_escapes_what_the_files_say(tmp_path, make_run):
    from mpiec.analysis import load_results
    from mpiec.analysis.html import render_html

    make_run(tmp_path / "x.h5", "ecrm", variant="ecrm:<b>bold</b>")
    page = render_html(load_results(tmp_path), [])
    assert "<b>bold</b>" not in page and "ecrm:&lt;b&gt;bold&lt;/b&gt;" in page


def test_write_report_writes_its_files(bench_dir, tmp_path, monkeypatch):
    from mpiec.analysis import html, load_results

    monkeypatch.setattr(report, "matplotlib_available", lambda: False)  # figures: tested above
    monkeypatch.setattr(html, "matplotlib_available", lambda: False)
    out = tmp_path / "out"
    written = report.write_report(load_results(bench_dir), out)
    names = {p.name for p in written}
    assert names == {v for k, v in report.REPORT_FILES.items() if k != "plots"}
    assert "under failures" in (out / "comparison.txt").read_text()
    assert "cpr-kill" in (out / "comparison.txt").read_text()
    assert (out / "summary.csv").read_text().startswith("run,")


def test_write_report_never_overwrites_a_result_file(bench_dir, tmp_path):
    from mpiec.analysis import load_results

    from mpiec.errors import MpiecError

    out = tmp_path / "out"
    out.mkdir()
    victim = next(bench_dir.glob("*.h5"))
    (out / "report.html").write_bytes(victim.read_bytes())
    with pytest.raises(MpiecError, match="existing HDF5"):
        report.write_report(load_results(bench_dir), out)
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]
    with pytest.raises(ResultFileError, match="no result files"):
        report.write_report([], out)


def test_report_refuses_bad_html_and_clashing_outputs(runs_dir, tmp_path):
    from mpiec.errors import MpiecError

    with pytest.raises(MpiecError, match=r"--html .*\.h5 names are for result files"):
        report.main([str(runs_dir), "--html", str(tmp_path / "r.h5")])
    same = str(tmp_path / "x.out")
    with pytest.raises(MpiecError, match="name the same file"):
        report.main([str(runs_dir), "--csv", same, "--html", same])
    assert not (tmp_path / "x.out").exists()
