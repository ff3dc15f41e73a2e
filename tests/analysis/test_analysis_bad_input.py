"""``mpiec report`` on result files with mistyped values: one line naming file and attribute, exit 2."""

from __future__ import annotations

import h5py
from mpiec.analysis import load_results
from mpiec.analysis.tables import comparison_table

from mpiec.cli import main


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
