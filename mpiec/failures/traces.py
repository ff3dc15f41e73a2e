"""Node-level fault traces: loading them and replaying them as kill plans.

Owns the two public trace formats the suite reads and their mapping onto a run's
failure targets (see docs/traces.md). Invariants:

* ``load_trace`` returns every failure of the file, sorted by ``time_s`` (ties keep
  file order), ``time_s`` counted from the trace's first failure (so the first is 0);
  anything malformed is a ``DataError`` of one line naming the file, the record
  (CSV line, JSON event index) and what is wrong — never a partial trace;
* the format is taken from the content, not the file name: a JSON list of events
  (stepfun-ai/InfiniteHBD-Trace's ``fault_trace.json``) or a CSV with the LANL
  failure-record header (``System, ..., nodenum, ..., Prob Started, Prob Fixed,
  Down Time, Facilities, Hardware, ...``);
* ``trace_kill_plans`` is a pure function of (failures, targets, options, seed): the
  node → target mapping depends on the *set* of trace node ids and the seed only,
  not on record order, so every rank (and every rerun) derives the same kills; its
  output is ``ROLE:INDEX@time=SECONDS`` strings that ``mpiec.failures.faults`` parses;
* ``trace_window`` (the default replay of ``mpiec bench``) is a pure function of the same
  inputs: the stretch of the trace, at the trace's own rate, over which the kills a run
  can take fall most evenly;
* a trace is bounded before it is parsed: only a regular file of at most ``MAX_INPUT_BYTES`` is
  read (``mpiec.config.inputs.read_input``: a named pipe or ``/dev/zero`` is refused), JSON nested
  deeper than ``MAX_JSON_DEPTH`` is refused, and dates with a UTC offset are compared in UTC
  (a file mixing dates with and without one is refused), so no input ends in a traceback.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mpiec.config.inputs import read_input
from mpiec.errors import DataError, MpiecError
from mpiec.failures.faults import KILLABLE_ROLES

DAY_S = 86400.0
MIN_GAP_S = 0.5  # run seconds: a slot cannot die twice before it is replaced; closer kills merge
_TARGET = re.compile(r"^([a-z]+):([0-9]{1,9})$")
_LANL_CATEGORIES = ("Facilities", "Hardware", "Human Error", "Network", "Undetermined", "Software")
#: Nesting levels a trace's JSON may have. An InfiniteHBD trace has 3 (the list, an event, its
#: fault_type); the cap leaves room for extra keys and keeps a crafted file from reaching the
#: parser's recursion limit (a RecursionError deep in ``json``).
MAX_JSON_DEPTH = 32
# a string literal; the closing quote optional so an unterminated one is one linear match, not a
# rescan from every later quote (that file is invalid JSON anyway: the parser names it next)
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')
_LANL_DATE = re.compile(r"^([0-9]{1,2})/([0-9]{1,2})/([0-9]{4}|[0-9]{2})"  # m/d/yyyy or m/d/yy
                        r"\s+([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?$")  # h:mm, optional :ss


@dataclass(frozen=True)
class TraceFailure:
    """One node failure of a trace."""

    node: str  # the trace's node id, as text
    time_s: float  # seconds since the trace's first failure, uncompressed
    kind: str  # fault type / category, "" if none
    repair_s: float | None  # fault_end - fault_start (or Down Time), None if unknown


def _escaped(text: str, limit: int = 60) -> str:
    """Text as it goes into a one-line message: control characters escaped, shortened."""
    if len(text) > limit:
        text = text[:limit] + "..."
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _show(value: Any) -> str:
    """A value of the file as a message shows it: a string quoted, anything else as JSON."""
    return f"'{_escaped(value)}'" if isinstance(value, str) else _escaped(json.dumps(value, default=repr))


# ---------------------------------------------------------------- loading

def load_trace(path: str | Path, *, system: str | None = None) -> list[TraceFailure]:
    """Format detected from content (JSON vs CSV), sorted by time; MpiecError on anything malformed.

    ``system`` (LANL CSV only): keep only the records of that ``System`` value; the LANL
    file mixes LANL's clusters (23 System values), and a researcher usually replays one.
    """
    p = Path(path)
    where = f"trace {_escaped(str(p), 200)}"
    raw = read_input(p, where, noun="trace file", error=DataError)  # a pipe or /dev/zero: refused
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # older CSV exports; JSON is UTF-8 by definition (checked below)
    head = text.lstrip()
    if not head:
        raise DataError(f"{where}: the file is empty")
    if head[0] in "[{":
        if system is not None:
            raise DataError(f"{where}: a system filter applies to LANL CSV traces, this is JSON")
        failures = _load_hbd_json(text, where)
    elif "," in head.splitlines()[0]:
        failures = _load_lanl_csv(text, where, system)
    else:
        raise DataError(f"{where}: unknown trace format (expected the JSON event list of "
                        "InfiniteHBD-Trace or a LANL failure-record CSV with a header line)")
    if not failures:
        which = f" of system {_show(system)}" if system is not None else ""
        raise DataError(f"{where}: has no failure records{which}")
    first = min(f.time_s for f in failures)
    # sort by time; ties keep file order (sorted is stable), so equal traces give equal lists
    return sorted((TraceFailure(f.node, f.time_s - first, f.kind, f.repair_s) for f in failures),
                  key=lambda f: f.time_s)


def _hbd_kind(value: Any) -> str | None:
    """InfiniteHBD's ``fault_type`` ({Level, Class, Desc}) as one text; None if not of that shape."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        parts = [value[k] for k in ("Level", "Class", "Desc") if value.get(k)]
        parts += [v for k, v in value.items() if k not in ("Level", "Class", "Desc") and v]
        return " / ".join(parts)
    return None


def _load_hbd_json(text: str, where: str) -> list[TraceFailure]:
    """InfiniteHBD-Trace: a list of ``fault_start`` / ``fault_end`` events, ``event_time`` in days.

    A ``fault_end`` closes the oldest open ``fault_start`` of the same node and fault type
    (file order); a start never closed (the trace ended first) has ``repair_s = None``.
    """
    _check_json_depth(text, where)
    try:
        events = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: not valid JSON at line {exc.lineno} column {exc.colno} "
                        f"({exc.msg})") from None
    if not isinstance(events, list):
        got = {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(events), "a number")
        raise DataError(f"{where}: expected a JSON list of events (InfiniteHBD-Trace's "
                        f"fault_trace.json), got {got}")
    failures: list[TraceFailure] = []
    # (node, kind) -> indices into failures of the starts not yet closed, oldest first
    open_starts: dict[tuple[str, str], deque[int]] = defaultdict(deque)
    for i, event in enumerate(events):
        at = f"{where}: event [{i}]"
        if not isinstance(event, dict):
            raise DataError(f"{at}: expected an object with node_id, event_time, event_type, "
                            f"got {_show(event)}")
        for key in ("node_id", "event_time", "event_type"):
            if key not in event:
                raise DataError(f"{at}: missing field '{key}'")
        node = event["node_id"]
        if isinstance(node, bool) or not isinstance(node, str | int) or str(node).strip() == "":
            raise DataError(f"{at}: node_id must be a non-empty string or an integer, got {_show(node)}")
        node = str(node)
        t = event["event_time"]
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise DataError(f"{at}: event_time must be a finite number of days, got {_show(t)}")
        kind = _hbd_kind(event.get("fault_type"))
        if kind is None:
            raise DataError(f"{at}: fault_type must be an object of strings (Level, Class, Desc) "
                            f"or a string, got {_show(event.get('fault_type'))}")
        etype = event["event_type"]
        if etype == "fault_start":
            open_starts[(node, kind)].append(len(failures))
            failures.append(TraceFailure(node, float(t) * DAY_S, kind, None))
        elif etype == "fault_end":
            pending = open_starts.get((node, kind))
            if not pending:
                what = _show(kind) if kind else "no fault_type"
                raise DataError(f"{at}: fault_end of node {_show(node)} ({what}) has no open fault_start "
                                "before it")
            j = pending.popleft()
            start = failures[j]
            repair = float(t) * DAY_S - start.time_s
            if repair < 0:
                raise DataError(f"{at}: fault_end at day {t:g} is before its fault_start at day "
                                f"{start.time_s / DAY_S:g} (negative duration)")
            failures[j] = TraceFailure(node, start.time_s, kind, repair)
        else:
            raise DataError(f"{at}: event_type must be 'fault_start' or 'fault_end', got {_show(etype)}")
    return failures


def _check_json_depth(text: str, where: str) -> None:
    """Refuse JSON nested deeper than ``MAX_JSON_DEPTH``, before the recursive parser sees it.

    Brackets are counted outside string literals (removed first, one regex pass: linear time);
    a raw newline cannot occur inside a JSON string, so line numbers survive the removal.
    """
    bare = np.frombuffer(_JSON_STRING.sub("", text).encode("utf-8", "surrogatepass"), np.uint8)
    step = np.isin(bare, (ord("["), ord("{"))).astype(np.int32) - np.isin(bare, (ord("]"), ord("}")))
    depth = np.cumsum(step, dtype=np.int64)
    if len(depth) and depth.max() > MAX_JSON_DEPTH:
        at = int(np.argmax(depth > MAX_JSON_DEPTH))
        line = int(np.count_nonzero(bare[:at] == ord("\n"))) + 1
        raise DataError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels at line {line} "
                        "(an InfiniteHBD trace is a list of flat event objects)")


def _column_key(name: str) -> str:
    """``'Prob Started (mm/dd/yy hh:mm)'`` -> ``'prob started'``: header variants match."""
    return " ".join(name.split("(")[0].lower().split())


def _lanl_date(value: str) -> tuple[datetime, bool] | None:
    """``6/21/2005 10:54`` (also ``6/21/05``, seconds, ISO 8601) -> (naive datetime, had an offset).

    A date with a UTC offset (``2005-06-21T10:54:00+05:00``, ``...Z``) is converted to UTC and
    made naive, so every date of a trace subtracts from every other; one without is the record's
    local wall-clock time. None if not a date (or out of range once converted).
    """
    value = value.strip()
    m = _LANL_DATE.match(value)  # a regex, not strptime: 10x faster on the 23,739 LANL records
    if m:
        month, day, year, hour, minute, second = (int(g) if g else 0 for g in m.groups())
        if len(m.group(3)) == 2:
            year += 1900 if year >= 69 else 2000  # strptime's %y rule
        try:
            return datetime(year, month, day, hour, minute, second), False
        except ValueError:
            return None
    try:
        date = datetime.fromisoformat(value)
        if date.tzinfo is None:
            return date, False
        return date.astimezone(UTC).replace(tzinfo=None), True
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 shifted out of range
        return None


class _LanlDates:
    """A LANL file's dates, parsed so that any two of them subtract.

    Dates with a UTC offset are normalised to UTC; dates without one are local wall-clock
    times of an unknown zone, so a file that mixes both is refused (at the first date of the
    other kind) instead of being misordered by the unknown offset.
    """

    def __init__(self) -> None:
        self.first: tuple[bool, str] | None = None  # (had an offset, its line)

    def parse(self, text: str, at: str, column: str) -> datetime:
        parsed = _lanl_date(text)
        if parsed is None:
            raise DataError(f"{at}: {column} {_show(text)} is not a date (expected m/d/yyyy hh:mm)")
        date, offset = parsed
        if self.first is None:
            self.first = (offset, at.rsplit(":", 1)[-1])
        elif self.first[0] != offset:
            raise DataError(f"{at}: {column} {_show(text)} has {'a' if offset else 'no'} UTC offset, "
                            f"unlike the trace's first date (line {self.first[1]}): give every date an "
                            "offset (or Z), or none")
        return date


def _load_lanl_csv(text: str, where: str, system: str | None) -> list[TraceFailure]:
    """LANL failure records: one row per node outage; times are local wall-clock dates.

    Node id ``SYSTEM:NODENUM`` (node numbers repeat across systems; ``SYSTEM:system`` for
    a record without node number, a system-level outage). Repair time from
    ``Down Time`` (minutes; the record's own figure, which also survives the DST jumps of
    its local dates), else ``Prob Fixed - Prob Started``. Kind: the filled root-cause
    column(s), ``Hardware / Graphics Accel Hdwr``.
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        columns = {_column_key(name): k for k, name in enumerate(header)}
        if "prob started" not in columns:
            raise DataError(f"{where}:{reader.line_num}: not a LANL failure-record header "
                            "(no 'Prob Started' column)")
        node_col = columns.get("nodenum", columns.get("nodenumz"))
        if node_col is None:
            raise DataError(f"{where}:{reader.line_num}: not a LANL failure-record header "
                            "(no 'nodenum' column)")
        system_col = columns.get("system")
        if system is not None and system_col is None:
            raise DataError(f"{where}: a system filter needs a 'System' column, the header has none")
        started_col = columns["prob started"]
        fixed_col = columns.get("prob fixed")
        down_col = columns.get("down time")
        categories = [(name, columns[_column_key(name)]) for name in _LANL_CATEGORIES
                      if _column_key(name) in columns]
        failures: list[TraceFailure] = []
        dates = _LanlDates()
        for row in reader:
            at = f"{where}:{reader.line_num}"
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise DataError(f"{at}: {len(row)} fields, the header has {len(header)}")
            sys_id = row[system_col].strip() if system_col is not None else ""
            if system is not None and sys_id != system:
                continue
            nodenum = row[node_col].strip()
            if not nodenum and not sys_id:
                raise DataError(f"{at}: missing field '{header[node_col]}'")
            started_text = row[started_col].strip()
            if not started_text:
                raise DataError(f"{at}: missing field '{header[started_col]}'")
            started = dates.parse(started_text, at, header[started_col])
            repair = _lanl_repair(row, at, header, started, fixed_col, down_col, dates)
            kind = "; ".join(name if row[k].strip() == name else f"{name} / {row[k].strip()}"
                             for name, k in categories if row[k].strip())
            # no node number: a system-level outage (all of LANL's system 17), one node of its own
            node = f"{sys_id}:{nodenum or 'system'}" if system_col is not None else nodenum
            # seconds since an arbitrary epoch: load_trace rebases on the first failure
            failures.append(TraceFailure(node, (started - datetime(1970, 1, 1)).total_seconds(),
                                         kind, repair))
    except csv.Error as exc:
        raise DataError(f"{where}:{reader.line_num}: malformed CSV ({exc})") from None
    return failures


def _lanl_repair(row: list[str], at: str, header: list[str], started: datetime,
                 fixed_col: int | None, down_col: int | None, dates: _LanlDates) -> float | None:
    """Repair seconds of one LANL record (Down Time, else Prob Fixed - Prob Started), None if neither."""
    if down_col is not None and row[down_col].strip():
        down_text = row[down_col].strip()
        try:
            minutes = float(down_text)
        except ValueError:
            minutes = math.nan
        if not math.isfinite(minutes):
            raise DataError(f"{at}: {header[down_col]} {_show(down_text)} is not a number of minutes")
        if minutes < 0:
            raise DataError(f"{at}: {header[down_col]} {_show(down_text)} is negative")
        return minutes * 60.0
    if fixed_col is None or not row[fixed_col].strip():
        return None
    fixed_text = row[fixed_col].strip()
    fixed = dates.parse(fixed_text, at, header[fixed_col])
    repair = (fixed - started).total_seconds()
    if repair < 0:
        raise DataError(f"{at}: {header[fixed_col]} {_show(fixed_text)} is before the problem "
                        "started (negative duration)")
    return repair


# ---------------------------------------------------------------- statistics

def trace_mtbf_s(failures: list[TraceFailure]) -> float:
    """Mean inter-arrival time of the trace, trace seconds (the simulator and docs use it).

    The whole trace's arrival process (every node): span between the first and the last
    failure over the number of gaps. A node's own MTBF is about this times the node count.
    """
    if len(failures) < 2:
        raise MpiecError(f"a trace needs at least 2 failures for a mean inter-arrival time, "
                         f"it has {len(failures)}")
    times = [f.time_s for f in failures]
    return (max(times) - min(times)) / (len(times) - 1)


# ---------------------------------------------------------------- replay

def trace_node_map(failures: list[TraceFailure], targets: list[str], *, seed: int,
                   mapping: Literal["fold", "sample"] = "fold") -> dict[str, str]:
    """Trace node id -> target slot: a seeded permutation of the distinct node ids, dealt out.

    The distinct node ids are sorted (record order does not matter), permuted by
    ``numpy.random.default_rng(seed)``, and the i-th node of the permutation goes to
    ``targets[i % len(targets)]``. ``fold``: every node is mapped, so the whole trace's
    arrival process lands on the job (several trace nodes share a target). ``sample``: only
    the first ``len(targets)`` nodes of the permutation are mapped (one trace node per
    target, the per-node failure process of a job of that size); the others are absent.
    """
    _check_targets(targets)
    if mapping not in ("fold", "sample"):
        raise MpiecError(f"trace mapping must be 'fold' or 'sample', got {_show(mapping)}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**63:
        raise MpiecError(f"trace seed must be a whole number in [0, 2^63), got {_show(seed)}")
    nodes = sorted({f.node for f in failures})
    order = np.random.default_rng(int(seed)).permutation(len(nodes))
    if mapping == "sample":
        order = order[:len(targets)]
    return {nodes[int(j)]: targets[i % len(targets)] for i, j in enumerate(order)}


def _check_targets(targets: list[str]) -> None:
    if not targets:
        raise MpiecError("a trace replay needs at least one failure target (e.g. server:0)")
    for t in targets:
        m = _TARGET.match(t) if isinstance(t, str) else None
        if not m or m.group(1) not in KILLABLE_ROLES:
            raise MpiecError(f"trace target {_show(t)} is not ROLE:INDEX with ROLE one of "
                             f"{', '.join(KILLABLE_ROLES)}")
    if len(set(targets)) != len(targets):
        raise MpiecError(f"trace targets repeat a slot: {', '.join(targets)}")


def _finite(value: float, what: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise MpiecError(f"{what} must be a finite number {bound}, got {_show(value)}")
    return float(value)


def _plan_time(t: float) -> str:
    """Seconds as faults' ``time=`` accepts them: plain decimal, microseconds, no exponent."""
    return f"{t:.6f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class TraceKill:
    """One kill of a replay and the trace failure it comes from."""

    plan: str  # 'server:1@time=3.25', as mpiec.failures.faults parses it
    target: str  # 'server:1'
    time_s: float  # run seconds since training started
    failure: TraceFailure

    def describe(self) -> str:
        """``server:1@time=3.25 <- trace node n7 (day 12.50, GPU)``: one line, the file's text escaped."""
        kind = f", {_escaped(self.failure.kind)}" if self.failure.kind else ""
        return (f"{self.plan} <- trace node {_escaped(self.failure.node)} "
                f"(day {self.failure.time_s / DAY_S:.2f}{kind})")


def trace_kills(failures: list[TraceFailure], targets: list[str], *, scale: float, seed: int,
                start_s: float = 0.0, max_kills: int | None = None,
                horizon_s: float | None = None, min_gap_s: float = MIN_GAP_S,
                mapping: Literal["fold", "sample"] = "fold", from_s: float = 0.0) -> list[TraceKill]:
    """The kills of a replay, each with its trace failure (``trace_kill_plans`` gives the plans).

    ``scale``: trace seconds per run second (86400 replays a trace day per second). ``from_s``:
    the trace time replayed at ``start_s`` (``trace_window`` picks one); earlier failures are
    dropped. A failure at trace time ``t`` becomes a kill at ``start_s + (t - from_s) / scale``
    run seconds since training started. In that order: failures of unmapped nodes are dropped
    (``sample``), kills after ``horizon_s`` (run seconds) dropped, a kill closer than
    ``min_gap_s`` to the previous kept kill of the same target merged into it, then the first
    ``max_kills`` kept. Sorted by time, then by target order.
    """
    scale = _finite(scale, "trace scale (trace seconds per run second)", positive=True)
    start_s = _finite(start_s, "trace start (run seconds)")
    from_s = _finite(from_s, "trace window start (trace seconds)")
    min_gap_s = _finite(min_gap_s, "trace minimum gap between kills of one target (seconds)")
    if horizon_s is not None:
        horizon_s = _finite(horizon_s, "trace horizon (run seconds)")
    if max_kills is not None and (isinstance(max_kills, bool) or not isinstance(max_kills, int)
                                  or max_kills < 0):
        raise MpiecError(f"trace max kills must be a whole number >= 0, got {_show(max_kills)}")
    if max_kills == 0:
        return []
    node_map = trace_node_map(failures, targets, seed=seed, mapping=mapping)
    rank = {t: k for k, t in enumerate(targets)}
    kills = sorted(((round(start_s + (f.time_s - from_s) / scale, 6), node_map[f.node], f)
                    for f in failures if f.node in node_map and f.time_s >= from_s),
                   key=lambda kill: (kill[0], rank[kill[1]]))
    last: dict[str, float] = {}
    out: list[TraceKill] = []
    for t, target, failure in kills:
        if not math.isfinite(t) or (horizon_s is not None and t > horizon_s):
            break  # sorted by time: every later kill is beyond too (inf: a tiny scale overflowed)
        if target in last and t - last[target] < min_gap_s:
            continue
        last[target] = t
        out.append(TraceKill(f"{target}@time={_plan_time(t)}", target, t, failure))
        if max_kills is not None and len(out) >= max_kills:
            break
    return out


def trace_kill_plans(failures: list[TraceFailure], targets: list[str], *, scale: float, seed: int,
                     start_s: float = 0.0, max_kills: int | None = None,
                     horizon_s: float | None = None, min_gap_s: float = MIN_GAP_S,
                     mapping: Literal["fold", "sample"] = "fold", from_s: float = 0.0) -> list[str]:
    """Kill-plan strings the existing parser accepts, e.g. 'server:1@time=3.25' (see ``trace_kills``)."""
    return [k.plan for k in trace_kills(failures, targets, scale=scale, seed=seed, start_s=start_s,
                                        max_kills=max_kills, horizon_s=horizon_s, min_gap_s=min_gap_s,
                                        mapping=mapping, from_s=from_s)]


def trace_window(failures: list[TraceFailure], targets: list[str], *, kills: int, seed: int,
                 mapping: Literal["fold", "sample"] = "fold") -> tuple[float, float]:
    """(start, length), trace seconds: the stretch of the trace a replay of ``kills`` kills takes
    by default, so that the kills a run can take are spread over it rather than bunched.

    The length is ``kills`` mean inter-arrival times of the failures that reach a target, so the
    replay keeps the trace's own rate (about ``kills`` failures per window). The start is the
    failure from which the window's first ``kills`` kills fall most evenly: the largest smallest
    gap, between consecutive kills and from the last kill to the window's end. A window holding
    fewer kills is chosen only where none holds enough; ties go to the earliest. Simultaneous
    failures of different targets have a gap of 0, so a burst is taken only from a trace of
    bursts. Replaying the window over a run's failure window of ``R`` seconds takes
    ``scale = length / R`` and ``from_s = start``.
    """
    if isinstance(kills, bool) or not isinstance(kills, int) or kills < 1:
        raise MpiecError(f"trace window kills must be a whole number >= 1, got {_show(kills)}")
    node_map = trace_node_map(failures, targets, seed=seed, mapping=mapping)
    # one entry per (instant, target): failures that coincide on one target are one kill at any scale
    t = np.array([time for time, _ in sorted({(f.time_s, node_map[f.node]) for f in failures
                                              if f.node in node_map})], dtype=np.float64)
    if not len(t):
        raise MpiecError("a trace replay needs a failure on a mapped node, the trace has none")
    n = len(t)
    length = kills * (t[-1] - t[0]) / (n - 1) if n > 1 else 0.0
    if not length > 0:  # one failure, or all at one instant: any length replays them at the start
        return float(t[0]), 1.0
    idx = np.arange(n)
    held = np.minimum(np.searchsorted(t, t + length, side="left") - idx, kills)  # >= 1: t[i] itself
    last = idx + held - 1
    score = np.minimum(_range_min(np.diff(t), idx, last), length - (t[last] - t)) / length
    # a window must start at the first failure of its instant: replaying from_s = t[i] replays
    # every failure at t[i], also those sorted before i
    first = np.concatenate([[True], t[1:] != t[:-1]])
    best = np.lexsort((-idx, score, held))  # most kills, then the best spread, then the earliest
    best = best[first[best]]
    return float(t[best[-1]]), float(length)


def _range_min(d: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(d[lo[i]:hi[i]])`` for every i (+inf where empty), by a sparse table: O(n log n)
    time and memory whatever the window widths (``--max-kills`` is not bounded by the trace)."""
    table = [np.concatenate([d, [np.inf]])]  # the pad makes an empty range read +inf
    while 2 ** len(table) <= len(d):
        prev, half = table[-1], 2 ** (len(table) - 1)
        table.append(np.minimum(prev[:-half], prev[half:]))
    width = hi - lo
    out = np.full(len(lo), np.inf)
    some = width > 0
    k = np.floor(np.log2(np.maximum(width, 1))).astype(np.int64)
    for j in np.unique(k[some]):
        sel = some & (k == j)
        row = table[j]
        out[sel] = np.minimum(row[lo[sel]], row[hi[sel] - 2 ** j])
    return out
