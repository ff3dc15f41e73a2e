"""The report's figures (matplotlib, Agg; PNG and PDF): ``pip install 'mpiec[plot]'``.

Owns the figures ``mpiec report --plots`` and the HTML page show, each written as
``<stem>.png`` and ``<stem>.pdf`` (``FIGURES``: stem → what it shows):

* ``throughput`` — samples/s over wall time, one panel per strategy variant: its failure-free
  run in grey, its failure run in colour; the failure run's kills (red lines), recoveries
  (kill → training resumes, red band), the slow stretch after it (until back to 95 % of the
  normal step rate, orange band), a lost run's end (black line) and checkpoints (ticks);
* ``overhead_ettr`` — failure-free throughput overhead vs ``none`` and ETTR failure-free and
  under failures, per variant;
* ``recovery`` — the mean recovery of each failure run split into its phases (stacked);
* ``protection`` — bytes written or sent for protection per variant (checkpoints, parity) and
  the size of every checkpoint over the steps;
* ``auc_vs_lost`` — ΔAUC vs the failure-free twin against the samples lost, per failure run;
* ``auc`` — held-out AUC over the steps of every run.

Repeated runs (``mpiec bench --repeat``): the throughput panels overlay every repetition (thinner,
translucent lines); ``overhead_ettr`` draws what the failure-free table says: its paired estimates
(``tables.ff_estimates``), each labelled with the table's own cell (``stats.fmt_diff``): a significant
overhead as a bar with its 95 % interval, an ``n.s.`` one as its interval only (hatched, no bar, no
value), every round's overhead against that round's baseline as a dot, the baseline without a bar;
its ETTR medians carry dashed whiskers where they are the range of a few runs, not a 95 % interval.

A figure with nothing to show for the given runs is not written (no recovery; no byte written or sent
for protection; every failure run at 0 lost samples and ΔAUC 0). ``plot_results`` takes runs of one
configuration; ``plot_groups`` splits a mixed set (``configs.config_groups``) into subdirectories.
Every number comes from ``metrics``. Invariants: matplotlib is imported only when a figure is
drawn, with the non-interactive ``Agg`` backend (``matplotlib_available()`` tells callers
beforehand); files in the output directory are overwritten, nothing else is touched; the
variant → colour mapping is the same in every figure of one call.
"""

from __future__ import annotations

import importlib.util
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mpiec.results import RunResult, decode, recoveries

from .configs import ConfigGroup
from .metrics import PHASE_LABELS, RECOVERY_PHASES, RunMetrics, compare, finite
from .stats import Estimate, median

__all__ = ["FIGURES", "auc_vs_lost_has_something", "matplotlib_available", "plot_groups", "plot_results",
           "protection_has_something", "pyplot", "save_figure", "throughput_series"]

FIGURES = {
    "throughput": "throughput over time per strategy, with failures and recoveries",
    "overhead_ettr": "failure-free overhead and ETTR per strategy",
    "recovery": "recovery latency split into its phases",
    "protection": "bytes written or sent for protection, and per checkpoint",
    "auc_vs_lost": "ΔAUC against lost samples",
    "auc": "held-out AUC over steps",
}
MIB = 1024.0 * 1024.0
#: An idle gap between two steps longer than this many median step times is drawn as a stop.
IDLE_GAP = 3.0
#: tab10 without red (kills and recoveries are red) and grey (failure-free runs are grey).
PALETTE = ("C0", "C1", "C2", "C4", "C5", "C6", "C8", "C9")


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def auto_window(n_steps: int) -> int:
    """Steps in the throughput window: a tenth of the run, 1 to 10 steps."""
    return max(1, min(10, n_steps // 10))


def throughput_series(result: RunResult, window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(time, samples/s): the samples of the last ``window`` steps over the wall time they took.

    Wall time, not Σ dt: time no step was running (a recovery) counts. Where the gap between two
    steps exceeds ``IDLE_GAP`` times the median step time, the series drops to 0 for the gap (two
    points at 0 are inserted), so a recovery shows as a stop, not as a line across it.
    """
    tl = result.timeline
    if len(tl) == 0:
        return np.zeros(0), np.zeros(0)
    w = max(1, min(window, len(tl)))
    t_end = tl["t_end"].astype(np.float64)
    dt = tl["dt"].astype(np.float64)
    start = np.concatenate([[t_end[0] - dt[0]], t_end])  # start[i]: when step i's window opens
    samples = np.cumsum(np.concatenate([[0], tl["samples"].astype(np.float64)]))
    idx = np.arange(1, len(tl) + 1)
    lo = np.maximum(idx - w, 0)
    span = start[idx] - start[lo]
    with np.errstate(divide="ignore", invalid="ignore"):
        tp = np.where(span > 0, (samples[idx] - samples[lo]) / span, np.nan)
    idle = t_end[1:] - dt[1:] - t_end[:-1]
    limit = IDLE_GAP * float(np.median(dt)) if len(dt) else math.inf
    times, values = [t_end[:1]], [tp[:1]]
    for i in range(1, len(tl)):
        if idle[i - 1] > limit:
            times.append(np.array([t_end[i - 1], t_end[i] - dt[i]]))
            values.append(np.zeros(2))
        times.append(t_end[i:i + 1])
        values.append(tp[i:i + 1])
    return np.concatenate(times), np.concatenate(values)


# -- helpers ----------------------------------------------------------------------------------------

def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, with the report's style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
                         "axes.spines.right": False, "font.size": 9})
    return plt


def save_figure(plt: Any, fig: Any, outdir: Path, stem: str, formats: Sequence[str] = ("png",)) -> list[Path]:
    """``fig`` written as ``outdir/stem.FORMAT`` for each format, then closed; the paths."""
    paths = []
    for fmt in formats:
        paths.append(outdir / f"{stem}.{fmt}")
        fig.savefig(paths[-1], dpi=120 if fmt == "png" else None, bbox_inches="tight")
    plt.close(fig)
    return paths


def _labels(metrics: list[RunMetrics]) -> dict[str, str]:
    """run → label: the variant, or the run's name where a variant has several runs of a kind."""
    seen: dict[tuple[str, bool], int] = {}
    for m in metrics:
        seen[(m.variant, m.failure)] = seen.get((m.variant, m.failure), 0) + 1
    return {m.run: m.variant if seen[(m.variant, m.failure)] == 1 else m.run for m in metrics}


def _colors(metrics: list[RunMetrics]) -> dict[str, str]:
    variants = list(dict.fromkeys(m.variant for m in metrics))
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


def _first_times(r: RunResult, kinds: set[str]) -> list[float]:
    """Times of the events of ``kinds``, one per (kind, step): every rank logs its own detect."""
    seen, out = set(), []
    for e in r.events:
        kind = decode(e["kind"])
        key = (kind, int(e["step"]))
        if kind in kinds and key not in seen:
            seen.add(key)
            out.append(float(e["time"]))
    return out


def _layout_changes(r: RunResult) -> list[tuple[float, str]]:
    """(time, "T=2 S=3") where the timeline's layout differs from the step before (elastic recovery;
    a file before schema v6 has none): the first step trained on the new layout starts there."""
    tl = r.timeline
    if not len(tl) or "servers" not in (tl.dtype.names or ()):
        return []
    tl = tl[np.argsort(tl["t_end"], kind="stable")]
    out = []
    for prev, row in zip(tl[:-1], tl[1:], strict=True):
        if row["servers"] < 0 or prev["servers"] < 0:
            continue
        if (row["trainers"], row["servers"]) != (prev["trainers"], prev["servers"]):
            out.append((float(row["t_end"] - row["dt"]), f"T={int(row['trainers'])} S={int(row['servers'])}"))
    return out


# -- figures ----------------------------------------------------------------------------------------

def _throughput(plt: Any, pairs: list[tuple[RunResult, RunMetrics]], colors: dict[str, str],
                window: int | None) -> Any:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    variants = list(dict.fromkeys(m.variant for _, m in pairs))
    fig, axes = plt.subplots(len(variants), 1, figsize=(10, 1.25 + 1.45 * len(variants)), sharex=True,
                             squeeze=False)
    top = 0.0
    w = window or auto_window(max(len(r.timeline) for r, _ in pairs))
    used: set[str] = set()
    repeated = max(sum(1 for _, m in pairs if m.variant == v and not m.failure) for v in variants) > 1
    alpha, thin = (0.55, 0.8) if repeated else (1.0, 1.0)
    for ax, v in zip(axes[:, 0], variants, strict=True):
        for r, m in ((r, m) for r, m in pairs if m.variant == v):
            t, tp = throughput_series(r, w)
            if len(tp) and np.isfinite(tp).any():
                top = max(top, float(np.nanmax(tp)))
            if not m.failure:
                ax.plot(t, tp, color="0.6", linewidth=1.3 * thin, alpha=alpha, zorder=2)
                used.add("ff")
                continue
            ax.plot(t, tp, color=colors[v], linewidth=1.6 * thin, alpha=alpha, zorder=3)
            used.add("fail")
            for rec in recoveries(r):
                kill = float(rec.get("kill", math.nan))
                resume = kill + float(rec.get("recovery_s", math.nan))
                normal = resume + float(rec.get("back_to_normal_s", 0.0))
                if finite(kill) and finite(resume):
                    ax.axvspan(kill, resume, color="tab:red", alpha=0.18, linewidth=0, zorder=1)
                    used.add("recovering")
                    if finite(normal) and normal > resume:
                        ax.axvspan(resume, normal, color="tab:orange", alpha=0.15, linewidth=0, zorder=1)
                        used.add("slow")
            for k in _first_times(r, {"kill", "emulated_kill"}):
                ax.axvline(k, color="tab:red", linewidth=1.2, zorder=4)
                used.add("kill")
            for k in _first_times(r, {"abort"})[:1]:
                ax.axvline(k, color="black", linewidth=1.6, zorder=4)
                used.add("abort")
            for k, label in _layout_changes(r):
                ax.axvline(k, color="tab:purple", linewidth=1.2, linestyle="--", zorder=4)
                ax.text(k, 0.97, f" {label}", color="tab:purple", fontsize=7, va="top", ha="left",
                        transform=ax.get_xaxis_transform())
                used.add("layout")
            for k in _first_times(r, {"checkpoint_end"}):
                ax.plot([k], [0.0], marker="|", color=colors[v], markersize=7, clip_on=False, zorder=4,
                        transform=ax.get_xaxis_transform())
                used.add("ckpt")
        ax.text(0.005, 0.93, v, transform=ax.transAxes, va="top", ha="left", fontweight="bold",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5})
        ax.set_ylabel("samples/s")
    for ax in axes[:, 0]:
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    axes[-1, 0].set_xlabel("wall time since the run started (s)")
    fig.suptitle(f"Throughput over time ({w}-step window): failure-free (grey) and under failures (colour)"
                 + (", every repetition overlaid" if repeated else ""), fontsize=11)
    proxies = {
        "ff": Line2D([], [], color="0.6", linewidth=1.3, label="failure-free run"),
        "fail": Line2D([], [], color="0.2", linewidth=1.6, label="run under failures"),
        "kill": Line2D([], [], color="tab:red", linewidth=1.2, label="kill"),
        "recovering": Patch(color="tab:red", alpha=0.3, label="recovering (kill → resume)"),
        "slow": Patch(color="tab:orange", alpha=0.3, label="below 95 % of normal speed"),
        "abort": Line2D([], [], color="black", linewidth=1.6, label="run lost"),
        "ckpt": Line2D([], [], color="0.3", marker="|", linestyle="none", markersize=7, label="checkpoint"),
        "layout": Line2D([], [], color="tab:purple", linewidth=1.2, linestyle="--",
                         label="layout change (elastic recovery: trainers T, servers S)"),
    }
    handles = [p for k, p in proxies.items() if k in used]
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 4), frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    return fig


def _error_bars(ax: Any, y: np.ndarray, est: list[Estimate]) -> bool:
    """Whiskers around each level (a median): solid black caps where they are a 95 % interval, dashed grey
    ones where they are only the range of a few runs (``stats.median`` below 6 runs); none for a
    deterministic figure or a single run. True when some whisker is a range."""
    ranges = False
    for yi, e in zip(y, est, strict=True):
        if e.has_interval and finite(e.value):
            ci = e.is_ci95
            ranges |= not ci
            bar = ax.errorbar([e.value], [yi], xerr=[[e.value - e.lo], [e.hi - e.value]], fmt="none",
                              ecolor="black" if ci else "0.35", capsize=3, linewidth=1, zorder=5)
            if not ci:
                bar[-1][0].set_linestyle("--")
    return ranges


def _level_label(e: Estimate, spec: str) -> str:
    """A level's bar label: its median, ``det.`` when identical in every run (as the tables print it)."""
    if not finite(e.value):
        return ""
    return format(e.value, spec) + (" det." if e.deterministic else "")


def _paired_points(groups: dict[tuple[str, bool], Any], v: str, baseline: str) -> list[float]:
    """Each round's overhead of ``v`` against that round's baseline run: the values the paired estimate
    averages (on the log scale)."""
    from .read import repeat_of

    base = {repeat_of(r): m.throughput_sps for m, r in groups.get((baseline, False), [])}
    out = []
    for m, r in groups.get((v, False), []):
        b = base.get(repeat_of(r))
        if b is not None and finite(b) and b > 0 and finite(m.throughput_sps) and m.throughput_sps > 0:
            out.append(100.0 * (1.0 - m.throughput_sps / b))
    return out


def _overhead_panel(ax: Any, metrics: list[RunMetrics], results: list[RunResult], variants: list[str],
                    colors: dict[str, str], baseline: str) -> None:
    """The left panel of ``overhead_ettr``: what the failure-free table says about the throughput
    overhead, variant by variant. Repeated runs: the table's paired estimate (``tables.ff_estimates``)
    labelled with the table's own cell (``stats.fmt_diff``): a significant one as a bar with its 95 %
    interval; an ``n.s.`` one as its interval only (a hatched grey span, no bar, no value); the
    per-round overheads as dots. Single runs: the overhead vs the baseline's run, as the table prints it.
    The baseline itself has no bar (it is the reference)."""
    from .stats import fmt_diff
    from .tables import ff_estimates, group_runs

    groups = group_runs(metrics, results, baseline)
    repeated = any(len(g) > 1 for g in groups.values())
    est = ff_estimates(groups, baseline) if repeated else {}
    single = {m.variant: m for m in metrics if not m.failure}
    xs: list[float] = [0.0]
    labels: list[tuple[int, float, str, str]] = []  # (row, x, text, colour)
    for i, v in enumerate(variants):
        is_base = (v, False) in groups and v == baseline
        if is_base:
            labels.append((i, 0.0, "baseline", "0.3"))
            continue
        if not repeated:
            m = single.get(v)
            x = m.overhead_pct if m is not None and m.overhead_pct is not None else math.nan
            if finite(x):
                ax.barh([i], [x], color=colors[v])
                xs.append(x)
                labels.append((i, x, f"{x:+.1f}", "black"))
            else:
                labels.append((i, 0.0, "no failure-free run" if m is None else "—", "0.3"))
            continue
        e = est.get(v, {}).get("overhead")
        pts = _paired_points(groups, v, baseline)
        if pts:
            ax.plot(pts, [i] * len(pts), "o", color="black", markersize=2.5, alpha=0.6, zorder=6)
            xs += pts
        if e is None or not finite(e.value):
            why = "no failure-free run" if (v, False) not in groups else "—"
            labels.append((i, max([0.0, *pts]), why, "0.3"))
            continue
        text = fmt_diff(e, ".1f")
        if e.is_ci95 and not e.significant:  # n.s.: the interval only, no bar and no value
            ax.barh([i], [e.hi - e.lo], left=[e.lo], height=0.5, color="none", edgecolor="0.45", hatch="///",
                    linewidth=0.8, zorder=3)
            xs += [e.lo, e.hi]
            labels.append((i, max([e.hi, *pts]), text, "0.3"))
            continue
        solid = e.is_ci95 or e.deterministic  # significant, or the same in every round
        ax.barh([i], [e.value], color=colors[v], alpha=1.0 if solid else 0.45, hatch=None if solid else "..",
                zorder=2)
        xs.append(e.value)
        if e.is_ci95:
            ax.errorbar([e.value], [i], xerr=[[e.value - e.lo], [e.hi - e.value]], fmt="none", ecolor="black",
                        capsize=3, linewidth=1, zorder=5)
            xs += [e.lo, e.hi]
        labels.append((i, max([e.value, e.hi if e.has_interval else e.value, *pts]), text, "black"))
    lo, hi = min(xs), max(xs)
    span = max(hi - lo, 1.0)
    longest = max((len(text) for *_, text, _c in labels), default=0)
    ax.set_xlim(lo - 0.06 * span, hi + min(0.8, 0.1 + 0.022 * longest) * span)  # room for the labels
    for i, x, text, color in labels:
        ax.annotate(text, (x, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8,
                    color=color)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(np.arange(len(variants)), variants)
    ax.invert_yaxis()
    what = "paired by round, [95 % interval]; n.s.: hatched interval" if repeated else "one run each"
    ax.set_xlabel(f"throughput overhead vs {baseline}, failure-free (%)\n({what})")
    ax.set_title("Cost when nothing fails")


def _overhead_ettr(plt: Any, metrics: list[RunMetrics], results: list[RunResult], colors: dict[str, str],
                   baseline: str = "none") -> Any:
    variants = list(dict.fromkeys(m.variant for m in metrics))
    ff = {m.variant: m for m in metrics if not m.failure}
    fail = {m.variant: m for m in metrics if m.failure}
    ff_all = {v: [m for m in metrics if m.variant == v and not m.failure] for v in variants}
    fail_all = {v: [m for m in metrics if m.variant == v and m.failure] for v in variants}
    repeated = any(len(g) > 1 for g in (*ff_all.values(), *fail_all.values()))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 1.3 + 0.45 * len(variants)), sharey=True)
    y = np.arange(len(variants))
    _overhead_panel(a1, metrics, results, variants, colors, baseline)
    h = 0.38
    if repeated:  # medians, as the failure table prints them, with their whiskers
        est_ff = [median([m.ettr for m in ff_all[v]]) for v in variants]
        est_fail = [median([m.ettr for m in fail_all[v]]) for v in variants]
    else:
        def one(m: RunMetrics | None) -> Estimate:
            return Estimate(m.ettr if m is not None and m.ettr is not None else math.nan)

        est_ff = [one(ff.get(v)) for v in variants]
        est_fail = [one(fail.get(v)) for v in variants]
    ranges = _error_bars(a2, y - h / 2, est_ff) | _error_bars(a2, y + h / 2, est_fail)
    b1 = a2.barh(y - h / 2, [e.value for e in est_ff], height=h, color="0.7", label="failure-free")
    b2 = a2.barh(y + h / 2, [e.value for e in est_fail], height=h, color=[colors[v] for v in variants],
                 label="under failures")
    lost = {v for v in variants if fail_all[v] and all(m.lost for m in fail_all[v])}
    for bars, ests, skip in ((b1, est_ff, set()), (b2, est_fail, lost)):
        for b, e, v in zip(bars, ests, variants, strict=True):
            top = e.hi if e.has_interval else e.value
            if v not in skip and finite(top):
                a2.annotate(_level_label(e, ".2f"), (top, b.get_y() + b.get_height() / 2), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=8)
    for i, v in enumerate(variants):
        if v in lost:
            a2.annotate("0: run lost", (0, i + h / 2), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize=8, color="black")
    a2.set_xlim(0, 1.25)
    xlabel = "ETTR (productive time / wall time)"
    if repeated:
        n = max((e.n for e in (*est_ff, *est_fail)), default=0)
        xlabel += "\nbars: medians" + (
            f"; dashed whiskers: the range of the runs (n = {n}: not a 95 % interval)" if ranges else
            "; whiskers: 95 % interval of the median" if any(e.is_ci95 for e in (*est_ff, *est_fail)) else "")
    a2.set_xlabel(xlabel)
    a2.set_title("Effective training time ratio")
    from matplotlib.patches import Patch

    a2.legend(handles=[Patch(facecolor="0.7", label="failure-free"),
                       Patch(facecolor="0.35", label="under failures\n(strategy's colour)")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _recovery(plt: Any, metrics: list[RunMetrics], labels: dict[str, str]) -> Any:
    rows = [m for m in metrics if m.recovery]
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.5 * len(rows)))
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    cmap = plt.get_cmap("tab10")
    for j, phase in enumerate(RECOVERY_PHASES):
        vals = np.array([m.recovery.get(phase, 0.0) for m in rows], dtype=float)
        vals = np.where(np.isfinite(vals), vals, 0.0)
        ax.barh(y, vals, left=left, color=cmap(j), label=PHASE_LABELS[phase], edgecolor="white",
                linewidth=0.5)
        left += vals
    for i, m in enumerate(rows):
        total = m.recovery.get("time_lost_s", left[i])
        ax.annotate(f"{total:.2f} s" + (f" × {m.recoveries}" if m.recoveries > 1 else ""),
                    (left[i], i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(y, [labels[m.run] for m in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max(left.max() if len(left) else 1.0, 1e-3) * 1.18)
    ax.set_xlabel("seconds per recovery (mean over the run's recoveries)")
    ax.set_title("Where a recovery's time goes: kill → detection → shrink+agree → plan → replace → "
                 "restore → back to 95 % speed (+ re-executed steps)", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / (1 + 0.35 * len(rows))), ncol=7, fontsize=8,
              frameon=False)
    fig.tight_layout()
    return fig


_KIND_MARKERS = {"full": "o", "baseline": "s", "diff": "^", "mfu": "v", "ssu": "D"}


def _protection(plt: Any, pairs: list[tuple[RunResult, RunMetrics]], colors: dict[str, str],
                labels: dict[str, str]) -> Any:
    ff = [(r, m) for r, m in pairs if not m.failure] or pairs
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 1.6 + 0.45 * len(ff)),
                                 gridspec_kw={"width_ratios": [1, 1.3]})
    y = np.arange(len(ff))
    ck = np.array([m.checkpoint_bytes for _, m in ff], dtype=float) / MIB
    par = np.array([m.parity_bytes for _, m in ff], dtype=float) / MIB
    a1.barh(y, ck, color=[colors[m.variant] for _, m in ff])
    a1.barh(y, par, left=ck, color=[colors[m.variant] for _, m in ff], hatch="///", edgecolor="white")
    for i, total in enumerate(ck + par):
        a1.annotate(f"{total:.1f}", (total, i), xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize=8)
    a1.set_yticks(y, [labels[m.run] for _, m in ff])
    a1.invert_yaxis()
    a1.set_xlim(0, max(float((ck + par).max()) if len(ff) else 0.0, 1e-3) * 1.2)
    a1.set_xlabel("MiB written or sent for protection, whole run")
    some_ff = any(not m.failure for _, m in pairs)
    a1.set_title("Protection traffic" + (" (failure-free runs)" if some_ff else ""))
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    a1.legend(handles=[Patch(facecolor="0.55", label="checkpoints (written)"),
                       Patch(facecolor="0.55", hatch="///", edgecolor="white", label="parity deltas (sent)")],
              fontsize=8, loc="lower right")
    kinds_used = set()
    with_ckpt = [(r, m) for r, m in ff if len(r.checkpoints)]
    for i, (r, m) in enumerate(with_ckpt):
        kinds = np.array([decode(k) for k in r.checkpoints["kind"]])
        size = 4 + 3 * (len(with_ckpt) - 1 - i)  # hollow and nested: equal checkpoints stay visible
        for kind in dict.fromkeys(kinds):
            sel = kinds == kind
            kinds_used.add(kind)
            a2.plot(r.checkpoints["step"][sel], r.checkpoints["bytes"][sel] / MIB, linestyle="none",
                    marker=_KIND_MARKERS.get(kind, "x"), color=colors[m.variant], markersize=size,
                    markerfacecolor="none", markeredgewidth=1.5)

    handles = [Line2D([], [], color=colors[m.variant], marker="o", linestyle="none", label=labels[m.run],
                      markerfacecolor="none", markeredgewidth=1.5) for r, m in with_ckpt]
    handles += [Line2D([], [], color="0.3", marker=_KIND_MARKERS.get(k, "x"), linestyle="none", label=k,
                       markerfacecolor="none", markeredgewidth=1.5)
                for k in sorted(kinds_used)]
    if handles:
        a2.legend(handles=handles, fontsize=8, ncol=2)
        a2.set_ylim(bottom=0)
    else:
        a2.text(0.5, 0.5, "no checkpoint taken", transform=a2.transAxes, ha="center", va="center")
    a2.set_xlabel("step the checkpoint holds")
    a2.set_ylabel("MiB per checkpoint")
    a2.set_title("Size of each checkpoint (marker: kind)")
    fig.tight_layout()
    return fig


def _point_label(ms: list[RunMetrics], labels: dict[str, str]) -> str:
    """The runs on one point: one run by its label, several by variant and count (``ckpt ×5``), wrapped:
    a long list of run names would squeeze the axes into a strip."""
    if len(ms) == 1:
        return labels[ms[0].run] + (" (lossless)" if ms[0].lossless else "")
    counts: dict[str, int] = {}
    for m in ms:
        counts[m.variant] = counts.get(m.variant, 0) + 1
    text = ", ".join(f"{v} ×{c}" if c > 1 else v for v, c in counts.items())
    if all(m.lossless for m in ms):
        text += " (lossless)"
    return textwrap.fill(text, 36)


def auc_vs_lost_has_something(metrics: list[RunMetrics]) -> bool:
    """Whether ``auc_vs_lost`` would show anything: some failure run with a twin lost samples, moved the
    AUC, or ended with another model than its twin (every point at (0, 0) is an empty figure)."""
    return any(m.failure and m.delta_auc is not None
               and (m.lost_samples > 0 or m.delta_auc != 0 or m.lossless is False) for m in metrics)


def protection_has_something(metrics: list[RunMetrics], results: list[RunResult]) -> bool:
    """Whether ``protection`` would show anything: some bytes written or sent, or some checkpoint."""
    return any(finite(m.protection_bytes) and m.protection_bytes > 0 for m in metrics) or any(
        len(r.checkpoints) for r in results)


def _auc_vs_lost(plt: Any, metrics: list[RunMetrics], colors: dict[str, str], labels: dict[str, str]) -> Any:
    rows = [m for m in metrics if m.failure and m.delta_auc is not None]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    from matplotlib.ticker import MaxNLocator

    at: dict[tuple[float, float], list[RunMetrics]] = {}
    for m in rows:
        at.setdefault((float(m.lost_samples), float(m.delta_auc or 0.0)), []).append(m)
    for (x, y), ms in at.items():  # runs on the same point share one marker (grey) and one label
        color = colors[ms[0].variant] if len(ms) == 1 else "0.5"
        ax.scatter([x], [y], s=60, color=color, zorder=3, marker="o" if ms[0].lossless else "X",
                   edgecolor="black", linewidth=0.5)
        ax.annotate(_point_label(ms, labels), (x, y), xytext=(6, 6), textcoords="offset points", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axhline(0, color="black", linewidth=0.8)
    xs = [float(m.lost_samples) for m in rows] or [1.0]
    ys = [abs(float(m.delta_auc or 0.0)) for m in rows] or [0.0]
    ax.set_xlim(-0.05 * max(max(xs), 1.0), max(max(xs), 1.0) * 1.35)
    span = max(max(ys), 1e-4) * 1.6
    ax.set_ylim(-span, span)
    ax.set_xlabel("samples lost (updates not in the final model)")
    ax.set_ylabel("ΔAUC vs the failure-free twin")
    ax.set_title("Model quality lost to failures (o: lossless, X: not)")
    fig.tight_layout()
    return fig


def _auc(plt: Any, pairs: list[tuple[RunResult, RunMetrics]], colors: dict[str, str],
         labels: dict[str, str]) -> Any:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r, m in pairs:
        if len(r.eval):
            ax.plot(r.eval["step"], r.eval["auc"], marker="o", markersize=3, color=colors[m.variant],
                    linestyle="-" if m.failure else "--", alpha=1.0 if m.failure else 0.6,
                    label=labels[m.run] + (" (under failures)" if m.failure else " (failure-free)"))
    teacher = [m.teacher_auc for _, m in pairs if finite(m.teacher_auc)]
    if teacher:
        ax.axhline(teacher[0], color="0.4", linestyle=":", linewidth=1, label="teacher model (ceiling)")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out AUC")
    ax.set_title("Held-out AUC over training (identical curves overlap: same model)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def plot_results(results: list[RunResult], outdir: str | Path, window: int | None = None,
                 formats: Sequence[str] = ("png", "pdf"), baseline: str = "none") -> list[Path]:
    """Write the ``FIGURES`` that have something to show into ``outdir`` (created), each in every
    format of ``formats``; return the paths written. ``results``: runs of one configuration
    (``plot_groups`` splits a mixed set first). ``window``: steps of the throughput window (default
    ``auto_window`` of each run)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    if not results:
        return []
    plt = pyplot()
    metrics = compare(results, baseline)
    pairs = list(zip(results, metrics, strict=True))
    colors, labels = _colors(metrics), _labels(metrics)
    written: list[Path] = []
    written += save_figure(plt, _throughput(plt, pairs, colors, window), outdir, "throughput", formats)
    fig = _overhead_ettr(plt, metrics, results, colors, baseline)
    written += save_figure(plt, fig, outdir, "overhead_ettr", formats)
    if any(m.recovery for m in metrics):
        written += save_figure(plt, _recovery(plt, metrics, labels), outdir, "recovery", formats)
    if protection_has_something(metrics, results):
        written += save_figure(plt, _protection(plt, pairs, colors, labels), outdir, "protection", formats)
    if auc_vs_lost_has_something(metrics):
        fig = _auc_vs_lost(plt, metrics, colors, labels)
        written += save_figure(plt, fig, outdir, "auc_vs_lost", formats)
    if any(len(r.eval) for r in results):
        written += save_figure(plt, _auc(plt, pairs, colors, labels), outdir, "auc", formats)
    return written


def plot_groups(groups: list[ConfigGroup], outdir: str | Path, window: int | None = None,
                formats: Sequence[str] = ("png", "pdf"), baseline: str = "none") -> dict[str, list[Path]]:
    """``plot_results`` of each configuration (``configs.config_groups``): into ``outdir`` itself for a
    single one, else into ``outdir/<its slug>``; per group label, the paths written."""
    outdir = Path(outdir)
    if len(groups) == 1:
        return {groups[0].label: plot_results(groups[0].results, outdir, window, formats, baseline)}
    outdir.mkdir(parents=True, exist_ok=True)
    return {g.label: plot_results(g.results, outdir / g.slug, window, formats, baseline) for g in groups}
