"""``mpiec simulate`` from the command line: help, the scale table from the reference calibration, costs
files, outputs, and one-line errors (no MPI; a second or two each)."""

from __future__ import annotations

import csv
import json

import pytest

from mpiec.simulate.cli import main
from mpiec.simulate.policies import modelled
from mpiec.simulate.reference import reference_costs

FAST = ["--nodes", "8,10000", "--trials", "1", "--hours", "2"]


def test_help_names_the_command_and_its_failure_sources(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: mpiec simulate")
    for flag in ("--calibrate", "--predict", "--nodes", "--published", "--weibull-shape", "--trace",
                 "--plot"):
        assert flag in out


def test_default_run_prints_every_calibrated_strategy_at_every_node_count(capsys, tmp_path):
    out_csv = tmp_path / "scale.csv"
    assert main([*FAST, "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out
    calibrated = [s for s in modelled() if s == "none" or s in reference_costs().strategies]
    rows = list(csv.DictReader(out_csv.open()))
    assert [(r["nodes"], r["strategy"]) for r in rows] == [(n, s) for n in ("8", "10000") for s in calibrated]
    assert "failures: node MTBF" in out and "reference calibration" in out
    assert "10,000" in out
    by = {(r["nodes"], r["strategy"]): r for r in rows}
    # at 10,000 nodes a job that restarts from scratch never finishes 2 hours of work; ckpt does
    assert float(by[("10000", "none")]["finished"]) < 1
    assert float(by[("10000", "ckpt")]["finished"]) == 1 and float(by[("10000", "ckpt")]["ettr"]) > 0.5


def test_costs_saved_and_read_back_give_the_same_table(capsys, tmp_path):
    saved = tmp_path / "costs.json"
    assert main([*FAST, "--save-costs", str(saved)]) == 0
    first = capsys.readouterr().out
    assert json.loads(saved.read_text())["runtime"]["step_s"] > 0
    assert main([*FAST, "--costs", str(saved)]) == 0
    second = capsys.readouterr().out
    table = lambda text: text[text.index(" nodes  strategy"):]  # noqa: E731 - the table's header onwards
    assert table(first) == table(second)


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "scale.png"
    assert main([*FAST, "--plot", str(png)]) == 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("argv", "message"), [
    (["--nodes", "8,x"], "--nodes must be whole numbers"),
    (["--nodes", "0"], "--nodes needs node counts >= 1"),
    (["--mtbf-node-h", "-3"], "--mtbf-node-h must be a number > 0"),
    (["--mtbf-node-h", "100", "--published", "llama3"], "give one failure source"),
    # every built-in is modelled; the example plug-in (installed by .ci/run) says why it is not
    (["--strategies", "ckpt,replica"], "strategy 'replica' is not modelled: a replica rebuild"),
    (["--strategies", "ckpt,nope"], "unknown strategy 'nope'"),
    (["--costs", "/nonexistent/c.json"], "costs file /nonexistent/c.json does not exist"),
    (["--calibrate", "/nonexistent"], "does not exist"),
    (["--csv", "/nonexistent/dir/x.csv"], "directory does not exist"),
    (["--plot", "x.h5"], ".h5 names are for result files"),
    (["--set", "layout.servers=0"], "layout.servers"),
    (["--corruption", "--sdc-prevalence", "0"], "--sdc-prevalence: expected a share of machines in (0, 1]"),
    (["--corruption", "--sdc-per-defective-h", "2,1"], "--sdc-per-defective-h: expected 0 < LO <= HI"),
    (["--corruption", "--sdc-per-defective-h", "x"], "--sdc-per-defective-h: expected LO,HI per hour"),
    (["--corruption", "ecrm:nope=1"], "nope"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main([*argv, "--trials", "1", "--nodes", "8"] if "--nodes" not in argv else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mpiec: error: ") and message in err and err.count("\n") == 1


def test_every_strategy_at_three_sizes_with_intervals_and_the_critical_path(capsys):
    assert main(["--nodes", "8,1000,10000", "--hours", "6"]) == 0
    out = capsys.readouterr().out
    table = out[out.index(" nodes  strategy"):]
    for name in modelled():
        if name in reference_costs().strategies or name == "none":
            assert sum(1 for line in table.splitlines() if f"  {name}  " in line) == 3, name
    assert "±" in table and "trials: at least 5" in out
    assert "the step model's critical path" in out and "10,000 nodes, ecrm: trainer" in out


@pytest.mark.parametrize(("paper", "claims"), [
    ("ecrec", ["up to 66 % lower", "up to 9.8x faster", "7-13 % drop"]),
    ("cpr", ["8.2-8.5 %", "0.53-0.68 %"]),
    ("cnr", ["6-17x lower", "2.5-8x lower", "~26 %"]),
])
def test_a_paper_preset_prints_its_headline_beside_the_simulated_figures(paper, claims, capsys):
    assert main(["--paper", paper, "--max-trials", "20"]) == 0
    out = capsys.readouterr().out
    verdicts = out[out.index("verdicts (paper | simulated):"):out.index("inputs: ")]
    for claim in claims:
        line = next(x for x in verdicts.splitlines() if claim in x)
        simulated = line.split("| simulated ")[1]
        assert simulated != "—" and any(ch.isdigit() for ch in simulated), line
    assert "calibrated here" in out and "assumed: " in out and "[U]" in out


def test_cluster_flags_are_checked_in_one_line(capsys):
    for argv, message in ((["--servers", "5"], "--servers and --trainers go together"),
                          (["--reschedule-s", "60"], "--reschedule-s needs --replacement reschedule"),
                          (["--replacement", "shrink", "--spares", "2"], "--spares needs --replacement"),
                          (["--storage-profile", "tape"], "--storage-profile must be calibrated or one of"),
                          (["--server-threads", "0"], "--server-threads must be a whole number"),
                          (["--trainer-speedup", "0"], "--trainer-speedup must be a number > 0")):
        assert main([*argv, "--nodes", "8", "--trials", "1"]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("mpiec: error: ") and message in err and err.count("\n") == 1, err


def test_spares_held_idle_against_shrinking(capsys):
    """The idle spares cost goodput per node; shrinking holds none and loses throughput instead."""
    assert main(["--nodes", "8", "--trials", "2", "--strategies", "ckpt", "--spares", "8"]) == 0
    spare = capsys.readouterr().out
    assert main(["--nodes", "8", "--trials", "2", "--strategies", "ckpt", "--replacement", "shrink"]) == 0
    shrink = capsys.readouterr().out
    assert "8 held idle" in spare and "the job shrinks and grows back 300 s after each recovery" in shrink
    for out in (spare, shrink):
        assert "goodput / node %" in out and "goodput x nodes / (nodes + idle spares)" in out
    assert "throughput lost while shrunk" in shrink and "throughput lost while shrunk" not in spare

    def per_node(out: str) -> float:
        header = next(line for line in out.splitlines() if line.startswith("nodes"))
        row = next(line for line in out.splitlines() if line.strip().startswith("8  ckpt"))
        cells = [c for c in row.split("  ") if c.strip()]
        names = [c.strip() for c in header.split("  ") if c.strip()]
        return float(cells[names.index("goodput / node %")])
    assert per_node(spare) < 0.55 * per_node(shrink)  # 8 idle spares beside 8 nodes halve it
