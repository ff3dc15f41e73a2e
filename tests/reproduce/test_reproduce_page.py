"""The reproduction's page and command: tables from findings, the hand-written section kept, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiec.cli import main as mpiec_main
from mpiec.errors import MpiecError
from mpiec.reproduce import PAPERS, paper
from mpiec.reproduce.claims import VERDICTS, Claim, Measured, Rule, check, judge
from mpiec.reproduce.cli import _earlier
from mpiec.reproduce.experiment import SCALES, Experiment, Machine, Regime, RegimeRow, RunSet, run_experiment
from mpiec.reproduce.page import (
    MARKER,
    READINGS,
    TITLE,
    PaperReport,
    checks_table,
    claims_table,
    markdown,
    page_html,
    realized_table,
    regime_table,
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
    col = {h: i for i, h in enumerate(s.header)}
    assert [(r[col["reproduced"]], r[col["not reproduced"]]) for r in s.rows] == [("0", "1"), ("1", "0")]
    assert all(r[1:-1].count("0") == len(VERDICTS) - 1 for r in s.rows)  # one finding each


def test_checks_stand_apart_and_are_not_tallied():
    """Issue 37: only the papers' claims enter the claims table and the tally; mpiec's own checks have a
    table of their own."""
    rep = report(9.0)
    own = check("ecrec", "k-growth", "k = 4 costs no more than k = 2", "no growth",
                Rule("at_most", 2.0, 5.0), " %")
    rep.findings.append(judge(own, Measured(0.5, n=3, deterministic=True)))
    claims, checks = claims_table(rep), checks_table(rep)
    assert [r[0] for r in claims.rows] == ["speedup"] and [r[0] for r in checks.rows] == ["k-growth"]
    assert "not the paper's claims" in checks.title and checks.rows[0][-1] == "reproduced"
    s = summary_table([rep])
    assert s.rows[0][1 + VERDICTS.index("reproduced")] == "1"  # the check's "reproduced" is not counted
    assert checks_table(report(9.0)) is None


def test_the_measured_column_shows_the_judged_figure_and_its_criterion():
    quoted = Claim("cpr", "ovh", "full recovery costs 13 %", "13 %", "S",
                   Rule("at_most", 9.5, 13.0, "why"), " %", quote="failure handling costs 13 % on average")
    rep = report(9.0)
    rep.findings[:] = [judge(quoted, Measured(8.43, n=1, deterministic=True))]
    row = claims_table(rep).rows[0]
    assert row[1] == "“failure handling costs 13 % on average” [S]"
    assert row[3].startswith("8.43 % det.") and row[4] == "≤ 9.5 % (partly ≤ 13 %)"


def test_not_judged_and_depends_show_their_label_and_the_realized_table():
    from mpiec.reproduce.claims import Assumption, Band
    from mpiec.reproduce.experiment import Gate, Realized

    rep = report(9.0)
    off = Realized.factor("save time / MTBF", 0.35, 12.6, 2.0, "Young is flat within 2x", " %")
    rep.findings[:] = [judge(CLAIM, Measured(9.0, n=1, deterministic=True), gate=Gate((off,))),
                       judge(CLAIM, Measured(9.0, n=1, deterministic=True), bands=[Band(
                           Assumption("bw", "bandwidth", 2.0, 1.0, 4.0, "src"),
                           lambda x: Measured(4.5 * x, n=1, deterministic=True))])]
    rows = claims_table(rep).rows
    assert rows[0][-1].startswith("not judged: regime not realized (save time / MTBF 12.6 %")
    assert rows[1][-1].startswith("depends on bandwidth: partly below 1.111, reproduced above")
    t = realized_table(rep)
    assert t.rows == [["save time / MTBF", "0.35 %", "12.6 %", "0.175–0.7 %", "NO",
                       "Young is flat within 2x"]]
    assert realized_table(report(9.0)) is None
    s = summary_table([rep]).rows[0]
    assert s[1 + VERDICTS.index("not judged")] == "1"
    assert s[1 + VERDICTS.index("depends on an assumption")] == "1"


def test_regime_table_marks_calibrated_constants_and_bands():
    rep = report(9.0)
    rep.regime = Regime("s", (RegimeRow("save / MTBF", "—", "0.35 %", True, "sized",
                                        calibrated="Young → 8.4 %", band="0.1–1 % (src)"),
                              RegimeRow("interval", "30 min", "7.5 s", True)))
    rows = regime_table(rep).rows
    assert rows[0][3] == "calibrated" and "calibrated: Young → 8.4 %" in rows[0][4]
    assert "band: 0.1–1 %" in rows[0][4]
    assert rows[1][3] == "kept"
    md = markdown([rep], command="c", date="d", seconds=1.0, machine=MACHINE, scale="quick")
    assert "ecrec: interval (calibrated: save / MTBF)" in md


def test_markdown_and_html_hold_every_part():
    kw = {"command": "mpiec reproduce ecrec", "date": "2026-11-25", "seconds": 60.0, "machine": MACHINE,
          "scale": "quick"}
    md = markdown([report(9.0)], **kw)
    assert "## ECRec" in md and "7.5 s" in md and "crashed" in md and "mpiec reproduce ecrec" in md
    page = page_html([report(9.0)], **kw)
    assert "&lt;faster&gt;" in page and "<faster>" not in page  # escaped


def test_a_rewritten_page_keeps_its_hand_written_readings(tmp_path):
    page = tmp_path / "reproductions.md"
    page.write_text(f"{TITLE}\n\nold tables\n\n{READINGS}\n\nThe rebuild is CPU-bound here.\n")
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
    monkeypatch.setattr("mpiec.launch.bench.Bench.run", lambda self: ran.append(self.out) or 0)
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

    monkeypatch.setattr("mpiec.launch.bench.Bench.run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(Experiment("x", "x", ("none",)), tmp_path / "x")
    assert (tmp_path / "x" / "bench.json").is_file()  # what it finished is kept


# ---- the --page file, the experiment folders and --reuse's inputs, checked before any run ----------

KW = {"command": "c", "date": "d", "seconds": 1.0, "machine": MACHINE, "scale": "smoke"}


@pytest.fixture
def no_runs(monkeypatch):
    """The benches a reproduction starts (none may, in these tests)."""
    ran: list = []
    monkeypatch.setattr("mpiec.launch.bench.Bench.run", lambda self: ran.append(self.out) or 0)
    return ran


def _reproduce(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = mpiec_main(["reproduce", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_a_hand_written_markdown_file_is_never_replaced(tmp_path, no_runs, capsys):
    """Before: ``--page notes.md`` replaced any Markdown file with the page (hand-written text gone)."""
    notes = tmp_path / "notes.md"
    notes.write_text("# My notes\n\nwritten by hand\n")
    with pytest.raises(MpiecError, match="is not a page mpiec reproduce wrote"):
        write_page(notes, markdown([report(9.0)], **KW), [])
    code, err = _reproduce(["cnr", "--smoke", "--out", str(tmp_path / "out"), "--page", str(notes)], capsys)
    assert code == 2 and "is not a page mpiec reproduce wrote" in err and err.count("\n") == 1
    assert notes.read_text() == "# My notes\n\nwritten by hand\n" and not no_runs
    assert not (tmp_path / "out").exists()


def test_a_page_the_reproduction_wrote_is_rewritten_and_an_empty_file_taken(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(markdown([report(1.0)], **KW) + f"\n{READINGS}\n\nmine\n")
    assert MARKER in page.read_text().splitlines()
    write_page(page, markdown([report(9.0)], **KW), [])
    assert "mine" in page.read_text() and "reproduced" in page.read_text()
    empty = tmp_path / "empty.md"
    empty.write_text("")
    write_page(empty, "# tables\n", [])
    assert empty.read_text() == "# tables\n"


@pytest.mark.parametrize("where, message", [
    ("missing/page.md", "does not exist"),
    ("afile/page.md", "is not a folder"),
    ("adir.md", "is not a regular file"),
])
def test_a_page_that_cannot_be_written_is_refused_before_any_run(tmp_path, no_runs, capsys, where, message):
    """Before: refused by a traceback at the end, after every experiment had run."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir.md").mkdir()
    code, err = _reproduce(["cpr", "--smoke", "--out", str(tmp_path / "out"), "--page",
                            str(tmp_path / where)], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not no_runs and not (tmp_path / "out").exists()


def test_an_occupied_later_experiment_folder_is_refused_before_the_first_run(tmp_path, no_runs, capsys):
    """Before: the earlier experiments (and papers) ran, then the occupied folder ended the command."""
    last = list(PAPERS)[-1]
    key = paper(last).experiments(SCALES["smoke"])[-1].key
    occupied = tmp_path / "out" / last / key
    occupied.mkdir(parents=True)
    (occupied / "old.h5").write_text("earlier")
    code, err = _reproduce(["all", "--smoke", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and f"{occupied} is not empty" in err and err.count("\n") == 1
    assert not no_runs and (occupied / "old.h5").read_text() == "earlier"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [last]


@pytest.mark.parametrize("doc", [
    [1], {"runs": {"a": 1}}, {"runs": [3]}, {"runs": [{"path": 5}]}, {"runs": [{"path": "../up.h5"}]},
    "{truncated",
])
def test_reuse_of_a_malformed_bench_json_runs_the_experiment_again(tmp_path, no_runs, capsys, doc):
    """Before: AttributeError / TypeError out of ``--reuse``; now one line, the folder moved aside."""
    d = tmp_path / "exp"
    d.mkdir()
    (d / "bench.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    rs = run_experiment(Experiment("x", "x", ("none",)), d, reuse=True)
    out = capsys.readouterr().out
    assert "was incomplete (bench.json" in out and out.count("\n") == 1
    assert no_runs == [d] and not rs.reused
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("exp.incomplete-")]
    assert (aside / "bench.json").is_file()


def _result_file(path: Path) -> None:
    from mpiec.launch.resolve import load_config
    from mpiec.results import ResultWriter

    attrs = {"config": load_config("tiny").to_dict(), "strategy": "none", "seed": 1, "failure_mode": "ulfm",
             "ulfm": True}
    with ResultWriter(path, attrs):
        pass


def test_reuse_runs_again_an_experiment_with_a_truncated_result_file(tmp_path, no_runs, capsys):
    """Before: a truncated ``.h5`` in a complete experiment blocked ``--reuse`` until deleted."""
    d = tmp_path / "exp"
    d.mkdir()
    _result_file(d / "a.h5")
    _result_file(d / "b.h5")
    (d / "bench.json").write_text(json.dumps({"runs": [{"variant": "none", "path": "a.h5"},
                                                       {"variant": "none", "path": "b.h5"}]}))
    rs = run_experiment(Experiment("x", "x", ("none",)), d, reuse=True)  # complete: reused
    assert rs.reused and len(rs.results) == 2 and not no_runs
    data = (d / "b.h5").read_bytes()
    (d / "b.h5").write_bytes(data[: len(data) // 2])
    rs = run_experiment(Experiment("x", "x", ("none",)), d, reuse=True)
    assert not rs.reused and no_runs == [d]
    assert "b.h5" in capsys.readouterr().out


@pytest.mark.parametrize("doc", [{"papers": []}, {"papers": {"x": {"experiments": [{"directory": "d"}]}}},
                                 {"command": "c", "date": "d", "seconds": "soon", "machine": {},
                                  "papers": {}},
                                 "[1, 2"])
def test_reuse_of_a_malformed_reproduce_json_is_one_line(tmp_path, capsys, doc):
    (tmp_path / "reproduce.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    assert _earlier(tmp_path) == {}
    out = capsys.readouterr().out
    assert "reproduce.json is malformed" in out and out.count("\n") == 1
    assert _earlier(tmp_path / "none") == {} and capsys.readouterr().out == ""


def test_findings_are_made_for_the_machine_the_runs_recorded():
    """Issue 37: under --reuse the findings used the machine remaking the page; now the one recorded with
    the runs (reproduce.json's), with the core count the runs themselves recorded."""
    from types import SimpleNamespace

    recorded = Machine(2, "old cpu", 8.0, 0.1, "3.11", "old-host")
    runs = [SimpleNamespace(summary={"host_cores": 2}), SimpleNamespace(summary={"host_cores": 2}),
            SimpleNamespace(summary={})]
    assert Machine.of_runs(runs, recorded) == recorded
    assert Machine.of_runs([SimpleNamespace(summary={"host_cores": 64})], recorded).cores == 64
    assert Machine.of_runs([], recorded) == recorded
    assert Machine.of_runs(runs).cores == 2  # no record: this host, with the runs' core count


def test_each_paper_says_what_this_machine_can_and_cannot_establish():
    """Issue 37: one paragraph a paper, under its heading, on the Markdown and the HTML page."""
    for name in PAPERS:
        scope = paper(name).scope
        assert "can and cannot establish" in scope and "jobscripts/reproduce.sbatch" in scope, name
    rep = report(9.0)
    rep.scope = "**What this machine can and cannot establish.** Only <this>."
    md = markdown([rep], command="mpiec reproduce", date="2026-12-01", seconds=1.0, machine=MACHINE,
                  scale="quick")
    assert "## ECRec\n\n**What this machine can and cannot establish.** Only <this>.\n" in md
    page = page_html([rep], command="mpiec reproduce", date="2026-12-01", seconds=1.0, machine=MACHINE,
                     scale="quick")
    assert "<p>What this machine can and cannot establish. Only &lt;this&gt;.</p>" in page


def test_reuse_keeps_the_experiments_seconds_in_a_moved_folder(tmp_path):
    """The earlier run's seconds are found by PAPER/EXPERIMENT, not by the folder's full path: a copy
    of results/reproduce-full remade elsewhere showed 0.0 minutes for every paper."""
    doc = {"command": "c", "date": "d", "seconds": 60.0,
           "machine": {"cores": 2, "cpu": "x", "memory_gb": 1.0, "load_start": 0.0, "python": "3",
                       "host": "h"},
           "papers": {"cnr": {"experiments": [{"directory": "results/reproduce-full/cnr/reduction",
                                               "seconds": 42.0}]}}}
    (tmp_path / "reproduce.json").write_text(json.dumps(doc))
    assert _earlier(tmp_path)["experiments"] == {"cnr/reduction": 42.0}
