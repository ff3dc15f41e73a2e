"""Comparison tables over result files: failure-free, under failures, recovery, per run, phases, events.

Owns what the tables show and how they render (text, Markdown, CSV); every number comes from
``metrics`` (the one place the derived figures are defined), the **phase share** excepted:

* **phase share** = ``Σ t_phase / Σ dt`` over the timeline after the warm-up steps (a
  time-weighted mean). ``other`` is the step time no trainer phase accounts for:
  ``max(0, 1 − Σ shares)`` over the trainer's own phases only. ``server`` is measured on the
  servers and overlaps ``wait`` (``OVERLAPPING``): it is shown, but not subtracted, so ``other``
  is never negative.

Entry points: ``comparison_table(results)`` — what ``mpiec bench`` prints: the failure-free
table, the failure table with its verdict lines, the recovery breakdown; ``comparison_tables``
— the same as ``Table`` objects (``.text()``, ``.markdown()``, ``.csv()``); ``runs_table`` — one
row per result file; ``summary_rows`` — the raw per-run figures for CSV.

Invariants: functions are pure (no I/O); tables have one row per run in the order given; missing
or not-applicable values print as ``—``; headers carry the units; the text tables of a bench fit
in about 120 columns.
"""

from __future__ import annotations

import csv
import io
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpiec.results import RunResult

from .metrics import PHASE_LABELS, RECOVERY_PHASES, RunMetrics, compare, finite, planned_kills

__all__ = [
    "PHASES",
    "Table",
    "comparison_table",
    "comparison_tables",
    "failure_free_table",
    "failure_table",
    "format_events",
    "format_phase_breakdown",
    "phase_breakdown",
    "phase_table",
    "recovery_table",
    "render_table",
    "runs_table",
    "summary_rows",
    "verdicts",
]

DASH = "—"
PHASES = ("data", "compute", "comm", "wait", "server", "strategy")
NOTE_WIDTH = 118  # notes under a text table are wrapped to fit a 120-column terminal
REASON_WIDTH = 60  # a lost run's abort reason in the verdict line, cut beyond this
OVERLAPPING = ("server",)  # measured elsewhere, inside another phase: not part of "other"


# -- rendering -------------------------------------------------------------------------------------

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


@dataclass
class Table:
    """A titled table with notes under it, rendered as text, Markdown or CSV."""

    title: str
    header: list[str]
    rows: list[list[str]]
    right: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    #: The table's conclusions (e.g. who lost data), shown right under it, before the notes.
    verdicts: list[str] = field(default_factory=list)

    def text(self, width: int = NOTE_WIDTH) -> str:
        """Title, aligned table, then the notes wrapped at ``width`` columns."""
        body = render_table(self.header, self.rows, self.right) if self.rows else "(no runs)"
        notes = [textwrap.fill(n, width, subsequent_indent="  ") for n in (*self.verdicts, *self.notes)]
        return "\n".join([self.title, body, *notes])

    def markdown(self) -> str:
        def cells(row: list[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"

        align = ["---:" if i in self.right else ":---" for i in range(len(self.header))]
        out = [f"### {self.title}", "", cells(self.header), "| " + " | ".join(align) + " |"]
        out += [cells(r) for r in self.rows] or ["(no runs)"]
        if self.verdicts:
            out += ["", *(f"**{n}**  " for n in self.verdicts)]
        if self.notes:
            out += ["", *(f"* {n}" for n in self.notes)]
        return "\n".join(out)

    def csv(self) -> str:
        """The displayed cells (formatted, units in the header); ``—`` becomes empty."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.header)
        for row in self.rows:
            w.writerow(["" if c == DASH else c for c in row])
        return buf.getvalue()


def _f(x: Any, spec: str) -> str:
    return format(x, spec) if finite(x) else DASH


def _signed(x: Any, spec: str, suffix: str = "") -> str:
    return f"{x:+{spec}}{suffix}" if finite(x) else DASH


def _fmt_bytes(n: Any) -> str:
    if not finite(n):
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


def _yes_no(x: bool | None) -> str:
    return DASH if x is None else "yes" if x else "no"


def _label(m: RunMetrics) -> str:
    out = m.variant
    if m.emulated:
        out += " (emulated)"
    if not m.complete:
        out += " (partial)"
    return out


def _interval(m: RunMetrics) -> str:
    """``5 (given)``; a rule in seconds: ``5 (young, 0.31 s)``."""
    if m.interval_steps is None:
        return m.interval_rule or DASH
    why = [m.interval_rule] if m.interval_rule else []
    if m.interval_s is not None:
        why.append(f"{m.interval_s:.3g} s")
    return f"{m.interval_steps}" + (f" ({', '.join(why)})" if why else "")


# -- the comparison ----------------------------------------------------------------------------------

def _with_delta(x: Any, delta: Any, spec: str) -> str:
    """``x (+delta)``; the bracket only when the difference to the baseline is known."""
    if not finite(x):
        return DASH
    return f"{x:{spec}}" + (f" ({delta:+{spec}})" if finite(delta) else "")


def failure_free_table(metrics: list[RunMetrics], baseline: str = "none") -> Table:
    """What protection costs when nothing fails: one row per failure-free run."""
    header = ["strategy", "samples/s", "overhead %", "ETTR", "ckpt interval", "protection B",
              "stall s", "RSS MiB (Δ)", "ΔCPU ms", "AUC", "logloss"]
    rows = []
    for m in metrics:
        if m.failure:
            continue
        rows.append([
            _label(m), _f(m.throughput_sps, ".0f"), _signed(m.overhead_pct, ".1f"), _f(m.ettr, ".3f"),
            _interval(m), _fmt_bytes(m.protection_bytes), _f(m.checkpoint_critical_s, ".2f"),
            _with_delta(m.memory_mb, m.memory_overhead_mb, ".0f"),
            _signed(m.server_cpu_extra_ms, ".2f"), _f(m.final_auc, ".4f"),
            _f(m.final_logloss, ".4f"),
        ])
    notes = [
        f"overhead: throughput lost vs the failure-free '{baseline}' run of the same config"
        + ("" if any(m.overhead_pct is not None for m in metrics if not m.failure)
           else f" (no such '{baseline}' run here)")
        + "; ETTR: 1 − time lost to protection stalls / wall time",
        "ckpt interval: steps between checkpoints (the rule that chose it, its seconds for a rule in "
        "seconds); protection B: bytes written (checkpoints) or sent (parity deltas); stall: time "
        "the training thread spent saving checkpoints; RSS: Σ peak resident memory over the ranks, "
        "(Δ) vs that run; ΔCPU: a server's CPU ms per step (every thread, evaluations included) "
        "minus that run's: what the protection costs a server's core (throughput hides it where "
        "ranks share cores)",
    ]
    return Table("failure-free", header, rows, right=set(range(1, len(header))), notes=notes)


def _scenario(metrics: list[RunMetrics], results: list[RunResult]) -> str:
    plans = set()
    for m, r in zip(metrics, results, strict=True):
        if m.failure:
            plans.add("; ".join(map(str, planned_kills(r))) or f"{m.kills} kill(s)")
    return plans.pop() if len(plans) == 1 else "several scenarios" if plans else "no failure run"


def failure_table(metrics: list[RunMetrics], scenario: str = "") -> Table:
    """What each strategy lost under the same failures: one row per failure run."""
    header = ["strategy", "kills", "lossless", "lost samples", "PLS", "ΔAUC", "Δlogloss",
              "time lost s", "s/recovery", "recovery s", "ETTR", "goodput/s"]
    rows = []
    for m in metrics:
        if not m.failure:
            continue
        rows.append([
            _label(m), str(m.kills), "run lost" if m.lost else _yes_no(m.lossless), str(m.lost_samples),
            _f(m.pls, ".3f"), _signed(m.delta_auc, ".4f"), _signed(m.delta_logloss, ".4f"),
            _f(m.time_lost_s, ".2f") if m.recoveries else DASH,
            _f(m.time_lost_per_failure_s, ".2f"), _f(m.recovery_latency_s, ".2f"),
            _f(m.ettr, ".3f"), _f(m.goodput_sps, ".0f"),
        ])
    notes = [
        "lossless: ended with the param_checksum of its failure-free twin (same strategy, config and "
        "seed; — when there is no twin), 'run lost': the run could not finish; ΔAUC, Δlogloss: vs that "
        "twin; lost samples: samples whose updates are not in the final model; PLS: their portion",
        "time lost: kill → back to 95 % of the normal step rate, plus rolled-back steps run again "
        "(s/recovery: per recovery; kills close together may share one); recovery: kill → training "
        "resumes (mean); ETTR: 1 − unproductive time / wall time; goodput: samples kept in the final "
        "model per second",
    ]
    title = "under failures" + (f": {scenario}" if scenario else "")
    return Table(title, header, rows, right=set(range(1, len(header))) - {2}, notes=notes,
                 verdicts=verdicts(metrics))


def verdicts(metrics: list[RunMetrics]) -> list[str]:
    """One line per outcome, naming the failure runs in it: lost the run / lost data / lost time
    only / lost nothing / not checked (no failure-free twin)."""
    groups: dict[str, list[str]] = {}
    for m in metrics:
        if not m.failure:
            continue
        if m.lost:
            why = m.abort_reason if len(m.abort_reason) <= REASON_WIDTH else \
                m.abort_reason[:REASON_WIDTH - 1].rstrip() + "…"
            groups.setdefault("lost the run", []).append(m.variant + (f" ({why})" if why else ""))
        elif m.lossless is False or m.lost_samples > 0:
            what = f"{m.lost_samples} samples" if m.lost_samples else "model ≠ twin"
            if m.delta_auc is not None:
                what += f", ΔAUC {m.delta_auc:+.4f}"
            groups.setdefault("lost data", []).append(f"{m.variant} ({what})")
        elif m.lossless is None:
            groups.setdefault("not checked (no failure-free twin)", []).append(m.variant)
        elif m.recoveries and finite(m.time_lost_s) and m.time_lost_s > 0:
            groups.setdefault("lost time only", []).append(f"{m.variant} ({m.time_lost_s:.2f} s)")
        else:
            groups.setdefault("lost nothing", []).append(m.variant)
    order = ("lost the run", "lost data", "lost time only", "lost nothing",
             "not checked (no failure-free twin)")
    return [f"{k}: {', '.join(groups[k])}" for k in order if k in groups]


def recovery_table(metrics: list[RunMetrics]) -> Table:
    """Where each recovery's time went: the mean seconds per recovery of each phase."""
    phases = [PHASE_LABELS[p] for p in RECOVERY_PHASES]
    header = ["strategy", "recoveries", *(f"{p} s" for p in phases), "time lost s"]
    rows = []
    for m in metrics:
        if not m.recovery:
            continue
        rows.append([_label(m), str(m.recoveries), *(_f(m.recovery.get(p), ".3f") for p in RECOVERY_PHASES),
                     _f(m.recovery.get("time_lost_s"), ".3f")])
    notes = ["mean per recovery; the phases add up to the time lost: kill → first detection → "
             "shrink and agree → recovery plan → replacement → state restored → back to 95 % of the "
             "normal step rate, plus rolled-back steps run again"]
    return Table("recovery breakdown", header, rows, right=set(range(1, len(header))), notes=notes)


def comparison_tables(results: list[RunResult], baseline: str = "none") -> list[Table]:
    """The failure-free table, the failure table and, when some run recovered, the recovery table."""
    metrics = compare(results, baseline)
    tables = [failure_free_table(metrics, baseline)]
    if any(m.failure for m in metrics):
        tables.append(failure_table(metrics, _scenario(metrics, results)))
    if any(m.recovery for m in metrics):
        tables.append(recovery_table(metrics))
    return tables


def comparison_table(results: list[RunResult], baseline: str = "none") -> str:
    """What ``mpiec bench`` and ``mpiec report`` print: ``comparison_tables`` as text."""
    return "\n\n".join(t.text() for t in comparison_tables(results, baseline))


def summary_rows(results: list[RunResult], baseline: str = "none") -> list[dict[str, Any]]:
    """One dict per run with every figure of ``metrics.RunMetrics`` (raw values, for CSV)."""
    return [m.as_row() for m in compare(results, baseline)]


def runs_table(results: list[RunResult], baseline: str = "none") -> Table:
    """One row per result file (its name, seed and checksum), failure-free and failure runs alike."""
    header = ["run", "strategy", "seed", "steps", "samples/s", "overhead %", "AUC", "lost",
              "lost samples", "recovery s", "re-exec", "time lost s", "protection B", "checksum"]
    rows = []
    for m in compare(results, baseline):
        rows.append([
            m.run, _label(m), str(m.seed), str(m.steps), _f(m.throughput_sps, ".1f"),
            _signed(m.overhead_pct, ".1f"), _f(m.final_auc, ".4f"), "yes" if m.lost else "no",
            str(m.lost_samples), _f(m.recovery_latency_s, ".3f"), str(m.reexecuted_steps),
            _f(m.time_lost_s, ".2f") if m.recoveries else DASH, _fmt_bytes(m.protection_bytes),
            m.param_checksum[:12] or DASH,
        ])
    return Table("runs", header, rows, right={2, 3, 4, 5, 6, 8, 9, 10, 11, 12})


# -- phases and events --------------------------------------------------------------------------------

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
