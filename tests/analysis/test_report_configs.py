"""``mpiec report`` over a folder mixing configurations: one set of tables per configuration, never a
median or a paired comparison across two."""

from __future__ import annotations

import csv

import pytest
from mpiec.analysis import frame_rows, load_results, report
from mpiec.analysis.configs import config_groups, differing_keys
from synthetic import write_run

ROUNDS = 3
#: (steps, none's throughput, ckpt's): the 80-step bench is faster and ckpt costs it 50 %, not 20 %
BENCHES = ((40, 1000.0, 800.0), (80, 2000.0, 1000.0))


def write_mixed(d):
    """A 40- and an 80-step bench of none and ckpt (3 rounds each) in one folder, plus a shrinking ckpt
    variant without spares in the 40-step one (a per-variant layout: not a configuration of its own)."""
    d.mkdir(parents=True)
    for steps, none, ckpt in BENCHES:
        for i in range(ROUNDS):
            for v, thr in (("none", none), ("ckpt", ckpt)):
                write_run(d / f"{v}-{steps}-r{i}.h5", v, throughput=thr + i, steps=steps,
                          config={"output": {"name": f"tiny-{v}-ff-s1-r{i}"}, "training": {"steps": steps},
                                  "layout": {"spares": 1, "replacement": "spare"}})
            if steps == 40:
                write_run(d / f"shrink-{steps}-r{i}.h5", "ckpt", variant="ckpt:replacement=shrink",
                          throughput=900.0 + i, steps=steps,
                          config={"output": {"name": f"tiny-ckpt-replacementshrink-ff-s1-r{i}"},
                                  "training": {"steps": steps},
                                  "layout": {"spares": 0, "replacement": "shrink"}})
    return d


@pytest.fixture
def mixed(tmp_path):
    return write_mixed(tmp_path / "mixed")


def test_configurations_are_told_apart_by_the_keys_that_differ(mixed):
    results = load_results(mixed)
    assert differing_keys(results) == ["training.steps"]  # not layout.*: constant within each variant
    groups = config_groups(results)
    assert [g.label for g in groups] == ["training.steps=40", "training.steps=80"]
    assert [len(g.results) for g in groups] == [3 * ROUNDS, 2 * ROUNDS]
    assert groups[0].slug == "training.steps-40"
    forty = [r for r in results if r.config["training"]["steps"] == 40 and r.strategy == "none"]
    assert differing_keys(forty) == []
    assert [g.label for g in config_groups(forty)] == [""]


def test_report_prints_one_set_of_tables_per_configuration(mixed, capsys):
    assert report.main([str(mixed)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("these result files mix 2 configurations (they differ in training.steps)")
    sections = out.split("configuration training.steps=")
    assert len(sections) == 3 and "phase breakdown" in sections[2]
    for (steps, none, _), text, overhead in zip(BENCHES, sections[1:], ("+20.0 [", "+50.0 ["), strict=True):
        assert text.startswith(f"{steps} (")
        ff = text.split("\n\n")[1].splitlines()
        rows = {line.split()[0]: line for line in ff if line.split() and line.split()[0] in ("none", "ckpt")}
        assert rows["none"].split()[1] == str(ROUNDS)  # n: this configuration's rounds, not pooled
        assert f"{none + 1:.0f} (range {none:.0f}–{none + 2:.0f})" in rows["none"]
        assert overhead in rows["ckpt"]


def test_every_output_is_split_by_configuration(mixed, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'mpiec[test]')")
    out = tmp_path / "out"
    report.write_report(load_results(mixed), out)
    for name in ("comparison.txt", "comparison.md", "report.html", "comparison.csv"):
        text = (out / name).read_text()
        assert "configuration training.steps=40" in text and "configuration training.steps=80" in text, name
    assert (out / "plots" / "training.steps-40" / "overhead_ettr.png").exists()
    assert (out / "plots" / "training.steps-80" / "overhead_ettr.png").exists()
    assert not (out / "plots" / "overhead_ettr.png").exists()
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(list((out / "plots").rglob("*.png")))
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert {r["configuration"] for r in rows} == {"training.steps=40", "training.steps=80"}
    assert {r["configuration"] for r in frame_rows(load_results(mixed))} == {"training.steps=40",
                                                                            "training.steps=80"}
