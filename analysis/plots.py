"""Optional PNG plots of result files (needs matplotlib: ``pip install 'mpiec[plot]'``).

Owns the figures ``mpiec report --plots`` writes:

* ``throughput.png`` — throughput over wall time of every run (samples/s,
  smoothed over a moving window of steps), failure-related events of each run
  marked as vertical lines in the run's colour;
* ``auc.png`` — held-out AUC over steps of every run.

Invariants: matplotlib is imported only when a plot is drawn, with the
non-interactive ``Agg`` backend; ``matplotlib_available()`` tells callers
beforehand; files are overwritten in the output directory, nothing else is
touched.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from mpiec.results import RunResult, decode

__all__ = ["MARKED_EVENTS", "matplotlib_available", "plot_results", "throughput_series"]

#: Event kinds drawn as vertical lines on the throughput plot.
MARKED_EVENTS = frozenset({
    "kill", "emulated_kill", "detect", "replace", "rebuild_start", "rebuild_end", "restore",
    "abort",
})
_STYLE = {"kill": "-", "emulated_kill": "-", "detect": "--", "abort": "-",
          "rebuild_end": ":", "restore": ":"}


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def throughput_series(result: RunResult, window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(t_end, samples/s) over a trailing window of ``window`` steps."""
    tl = result.timeline
    if len(tl) == 0:
        return np.zeros(0), np.zeros(0)
    w = max(1, min(window, len(tl)))
    samples = np.cumsum(np.concatenate([[0], tl["samples"].astype(np.float64)]))
    dt = np.cumsum(np.concatenate([[0.0], tl["dt"].astype(np.float64)]))
    idx = np.arange(1, len(tl) + 1)
    lo = np.maximum(idx - w, 0)
    span = dt[idx] - dt[lo]
    with np.errstate(divide="ignore", invalid="ignore"):
        tp = np.where(span > 0, (samples[idx] - samples[lo]) / span, np.nan)
    return tl["t_end"].astype(np.float64), tp


def plot_results(results: list[RunResult], outdir: str | Path, window: int = 10) -> list[Path]:
    """Write ``throughput.png`` and ``auc.png`` into ``outdir``; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(10, 5))
    for i, r in enumerate(results):
        color = f"C{i % 10}"
        label = r.name + (" (emulated)" if r.summary["emulated"] else "")
        t, tp = throughput_series(r, window)
        ax.plot(t, tp, color=color, label=label, linewidth=1.2)
        for e in r.events:
            kind = decode(e["kind"])
            if kind in MARKED_EVENTS:
                ax.axvline(float(e["time"]), color=color, alpha=0.6,
                           linestyle=_STYLE.get(kind, "-."), linewidth=0.8)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(f"throughput (samples/s, {window}-step window)")
    ax.set_title("throughput; vertical lines: kill (solid), detect (dashed), rebuilt (dotted)")
    if results:
        ax.legend(fontsize="small")
    fig.tight_layout()
    written.append(outdir / "throughput.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 5))
    for i, r in enumerate(results):
        if len(r.eval):
            ax.plot(r.eval["step"], r.eval["auc"], marker="o", markersize=3,
                    color=f"C{i % 10}", label=r.name)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out AUC")
    ax.set_title("AUC over steps")
    if any(len(r.eval) for r in results):
        ax.legend(fontsize="small")
    fig.tight_layout()
    written.append(outdir / "auc.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written
