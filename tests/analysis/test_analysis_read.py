"""load_results: discovery, order, bad files."""

from __future__ import annotations

import io

import pytest
from mpiec.analysis import load_results
from mpiec.analysis.read import find_result_files

from mpiec.errors import ResultFileError


def test_recursive_and_dedup(runs_dir):
    files = find_result_files([runs_dir, runs_dir / "none.h5", str(runs_dir)])
    assert sorted(p.name for p in files) == ["cpr.h5", "ecrm.h5", "none.h5"]


def test_temp_files_of_unfinished_writer_are_not_results(runs_dir):
    (runs_dir / ".x.h5.123.tmp").write_bytes(b"partial")
    assert len(load_results(runs_dir)) == 3


def test_sorted_by_created_then_path(runs_dir):
    rs = load_results(runs_dir)
    keys = [(r.created, str(r.path)) for r in rs]
    assert keys == sorted(keys)


def test_bad_file_raises_naming_it(runs_dir):
    (runs_dir / "bad.h5").write_text("garbage")
    with pytest.raises(ResultFileError, match=r"bad\.h5: not an HDF5 file"):
        load_results(runs_dir)


def test_skip_bad_reports(runs_dir):
    (runs_dir / "bad.h5").write_text("garbage")
    err = io.StringIO()
    rs = load_results(runs_dir, skip_bad=True, stream=err)
    assert len(rs) == 3
    assert "skipping" in err.getvalue() and "bad.h5" in err.getvalue()


def test_missing_path(tmp_path):
    with pytest.raises(ResultFileError, match="does not exist"):
        load_results(tmp_path / "nothing")


def test_empty_dir(tmp_path):
    assert load_results(tmp_path) == []
