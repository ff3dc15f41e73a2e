"""Text tables over result files: the comparison table, phase breakdowns, events.

Owns the definitions of the derived numbers the suite reports:

* **overhead** of a run = ``100 · (1 − throughput / throughput_baseline)``,
  i.e. the percent of throughput lost against the ``baseline`` strategy run
  (``none`` by default) of the same list. The baseline run is chosen per run
  among the runs of the baseline strategy whose config is the same apart from
  ``strategy``, ``failures``, ``output`` and ``training.seed``: prefer one that
  was not lost and saw no kill, then the same seed, then the first in list
  order. No such run → ``—``.
* **phase share** = ``Σ t_phase / Σ dt`` over the timeline after the warm-up
  steps (a time-weighted mean). ``other`` is the step time no trainer phase
  accounts for: ``max(0, 1 − Σ shares)`` over the trainer's own phases only.
  ``server`` is measured on the servers and overlaps ``wait`` (``OVERLAPPING``):
  it is shown, but not subtracted, so ``other`` is never negative.

Invariants: functions are pure (no I/O), the table is plain text with aligned
columns and one row per run in the order given, missing values print as ``—``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from mpiec.results import RunResult, decode

__all__ = [
    "PHASES",
    "comparison_table",
    "format_events",
    "format_phase_breakdown",
    "phase_breakdown",
    "phase_table",
    "render_table",
    "summary_rows",
]

DASH = "—"
PHASES = ("data", "compute", "comm", "wait", "server", "strategy")
OVERLAPPING = ("server",)  # measured elsewhere, inside another phase: not part of "other"
_KILL_KINDS = {"kill", "emulated_kill"}


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def _had_kill(r: RunResult) -> bool:
    return any(decode(k) in _KILL_KINDS for k in r.events["kind"])


_NOT_COMPARED = ("strategy", "failures", "output")


def _comparable(r: RunResult) -> str:
    """The run's config without what may differ from its baseline run."""
    cfg = {k: v for k, v in r.config.items() if k not in _NOT_COMPARED}
    training = cfg.get("training")
    if isinstance(training, dict):
        cfg["training"] = {k: v for k, v in training.items() if k != "seed"}
    return json.dumps(cfg, sort_keys=True, default=str)


def _pick_baseline(run: RunResult, candidates: list[RunResult]) -> RunResult | None:
    key = _comparable(run)
    candidates = [b for b in candidates if _comparable(b) == key]
    if not candidates:
        return None

    def rank(b: RunResult) -> tuple[int, int]:
        clean = not b.summary["lost"] and not _had_kill(b)
        return (0 if clean else 1, 0 if b.seed == run.seed else 1)

    return min(candidates, key=rank)  # min is stable: first in list order on ties


def summary_rows(results: list[RunResult], baseline: str = "none") -> list[dict[str, Any]]:
    """One dict per run with the summary numbers (raw values, for CSV)."""
    candidates = [r for r in results if r.strategy == baseline]
    rows = []
    for r in results:
        s = r.summary
        base = _pick_baseline(r, candidates)
        overhead = None
        if base is not None:
            tb, tr = base.summary["throughput_sps"], s["throughput_sps"]
            if _finite(tb) and tb > 0 and _finite(tr):
                overhead = 100.0 * (1.0 - tr / tb)
        rows.append({
            "run": r.name,
            "strategy": str(r.attrs.get("variant") or r.strategy),
            "seed": r.seed,
            "emulated": s["emulated"],
            "complete": s["complete"],
            "steps": s["steps_completed"],
            "samples": s["samples_completed"],
            "throughput_sps": s["throughput_sps"],
            "overhead_pct": overhead,
            "baseline_run": base.name if base is not None else None,
            "final_auc": s["final_auc"],
            "final_logloss": s["final_logloss"],
            "final_accuracy": s["final_accuracy"],
            "teacher_auc": s["teacher_auc"],
            "lost": s["lost"],
            "lost_samples": s["lost_samples"],
            "recovery_latency_s": s["recovery_latency_s"],
            "recoveries": s["recoveries"],
            "reexecuted_steps": s["reexecuted_steps"],
            "time_lost_s": s["time_lost_s"],
            "stall_s": s["stall_s"],
            "checkpoint_bytes": s["checkpoint_bytes"],
            "parity_bytes": s["parity_bytes"],
            "param_checksum": s["param_checksum"],
            "path": str(r.path),
        })
    return rows


def _fmt_float(x: Any, spec: str) -> str:
    return format(x, spec) if _finite(x) else DASH


def _fmt_bytes(n: Any) -> str:
    if not _finite(n):
        return DASH
    n = int(n)
    if n == 0:
        return "0"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def render_table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    """Aligned text table; columns whose index is in ``right`` are right-aligned."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: list[str]) -> str:
        out = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def comparison_table(results: list[RunResult], baseline: str = "none") -> str:
    """The side-by-side table ``mpiec bench`` and ``mpiec report`` print."""
    header = [
        "run", "strategy", "seed", "steps", "samples/s", "overhead", "AUC", "logloss",
        "lost", "lost samples", "recovery s", "re-exec", "time lost s", "ckpt bytes", "parity bytes",
        "checksum",
    ]
    rows = []
    for row in summary_rows(results, baseline):
        strategy = row["strategy"]
        if row["emulated"]:
            strategy += " (emulated)"
        if not row["complete"]:
            strategy += " (partial)"
        rows.append([
            row["run"],
            strategy,
            str(row["seed"]),
            str(row["steps"]),
            _fmt_float(row["throughput_sps"], ".1f"),
            f"{row['overhead_pct']:+.1f}%" if _finite(row["overhead_pct"]) else DASH,
            _fmt_float(row["final_auc"], ".4f"),
            _fmt_float(row["final_logloss"], ".4f"),
            "yes" if row["lost"] else "no",
            str(row["lost_samples"]),
            _fmt_float(row["recovery_latency_s"], ".3f"),
            str(row["reexecuted_steps"]),
            _fmt_float(row["time_lost_s"], ".2f") if row["recoveries"] else DASH,
            _fmt_bytes(row["checkpoint_bytes"]),
            _fmt_bytes(row["parity_bytes"]),
            row["param_checksum"][:12] or DASH,
        ])
    table = render_table(header, rows, right={2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14})
    notes = []
    if not any(r.strategy == baseline for r in results):
        notes.append(f"overhead: no '{baseline}' run in this set")
    else:
        notes.append(f"overhead: throughput lost vs the '{baseline}' run")
    return table + "\n" + "\n".join(notes)


def _warmup_steps(n: int, warmup: int | None) -> int:
    if warmup is None:
        warmup = min(10, n // 5)
    return max(0, min(int(warmup), n))


def phase_breakdown(result: RunResult, warmup: int | None = None) -> dict[str, float]:
    """Time-weighted share of each phase in the step time, after warm-up.

    ``warmup`` steps are skipped (default ``min(10, n_steps // 5)``). Keys:
    ``PHASES`` + ``other``; all nan if no step remains or ``Σ dt`` is 0.
    """
    tl = result.timeline
    tl = tl[_warmup_steps(len(tl), warmup):]
    total = float(np.sum(tl["dt"], dtype=np.float64)) if len(tl) else 0.0
    if total <= 0 or not math.isfinite(total):
        return {k: math.nan for k in (*PHASES, "other")}
    shares = {p: float(np.sum(tl[f"t_{p}"], dtype=np.float64)) / total for p in PHASES}
    own = sum(v for p, v in shares.items() if p not in OVERLAPPING)
    shares["other"] = max(0.0, 1.0 - own)
    return shares


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if math.isfinite(x) else DASH


def format_phase_breakdown(result: RunResult, warmup: int | None = None) -> str:
    """One line: ``run (strategy): data 1.0%  compute 60.0% …``."""
    shares = phase_breakdown(result, warmup)
    n = len(result.timeline) - _warmup_steps(len(result.timeline), warmup)
    parts = "  ".join(f"{k} {_pct(v)}" for k, v in shares.items())
    return f"{result.name} ({result.strategy}, {n} steps): {parts}"


def phase_table(results: list[RunResult], warmup: int | None = None) -> str:
    """Phase shares of several runs as one aligned table."""
    header = ["run", "strategy", "steps", *PHASES, "other"]
    rows = []
    for r in results:
        shares = phase_breakdown(r, warmup)
        n = len(r.timeline) - _warmup_steps(len(r.timeline), warmup)
        rows.append([r.name, r.strategy, str(n), *(_pct(shares[k]) for k in (*PHASES, "other"))])
    return render_table(header, rows, right=set(range(2, len(header))))


def format_events(result: RunResult) -> str:
    """The run's events as an aligned table (or a line saying there are none)."""
    events = result.event_list()
    if not events:
        return f"{result.name}: no events"
    header = ["step", "time s", "kind", "rank", "role", "detail"]
    rows = []
    for e in events:
        role = e["role"] + (f"[{e['role_index']}]" if e["role_index"] >= 0 else "")
        rows.append([
            str(e["step"]), f"{e['time']:.3f}", e["kind"],
            str(e["rank"]) if e["rank"] >= 0 else DASH, role or DASH, e["detail"],
        ])
    return f"{result.name} ({result.strategy}) events:\n" + render_table(
        header, rows, right={0, 1, 3}
    )
