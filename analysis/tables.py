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

**Repeated benches** (some variant has more than one run of a kind): the failure-free and failure
tables have one row per variant with every figure a median and its 95 % interval (``stats``); a
difference to the baseline whose interval includes zero prints as ``n.s.``; time lost and re-executed
steps show their mean ± sd (the kills fall at spread phases of the interval). Where ranks share cores
(``n_ranks`` > the summary's ``host_cores``) the headline is each role's extra CPU per step (also as a
share of the baseline's trainer step), the throughput overhead beside it; with a core per rank the
throughput overhead is the headline. ``trust_line`` says whether the comparison can be trusted.

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

from .metrics import (
    PHASE_LABELS,
    RECOVERY_PHASES,
    RunMetrics,
    baseline_for,
    compare,
    finite,
    overhead_pct,
    planned_kills,
    unfired_kills,
)
from .read import repeat_of
from .stats import (
    CONFIDENCE,
    Comparison,
    Estimate,
    analyse_table,
    fmt_diff,
    fmt_estimate,
    mean_sd,
    mean_t,
    median,
    median_bracket_level,
    rounds_to_resolve,
    unpaired,
)

__all__ = [
    "PHASES",
    "Table",
    "comparison_table",
    "comparison_tables",
    "failure_free_table",
    "corruption_table",
    "failure_table",
    "format_events",
    "format_phase_breakdown",
    "phase_breakdown",
    "phase_table",
    "recovery_table",
    "render_table",
    "runs_table",
    "summary_rows",
    "trust_line",
    "verdicts",
]
#: Extra summary keys shown as columns of the repeated failure table when some run records them
#: (key -> (header, format)): median [95 % interval] over the repeats. Filled by the modules adding keys.
FAILURE_EXTRA_COLUMNS: dict[str, tuple[str, str]] = {
    "unprotected_s": ("unprotected s", ".3f"),
    "repair_throughput_ratio": ("thr. during repair", ".2f"),
}
#: A comparison is disturbed when other processes took more than this share of the CPU (median run).
DISTURBED_SHARE = 0.10

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
        is_base = m.variant == baseline  # no overhead against itself
        rows.append([
            _label(m), _f(m.throughput_sps, ".0f"), "baseline" if is_base else _signed(m.overhead_pct, ".1f"),
            _f(m.ettr, ".3f"), _interval(m), _fmt_bytes(m.protection_bytes),
            _f(m.checkpoint_critical_s, ".2f"),
            _f(m.memory_mb, ".0f") if is_base else _with_delta(m.memory_mb, m.memory_overhead_mb, ".0f"),
            DASH if is_base else _signed(m.server_cpu_extra_ms, ".2f"), _f(m.final_auc, ".4f"),
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


def corruption_table(metrics: list[RunMetrics]) -> Table:
    """What each strategy made of the same silent corruption: one row per run where a flip fired."""
    header = ["strategy", "flips", "detected", "steps to detection", "located", "repaired", "final model",
              "rows ≠ twin", "max |Δw|", "ΔAUC"]
    rows = []
    for m in metrics:
        if not m.corruptions:
            continue
        model = ("run lost" if m.lost else DASH if m.lossless is None else
                 "the twin's (repaired or undone)" if m.lossless else "≠ twin (persisted)")
        rows.append([_label(m), str(m.corruptions), f"{m.corruptions_detected}/{m.corruptions}",
                     DASH if m.detection_steps is None else str(m.detection_steps),
                     f"{m.corruptions_located}/{m.corruptions}", f"{m.corruptions_repaired}/{m.corruptions}",
                     model,
                     DASH if m.rows_differing is None else str(m.rows_differing),
                     DASH if m.max_weight_error is None else f"{m.max_weight_error:.3g}",
                     _signed(m.delta_auc, ".4f")])
    notes = ["a flip changes one bit of a rank's live state and tells no one (docs/running.md 'Silent "
             "corruption'); detected: a detection event followed it (ecrm's verify_every re-encode: "
             "parity_mismatch, the runtime's shard_mismatch); steps to detection: flip → detection (0: "
             "at the end of the flip's step); located: the detection or a repair named the flipped row; "
             "repaired: the flipped row was corrected (ecrm, code = rs with r >= 2 locates it); final "
             "model: its param_checksum against the failure-free twin's (a repair after the row was read "
             "or updated leaves those effects in the model); rows ≠ twin, max |Δw|: the embedding rows "
             "not bitwise the twin's and the largest weight difference, embedding or dense (nan: a "
             "weight no longer finite), from both runs' final_model (output.final_model; a bench sets "
             "it for plans with flips)"]
    return Table("silent corruption", header, rows, right={1, 2, 3, 4, 5, 7, 8, 9}, notes=notes)


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
    """The failure-free table, the failure table and, when some run recovered, the recovery table
    (one row per variant, medians with intervals, when the runs are repeated)."""
    metrics = compare(results, baseline)
    groups = group_runs(metrics, results, baseline)
    if any(len(g) > 1 for g in groups.values()):
        return repeated_tables(groups, baseline)
    tables = [failure_free_table(metrics, baseline)]
    line = trust_line(groups, baseline)
    if line:
        tables[0].verdicts.insert(0, line)
    if any(m.failure for m in metrics):
        tables.append(failure_table(metrics, _scenario(metrics, results)))
        tables[-1].verdicts.extend(unfired_lines(results))
    if any(m.corruptions for m in metrics):
        tables.append(corruption_table(metrics))
    if any(m.recovery for m in metrics):
        tables.append(recovery_table(metrics))
    return tables


def unfired_lines(results: list[RunResult]) -> list[str]:
    """One line per run where a planned kill did not fire: the strategies were then not compared under
    the same failures (a shrink dropped the slot, the run ended or was lost first)."""
    out = []
    for r in results:
        missed = unfired_kills(r)
        if missed:
            out.append(f"NOT the same failures: {r.name}: {len(missed)} of {len(planned_kills(r)) or '?'} "
                       f"planned kill(s) did not fire ({'; '.join(missed[:3])}"
                       + (f"; {len(missed) - 3} more" if len(missed) > 3 else "") + ")")
    return out


def comparison_table(results: list[RunResult], baseline: str = "none") -> str:
    """What ``mpiec bench`` and ``mpiec report`` print: ``comparison_tables`` as text."""
    return "\n\n".join(t.text() for t in comparison_tables(results, baseline))


def summary_rows(results: list[RunResult], baseline: str = "none") -> list[dict[str, Any]]:
    """One dict per run with every figure of ``metrics.RunMetrics`` (raw values, for CSV)."""
    return [m.as_row() for m in compare(results, baseline)]


def runs_table(results: list[RunResult], baseline: str = "none") -> Table:
    """One row per result file (its name, seed and checksum), failure-free and failure runs alike.

    ``overhead %`` is measured against the failure-free ``baseline`` run of the same config and, in a
    repeated bench, of the same round (the pairing the tables use); the baseline strategy's own runs
    have none (``baseline``; ``—`` for its failure runs): a baseline run against another baseline run is
    noise between rounds, not an overhead."""
    header = ["run", "strategy", "seed", "steps", "samples/s", "overhead %", "AUC", "lost",
              "lost samples", "recovery s", "re-exec", "time lost s", "protection B", "checksum"]
    rounds: dict[int, list[RunResult]] = {}
    for r in results:
        rounds.setdefault(repeat_of(r), []).append(r)
    rows = []
    for m, r in zip(compare(results, baseline), results, strict=True):
        if r.strategy == baseline:
            over = DASH if m.failure else "baseline"
        else:
            base = baseline_for(r, rounds[repeat_of(r)], baseline)
            over = _signed(overhead_pct(r, base) if base is not None else m.overhead_pct, ".1f")
        rows.append([
            m.run, _label(m), str(m.seed), str(m.steps), _f(m.throughput_sps, ".1f"),
            over, _f(m.final_auc, ".4f"), "yes" if m.lost else "no",
            str(m.lost_samples), _f(m.recovery_latency_s, ".3f"), str(m.reexecuted_steps),
            _f(m.time_lost_s, ".2f") if m.recoveries else DASH, _fmt_bytes(m.protection_bytes),
            m.param_checksum[:12] or DASH,
        ])
    notes = [f"overhead: throughput lost vs the failure-free '{baseline}' run of the same config and round; "
             f"'{baseline}' runs: baseline (no overhead against themselves)"]
    return Table("runs", header, rows, right={2, 3, 4, 5, 6, 8, 9, 10, 11, 12}, notes=notes)


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


# -- repeated benches ------------------------------------------------------------------------------------

Group = list[tuple[RunMetrics, RunResult]]


def group_runs(metrics: list[RunMetrics], results: list[RunResult],
               baseline: str = "none") -> dict[tuple[str, bool], Group]:
    """The runs of each (variant, failure run): the repeats of one variant; the baseline's groups first,
    the others in first-appearance order."""
    out: dict[tuple[str, bool], Group] = {}
    for m, r in zip(metrics, results, strict=True):
        out.setdefault((m.variant, m.failure), []).append((m, r))
    return dict(sorted(out.items(), key=lambda kv: kv[0][0] != baseline))


def _summary(g: Group, key: str, scale: float = 1.0) -> list[float]:
    out = []
    for _, r in g:
        v = r.summary.get(key)
        if finite(v):
            out.append(float(v) * scale)
    return out


def shares_cores(groups: dict[tuple[str, bool], Group]) -> bool | None:
    """Whether the runs had more ranks than their host's cores (None: not recorded)."""
    seen = []
    for g in groups.values():
        for _, r in g:
            cores, ranks = r.summary.get("host_cores"), r.attrs.get("n_ranks")
            if finite(cores) and cores > 0 and finite(ranks):
                seen.append(int(ranks) > int(cores))
    return any(seen) if seen else None


def _step_ms(g: Group) -> float:
    """The median step time (ms) of a group's runs after their first 5 steps."""
    dts = [r.timeline["dt"][5:] for _, r in g if len(r.timeline) > 5]
    return 1e3 * float(np.median(np.concatenate(dts))) if dts else math.nan


def by_round(g: Group, fn: Any, rounds: list[int]) -> list[Any]:
    """``fn(metrics, result)`` of a group's runs aligned on ``rounds`` (None where the group has no run
    in a round); a group with two runs in one round (not a bench's rounds) gives its runs in order."""
    reps = [repeat_of(r) for _, r in g]
    if len(set(reps)) != len(reps):
        return [fn(m, r) for m, r in g]
    at = {rep: fn(m, r) for rep, (m, r) in zip(reps, g, strict=True)}
    return [at.get(i) for i in rounds]


def _rounds(groups: dict[tuple[str, bool], Group], failure: bool) -> list[int]:
    return sorted({repeat_of(r) for (_, f), g in groups.items() if f == failure for _, r in g})


def analyse(groups: dict[tuple[str, bool], Group], fn: Any, baseline: str = "none", scale: Any = "diff",
            failure: bool = False) -> dict[str, Comparison]:
    """``stats.analyse_table`` of the figure ``fn(metrics, result)`` over the variants' rounds."""
    rounds = _rounds(groups, failure)
    table = {v: by_round(g, fn, rounds) for (v, f), g in groups.items() if f == failure}
    if any(len(x) != len(rounds) for x in table.values()):  # not a bench's rounds: no pairing possible
        base = table.get(baseline)
        return {v: Comparison(median(x), unpaired(x, base, scale) if base and v != baseline else None)
                for v, x in table.items()}
    return analyse_table(table, baseline, scale)


def _cpu(role: str) -> Any:
    key = f"{role}_cpu_s_per_step"

    def fn(_m: RunMetrics, r: RunResult) -> float | None:
        v = r.summary.get(key)
        return float(v) * 1e3 if finite(v) else None
    return fn


def ff_estimates(groups: dict[tuple[str, bool], Group],
                 baseline: str = "none") -> dict[str, dict[str, Estimate]]:
    """Per failure-free variant: throughput, memory, each role's CPU ms per step (medians with their
    order-statistic intervals) and, paired by round against the baseline (``stats.paired``): the
    throughput overhead % (log ratio), the extra memory and each role's extra CPU (differences)."""
    thr = analyse(groups, lambda m, _r: m.throughput_sps, baseline, "ratio")
    mem = analyse(groups, lambda m, _r: m.memory_mb, baseline, "diff")
    cpu = {role: analyse(groups, _cpu(role), baseline, "diff") for role in ("server", "trainer")}
    out: dict[str, dict[str, Estimate]] = {}
    for v in thr:
        est = {"throughput": thr[v].level, "memory": mem[v].level}
        ratio = thr[v].vs_base
        if ratio is not None:  # throughput ratio r -> overhead 100·(1 − r), decreasing
            est["overhead"] = ratio.mapped(lambda x: 100.0 * (1.0 - x), increasing=False, null=0.0)
        extra = mem[v].vs_base
        if extra is not None:
            est["memory_extra"] = extra
        for role in ("server", "trainer"):
            est[f"{role}_cpu"] = cpu[role][v].level
            extra = cpu[role][v].vs_base
            if extra is not None:
                est[f"{role}_cpu_extra"] = extra
        out[v] = est
    return out


def _rounds_n(est: dict[str, dict[str, Estimate]]) -> int:
    return max((e["throughput"].n for e in est.values() if "throughput" in e), default=0)


def interval_title(est: dict[str, dict[str, Estimate]]) -> str:
    """What the brackets of a repeated table are, for its title."""
    n = _rounds_n(est)
    if n < 2:
        return "one run each: no intervals"
    levels = ("medians [95 % interval]" if median_bracket_level(n) >= CONFIDENCE
              else f"medians (range of {n} runs)")
    return f"{n} rounds: {levels}; vs the baseline paired by round [95 % interval]"


def method_notes(est: dict[str, dict[str, Estimate]], baseline: str) -> list[str]:
    """The footer lines that name the statistical method and its formula (docs/measurement.md)."""
    n = _rounds_n(est)
    level = median_bracket_level(n)
    if n < 2:
        brackets = "one run: no interval"
    elif level >= CONFIDENCE:
        brackets = "[a, b]: the order-statistic 95 % interval of the median (distribution-free)"
    else:
        brackets = (f"(range a–b): the range of the {n} runs, which holds the median with only "
                    f"{100 * level:.0f} % (1 − 2^(1−n)): not a 95 % interval")
    levels = "levels (samples/s, ms, MiB, AUC): the median of the runs; " + brackets
    paired = (f"vs the failure-free '{baseline}' runs: paired by round (a randomized complete block design: "
              "every variant once per round, order rotated); per round d = log(x / base) for throughput "
              "(shown as overhead 100·(1 − e^mean(d)) %), d = x − base for ΔCPU and RSS; [95 % interval] = "
              "mean(d) ± t(0.975, n−1)·sd(d)/√n over the n rounds, per variant (variance not pooled); "
              "n.s.: the interval includes 0; det.: identical in every round (one measurement, no interval); "
              "(n=1): one round, no interval")
    if any("Welch" in e.method for x in est.values() for e in x.values()):
        paired = (f"vs the failure-free '{baseline}' runs: these runs are not a bench's rounds (no round "
                  "ids), so they are compared unpaired: Welch's t 95 % interval of the difference of the "
                  "means (of the logs for throughput); n.s.: the interval includes 0; det.: identical in "
                  "every run")
    return [levels, paired]


def _share(e: Estimate | None, step_ms: float) -> str:
    if e is not None and e.deterministic and e.value == e.null:
        return ""
    if e is None or not finite(e.value) or not finite(step_ms) or step_ms <= 0 or (e.is_ci95
                                                                                     and not e.significant):
        return ""
    return f" ({100 * e.value / step_ms:+.0f}%)"


def _n(g: Group) -> str:
    return str(len(g))


def repeated_ff_table(groups: dict[tuple[str, bool], Group], baseline: str = "none") -> Table:
    """One row per variant: medians [95 % interval] over its failure-free repeats."""
    est = ff_estimates(groups, baseline)
    shared = shares_cores(groups)
    step_ms = _step_ms(groups.get((baseline, False), []))
    cpu_cols = ["ΔCPU server ms/step", "ΔCPU trainer ms/step"]
    thr_cols = ["thr. overhead %", "samples/s"]
    header = ["strategy", "n", *(cpu_cols + thr_cols if shared else thr_cols + cpu_cols), "RSS MiB (Δ)",
              "ckpt interval", "AUC"]
    rows = []
    for (v, failure), g in groups.items():
        if failure:
            continue
        e = est[v]
        m0 = g[0][0]
        srv, trn = e.get("server_cpu_extra"), e.get("trainer_cpu_extra")
        cpu = [fmt_diff(srv, ".2f") + _share(srv, step_ms) if srv else "baseline",
               fmt_diff(trn, ".2f") + _share(trn, step_ms) if trn else "baseline"]
        thr = [fmt_diff(e["overhead"], ".1f") if "overhead" in e else "baseline",
               fmt_estimate(e["throughput"], ".0f")]
        mem = fmt_diff(e["memory_extra"], ".0f") if "memory_extra" in e else fmt_estimate(e["memory"], ".0f")
        rows.append([_label(m0), _n(g), *(cpu + thr if shared else thr + cpu), mem, _interval(m0),
                     fmt_estimate(median([m.final_auc for m, _ in g]), ".4f")])
    case = ("ranks share cores: the headline is the CPU cost per step (ΔCPU: CPU ms per step of a "
            "server / a trainer minus the baseline's; in brackets its share of the baseline's trainer "
            f"step of {step_ms:.1f} ms); throughput overhead beside it" if shared else
            "a core per rank: the headline is the throughput overhead (samples/s lost vs the baseline); "
            "ΔCPU: each role's CPU ms per step minus the baseline's")
    profiles = {str(r.summary.get("storage_profile")) for g in groups.values() for _, r in g
                if r.summary.get("storage_profile")}
    notes = [*method_notes(est, baseline), case,
             "RSS: Σ peak resident memory over the ranks after start-up: the baseline's total, (Δ) the "
             "others' extra"]
    if profiles:
        notes.append("storage: " + ", ".join(sorted(profiles)))
    title = "failure-free (" + interval_title(est) + ")"
    return Table(title, header, rows, right=set(range(1, len(header))), notes=notes)


def _mean_sd(values: list[Any], spec: str) -> str:
    mean, sd, n = mean_sd(values)
    if not n:
        return DASH
    return f"{mean:{spec}}" + (f" ± {sd:{spec}}" if finite(sd) else "")


def repeated_failure_table(groups: dict[tuple[str, bool], Group], scenario: str = "") -> Table:
    """One row per variant: what its repeats under the scenario lost (medians, mean ± sd of time lost)."""
    extras = {k: v for k, v in FAILURE_EXTRA_COLUMNS.items()
              if any(finite(r.summary.get(k)) for (_, f), g in groups.items() if f for _, r in g)}
    header = ["strategy", "n", "kills", "lossless", "lost samples", "ΔAUC", "time lost s (mean ± sd)",
              "re-exec steps", "recovery s", "ETTR", "goodput/s", *(h for h, _ in extras.values())]
    twin_column = any(finite(m.repair_throughput_vs_twin) for (_, f), g in groups.items() if f for m, _ in g)
    if twin_column:
        header.append("thr. during repair vs twin")
    rows = []
    for (_, failure), g in groups.items():
        if not failure:
            continue
        ms = [m for m, _ in g]
        vs_twin = [float(m.repair_throughput_vs_twin) for m in ms if finite(m.repair_throughput_vs_twin)]
        checked = [m.lossless for m in ms if m.lossless is not None and not m.lost]
        lost = sum(m.lost for m in ms)
        lossless = f"{sum(checked)}/{len(ms)}" + (f" ({lost} lost)" if lost else "") if ms else DASH
        ok = [m for m in ms if not m.lost]
        rows.append([
            _label(ms[0]), _n(g), _f(float(np.median([m.kills for m in ms])), ".0f"), lossless,
            fmt_estimate(median([m.lost_samples for m in ms]), ".0f"),
            fmt_diff(mean_t([m.delta_auc for m in ok]), ".4f"),
            _mean_sd([m.time_lost_s for m in ok if m.recoveries], ".2f"),
            _mean_sd([m.reexecuted_steps for m in ok if m.recoveries], ".1f"),
            fmt_estimate(median([m.recovery_latency_s for m in ok]), ".2f"),
            fmt_estimate(median([m.ettr for m in ms]), ".3f"),
            fmt_estimate(median([m.goodput_sps for m in ms]), ".0f"),
            *(fmt_estimate(median(_summary(g, key)), spec) for key, (_, spec) in extras.items()),
            *([fmt_estimate(median(vs_twin), ".2f")] if twin_column else []),
        ])
    n = max((len(g) for (_, f), g in groups.items() if f), default=0)
    levels = ("[a, b]: the order-statistic 95 % interval of the median"
              if median_bracket_level(n) >= CONFIDENCE else
              f"(range a–b): the range of the runs (n = {n}: it holds the median with only "
              f"{100 * median_bracket_level(max(n, 2)):.0f} %, not a 95 % interval)")
    notes = [f"medians over the repeats; {levels}; det.: identical in every run; ΔAUC: final AUC minus the "
             "failure-free twin's (same round), mean with its Student-t 95 % interval (n.s.: holds 0); "
             "lossless: runs whose model equals the failure-free twin's / runs; "
             "time lost and re-executed steps: mean ± sd over the repeats that recovered (the "
             "kills fall at evenly spread phases of each strategy's checkpoint interval, so the mean is the "
             "expected re-execution)"]
    if extras or twin_column:
        notes.append("unprotected s: kill → end of the repair (a rebuild's end, else the resume); "
                     "thr. during repair: samples/s of the steps trained while a repair ran (ecrm's "
                     "background rebuild), over the run's own pace before the kill, and over its "
                     "failure-free twin's (same round) on the same steps; — where training paused "
                     "for the whole repair")
    title = "under failures" + (f": {scenario}" if scenario else "") + (
        " (medians [95 % interval])" if median_bracket_level(n) >= CONFIDENCE
        else f" (medians, range of {n} runs)")
    return Table(title, header, rows, right=set(range(1, len(header))) - {3}, notes=notes,
                 verdicts=_grouped_verdicts(groups)
                 + unfired_lines([r for (_, f), g in groups.items() if f for _, r in g]))


def _grouped_verdicts(groups: dict[tuple[str, bool], Group]) -> list[str]:
    """The verdict lines with each variant's share of its repeats: ``lost nothing: ecrm (5/5)``."""
    counts: dict[str, dict[str, int]] = {}
    for (v, failure), g in groups.items():
        if not failure:
            continue
        for m, _ in g:
            for line in verdicts([m]):
                kind = line.split(":", 1)[0]
                counts.setdefault(kind, {}).setdefault(v, 0)
                counts[kind][v] += 1
    order = ("lost the run", "lost data", "lost time only", "lost nothing",
             "not checked (no failure-free twin)")
    sizes = {v: len(g) for (v, f), g in groups.items() if f}
    return [f"{k}: " + ", ".join(f"{v} ({c}/{sizes[v]})" for v, c in counts[k].items()) for k in order
            if k in counts]


def repeated_recovery_table(groups: dict[tuple[str, bool], Group]) -> Table:
    """The median over the repeats of each run's mean seconds per recovery phase."""
    header = ["strategy", "n", *(f"{PHASE_LABELS[p]} s" for p in RECOVERY_PHASES), "time lost s"]
    rows = []
    for (_, failure), g in groups.items():
        ms = [m for m, _ in g if m.recovery]
        if not failure or not ms:
            continue
        rows.append([_label(ms[0]), str(len(ms)),
                     *(_f(float(np.nanmedian([m.recovery.get(p, math.nan) for m in ms])), ".3f")
                       for p in (*RECOVERY_PHASES, "time_lost_s"))])
    return Table("recovery breakdown (median over the repeats of the mean per recovery)", header, rows,
                 right=set(range(1, len(header))))


def _repeated_scenario(failures: Group) -> str:
    """The scenario of the failure runs: the first round's kill plan, noting the per-round shifts."""
    from .read import repeat_of

    plans = {"; ".join(map(str, planned_kills(r))) for _, r in failures}
    if len(plans) <= 1:
        return _scenario([m for m, _ in failures], [r for _, r in failures])
    first = [r for _, r in failures if repeat_of(r) == 0] or [r for _, r in failures]
    plan = "; ".join(map(str, planned_kills(first[0]))) or "several scenarios"
    return f"{plan} (round 1; later rounds shifted through each strategy's checkpoint interval)"


def repeated_tables(groups: dict[tuple[str, bool], Group], baseline: str = "none") -> list[Table]:
    """The tables of a repeated bench, the trust line first under the failure-free table."""
    tables = [repeated_ff_table(groups, baseline)]
    line = trust_line(groups, baseline)
    if line:
        tables[0].verdicts.insert(0, line)
    failures = [(m, r) for (_, f), g in groups.items() if f for m, r in g]
    if failures:
        tables.append(repeated_failure_table(groups, _repeated_scenario(failures)))
    if any(m.corruptions for m, _ in failures):
        tables.append(corruption_table([m for m, _ in failures]))
    if any(m.recovery for m, _ in failures):
        tables.append(repeated_recovery_table(groups))
    return tables


def trust_line(groups: dict[tuple[str, bool], Group], baseline: str = "none") -> str:
    """One line: whether the comparison can be trusted, and if not which of the three conditions fails
    ("" for files that recorded no disturbance figures). Trustworthy = the machine was **quiet** (other
    processes took at most ``DISTURBED_SHARE`` of the CPU, median over the runs), the headline
    comparisons have **valid** 95 % intervals at this n (paired by round, n ≥ 2) and every contender's
    headline effect is **resolved** (its interval excludes 0). For the largest unresolved effect it says
    how many rounds would resolve it (``stats.rounds_to_resolve``, from the measured spread)."""
    runs = [r for g in groups.values() for _, r in g]
    other = [float(r.summary["other_cpu_share"]) for r in runs if finite(r.summary.get("other_cpu_share"))]
    if not other:
        return ""
    got = [float(r.summary["run_cpu_share"]) for r in runs if finite(r.summary.get("run_cpu_share"))]
    load = [float(r.summary["host_load_1m"]) for r in runs if finite(r.summary.get("host_load_1m"))]
    spread = [float(r.summary["step_time_spread"]) for r in runs if finite(r.summary.get("step_time_spread"))]
    cores = max((int(r.summary.get("host_cores") or 0) for r in runs), default=0)
    med = float(np.median(other))
    facts = (f"other processes took {100 * med:.0f} % of the CPU (median over {len(other)} runs, up to "
             f"{100 * max(other):.0f} %)"
             + (f", host load {np.median(load):.1f} on {cores} cores" if load and cores else "")
             + (f"; the ranks got {100 * np.median(got):.0f} % of wall × cores" if got else "")
             + (f"; step times spread {100 * np.median(spread):.0f} % (IQR/median)" if spread else ""))
    failed: list[str] = []
    if med > DISTURBED_SHARE:
        failed.append(f"DISTURBED (other processes took {100 * med:.0f} % of the CPU, more than "
                      f"{100 * DISTURBED_SHARE:.0f} %)")
    key = "server_cpu_extra" if shares_cores(groups) else "overhead"
    what = "ΔCPU server ms/step" if key != "overhead" else "throughput overhead %"
    spec = ".2f" if key != "overhead" else ".1f"
    heads = {v: e[key] for v, e in ff_estimates(groups, baseline).items() if key in e}
    invalid = [v for v, e in heads.items() if not (e.is_ci95 or e.deterministic)]
    if not heads:
        failed.append(f"no comparison with the failure-free '{baseline}' runs")
    elif invalid:
        failed.append(f"no valid 95 % interval at this n ({', '.join(invalid)}: one round; run --repeat 2 "
                      "or more)")
    else:
        open_ = {v: e for v, e in heads.items() if not e.significant and not e.deterministic}
        if open_:
            worst = max(open_, key=lambda v: abs(open_[v].center) if finite(open_[v].center) else 0.0)
            need = rounds_to_resolve(open_[worst])
            n = open_[worst].n
            hint = (f"; about {need} rounds would resolve the largest ({worst}) at 80 % power if its "
                    f"estimate is the truth (now {n})" if need else
                    f"; {worst}'s effect is within its noise: no number of rounds up to 1000 resolves it")
            failed.append(f"effects not resolved by the intervals ({what}: "
                          + ", ".join(f"{v} {fmt_diff(e, spec)}" for v, e in open_.items()) + ")" + hint)
    if failed:
        return f"comparison NOT trustworthy: {'; '.join(failed)}. {facts}"
    return f"comparison trustworthy (quiet machine, valid 95 % intervals, every effect resolved): {facts}"
