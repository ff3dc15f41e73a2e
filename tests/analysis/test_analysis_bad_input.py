"""``mpiec report`` on result files with mistyped values: one line naming file and attribute, exit 2;
``frame`` on a malformed ``bench.json``: one line naming it."""

from __future__ import annotations

import json

import h5py
import pytest
from mpiec.analysis import frame, load_results
from mpiec.analysis.tables import comparison_table

from mpiec.cli import main
from mpiec.errors import ResultFileError


def test_report_on_a_mistyped_summary_attribute_is_one_line_exit_2(tmp_path, make_run, capsys):
    p = tmp_path / "run.h5"
    make_run(p, "none")
    with h5py.File(p, "a") as f:
        f["summary"].attrs["throughput_sps"] = "abc"
    assert main(["report", str(p), "--no-events"]) == 2
    err = capsys.readouterr().err
    assert err == (f"mpiec: error: result file {p}: summary attribute throughput_sps must be a number, "
                   "got 'abc'\n")


def test_failure_table_takes_a_config_whose_failures_is_not_a_table(tmp_path, make_run):
    """A result file's config is free-form JSON: a fired kill with ``failures`` a string still
    gives the failure table (its title counts the kills)."""
    make_run(tmp_path / "r.h5", "ckpt", kill_at=5, config={"failures": "server:1@step=3"})
    assert "under failures: 1 kill(s)" in comparison_table(load_results(tmp_path))


@pytest.mark.parametrize("doc, problem", [
    ([1, 2], "a JSON list, not an object"),
    ({"runs": {"a": 1}}, "'runs' is not a list of objects"),
    ({"runs": ["run.h5"]}, "'runs' is not a list of objects"),
    ({"runs": [{"path": "run.h5", "repeat": "one"}]}, "run 0's 'repeat' is 'one'"),
    ({"runs": [{"path": 7}]}, "run 0's 'path' is 7"),
    ({"runs": [{"path": "run.h5", "order": [1]}]}, "run 0's 'order' is [1]"),
    ("{not json", "not JSON"),
])
def test_frame_on_a_malformed_bench_json_is_one_line_naming_it(tmp_path, make_run, doc, problem):
    """Before: AttributeError ('list' has no 'get'), TypeError (int() of None, iterating an int) or a
    wrong row; now a ``ResultFileError`` naming the file and the problem."""
    make_run(tmp_path / "run.h5", "none")
    (tmp_path / "bench.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ResultFileError) as err:
        frame(tmp_path)
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'bench.json'}: malformed (") and problem in msg and "\n" not in msg


def test_frame_reads_a_well_formed_bench_json(tmp_path, make_run):
    make_run(tmp_path / "run.h5", "none")
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [
        {"path": "run.h5", "repeat": 2, "order": 5, "kill_shift_steps": 1.5}, {"path": None, "repeat": 0}]}))
    row = frame(tmp_path).iloc[0]
    assert (row["repeat"], row["order"], row["kill_shift_steps"]) == (2, 5, 1.5)
