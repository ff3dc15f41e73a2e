"""Fault traces: both formats load, malformed records give one line naming them, replays are
seeded, compressed as documented, and parse as kill plans (no MPI, milliseconds)."""

import csv
import json
import random
from pathlib import Path

import pytest

from mpiec.errors import MpiecError
from mpiec.failures.faults import parse_kill_plans
from mpiec.failures.traces import (
    DAY_S,
    MIN_GAP_S,
    TraceFailure,
    load_trace,
    trace_kill_plans,
    trace_mtbf_s,
    trace_node_map,
)
from mpiec.launch.resolve import load_config

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
HBD = FIXTURES / "small_trace.json"
LANL = FIXTURES / "small_lanl.csv"
LANL_HEADER = LANL.read_text().splitlines()[0]
TARGETS = ["server:0", "server:1", "trainer:0", "trainer:1"]


@pytest.fixture
def cfg():
    return load_config("tiny", sets=["training.steps=100"])


def _many_nodes(n_nodes=40, per_node=3, seed=0):
    """A synthetic trace: n_nodes nodes, per_node failures each, distinct times."""
    rng = random.Random(seed)
    times = rng.sample(range(1, 10**6), n_nodes * per_node)
    return sorted((TraceFailure(f"n{k % n_nodes}", float(t), "", None) for k, t in enumerate(times)),
                  key=lambda f: f.time_s)


# ---------------------------------------------------------------- loading

def test_hbd_json_loads_sorted_and_paired():
    events = json.loads(HBD.read_text())
    starts = [e for e in events if e["event_type"] == "fault_start"]
    failures = load_trace(HBD)
    assert len(failures) == len(starts)
    times = [f.time_s for f in failures]
    assert times == sorted(times) and times[0] == 0.0
    first_day = min(e["event_time"] for e in starts)
    assert times[-1] == pytest.approx((max(e["event_time"] for e in starts) - first_day) * DAY_S)
    assert {f.node for f in failures} == {e["node_id"] for e in starts}
    assert all(f.kind.count(" / ") == 2 for f in failures)  # Level / Class / Desc
    # a start the trace never closes has no repair time; every closed one has its end - start
    closed = {(e["node_id"], json.dumps(e["fault_type"])) for e in events if e["event_type"] == "fault_end"}
    never_closed = [s for s in starts if (s["node_id"], json.dumps(s["fault_type"])) not in closed]
    assert [f.repair_s is None for f in failures].count(True) == len(never_closed) > 0
    assert all(f.repair_s >= 0 for f in failures if f.repair_s is not None)


def test_hbd_overlapping_faults_of_one_node_pair_by_type(tmp_path):
    # node x: GPU fault open while a NIC fault starts and ends: the NIC end closes the NIC start
    events = [
        {"node_id": "x", "event_time": 1.0, "event_type": "fault_start", "fault_type": {"Class": "GPU"}},
        {"node_id": "x", "event_time": 2.0, "event_type": "fault_start", "fault_type": {"Class": "NIC"}},
        {"node_id": "x", "event_time": 2.5, "event_type": "fault_end", "fault_type": {"Class": "NIC"}},
        {"node_id": "x", "event_time": 4.0, "event_type": "fault_end", "fault_type": {"Class": "GPU"}},
    ]
    failures = load_trace(_write(tmp_path, events))
    assert [(f.kind, f.repair_s) for f in failures] == [("GPU", 3.0 * DAY_S), ("NIC", 0.5 * DAY_S)]


def test_lanl_csv_loads_sorted_with_nodes_per_system():
    failures = load_trace(LANL)
    rows = list(csv.reader(LANL.read_text().splitlines()[1:]))
    file_nodes = [f"{r[0]}:{r[5] or 'system'}" for r in rows]  # SYSTEM:NODENUM, in file order
    assert sorted(f.node for f in failures) == sorted(file_nodes)
    assert [f.node for f in failures] != file_nodes  # the file is ordered by node, not by time
    times = [f.time_s for f in failures]
    assert times == sorted(times) and times[0] == 0.0
    by_kind = {f.kind: f for f in failures}
    assert by_kind["Facilities / Power Outage"].repair_s == 4 * 3600  # no Down Time: Prob Fixed - Started
    assert by_kind["Hardware / Memory Dimm"].repair_s == 90 * 60  # Down Time, minutes
    assert by_kind["Undetermined"].repair_s == 10 * 60
    assert by_kind[""].repair_s is None  # no category, no fix time


def test_lanl_system_filter():
    all_failures = load_trace(LANL)
    only = load_trace(LANL, system="21")
    assert only and all(f.node.startswith("21:") for f in only)
    assert len(only) == sum(f.node.startswith("21:") for f in all_failures)
    assert only[0].time_s == 0.0  # rebased on the system's own first failure
    with pytest.raises(MpiecError, match="no failure records of system '?99"):
        load_trace(LANL, system="99")
    with pytest.raises(MpiecError, match="LANL CSV"):
        load_trace(HBD, system="20")


def test_lanl_header_variants_and_two_digit_years(tmp_path):
    # the LANL README spells the date columns 'Prob Started (mm/dd/yy hh:mm)'
    path = tmp_path / "variant.csv"
    path.write_text("System,nodenum,Prob Started (mm/dd/yy hh:mm),Prob Fixed (mm/dd/yy hh:mm),Down Time\n"
                    "7,3,12/31/99 23:00,1/1/00 1:00,\n"
                    "7,4,12/31/99 22:00,12/31/99 22:30,\n")
    failures = load_trace(path)
    assert [(f.node, f.time_s, f.repair_s) for f in failures] == [("7:4", 0.0, 1800.0),
                                                                 ("7:3", 3600.0, 7200.0)]


# ---------------------------------------------------------------- malformed traces

def _write(tmp_path, events):
    path = tmp_path / "t.json"
    path.write_text(events if isinstance(events, str) else json.dumps(events))
    return path


def _event(node="a", t=1.0, etype="fault_start", kind="GPU"):
    return {"node_id": node, "event_time": t, "event_type": etype, "fault_type": kind}


def _one_line_error(path, *needles):
    with pytest.raises(MpiecError) as info:
        load_trace(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    for needle in needles:
        assert needle in message, message
    return message


@pytest.mark.parametrize("events, needles", [
    ([_event(), {"event_time": 2.0, "event_type": "fault_start"}], ["event [1]", "missing field 'node_id'"]),
    ([_event(), _event(t="2.5d")], ["event [1]", "event_time", "'2.5d'"]),
    ([_event(t=None)], ["event [0]", "event_time", "null"]),
    ([_event(t=True)], ["event [0]", "event_time"]),
    ([_event(t=3.0), _event(t=2.0, etype="fault_end")], ["event [1]", "negative duration"]),
    ([_event(etype="fault_end")], ["event [0]", "no open fault_start"]),
    ([_event(), _event(etype="fault_end", kind="NIC")], ["event [1]", "no open fault_start"]),
    ([_event(etype="crash")], ["event [0]", "event_type", "'crash'"]),
    ([_event(node="")], ["event [0]", "node_id"]),
    ([_event(kind=[1, 2])], ["event [0]", "fault_type"]),
    ([_event(), "fault"], ["event [1]", "expected an object"]),
    ({"events": []}, ["expected a JSON list"]),
    ([], ["no failure records"]),
    ('[{"node_id": "a",\n "event_time": }]', ["not valid JSON at line 2"]),
])
def test_malformed_json(tmp_path, events, needles):
    _one_line_error(_write(tmp_path, events), *needles)


def test_nan_event_time_is_refused(tmp_path):
    _one_line_error(_write(tmp_path, '[{"node_id": "a", "event_time": NaN, "event_type": "fault_start"}]'),
                    "event [0]", "finite")


ROW = ("{system},cluster,4,16,4,{node},{node},Jan-03,Feb-03,current,part,8,1,1,1,compute,"
       "{started},{fixed},{down},,Hw,,,,,No")  # the LANL header's 26 columns


@pytest.mark.parametrize("fields, needles", [
    ({"started": ""}, ["missing field 'Prob Started'"]),
    ({"started": "yesterday"}, ["Prob Started 'yesterday' is not a date"]),
    ({"started": "13/2/2004 1:00", "fixed": "", "down": ""}, ["'13/2/2004 1:00' is not a date"]),
    ({"down": "-5"}, ["Down Time '-5' is negative"]),
    ({"down": "long"}, ["Down Time 'long' is not a number"]),
    ({"fixed": "3/2/2004 9:30", "down": ""}, ["negative duration"]),
    ({"fixed": "soon", "down": ""}, ["Prob Fixed 'soon' is not a date"]),
    ({"node": "", "system": ""}, ["missing field 'nodenum'"]),  # with a System: a system-level outage
    ({"truncated": True}, ["8 fields, the header has 26"]),
])
def test_malformed_lanl_rows(tmp_path, fields, needles):
    values = {"system": "20", "node": "0", "started": "3/2/2004 10:00", "fixed": "3/2/2004 11:30",
              "down": "90", **fields}
    row = "20,cluster,4,16,4,0,0,3/2/2004 10:00" if values.pop("truncated", False) else ROW.format(**values)
    good = ROW.format(system="20", node="1", started="3/1/2004 10:00", fixed="3/1/2004 11:00", down="60")
    path = tmp_path / "bad.csv"
    path.write_text(f"{LANL_HEADER}\n{good}\n{row}\n{good}\n")
    _one_line_error(path, ":3:", *needles)  # line 3 of the file: the bad record


@pytest.mark.parametrize("text, needles", [
    ("", ["the file is empty"]),
    ("  \n\n", ["the file is empty"]),
    ("node 3 failed at noon\n", ["unknown trace format"]),
    ("time,host,what\n1,a,b\n", [":1:", "not a LANL failure-record header", "Prob Started"]),
    ("System,Prob Started\n1,3/2/2004 10:00\n", [":1:", "no 'nodenum' column"]),
    (LANL_HEADER + "\n", ["no failure records"]),
])
def test_empty_unknown_and_headerless_files(tmp_path, text, needles):
    path = tmp_path / "trace.txt"
    path.write_text(text)
    _one_line_error(path, *needles)


def test_missing_file_and_directory(tmp_path):
    _one_line_error(tmp_path / "nope.json", "does not exist")
    _one_line_error(tmp_path, "is a directory")


# ---------------------------------------------------------------- replay

def test_plans_parse_as_kill_plans_at_the_compressed_times(cfg):
    failures = load_trace(HBD)
    targets = [f"server:{i}" for i in range(cfg.layout.servers)] + \
              [f"trainer:{i}" for i in range(cfg.layout.trainers)]
    scale, start = DAY_S, 1.5
    plans = trace_kill_plans(failures, targets, scale=scale, seed=3, start_s=start, min_gap_s=0)
    kills = parse_kill_plans(plans, cfg)
    node_map = trace_node_map(failures, targets, seed=3)
    assert [f"{k.role}:{k.index}" for k in kills] == [node_map[f.node] for f in failures]
    assert [k.time for k in kills] == pytest.approx([start + f.time_s / scale for f in failures], abs=1e-6)
    assert all(k.step is None for k in kills)


@pytest.mark.parametrize("t", [0.0, 1e-7, 0.1 + 0.2, 3.25, 12345.678901, 9.99999951])
def test_plan_times_keep_microseconds(cfg, t):
    plans = trace_kill_plans([TraceFailure("a", t, "", None)], ["server:0"], scale=1.0, seed=0)
    (kill,) = parse_kill_plans(plans, cfg)
    assert kill.time == pytest.approx(t, abs=1e-6) and "e" not in plans[0].split("=")[1]


def test_mapping_is_seeded_and_independent_of_record_order():
    failures = _many_nodes()
    a = trace_node_map(failures, TARGETS, seed=11)
    shuffled = failures[:]
    random.Random(5).shuffle(shuffled)
    assert trace_node_map(shuffled, TARGETS, seed=11) == a
    assert trace_kill_plans(failures, TARGETS, scale=1e4, seed=11) == \
        trace_kill_plans(failures, TARGETS, scale=1e4, seed=11)
    maps = {json.dumps(trace_node_map(failures, TARGETS, seed=s), sort_keys=True) for s in range(10)}
    assert len(maps) > 1  # different seeds, different mappings
    assert trace_kill_plans(failures, TARGETS, scale=1e4, seed=1) != \
        trace_kill_plans(failures, TARGETS, scale=1e4, seed=2)


def test_fold_maps_every_node_evenly_sample_one_node_per_target():
    failures = _many_nodes(n_nodes=10)
    fold = trace_node_map(failures, TARGETS, seed=4)
    assert set(fold) == {f.node for f in failures}
    per_target = [list(fold.values()).count(t) for t in TARGETS]
    assert max(per_target) - min(per_target) <= 1
    sample = trace_node_map(failures, TARGETS, seed=4, mapping="sample")
    assert len(sample) == len(TARGETS) and sorted(sample.values()) == sorted(TARGETS)
    plans = trace_kill_plans(failures, TARGETS, scale=1.0, seed=4, mapping="sample", min_gap_s=0)
    assert len(plans) == sum(f.node in sample for f in failures) < len(failures)
    # more targets than trace nodes: every node still gets its own target
    few = trace_node_map(failures[:1], TARGETS, seed=4)
    assert len(few) == 1 and set(few.values()) <= set(TARGETS)


def test_kills_of_one_target_closer_than_the_gap_merge():
    one = [TraceFailure("a", t, "", None) for t in (0.0, 0.3, 0.6, 0.7, 2.0)]
    other = [TraceFailure("b", 0.1, "", None)]
    failures = sorted(one + other, key=lambda f: f.time_s)
    targets = ["server:0", "server:1"]
    node_map = trace_node_map(failures, targets, seed=0)
    plans = trace_kill_plans(failures, targets, scale=1.0, seed=0, min_gap_s=0.5)
    mine = [p for p in plans if p.startswith(node_map["a"] + "@")]
    # measured from the last kill kept: 0.3 merges into 0, 0.6 stays, 0.7 merges into 0.6
    assert [float(p.split("=")[1]) for p in mine] == [0.0, 0.6, 2.0]
    assert f"{node_map['b']}@time=0.1" in plans  # another target is not merged
    assert len(trace_kill_plans(failures, targets, scale=1.0, seed=0, min_gap_s=0)) == len(failures)
    assert MIN_GAP_S > 0  # the documented default merges


def test_horizon_and_max_kills():
    failures = [TraceFailure(f"n{i}", 100.0 * i, "", None) for i in range(10)]
    plans = trace_kill_plans(failures, TARGETS, scale=100.0, seed=0, start_s=1.0, horizon_s=5.0)
    assert [float(p.split("=")[1]) for p in plans] == [1.0, 2.0, 3.0, 4.0, 5.0]
    capped = trace_kill_plans(failures, TARGETS, scale=100.0, seed=0, max_kills=3)
    assert capped == trace_kill_plans(failures, TARGETS, scale=100.0, seed=0)[:3]
    assert trace_kill_plans(failures, TARGETS, scale=100.0, seed=0, max_kills=0) == []
    # a scale so small that t / scale overflows: only the kill at trace time 0 is representable
    tiny_scale = trace_kill_plans(failures, TARGETS, scale=1e-308, seed=0)
    assert len(tiny_scale) == 1 and tiny_scale[0].endswith("@time=0")
    # the cap counts kills after merging: merged duplicates do not use it up
    dup = [TraceFailure("a", 0.0, "", None)] * 3 + [TraceFailure("a", 10.0, "", None)]
    assert len(trace_kill_plans(dup, ["server:0"], scale=1.0, seed=0, max_kills=2)) == 2


@pytest.mark.parametrize("kwargs, needle", [
    ({"scale": 0}, "trace scale"),
    ({"scale": -1.0}, "trace scale"),
    ({"scale": float("nan")}, "trace scale"),
    ({"scale": 1.0, "start_s": -1.0}, "trace start"),
    ({"scale": 1.0, "horizon_s": float("inf")}, "trace horizon"),
    ({"scale": 1.0, "max_kills": -1}, "max kills"),
    ({"scale": 1.0, "mapping": "round-robin"}, "mapping"),
    ({"scale": 1.0, "targets": []}, "at least one failure target"),
    ({"scale": 1.0, "targets": ["monitor:0"]}, "target 'monitor:0' is not ROLE:INDEX"),
    ({"scale": 1.0, "targets": ["server:0", "server:0"]}, "repeat"),
    ({"scale": 1.0, "seed": -1}, "seed"),
])
def test_bad_replay_options(kwargs, needle):
    args = {"targets": TARGETS, "seed": 0, **kwargs}
    targets = args.pop("targets")
    with pytest.raises(MpiecError, match=needle):
        trace_kill_plans(load_trace(HBD), targets, **args)


def test_mtbf_is_the_mean_inter_arrival_time():
    failures = load_trace(HBD)
    times = [f.time_s for f in failures]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert trace_mtbf_s(failures) == pytest.approx(sum(gaps) / len(gaps))
    with pytest.raises(MpiecError, match="at least 2 failures"):
        trace_mtbf_s(failures[:1])
