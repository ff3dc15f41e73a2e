"""What the monitor computes from the ranks' final reports: pure functions, no MPI.

Sits beside ``mpiec.results``, not in ``mpiec.roles``: the monitor computes these figures and
``mpiec.analysis`` (and ``mpiec.simulate``) read them back without importing a role.

Owns the definitions behind the result's headline figures:

* **timeline** — the union of every trainer's records (and the monitor's
  streamed copy), keyed by (epoch, step): a step re-executed after a rollback
  appears once per epoch and is marked ``reexec``;
* **param_checksum** — SHA-256 over the dense replica (parameters, then
  optimizer state) followed by every embedding row ``[weights | optimizer
  state]`` in **global row order** (no padding, no parity), so it does not
  depend on the number of servers or the striping;
* **recovery breakdown** — per recovery: detection (kill → first detect),
  shrink and agree, plan, replacement, restore (together ``recovery_s``, kill → resume),
  ``back_to_normal_s`` (resume → first step at 95 % of the normal rate: reported, no longer the
  basis of anything), and the **time lost**: the wall time from the last step end before the kill
  to the end of the disturbance window, minus what the first executions of steps in that window
  cost at the run's own failure-free pace (``reference``: median interval between step ends
  before the first disturbance, plus the evaluation after an evaluated step and a checkpoint's
  stall on the critical path, which are not failure costs). The window ends at the first step end
  after the strategy's repair is over — the resume, a background ``rebuild_end``, the last
  re-executed step, whichever is last — extended while steps stay off the pace (at most
  ``SETTLE_MAX_RECORDS``). Equivalently: the recovery gap plus the signed excess of every step in
  the window plus the re-executed steps in full. ``time_lost_s = recovery_s + degraded_s +
  reexec_s``. Signed, not clipped at 0: per-step noise cancels in the sum instead of adding up
  (see ``docs/measurement.md``); validated by the ``MPIEC_STALL`` hook (``stall_losses``);
* **repair** — ``unprotected_s`` = kill → end of the repair (resume; a background rebuild's end),
  ``repair_throughput_ratio`` = samples/s of the steps trained while a repair still runs after
  the resume, over the run's own failure-free rate (the twin's proxy; NaN when the repair ends
  with the recovery, as training was paused all along);
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpiec.results.file import TIMELINE_DTYPE


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
    table, order = _global_order(rows, shards)
    block = 1 << 16
    for lo in range(0, order.size, block):
        h.update(np.ascontiguousarray(table[order[lo:lo + block]]).tobytes())
    return h.hexdigest()


def _global_order(rows: np.ndarray,
                  shards: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The shards' rows stacked, and the order that puts them by global id."""
    width = max(t.shape[1] for _, t in shards)
    return np.concatenate([t.reshape(-1, width) for _, t in shards]), np.argsort(rows, kind="stable")


def embedding_weights(shards: list[tuple[np.ndarray, np.ndarray]], dim: int) -> np.ndarray:
    """The embedding weights of the shards (``(global_rows, table)`` pairs whose rows are
    ``[weights | optimizer state]``), a row per global id: the ``final_model`` a result file keeps.
    The shards must hold every row once (as ``param_checksum`` checks)."""
    rows = np.concatenate([r for r, _ in shards])
    table, order = _global_order(rows, shards)
    return np.ascontiguousarray(table[order, :dim], dtype=np.float32)


#: Records at the start of the run left out of the reference step time (warm-up: JIT, caches).
WARMUP_RECORDS = 5
#: A disturbance's window extends past the end of its repair while steps stay this far off the
#: reference: at most this many records.
SETTLE_MAX_RECORDS = 10


@dataclass(frozen=True)
class Reference:
    """The run's own failure-free pace, from the records before the first disturbance.

    ``step_s``: median interval between consecutive step ends (a step and the loop around it);
    ``noise_s``: the robust spread of those intervals (1.4826 × MAD); ``eval_s``: the median extra
    time of an interval that follows an evaluated step (the evaluation); ``samples``: the median
    samples of a step; ``from_before``: whether the records before the first disturbance sufficed
    (else every first execution of a step that follows one of its own epoch)."""

    step_s: float
    noise_s: float
    eval_s: float
    samples: float
    from_before: bool

    @property
    def band_s(self) -> float:
        """An interval further than this over its expected time is off the normal pace."""
        return max(3.0 * self.noise_s, 0.1 * self.step_s)

    @property
    def rate_sps(self) -> float:
        return self.samples / self.step_s if self.step_s > 0 else math.nan


def step_intervals(timeline: np.ndarray) -> np.ndarray:
    """Seconds between the end of each record and the end of the one before it (time order); the
    first record's is its own ``dt``. Their sum is the wall time up to the last step end: a
    recovery, an evaluation or anything else between two steps lies in the next record's interval."""
    if not len(timeline):
        return np.zeros(0)
    iv = np.diff(timeline["t_end"], prepend=np.nan)
    iv[0] = timeline["dt"][0]
    return iv


def _clean_records(timeline: np.ndarray, eval_steps: set[int]) -> np.ndarray:
    """Mask of records whose interval is a plain step: past warm-up, a first execution, following
    a record of the same epoch, not following an evaluated step."""
    n = len(timeline)
    ok = np.zeros(n, dtype=bool)
    if n <= 1:
        return ok
    ok[WARMUP_RECORDS:] = True
    ok[1:] &= timeline["epoch"][1:] == timeline["epoch"][:-1]
    ok &= ~timeline["reexec"]
    ok[0] = False
    after_eval = np.array([int(s) - 1 in eval_steps for s in timeline["step"]], dtype=bool)
    return ok & ~after_eval


def reference(timeline: np.ndarray, eval_steps: set[int] | None = None,
              before: float = math.inf) -> Reference:
    """The run's pace from its records ending by ``before`` (the first disturbance); when fewer
    than 5 plain intervals end by then, from every plain interval of the run (the median stays
    the normal pace as long as disturbed steps are a minority)."""
    eval_steps = eval_steps or set()
    iv = step_intervals(timeline)
    clean = _clean_records(timeline, eval_steps)
    early = clean & (timeline["t_end"] <= before) if len(timeline) else clean
    from_before = int(early.sum()) >= 5
    use = early if from_before else clean
    if not use.any():
        use = np.ones(len(timeline), dtype=bool)
    if not len(timeline):
        return Reference(0.0, 0.0, 0.0, 0.0, False)
    step = float(np.median(iv[use]))
    noise = 1.4826 * float(np.median(np.abs(iv[use] - step)))
    after_eval = np.array([int(s) - 1 in eval_steps for s in timeline["step"]], dtype=bool)
    ev = after_eval & ~timeline["reexec"]
    ev[0] = False
    ev[1:] &= timeline["epoch"][1:] == timeline["epoch"][:-1]
    ev_early = ev & (timeline["t_end"] <= before)
    ev = ev_early if ev_early.any() else ev
    eval_s = max(0.0, float(np.median(iv[ev])) - step) if ev.any() else 0.0
    return Reference(step, noise, eval_s, float(np.median(timeline["samples"][use])), from_before)


def expected_s(timeline: np.ndarray, ref: Reference, eval_steps: set[int] | None = None,
               step_extra: dict[int, float] | None = None) -> np.ndarray:
    """What each record's interval costs at the failure-free pace: the reference step, plus the
    evaluation when the step before it is evaluated, plus ``step_extra`` of its step (a
    checkpoint's stall on the critical path, already counted as protection cost); 0 for a
    re-executed record (work done twice is lost in full)."""
    eval_steps = eval_steps or set()
    step_extra = step_extra or {}
    out = np.full(len(timeline), ref.step_s)
    for i, s in enumerate(timeline["step"]):
        out[i] += (ref.eval_s if int(s) - 1 in eval_steps else 0.0) + step_extra.get(int(s), 0.0)
    if len(timeline):
        out[timeline["reexec"]] = 0.0
    return out


@dataclass
class _Window:
    """Records ``lo..hi`` (inclusive; ``hi < lo``: none) of a disturbance, from ``t0`` (the last
    step end before it) to ``t1`` (the end of the window)."""

    lo: int
    hi: int
    t0: float
    t1: float


def _settle(timeline: np.ndarray, excess: np.ndarray, band: float, hi: int, limit: int) -> int:
    """Extend a window past record ``hi`` while the records after it stay off the normal pace
    (at most ``SETTLE_MAX_RECORDS``, never to ``limit`` or beyond)."""
    for _ in range(SETTLE_MAX_RECORDS):
        nxt = hi + 1
        if nxt >= limit or excess[nxt] <= band:
            break
        hi = nxt
    return hi


def _window_loss(timeline: np.ndarray, iv: np.ndarray, exp: np.ndarray, w: _Window) -> tuple[float, float]:
    """(time lost, wall time of the re-executed records) of a window: its wall time minus what
    its first executions cost at the failure-free pace. The signed sum: noise cancels."""
    if w.hi < w.lo:
        return max(0.0, w.t1 - w.t0), 0.0
    sel = slice(w.lo, w.hi + 1)
    redo = timeline["reexec"][sel]
    return (w.t1 - w.t0) - float(exp[sel].sum()), float(timeline["dt"][sel][redo].sum())


def _events_of(events: list[tuple] | None, kind: str) -> list[tuple[int, float, str]]:
    """(step, time, detail) of the events of ``kind`` (tuples as ``RankContext.event`` logs them)."""
    out = []
    for ev in events or []:
        k = ev[2].decode() if isinstance(ev[2], bytes) else str(ev[2])
        if k == kind:
            detail = ev[6].decode() if isinstance(ev[6], bytes) else str(ev[6])
            out.append((int(ev[0]), float(ev[1]), detail))
    return out


def _repair_throughput(timeline: np.ndarray, iv: np.ndarray, exp: np.ndarray, ref: Reference,
                       start: float, end: float, limit: int) -> tuple[float, list[int]]:
    """Samples/s of the steps trained from ``start`` to the first step end at or after ``end``
    (the first record counted for the part of it after ``start``), over the reference rate; the
    steps measured. NaN (and no steps) when no step ends in that span."""
    n = min(limit, len(timeline))
    t_end = timeline["t_end"][:n]
    idx = np.flatnonzero(t_end > start)
    if not idx.size or not ref.rate_sps > 0:
        return math.nan, []
    last = idx[np.searchsorted(t_end[idx], end - 1e-9)] if t_end[idx[-1]] >= end - 1e-9 else idx[-1]
    sel = np.arange(idx[0], last + 1)
    weight = np.ones(sel.size)
    first = sel[0]
    dt0 = float(timeline["dt"][first])
    if dt0 > 0 and t_end[first] - dt0 < start:  # the step was under way at ``start``
        weight[0] = min(1.0, (t_end[first] - start) / dt0)
    extra = np.where(timeline["reexec"][sel], 0.0, np.maximum(0.0, exp[sel] - ref.step_s)) * weight
    seconds = float(t_end[last] - start - extra.sum())
    if seconds <= 0:
        return math.nan, []
    rate = float((timeline["samples"][sel] * weight).sum()) / seconds
    return rate / ref.rate_sps, [int(timeline["step"][first]), int(timeline["step"][last])]


def recovery_breakdown(recoveries: list[list[dict[str, float]]], kill_times: list[float],
                       timeline: np.ndarray, events: list[tuple] | None = None,
                       eval_steps: set[int] | None = None,
                       step_extra: dict[int, float] | None = None) -> list[dict[str, Any]]:
    """Per recovery (by epoch): phase durations in seconds, time lost, the repair's figures.

    ``events`` (tuples as logged: step, time, kind, ...) give the end of a background repair
    (``rebuild_start`` / ``rebuild_end``) and the ``stall`` disturbances; ``eval_steps`` the steps
    followed by an evaluation; ``step_extra`` the failure-free extra seconds of a step (checkpoint
    stall). See ``docs/measurement.md`` for the definitions."""
    eval_steps = eval_steps or set()
    by_epoch: dict[int, list[dict[str, float]]] = {}
    for rank_list in recoveries:
        for rec in rank_list:
            by_epoch.setdefault(int(rec["epoch"]), []).append(rec)
    n = len(timeline)
    t_end = timeline["t_end"] if n else np.zeros(0)
    phases = []
    grown: set[int] = set()
    previous = -math.inf  # the previous recovery's end: a kill before it was that one's
    for epoch in sorted(by_epoch):
        recs = by_epoch[epoch]
        first = min(r.get("first_detect", r.get("detect", math.inf)) for r in recs)
        agreed = max(r.get("agree", first) for r in recs)
        planned = max(r.get("plan", agreed) for r in recs)
        replaced = max(r["replaced"] for r in recs)
        restored = max(r["restored"] for r in recs)
        before = [t for t in kill_times if previous < t <= first + 1e-6]
        killed = max(before) if before else first  # no kill: a growth (or a death seen first)
        if any(r.get("grow") for r in recs):
            grown.add(epoch)
        phases.append((epoch, first, agreed, planned, replaced, restored, killed))
        previous = restored
    # the window of each recovery starts at the last step end before its kill (else at the kill)
    starts = [float(t_end[t_end <= p[6]][-1]) if n and (t_end <= p[6]).any() else p[6] for p in phases]
    stalls = _events_of(events, "stall")
    first_t0 = min(starts + [t for _, t, _ in stalls], default=math.inf)
    ref = reference(timeline, eval_steps, before=first_t0)
    iv = step_intervals(timeline)
    exp = expected_s(timeline, ref, eval_steps, step_extra)
    excess = iv - exp
    rb_start = _events_of(events, "rebuild_start")
    rb_end = _events_of(events, "rebuild_end")
    out = []
    for k, (epoch, first, agreed, planned, replaced, restored, killed) in enumerate(phases):
        t0 = starts[k]
        t_next = starts[k + 1] if k + 1 < len(phases) else math.inf
        limit = int(np.searchsorted(t_end, t_next, side="right")) if n else 0  # records of this window
        # the repair: the recovery, then a background rebuild if the strategy runs one
        r_start = min([t for _, t, _ in rb_start if killed <= t < t_next], default=killed)
        r_end = max([restored] + [t for _, t, _ in rb_end if killed <= t < t_next])
        mine = np.flatnonzero((timeline["epoch"][:limit] == epoch) & timeline["reexec"][:limit]) if n \
            else np.zeros(0, dtype=int)
        work_end = max(r_end, float(t_end[mine[-1]]) if mine.size else r_end)
        lo = int(np.searchsorted(t_end, t0, side="right")) if n else 0
        after = np.flatnonzero(t_end[lo:limit] >= work_end - 1e-9) if n else np.zeros(0, dtype=int)
        if after.size:
            hi = _settle(timeline, excess, ref.band_s, lo + int(after[0]), limit)
            w = _Window(lo, hi, t0, float(t_end[hi]))
        else:  # no step after the repair (the run ended or was lost): to the end of the repair
            w = _Window(lo, limit - 1, t0, max(work_end, float(t_end[limit - 1]) if limit > lo else work_end))
        lost_s, reexec_s = _window_loss(timeline, iv, exp, w)
        back = restored
        resumed = timeline[(timeline["epoch"] == epoch)] if n else timeline
        if len(resumed) and ref.step_s > 0:
            ok = resumed[resumed["dt"] <= _normal_step_time(timeline) / 0.95]
            back = float(ok["t_end"][0]) if len(ok) else float(resumed["t_end"][-1])
        ratio, steps = _repair_throughput(timeline, iv, exp, ref, max(r_start, restored), r_end, limit) \
            if r_end > restored + 1e-9 else (math.nan, [])
        recovery_s = restored - killed
        out.append({"epoch": epoch, "grow": epoch in grown, "kill": killed, "detection_s": first - killed,
                    "shrink_agree_s": agreed - first, "plan_s": planned - agreed,
                    "replace_s": replaced - planned, "restore_s": restored - replaced,
                    "back_to_normal_s": max(0.0, back - restored), "recovery_s": recovery_s,
                    "reexec_s": reexec_s, "degraded_s": lost_s - recovery_s - reexec_s,
                    "time_lost_s": lost_s, "window_steps": _steps_of(timeline, w),
                    "repair_s": r_end - r_start, "unprotected_s": max(0.0, r_end - killed),
                    "repair_throughput_ratio": ratio, "repair_steps": steps,
                    "reference_step_s": ref.step_s})
    return out


def _steps_of(timeline: np.ndarray, w: _Window) -> list[int]:
    """First and last step of a window's records ([] when it has none)."""
    if w.hi < w.lo:
        return []
    return [int(timeline["step"][w.lo]), int(timeline["step"][w.hi])]


def stall_losses(timeline: np.ndarray, events: list[tuple] | None, eval_steps: set[int] | None = None,
                 step_extra: dict[int, float] | None = None,
                 kill_times: list[float] | None = None) -> list[dict[str, Any]]:
    """Per ``stall`` event (the ``MPIEC_STALL`` test hook, ``mpiec.failures.stall``): the time it cost,
    measured like a recovery's time lost with no repair: from the end of the record before the
    stalled step to the end of the stalled step, extended while steps stay off the normal pace,
    minus what its steps cost at the failure-free pace. Several ranks stalled at one step are one
    disturbance (their seconds summed as ``stall_s``, the injected figure to compare with)."""
    stalls = _events_of(events, "stall")
    n = len(timeline)
    if not stalls or not n:
        return []
    eval_steps = eval_steps or set()
    t_end = timeline["t_end"]
    by_step: dict[int, list[tuple[float, float]]] = {}
    for step, t, detail in stalls:
        try:
            secs = float(detail)
        except ValueError:
            secs = math.nan
        by_step.setdefault(step, []).append((t, secs))
    found = []
    for step, items in sorted(by_step.items()):
        t = min(x[0] for x in items)
        idx = np.flatnonzero((timeline["step"] == step) & (t_end >= t))
        if idx.size and idx[0] > 0:
            found.append((step, int(idx[0]), sum(x[1] for x in items)))
    if not found:
        return []
    starts = [float(t_end[i - 1]) for _, i, _ in found] + list(kill_times or [])
    ref = reference(timeline, eval_steps, before=min(starts))
    iv = step_intervals(timeline)
    exp = expected_s(timeline, ref, eval_steps, step_extra)
    excess = iv - exp
    out = []
    for k, (step, i, secs) in enumerate(found):
        nxt = min([float(t_end[j - 1]) for _, j, _ in found[k + 1:]] +
                  [x for x in kill_times or [] if x > t_end[i]], default=math.inf)
        limit = int(np.searchsorted(t_end, nxt, side="right"))
        hi = _settle(timeline, excess, ref.band_s, i, limit)
        w = _Window(i, hi, float(t_end[i - 1]), float(t_end[hi]))
        lost_s, _ = _window_loss(timeline, iv, exp, w)
        out.append({"step": step, "stall_s": secs, "time_lost_s": lost_s,
                    "window_steps": _steps_of(timeline, w), "reference_step_s": ref.step_s})
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


def layout_throughput(timeline: np.ndarray) -> dict[str, float]:
    """Throughput under the layouts an elastic run had, as ratios to the first layout's:
    ``throughput_shrunk_ratio`` (median step time on the first layout, before its first change,
    over the median on any other layout) and ``throughput_regrown_ratio`` (over the median once
    back on the first layout after a change; NaN if it never came back). The first 5 steps and
    the first 2 of every later stretch of one layout (a recovery's, a warm-up's) are left out.
    Empty when the layout never changed."""
    if not len(timeline) or "servers" not in (timeline.dtype.names or ()):
        return {}
    lay = timeline["trainers"].astype(np.int64) * (1 << 20) + timeline["servers"]
    changes = np.flatnonzero(lay[1:] != lay[:-1]) + 1
    if not changes.size:
        return {}
    starts = np.concatenate([[0], changes])
    ends = np.concatenate([changes, [len(timeline)]])
    first: list[np.ndarray] = []
    shrunk: list[np.ndarray] = []
    back: list[np.ndarray] = []
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        skip = 5 if i == 0 else 2
        dts = timeline["dt"][a + skip:b] if b - a > skip else timeline["dt"][a:b]
        (first if i == 0 else back if lay[a] == lay[0] else shrunk).append(dts)

    def median(parts: list[np.ndarray]) -> float:
        every = np.concatenate(parts) if parts else np.empty(0)
        return float(np.median(every)) if every.size else math.nan

    ref = median(first)
    return {"throughput_shrunk_ratio": ref / median(shrunk) if shrunk else math.nan,
            "throughput_regrown_ratio": ref / median(back) if back else math.nan}


def unique_steps(timeline: np.ndarray) -> int:
    """Steps trained at least once (re-executions not counted)."""
    return int(np.unique(timeline["step"]).size) if len(timeline) else 0


def reexecuted_steps(timeline: np.ndarray) -> int:
    return int(timeline["reexec"].sum()) if len(timeline) else 0


__all__ = ["Reference", "efficiency", "embedding_weights", "expected_s", "final_samples", "layout_throughput",
           "merge_timelines", "param_checksum", "recovery_breakdown", "reexecuted_steps", "reference",
           "stall_losses", "step_intervals", "summary_efficiency", "unique_steps"]
