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
  shrink and agree, replacement, restore, back to 95 % of the normal step rate;
  its **time lost** = kill → back to normal, plus the time spent re-executing
  rolled-back steps after that (work done twice is time lost too);
* **ETTR** (effective training time ratio) = ``1 − (time lost to failures +
  protection stall on the critical path) / wall time`` and **goodput** = samples
  that survive to the final model per second of wall time (both 0 for a lost run);
* **CPU per step** — per role, the CPU seconds (process clock, every thread) the ranks
  holding it at the end spent from the start of training, over the steps they executed
  (re-executions and evaluations included): the cost of a strategy that throughput alone
  hides when ranks share cores.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

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
        redo = after[after["reexec"] & (after["t_end"] > back)] if len(after) else after
        reexec_s = float(redo["dt"].sum()) if len(redo) else 0.0
        out.append({"epoch": epoch, "kill": killed, "detection_s": first - killed,
                    "shrink_agree_s": agreed - first, "plan_s": planned - agreed,
                    "replace_s": replaced - planned, "restore_s": restored - replaced,
                    "back_to_normal_s": max(0.0, back - restored), "recovery_s": restored - killed,
                    "reexec_s": reexec_s, "time_lost_s": max(0.0, back - killed) + reexec_s})
    return out


def final_samples(timeline: np.ndarray) -> int:
    """Samples of the last execution of every step (a re-executed step counts once)."""
    if not len(timeline):
        return 0
    last: dict[int, int] = {}
    for step, samples in zip(timeline["step"], timeline["samples"], strict=True):
        last[int(step)] = int(samples)  # the timeline is in time order: the last wins
    return sum(last.values())


def efficiency(timeline: np.ndarray, time_lost_s: float, stall_s: float, lost_samples: int,
               lost: bool) -> dict[str, float]:
    """``ettr``, ``goodput_sps`` and ``unproductive_s`` of a run (see the module docstring)."""
    wall = float(timeline["t_end"][-1]) if len(timeline) else 0.0
    if lost or wall <= 0:
        return {"ettr": 0.0, "goodput_sps": 0.0, "unproductive_s": wall}
    unproductive = min(wall, max(0.0, time_lost_s) + max(0.0, stall_s))
    kept = max(0, final_samples(timeline) - lost_samples)
    return {"ettr": 1.0 - unproductive / wall, "goodput_sps": kept / wall, "unproductive_s": unproductive}


def summary_efficiency(summary: dict[str, Any], timeline: np.ndarray, lost: bool) -> dict[str, Any]:
    """``efficiency`` from a run's merged summary, plus ``lost_samples`` and ``protection_bytes``.

    Partial recovery reports the portion of lost samples (``pls``): those samples do not survive
    to the final model, so they count as ``lost_samples``. The stall is the checkpoint time on the
    critical path; protection bytes are checkpoint bytes written + parity bytes sent."""
    lost_samples = int(summary.get("lost_samples", 0) or 0)
    pls = summary.get("pls")
    if not lost and isinstance(pls, float) and math.isfinite(pls):
        lost_samples = max(lost_samples, int(round(pls * final_samples(timeline))))
    stall = summary.get("checkpoint_critical_s")
    stall = float(stall) if isinstance(stall, int | float) and math.isfinite(stall) else 0.0
    out: dict[str, Any] = efficiency(timeline, float(summary.get("time_lost_s") or 0.0), stall,
                                     lost_samples, lost)
    out["lost_samples"] = lost_samples
    out["protection_bytes"] = int(summary.get("checkpoint_bytes", 0) or 0) + \
        int(summary.get("parity_bytes", 0) or 0)
    return out


def _normal_step_time(timeline: np.ndarray) -> float:
    """Median step time of the first epoch after warm-up (the failure-free rate)."""
    if not len(timeline):
        return 0.0
    first = timeline[timeline["epoch"] == 0]
    part = first[5:] if len(first) > 10 else first
    return float(np.median(part["dt"])) if len(part) else 0.0


def cpu_per_step(reports: list[dict[str, Any]]) -> dict[str, float]:
    """``server_cpu_s_per_step``, ``trainer_cpu_s_per_step`` and ``server_apply_cpu_s_per_step``
    (the optimizer's share of the servers') from the ranks' final reports; a role with no
    executed step is left out."""
    out: dict[str, float] = {}
    for role in ("server", "trainer"):
        held = [r for r in reports if r["info"]["role"] == role]
        steps = sum(int(r["info"].get("steps_run", 0)) for r in held)
        if steps:
            out[f"{role}_cpu_s_per_step"] = sum(float(r["info"]["cpu_s"]) for r in held) / steps
            if role == "server":
                apply_s = sum(float(r["role"].get("apply_cpu_s", 0.0)) for r in held)
                out["server_apply_cpu_s_per_step"] = apply_s / steps
    return out


def unique_steps(timeline: np.ndarray) -> int:
    """Steps trained at least once (re-executions not counted)."""
    return int(np.unique(timeline["step"]).size) if len(timeline) else 0


def reexecuted_steps(timeline: np.ndarray) -> int:
    return int(timeline["reexec"].sum()) if len(timeline) else 0


__all__ = ["efficiency", "final_samples", "merge_timelines", "param_checksum", "recovery_breakdown",
           "reexecuted_steps", "summary_efficiency", "unique_steps"]
