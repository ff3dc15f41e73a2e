"""The reader holds summary attributes, root attributes and dataset columns to their schema types:
a mistyped value is one ResultFileError line naming the file and the attribute (no MPI)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from mpiec.errors import ResultFileError
from mpiec.results import TIMELINE_DTYPE, ResultWriter, read_result

ATTRS = {"config": {"strategy": {"name": "none"}}, "strategy": "none", "seed": 1,
         "failure_mode": "ulfm", "ulfm": True}


def good_file(tmp_path):
    p = tmp_path / "run.h5"
    w = ResultWriter(p, ATTRS)
    w.add_steps(np.zeros(3, TIMELINE_DTYPE))
    w.close({"throughput_sps": 10.0})
    return p


@pytest.mark.parametrize("key, value, message", [
    ("throughput_sps", "abc", "summary attribute throughput_sps must be a number, got 'abc'"),
    ("steps_completed", 1.5, "summary attribute steps_completed must be an integer, got 1.5"),
    ("param_checksum", 3, "summary attribute param_checksum must be a string, got 3"),
    ("lost", "no", "summary attribute lost must be true or false, got 'no'"),
    ("complete", "yes", "summary attribute complete must be true or false"),
    ("recovery_latency_s", [1.0, 2.0], "summary attribute recovery_latency_s must be a number"),
])
def test_mistyped_summary_attribute_is_one_line(tmp_path, key, value, message):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        f["summary"].attrs[key] = value
    with pytest.raises(ResultFileError) as ei:
        read_result(p)
    text = str(ei.value)
    assert text.startswith(f"result file {p}: ") and message in text and "\n" not in text


def test_compatible_types_are_read_as_the_schema_type(tmp_path):
    """Ints for floats and 0/1 for bools (how other HDF5 tools store them) read as the schema's type."""
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        f["summary"].attrs["throughput_sps"] = np.int32(7)
        f["summary"].attrs["lost"] = np.int8(0)
    s = read_result(p).summary
    assert s["throughput_sps"] == 7.0 and type(s["throughput_sps"]) is float
    assert s["lost"] is False


@pytest.mark.parametrize("key, value", [("strategy", 3), ("ulfm", "maybe"), ("seed", "x"),
                                        ("variant", np.array([1.0, 2.0]))])
def test_mistyped_root_attribute_is_one_line(tmp_path, key, value):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        f.attrs[key] = value
    with pytest.raises(ResultFileError, match=f"run.h5: root attribute {key} must be") as ei:
        read_result(p)
    assert "\n" not in str(ei.value)


def test_text_in_a_numeric_column_is_refused(tmp_path):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        del f["timeline"]
        dt = np.dtype([(n, "S8" if n == "t_end" else TIMELINE_DTYPE[n]) for n in TIMELINE_DTYPE.names])
        f["timeline"] = np.zeros(3, dt)
    with pytest.raises(ResultFileError, match="dataset timeline column t_end holds .*S8, not numbers"):
        read_result(p)


def test_defaulted_must_be_a_list(tmp_path):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        f["summary"].attrs["defaulted"] = "{}"
    with pytest.raises(ResultFileError, match="summary attribute defaulted is not a JSON list"):
        read_result(p)
