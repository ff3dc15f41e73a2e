"""The derived numbers of the comparison, one definition each: pure functions over ``RunResult`` lists.

Owns how runs are paired and every figure computed from more than one summary value:

* **variant** of a run = its root attribute ``variant`` (``ckpt:interval=10``), else its strategy.
* **failure run** = a run with a kill planned (``config.failures.kill``) or fired (a ``kill`` /
  ``emulated_kill`` event); every other run is **failure-free**.
* **baseline** of a run (for the overhead and the memory overhead) = a run of the ``baseline``
  strategy (``none``) whose config is the same apart from ``strategy``, ``failures``, ``output`` and
  ``training.seed``: preferably failure-free and not lost, then the same seed, then the first in list
  order. **overhead** = ``100 · (1 − throughput / throughput_baseline)`` (percent of throughput lost);
  **memory overhead** = Σ ``peak_rss_mb`` over the ranks minus the baseline's.
* **twin** of a failure run = a failure-free run of the same variant whose config is the same apart
  from ``failures`` and ``output`` (same seed, same strategy keys, same spares), not lost, the first in
  list order. **ΔAUC**, **Δlogloss** = the run's final value minus its twin's; **lossless** = the
  run's ``param_checksum`` equals its twin's (``None`` when there is no twin, when either checksum
  is empty, or when the run was lost).
* **ETTR**, **goodput** = the summary's ``ettr`` / ``goodput_sps``; files written before those keys
  get them from ``mpiec.results.accounting.efficiency`` (the runtime's own definition: ``1 −
  (time lost + checkpoint stall on the critical path) / wall``, and the samples of the last execution
  of every step minus the lost samples, per second of wall time).
* **lost samples** = the summary's ``lost_samples`` (older files: at least ``pls ×`` the samples
  trained, as the runtime counts partial recovery now); **PLS** = ``cpr``'s ``pls`` when recorded,
  else lost samples / the samples the run was to keep (a lost run: trained + lost).
* **recovery breakdown** = the mean per recovery of each phase of ``summary.recovery_breakdown``
  (``RECOVERY_PHASES``, which add up to ``time_lost_s`` of that recovery; ``docs/measurement.md``);
  **time lost per failure** = (``time_lost_s`` − ``stall_time_lost_s``) / ``recoveries``.
* **repair throughput** = ``repair_throughput_ratio`` (the steps trained while a repair ran after
  the resume, over the run's own pre-failure rate: the twin's proxy), and
  ``repair_throughput_vs_twin`` (over the twin's rate on the same steps, when there is a twin);
  **unprotected** = ``unprotected_s`` (kill → end of the repair, summed).
* **corruption** (``flip:`` plans): ``corruptions`` fired, ``corruptions_detected`` (a detection event
  followed, ``mpiec.failures.corruption.DETECTIONS``), ``corruptions_located`` (it, or a repair, named
  the flipped row), ``corruptions_repaired`` (a repair of the
  flipped row followed, ``REPAIRED``), ``detection_steps`` (flip → detection, the
  slowest); whether a corruption **persisted** is whether the run is not lossless (its twin decides).
* **model difference** (when the run and its twin both wrote ``final_model``, ``output.final_model``):
  ``rows_differing`` = embedding rows whose weights are not bitwise the twin's, ``max_weight_error``
  = the largest |weight − twin's| over every embedding weight and dense parameter (nan where either
  is not finite: a flipped exponent bit), ``dense_differs`` = a dense parameter is not the twin's.
* **protection bytes** = ``protection_bytes``, else ``checkpoint_bytes + parity_bytes``.
* **interval** of a checkpointing run = ``checkpoint_interval_steps`` and ``_rule`` of its summary
  (older files: the ``checkpoint_interval`` text, else the median gap of its full checkpoints).

Invariants: no I/O, no MPI, no matplotlib; a number that cannot be computed is ``None`` (or nan in
a float field), never a made-up value; ``compare`` keeps the order of the runs it is given.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from mpiec.results import RunResult, decode, overheads, recoveries
from mpiec.results import unfired_kills as unfired_kills_of
from mpiec.results.accounting import expected_s, final_samples, reference, step_intervals, summary_efficiency

__all__ = [
    "KILL_KINDS",
    "RECOVERY_PHASES",
    "RunMetrics",
    "baseline_for",
    "compare",
    "failure_run",
    "finite",
    "interval_label",
    "model_difference",
    "kills_fired",
    "overhead_pct",
    "planned_kills",
    "unfired_kills",
    "recovery_means",
    "repair_throughput_vs_twin",
    "twin_for",
    "variant",
]

KILL_KINDS = frozenset({"kill", "emulated_kill"})

#: The phases of one recovery, in order, as ``summary.recovery_breakdown`` names them; together
#: they make up that recovery's ``time_lost_s`` (``docs/measurement.md``): kill → resume, then
#: ``degraded_s`` (the excess over the run's own pace of the steps until the repair is over, signed)
#: and the re-executed steps. Files written before ``degraded_s`` get it as the rest of their
#: ``time_lost_s`` (there: the time from the resume back to 95 % of the normal rate).
RECOVERY_PHASES = ("detection_s", "shrink_agree_s", "plan_s", "replace_s", "restore_s",
                   "degraded_s", "reexec_s")
#: Short labels of ``RECOVERY_PHASES`` (and of ``back_to_normal_s``) for tables and legends.
PHASE_LABELS = {"detection_s": "detect", "shrink_agree_s": "shrink+agree", "plan_s": "plan",
                "replace_s": "replace", "restore_s": "restore", "degraded_s": "degraded",
                "back_to_normal_s": "to 95% speed", "reexec_s": "re-exec"}

_NOT_IN_BASELINE_KEY = ("strategy", "failures", "output")
_NOT_IN_TWIN_KEY = ("failures", "output")


def finite(x: Any) -> bool:
    """A real, finite number (bools are not numbers here)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def number(x: Any) -> float:
    """``x`` as a float when it is a real, finite number (numpy's included, bools not), else nan: a
    summary value read without trusting its type."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return math.nan
    v = float(x)
    return v if math.isfinite(v) else math.nan


def variant(r: RunResult) -> str:
    """The strategy variant as ``mpiec bench --strategies`` spells it."""
    return str(r.attrs.get("variant") or r.strategy)


def kills_fired(r: RunResult) -> int:
    return int(sum(decode(k) in KILL_KINDS for k in r.events["kind"]))


def unfired_kills(r: RunResult) -> list[str]:
    """The planned kills that never fired (``mpiec.results.unfired_kills``, "kill: why"); [] in older
    files."""
    doc = unfired_kills_of(r)
    if doc is None:
        return ["(kills_unfired unreadable)"]
    return [f"{d.get('kill')}: {d.get('why')}" if isinstance(d, dict) else str(d) for d in doc]


def planned_kills(r: RunResult) -> list[Any]:
    """``config.failures.kill`` as a list; [] where the file holds no such list (a config is
    free-form JSON in a result file, so nothing here may assume its shape)."""
    failures = r.config.get("failures")
    kills = failures.get("kill") if isinstance(failures, dict) else None
    return list(kills) if isinstance(kills, list | tuple) else []


def failure_run(r: RunResult) -> bool:
    """A kill was planned or fired in this run."""
    return bool(planned_kills(r)) or kills_fired(r) > 0


def _config_key(r: RunResult, drop: tuple[str, ...], drop_seed: bool) -> str:
    cfg = {k: v for k, v in r.config.items() if k not in drop}
    training = cfg.get("training")
    if drop_seed and isinstance(training, dict):
        cfg["training"] = {k: v for k, v in training.items() if k != "seed"}
    return json.dumps(cfg, sort_keys=True, default=str)


def _clean(r: RunResult) -> bool:
    return not r.summary["lost"] and not failure_run(r)


def baseline_for(run: RunResult, results: list[RunResult], baseline: str = "none") -> RunResult | None:
    """The ``baseline`` strategy's run ``run`` is measured against (see the module docstring)."""
    key = _config_key(run, _NOT_IN_BASELINE_KEY, drop_seed=True)
    cands = [b for b in results if b.strategy == baseline
             and _config_key(b, _NOT_IN_BASELINE_KEY, drop_seed=True) == key]
    if not cands:
        return None
    # min is stable: the first in list order on ties
    return min(cands, key=lambda b: (0 if _clean(b) else 1, 0 if b.seed == run.seed else 1))


def twin_for(run: RunResult, results: list[RunResult]) -> RunResult | None:
    """The failure-free run of ``run``'s variant and config (None for a failure-free run)."""
    if not failure_run(run):
        return None
    key = _config_key(run, _NOT_IN_TWIN_KEY, drop_seed=False)
    twins = [t for t in results if t is not run and variant(t) == variant(run) and _clean(t)
             and _config_key(t, _NOT_IN_TWIN_KEY, drop_seed=False) == key]
    from .read import repeat_of  # here: read imports this module

    # a repeated bench's twin is the failure-free run of the same round: run next to it, on the
    # machine as it was then (a twin from another round would compare two states of the host)
    same_round = [t for t in twins if repeat_of(t) == repeat_of(run)]
    return (same_round or twins or [None])[0]


def overhead_pct(run: RunResult, base: RunResult | None) -> float | None:
    """Percent of ``base``'s throughput that ``run`` does not reach (None without a baseline)."""
    if base is None:
        return None
    tb, tr = base.summary["throughput_sps"], run.summary["throughput_sps"]
    if not (finite(tb) and tb > 0 and finite(tr)):
        return None
    return 100.0 * (1.0 - tr / tb)


def recovery_means(r: RunResult) -> dict[str, float]:
    """Mean seconds per recovery of each of ``RECOVERY_PHASES`` plus ``recovery_s`` and
    ``time_lost_s``; empty when the run recorded no recovery breakdown."""
    recs = recoveries(r)
    if not recs:
        return {}
    out = {}
    for key in (*RECOVERY_PHASES, "recovery_s", "time_lost_s", "back_to_normal_s", "unprotected_s",
                "repair_throughput_ratio"):
        vals = [float(v) for v in (_phase(x, key) for x in recs) if finite(v)]
        out[key] = float(np.mean(vals)) if vals else math.nan
    return out


def _phase(rec: dict[str, Any], key: str) -> Any:
    """One figure of a recovery; ``degraded_s`` of a file written before it: the rest of its
    ``time_lost_s`` once kill → resume and the re-executed steps are taken out."""
    if key == "degraded_s" and key not in rec:
        parts = [rec.get(k) for k in ("time_lost_s", "recovery_s", "reexec_s")]
        return parts[0] - parts[1] - parts[2] if all(finite(p) for p in parts) else None
    return rec.get(key)


def _recovery_time_lost(r: RunResult) -> float:
    """The run's time lost to its recoveries: ``time_lost_s`` less what injected stalls cost."""
    return overheads(r).recovery_time_lost_s


def _eval_steps(r: RunResult) -> set[int]:
    return {int(s) for s in r.eval["step"]} if len(r.eval) else set()


def repair_throughput_vs_twin(result: RunResult, twin: RunResult | None,
                              normalize: bool = False) -> float | None:
    """Throughput of ``result`` while its repairs ran after the resume, over its ``twin``'s
    (failure-free, same config) throughput over the same steps; the mean over its recoveries.

    Each recovery's ``repair_steps`` (first, last) name the steps trained during the repair;
    both runs' rates over them are samples over the wall time of those steps, less the failure-free
    extras (evaluations) by each run's own pace. None without a twin, or when no recovery of
    ``result`` trained during its repair (the repair ended with the recovery: training was paused).
    ``normalize``: each rate over its own run's pace before the kill first (the twin then
    corrects only for what those steps cost, not for a host that was faster or slower while the
    twin ran: runs that were not interleaved)."""
    if twin is None or not len(twin.timeline) or not len(result.timeline):
        return None
    ratios = []
    for rec in recoveries(result):
        steps = rec.get("repair_steps") or []
        ratio = rec.get("repair_throughput_ratio")
        if len(steps) != 2 or not finite(ratio):
            continue
        kill = float(rec.get("kill", math.inf))
        twin_rate = _rate_over(twin.timeline, _eval_steps(twin), steps)
        own_ref = reference(result.timeline, _eval_steps(result), before=kill)
        if normalize and twin_rate:
            twin_before = twin.timeline[twin.timeline["step"] < steps[0]]  # the same steps as the run's
            twin_rate /= reference(twin_before, _eval_steps(twin)).rate_sps if len(twin_before) else math.nan
            own_rate = float(ratio)
        else:
            own_rate = float(ratio) * own_ref.rate_sps  # the ratio is over the run's own pace
        if twin_rate and finite(twin_rate) and twin_rate > 0 and own_ref.rate_sps > 0:
            ratios.append(own_rate / twin_rate)
    return float(np.mean(ratios)) if ratios else None


def _rate_over(tl: np.ndarray, evals: set[int], steps: list[int]) -> float | None:
    """Samples/s of the first executions of ``steps[0]..steps[1]`` in a timeline (evaluations out)."""
    ref = reference(tl, evals)
    iv = step_intervals(tl)
    extra = expected_s(tl, ref, evals) - ref.step_s
    sel = (tl["step"] >= steps[0]) & (tl["step"] <= steps[1]) & ~tl["reexec"]
    sel[0] = False  # the first record's interval is not a step's
    seconds = float((iv[sel] - np.maximum(0.0, extra[sel])).sum())
    return float(tl["samples"][sel].sum()) / seconds if sel.any() and seconds > 0 else None


def _efficiency(r: RunResult) -> dict[str, Any]:
    """The run's ETTR, goodput, lost samples and protection bytes: each as written by the monitor,
    or (files written before that key) by the monitor's own rule over the stored summary.
    Protection bytes are always derived from the stored checkpoint and parity bytes: monitors
    before schema v4 derived them before the writer filled ``checkpoint_bytes`` from the
    ``checkpoints`` dataset, so ecsnap's snapshot traffic read as 0."""
    s = r.summary
    derived = summary_efficiency(s, r.timeline, bool(s["lost"]))
    # lost_samples is always stored, but counts cpr's pls only since the monitor writes ettr too
    stored = {k for k in ("ettr", "goodput_sps") if finite(s.get(k))}
    if "ettr" in stored:
        stored.add("lost_samples")
    return {k: s[k] if k in stored else derived[k]
            for k in ("ettr", "goodput_sps", "lost_samples", "protection_bytes")}


def _pls(r: RunResult, lost_samples: int) -> float | None:
    pls = r.summary.get("pls")
    if finite(pls):
        return float(pls)
    kept = final_samples(r.timeline)
    total = kept + lost_samples if r.summary["lost"] else kept
    return lost_samples / total if total > 0 else None


def _server_cpu_ms(r: RunResult) -> float | None:
    v = r.summary.get("server_cpu_s_per_step")
    return 1e3 * float(v) if finite(v) else None


def _memory_mb(r: RunResult) -> float | None:
    if not len(r.ranks):
        return None
    rss = r.ranks["peak_rss_mb"].astype(np.float64)
    return float(rss.sum()) if np.all(np.isfinite(rss)) else None


def interval_label(r: RunResult) -> tuple[int | None, float | None, str]:
    """(interval in steps, in seconds for a rule in seconds, the rule that chose it) of a
    checkpointing run; (None, None, "") for a run that took no checkpoint and records no interval."""
    s = r.summary
    steps, seconds = s.get("checkpoint_interval_steps"), s.get("checkpoint_interval_s")
    seconds = float(seconds) if finite(seconds) and seconds > 0 else None
    rule = str(s.get("checkpoint_interval_rule") or "")
    if finite(steps) and steps > 0:
        return int(steps), seconds, rule
    text = str(s.get("checkpoint_interval") or "")
    if text.endswith(" steps") and text.split()[0].isdigit():
        return int(text.split()[0]), seconds, rule or "given"
    kinds = [decode(k) for k in r.checkpoints["kind"]]
    full = r.checkpoints[np.isin(kinds, ["full", "baseline"])] if len(kinds) else r.checkpoints
    gaps = np.diff(np.unique(full["step"])) if len(full) > 1 else np.zeros(0)
    if len(gaps):
        return int(np.median(gaps)), seconds, rule or "measured"
    return None, seconds, rule or text


@dataclass
class RunMetrics:
    """Every derived figure of one run (None: not applicable or not computable)."""

    run: str
    variant: str
    strategy: str
    failure: bool
    seed: Any
    emulated: bool
    complete: bool
    lost: bool
    abort_reason: str
    kills: int
    steps: int
    samples: int
    throughput_sps: float
    overhead_pct: float | None
    baseline_run: str | None
    ettr: float | None
    goodput_sps: float | None
    final_auc: float
    final_logloss: float
    final_accuracy: float
    teacher_auc: float
    twin_run: str | None
    delta_auc: float | None
    delta_logloss: float | None
    lossless: bool | None
    lost_samples: int
    pls: float | None
    recoveries: int
    recovery_latency_s: float
    time_lost_s: float
    time_lost_per_failure_s: float | None
    reexecuted_steps: int
    stall_s: float
    checkpoint_critical_s: float | None
    checkpoints: int
    checkpoint_bytes: int
    parity_bytes: int
    protection_bytes: int
    interval_steps: int | None
    interval_s: float | None
    interval_rule: str
    memory_mb: float | None
    memory_overhead_mb: float | None
    server_cpu_ms: float | None  # CPU ms per executed step of a server (schema v4; None before)
    server_cpu_extra_ms: float | None  # that minus the baseline run's
    param_checksum: str
    path: str
    recovery: dict[str, float] = field(default_factory=dict)
    unprotected_s: float | None = None  # kill → end of the repair, summed over the recoveries
    repair_throughput_ratio: float | None = None  # during the repairs / the run's own pre-failure rate
    repair_throughput_vs_twin: float | None = None  # the same over its twin's rate on the same steps
    corruptions: int = 0  # planned silent corruptions (``flip:``) that fired
    corruptions_detected: int = 0  # of them, how many a detection event followed
    corruptions_repaired: int = 0  # of them, how many a repair of their row followed
    corruptions_located: int = 0  # of them, how many a detection or repair named the row of
    detection_steps: int | None = None  # flip → its first detection, in steps (the slowest; None: none)
    rows_differing: int | None = None  # embedding rows not bitwise the twin's (both wrote final_model)
    max_weight_error: float | None = None  # the largest |weight − twin's| (nan: a non-finite weight)
    dense_differs: bool | None = None  # a dense parameter is not bitwise the twin's

    def as_row(self) -> dict[str, Any]:
        """Flat dict for CSV: the recovery phases become ``recovery_<phase>`` columns."""
        row = asdict(self)
        rec = row.pop("recovery")
        for key in RECOVERY_PHASES:  # the mean kill → resume is recovery_latency_s already
            row[f"recovery_{key}"] = rec.get(key)
        return row


def compare(results: list[RunResult], baseline: str = "none") -> list[RunMetrics]:
    """The metrics of every run, in the order given, each paired within ``results``."""
    out = []
    for r in results:
        s = r.summary
        base = baseline_for(r, results, baseline)
        twin = twin_for(r, results)
        eff = _efficiency(r)
        lost_samples = eff["lost_samples"]
        ettr, goodput = (eff["ettr"], eff["goodput_sps"]) if len(r.timeline) or "ettr" in s else (None, None)
        d_auc = d_logloss = lossless = None
        if twin is not None:
            ts = twin.summary
            if finite(s["final_auc"]) and finite(ts["final_auc"]) and not s["lost"]:
                d_auc = s["final_auc"] - ts["final_auc"]
            if finite(s["final_logloss"]) and finite(ts["final_logloss"]) and not s["lost"]:
                d_logloss = s["final_logloss"] - ts["final_logloss"]
            if not s["lost"] and s["param_checksum"] and ts["param_checksum"]:
                lossless = s["param_checksum"] == ts["param_checksum"]
        mem, base_mem = _memory_mb(r), _memory_mb(base) if base is not None else None
        cpu, base_cpu = _server_cpu_ms(r), _server_cpu_ms(base) if base is not None else None
        steps, seconds, rule = interval_label(r)
        recoveries = int(s.get("recoveries") or 0)
        crit = s.get("checkpoint_critical_s")
        out.append(RunMetrics(
            run=r.name, variant=variant(r), strategy=r.strategy, failure=failure_run(r), seed=r.seed,
            emulated=bool(s["emulated"]), complete=bool(s["complete"]), lost=bool(s["lost"]),
            abort_reason=str(s.get("abort_reason") or ""), kills=kills_fired(r),
            steps=int(s["steps_completed"]), samples=int(s["samples_completed"]),
            throughput_sps=float(s["throughput_sps"]), overhead_pct=overhead_pct(r, base),
            baseline_run=base.name if base is not None else None, ettr=ettr, goodput_sps=goodput,
            final_auc=float(s["final_auc"]), final_logloss=float(s["final_logloss"]),
            final_accuracy=float(s["final_accuracy"]), teacher_auc=float(s["teacher_auc"]),
            twin_run=twin.name if twin is not None else None, delta_auc=d_auc,
            delta_logloss=d_logloss, lossless=lossless, lost_samples=lost_samples,
            pls=_pls(r, lost_samples), recoveries=recoveries,
            recovery_latency_s=float(s["recovery_latency_s"]), time_lost_s=float(s["time_lost_s"]),
            time_lost_per_failure_s=_recovery_time_lost(r) / recoveries if recoveries else None,
            reexecuted_steps=int(s["reexecuted_steps"]), stall_s=float(s["stall_s"]),
            checkpoint_critical_s=float(crit) if finite(crit) else None,
            checkpoints=len(r.checkpoints), checkpoint_bytes=int(s["checkpoint_bytes"]),
            parity_bytes=int(s["parity_bytes"]), protection_bytes=eff["protection_bytes"],
            interval_steps=steps, interval_s=seconds, interval_rule=rule, memory_mb=mem,
            memory_overhead_mb=mem - base_mem if mem is not None and base_mem is not None else None,
            server_cpu_ms=cpu, server_cpu_extra_ms=cpu - base_cpu if cpu is not None and base_cpu is not None
            else None,
            param_checksum=str(s["param_checksum"]), path=str(r.path), recovery=recovery_means(r),
            unprotected_s=float(s["unprotected_s"]) if recoveries and finite(s.get("unprotected_s"))
            else None,
            repair_throughput_ratio=float(s["repair_throughput_ratio"])
            if finite(s.get("repair_throughput_ratio")) else None,
            repair_throughput_vs_twin=repair_throughput_vs_twin(r, twin),
            **_corruption(r),
            **(model_difference(r, twin) if twin is not None else {}),
        ))
    return out


def model_difference(run: RunResult, twin: RunResult) -> dict[str, Any]:
    """``rows_differing``, ``max_weight_error``, ``dense_differs`` of a run against its twin; {}
    unless both hold a final model of the same shape."""
    a, b = run.final_model, twin.final_model
    if a is None or b is None or a.embeddings.shape != b.embeddings.shape or a.dense.shape != b.dense.shape:
        return {}
    rows = a.embeddings.view(np.uint32) != b.embeddings.view(np.uint32)  # bitwise: -0.0 ≠ 0.0, nan = nan
    dense = a.dense.view(np.uint32) != b.dense.view(np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        diffs = np.abs(np.concatenate([(a.embeddings - b.embeddings)[rows], a.dense[dense] - b.dense[dense]]))
    worst = (float(diffs.max()) if diffs.size else 0.0) if np.isfinite(diffs).all() else math.nan
    return {"rows_differing": int(rows.any(axis=1).sum()), "max_weight_error": worst,
            "dense_differs": bool(dense.any())}


def _corruption(r: RunResult) -> dict[str, Any]:
    """``corruptions``, ``corruptions_detected``, ``corruptions_repaired``, ``detection_steps`` of a
    run's ``summary.corruptions``."""
    try:
        notes = json.loads(str(r.summary.get("corruptions") or "[]"))
    except ValueError:
        notes = []
    notes = [n for n in notes if isinstance(n, dict)]
    gaps = [int(n["detected_step"]) - int(n["step"]) for n in notes if n.get("detected_step") is not None]
    return {"corruptions": len(notes), "corruptions_detected": len(gaps),
            "corruptions_repaired": sum(n.get("repaired_step") is not None for n in notes),
            "corruptions_located": sum(bool(n.get("located")) for n in notes),
            "detection_steps": max(gaps) if gaps else None}
