"""The ``mpiec report`` entry point."""

from __future__ import annotations

import csv
import re

import pytest
from mpiec.analysis import plots, report

from mpiec.errors import ResultFileError


def test_report_prints_tables(runs_dir, capsys):
    assert report.main([str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert "samples/s" in out and "phase breakdown" in out
    assert "ecrm" in out and "events:" in out


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


def test_report_plots(runs_dir, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install mpiec[plot])")
    outdir = tmp_path / "plots"
    assert report.main([str(runs_dir), "--plots", str(outdir), "--no-events"]) == 0
    for name in ("throughput.png", "auc.png"):
        data = (outdir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


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
