"""The paired analysis redone outside the suite: docs/report.md's pandas + scipy block, run as written on
a synthetic repeated bench, gives the failure-free table's intervals; ``frame`` carries the round and the
order within it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mpiec.analysis import frame_rows, load_results
from mpiec.analysis.metrics import compare
from mpiec.analysis.tables import ff_estimates, group_runs
from test_analysis_repeats import N, write_repeats

DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"
MARK = "<!-- the paired analysis; tests/analysis/test_frame_analysis.py runs this block -->"
PLACEHOLDER = '"results/bench-X"'


def doc_block() -> str:
    """The Python block right under ``MARK`` in docs/report.md, exactly as a reader copies it."""
    text = DOC.read_text(encoding="utf-8")
    assert text.count(MARK) == 1, "docs/report.md lost the marked analysis block"
    m = re.match(r"\s*```python\n(.*?)\n```", text.split(MARK, 1)[1], re.S)
    assert m, "no ```python block right under the mark"
    assert m.group(1).count(PLACEHOLDER) == 1
    return m.group(1)


def run_doc_block(directory: Path) -> object:
    pytest.importorskip("pandas")
    pytest.importorskip("scipy")
    ns: dict[str, object] = {}
    exec(compile(doc_block().replace(PLACEHOLDER, repr(str(directory))), str(DOC), "exec"), ns)  # noqa: S102
    return ns["overhead"]


@pytest.mark.parametrize("missing", [None, "ecrm-ff-r2.h5"])
def test_the_documented_pandas_analysis_gives_the_tables_intervals(tmp_path, capsys, missing):
    d = write_repeats(tmp_path / "rep")
    if missing:  # a missing run: both drop that round from the pair
        (d / missing).unlink()
    overhead = run_doc_block(d)
    assert "overhead %" in capsys.readouterr().out
    results = load_results(d)
    est = ff_estimates(group_runs(compare(results), results))
    assert sorted(overhead.index) == ["ckpt", "ecrm"]
    for v in ("ckpt", "ecrm"):
        e = est[v]["overhead"]
        assert e.n == (N - 1 if missing and v == "ecrm" else N)
        row = overhead.loc[v]
        assert row["overhead %"] == pytest.approx(e.value, abs=1e-9)
        assert row["lo"] == pytest.approx(e.lo, abs=1e-9) and row["hi"] == pytest.approx(e.hi, abs=1e-9)
        assert bool(row["significant"]) == e.significant
    assert overhead.loc["ckpt", "significant"] and not overhead.loc["ecrm", "significant"]


def test_frame_rows_carry_the_round_and_the_order_within_it(tmp_path):
    d = write_repeats(tmp_path / "rep")
    rows = frame_rows(load_results(d))
    per_round: dict[int, list[int]] = {}
    for r in rows:
        assert r["configuration"] == ""
        per_round.setdefault(r["repeat"], []).append(r["order_in_round"])
    # no bench.json: the order the runs are given in, 0 first, one place per run of the round
    assert sorted(per_round) == list(range(N))
    assert all(sorted(v) == list(range(len(v))) for v in per_round.values())
    # with the bench's manifest: its order, counted within the round (a failed run without a file counts)
    names = sorted(p.name for p in d.glob("*.h5"))
    runs = []
    for rep in range(N):
        mine = [n for n in names if n.endswith(f"-r{rep}.h5")]
        mine = mine[rep % len(mine):] + mine[:rep % len(mine)]  # rotated, as the bench does
        runs += [{"order": len(runs) + k, "repeat": rep, "path": n} for k, n in enumerate(mine)]
    runs.insert(1, {"order": -1, "repeat": 0, "path": None})  # round 0: a run that left no file, first
    (d / "bench.json").write_text(json.dumps({"runs": runs}))
    by_name = {r["run"]: r for r in frame_rows(load_results(d))}
    for entry in runs:
        if entry["path"] is None:
            continue
        row = by_name[entry["path"].removesuffix(".h5")]
        before = [x for x in runs if x["repeat"] == entry["repeat"] and x["order"] < entry["order"]]
        assert row["repeat"] == entry["repeat"] and row["order"] == entry["order"]
        assert row["order_in_round"] == len(before)
    assert min(r["order_in_round"] for r in by_name.values() if r["repeat"] == 0) == 1
