"""What the monitor computes from the ranks' final reports: pure functions, no MPI.

Owns the definitions behind the result's headline figures:

* **timeline** — the union of every trainer's records (and the monitor's
  streamed copy), keyed by (epoch, step): a step re-executed after a rollback
  appears once per epoch and is marked ``reexec``;
* **param_checksum** — SHA-256 over the dense replica (parameters, then
  optimizer state) followed by every embedding row ``[weights | optimizer
  state]`` in **global row order** (no padding, no parity), so it does not
  depend on the number of servers or the striping;
* **recovery breakdown** — per recovery: detection (kill → first detect),
  shrink and agree, replacement, restore, back to 95 % of the normal step rate.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from mpiec.results import TIMELINE_DTYPE


def merge_timelines(parts: list[np.ndarray]) -> np.ndarray:
    """One record per (epoch, step), the first part's wins; sorted by time; ``reexec`` set."""
    seen: set[tuple[int, int]] = set()
    keep = []
    for part in parts:
        for rec in part:
            key = (int(rec["epoch"]), int(rec["step"]))
            if key not in seen:
                seen.add(key)
                keep.append(rec)
    if not keep:
        return np.zeros(0, TIMELINE_DTYPE)
    tl = np.array(keep, dtype=TIMELINE_DTYPE)
    tl = tl[np.lexsort((tl["step"], tl["epoch"]))]
    high = -1
    last_epoch_high: dict[int, int] = {}
    for e in np.unique(tl["epoch"]):
        last_epoch_high[int(e)] = high
        high = max(high, int(tl["step"][tl["epoch"] == e].max()))
    tl["reexec"] = [int(s) <= last_epoch_high[int(e)] for e, s in zip(tl["epoch"], tl["step"], strict=True)]
    return tl[np.argsort(tl["t_end"], kind="stable")]


def param_checksum(dense: tuple[np.ndarray, np.ndarray], shards: list[tuple[np.ndarray, np.ndarray]],
                   total_rows: int) -> str:
    """SHA-256 of the dense replica and of every row in global order; "" if rows are missing."""
    h = hashlib.sha256()
    for arr in dense:
        h.update(np.ascontiguousarray(arr, dtype=np.float32).tobytes())
    if not shards:
        return ""
    rows = np.concatenate([r for r, _ in shards])
    if rows.size != total_rows or (rows.size and not np.array_equal(np.sort(rows), np.arange(total_rows))):
        return ""
    width = max(t.shape[1] for _, t in shards)
    table = np.concatenate([t.reshape(-1, width) for _, t in shards])
    order = np.argsort(rows, kind="stable")
    block = 1 << 16
    for lo in range(0, order.size, block):
        h.update(np.ascontiguousarray(table[order[lo:lo + block]]).tobytes())
    return h.hexdigest()


def recovery_breakdown(recoveries: list[list[dict[str, float]]], kill_times: list[float],
                       timeline: np.ndarray) -> list[dict[str, float]]:
    """Per recovery (by epoch): phase durations in seconds, from every rank's phase times."""
    by_epoch: dict[int, list[dict[str, float]]] = {}
    for rank_list in recoveries:
        for rec in rank_list:
            by_epoch.setdefault(int(rec["epoch"]), []).append(rec)
    normal = _normal_step_time(timeline)
    out = []
    for epoch in sorted(by_epoch):
        recs = by_epoch[epoch]
        first = min(r.get("first_detect", r.get("detect", math.inf)) for r in recs)
        agreed = max(r.get("agree", first) for r in recs)
        planned = max(r.get("plan", agreed) for r in recs)
        replaced = max(r["replaced"] for r in recs)
        restored = max(r["restored"] for r in recs)
        before = [t for t in kill_times if t <= first + 1e-6]
        killed = max(before) if before else first
        after = timeline[(timeline["epoch"] == epoch)] if len(timeline) else timeline
        back = restored
        if len(after) and normal > 0:
            ok = after[after["dt"] <= normal / 0.95]
            back = float(ok["t_end"][0]) if len(ok) else float(after["t_end"][-1])
        out.append({"epoch": epoch, "kill": killed, "detection_s": first - killed,
                    "shrink_agree_s": agreed - first, "plan_s": planned - agreed,
                    "replace_s": replaced - planned, "restore_s": restored - replaced,
                    "back_to_normal_s": max(0.0, back - restored), "recovery_s": restored - killed,
                    "time_lost_s": max(0.0, back - killed)})
    return out


def _normal_step_time(timeline: np.ndarray) -> float:
    """Median step time of the first epoch after warm-up (the failure-free rate)."""
    if not len(timeline):
        return 0.0
    first = timeline[timeline["epoch"] == 0]
    part = first[5:] if len(first) > 10 else first
    return float(np.median(part["dt"])) if len(part) else 0.0


def unique_steps(timeline: np.ndarray) -> int:
    """Steps trained at least once (re-executions not counted)."""
    return int(np.unique(timeline["step"]).size) if len(timeline) else 0


def reexecuted_steps(timeline: np.ndarray) -> int:
    return int(timeline["reexec"].sum()) if len(timeline) else 0


__all__ = ["merge_timelines", "param_checksum", "recovery_breakdown", "unique_steps", "reexecuted_steps"]
