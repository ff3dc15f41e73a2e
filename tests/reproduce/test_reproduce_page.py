"""The reproduction's page and command: tables from findings, the hand-written section kept, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpiec.cli import main as mpiec_main
from mpiec.reproduce.claims import Claim, Measured, Rule, judge
from mpiec.reproduce.experiment import Experiment, Machine, Regime, RegimeRow, RunSet, run_experiment
from mpiec.reproduce.page import (
    READINGS,
    PaperReport,
    claims_table,
    markdown,
    page_html,
    summary_table,
    write_page,
)

CLAIM = Claim("ecrec", "speedup", "recovers <faster>", "9.8x", "P", Rule("at_least", 5.0, 2.0), "x")
MACHINE = Machine(2, "cpu", 24.0, 0.1, "3.11", "host")


def report(value: float) -> PaperReport:
    regime = Regime("one paper minute = 0.25 s", (RegimeRow("interval", "30 min", "7.5 s", True, "kept"),))
    exp = Experiment("recovery", "a server kill", ("ckpt", "ecrm"), kills=("server:1@step=10",))
    runs = {"recovery": RunSet(exp, Path("/nowhere"), problems=["ecrm failure run 1: crashed"])}
    # deterministic: judged on its value (a noisy figure of one run would be at most partly)
    found = judge(CLAIM, Measured(value, n=1, deterministic=True))
    return PaperReport("ecrec", "ECRec", regime, [found], runs)


def test_tables_show_the_verdict_and_reason_as_judged():
    rep = report(1.0)
    t = claims_table(rep)
    assert t.rows[0][-1] == "not reproduced"
    assert any("not ≥ 2" in n for n in t.notes)
    s = summary_table([rep, report(9.0)])
    assert [r[1:5] for r in s.rows] == [["0", "0", "1", "0"], ["1", "0", "0", "0"]]


def test_markdown_and_html_hold_every_part():
    kw = {"command": "mpiec reproduce ecrec", "date": "2026-11-25", "seconds": 60.0, "machine": MACHINE,
          "scale": "quick"}
    md = markdown([report(9.0)], **kw)
    assert "## ECRec" in md and "7.5 s" in md and "crashed" in md and "mpiec reproduce ecrec" in md
    page = page_html([report(9.0)], **kw)
    assert "&lt;faster&gt;" in page and "<faster>" not in page  # escaped


def test_a_rewritten_page_keeps_its_hand_written_readings(tmp_path):
    page = tmp_path / "reproductions.md"
    page.write_text(f"# old tables\n\n{READINGS}\n\nThe rebuild is CPU-bound here.\n")
    write_page(page, "# new tables\n", [])
    text = page.read_text()
    assert text.startswith("# new tables") and "old tables" not in text
    assert "The rebuild is CPU-bound here." in text
    write_page(tmp_path / "fresh.md", "# only tables\n", [])
    assert READINGS not in (tmp_path / "fresh.md").read_text()


def test_experiment_counts_its_runs_and_builds_bench_args(tmp_path):
    e = Experiment("x", "x", ("ckpt", "ecrm"), kills=("server:1@step=5",), repeat=3)
    assert e.n_runs == (3 + 2) * 3 + 1  # none + 2 failure-free, 2 failure runs, per round; one warm-up
    assert Experiment("y", "y", ("none", "ecrm")).n_runs == 2
    a = e.args(tmp_path)
    assert a.scenario is None and a.kill == ["server:1@step=5"] and a.strategies == "ckpt,ecrm"
    assert Experiment("z", "z", ("ecrm",)).args(tmp_path).scenario == "none"
    with pytest.raises(ValueError):
        Experiment("w", "w", ("ecrm",), failure_free=False)


def test_an_occupied_directory_is_never_overwritten(tmp_path):
    (tmp_path / "old.h5").write_text("x")
    with pytest.raises(Exception, match="not empty"):
        run_experiment(Experiment("x", "x", ("none",)), tmp_path)
    assert (tmp_path / "old.h5").read_text() == "x"


def test_reuse_moves_an_incomplete_experiment_aside(tmp_path, monkeypatch):
    d = tmp_path / "exp"
    d.mkdir()
    (d / "partial.h5").write_text("x")
    ran = []
    monkeypatch.setattr("mpiec.bench.Bench.run", lambda self: ran.append(self.out) or 0)
    rs = run_experiment(Experiment("x", "x", ("none",)), d, reuse=True)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("exp.incomplete-")]
    assert len(aside) == 1 and (aside[0] / "partial.h5").read_text() == "x"
    assert ran and rs.problems  # the (faked) bench wrote nothing: said so


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "dlrm"], "invalid choice"),
    (["reproduce", "all", "--quick", "--smoke"], "not allowed"),
    (["reproduce", "all", "--page", "x.txt", "--out", "OUT"], "Markdown"),
])
def test_bad_arguments_fail_before_any_run(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / a) if a == "OUT" else a for a in argv]
    try:
        code = mpiec_main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_figures_beside_a_page_get_a_prefix_and_the_page_points_at_them(tmp_path):
    from mpiec.reproduce.page import PAGE_FIGURE_PREFIX

    png = tmp_path / "cnr-reduction.png"
    png.write_bytes(b"png")
    rep = report(9.0)
    rep.figures = [png]
    kw = {"command": "c", "date": "d", "seconds": 1.0, "machine": MACHINE, "scale": "full", "remade": "c2"}
    md = markdown([rep], **kw, figure_prefix=PAGE_FIGURE_PREFIX)
    assert f"figures/{PAGE_FIGURE_PREFIX}cnr-reduction.png" in md and "remade from those runs by `c2`" in md
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "figures").mkdir()
    (docs / "figures" / "cnr-reduction.png").write_bytes(b"another page's figure")
    write_page(docs / "reproductions.md", md, [png], prefix=PAGE_FIGURE_PREFIX)
    assert (docs / "figures" / "cnr-reduction.png").read_bytes() == b"another page's figure"
    assert (docs / "figures" / f"{PAGE_FIGURE_PREFIX}cnr-reduction.png").read_bytes() == b"png"


def test_an_interrupted_bench_stops_the_reproduction(tmp_path, monkeypatch):
    import json as _json

    def interrupted(self):
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "bench.json").write_text(_json.dumps({"runs": [
            {"variant": "none", "failure": False, "repeat": 0, "path": None, "message": "interrupted"}]}))
        return 3

    monkeypatch.setattr("mpiec.bench.Bench.run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(Experiment("x", "x", ("none",)), tmp_path / "x")
    assert (tmp_path / "x" / "bench.json").is_file()  # what it finished is kept
