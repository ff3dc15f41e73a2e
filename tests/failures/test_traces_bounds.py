"""Traces that used to crash the reader: LANL dates with UTC offsets, deeply nested JSON. Each is
read in UTC or refused with one line naming the file and the record (no MPI, milliseconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpiec.cli import main
from mpiec.errors import DataError
from mpiec.failures.traces import MAX_JSON_DEPTH, load_trace

LANL = Path(__file__).parents[1] / "fixtures" / "traces" / "small_lanl.csv"
HEADER = LANL.read_text().splitlines()[0]
ROW = ("20,cluster,4,16,4,{node},{node},Jan-03,Feb-03,current,part,8,1,1,1,compute,"
       "{started},{fixed},{down},,Hw,,,,,No")


def lanl(tmp_path, *rows: tuple[str, str, str]) -> Path:
    path = tmp_path / "t.csv"
    lines = [ROW.format(node=i, started=s, fixed=f, down=d) for i, (s, f, d) in enumerate(rows)]
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


def test_dates_with_offsets_are_compared_in_utc(tmp_path):
    path = lanl(tmp_path, ("2005-06-21T10:54:00+05:00", "2005-06-21T11:00:00+05:00", ""),
               ("2005-06-21T06:00:00Z", "", ""),  # 0.9 h after the first in UTC (05:54Z)
               ("2005-06-21T07:54:00+02:00", "2005-06-21T06:30:00Z", ""))  # 05:54Z: with the first
    failures = load_trace(path)
    assert [(f.node, f.time_s) for f in failures] == [("20:0", 0.0), ("20:2", 0.0), ("20:1", 360.0)]
    assert failures[0].repair_s == 360.0 and failures[1].repair_s == 36 * 60.0


@pytest.mark.parametrize("rows, needles", [
    ((("2005-06-21T10:54:00+05:00", "", ""), ("6/22/2005 10:54", "", "")),
     [":3:", "Prob Started '6/22/2005 10:54' has no UTC offset", "first date (line 2)"]),
    ((("6/21/2005 10:54", "", ""), ("2005-06-22T10:54:00Z", "", "")),
     [":3:", "has a UTC offset", "first date (line 2)"]),
    ((("2005-06-21T10:54:00Z", "6/21/2005 11:54", ""),), [":2:", "Prob Fixed '6/21/2005 11:54' has no UTC"]),
    ((("9999-12-31T23:00:00-05:00", "", ""),), [":2:", "is not a date"]),  # beyond year 9999 in UTC
])
def test_mixed_or_out_of_range_offsets_are_one_line(tmp_path, rows, needles):
    with pytest.raises(DataError) as ei:
        load_trace(lanl(tmp_path, *rows))
    text = str(ei.value)
    assert "\n" not in text and text.startswith("trace ") and all(n in text for n in needles), text


def test_deeply_nested_json_is_refused_before_the_parser(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    deeper = f"deep.json: JSON nested deeper than {MAX_JSON_DEPTH} levels at line 1 "
    with pytest.raises(DataError, match=deeper):
        load_trace(path)
    # brackets inside strings do not count, and a trace's own 3 levels pass
    ok = tmp_path / "ok.json"
    ok.write_text('[{"node_id": "[[[[" , "event_time": 1, "event_type": "fault_start",\n'
                  ' "fault_type": {"Desc": "' + "{" * 100 + '\\""}}]')
    assert len(load_trace(ok)) == 1


@pytest.mark.parametrize("cmd", [["bench", "--preset", "tiny", "--strategies", "none"], ["simulate"]])
def test_both_commands_print_one_line_and_exit_2(tmp_path, capsys, cmd):
    path = lanl(tmp_path, ("2005-06-21T10:54:00+05:00", "", ""), ("6/22/2005 10:54", "", ""))
    assert main([*cmd, "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mpiec: error: trace ") and "UTC offset" in err
