"""The crossover study of issue 11 (item 4): which strategy wins where.

Every protection strategy costs something that grows with a different quantity: a full
checkpoint (``ckpt``, ``cpr``, ``log``'s base, ``ecsnap``'s snapshot) with the table size and
the interval, a differential one (``cnr``) with the rows updated since the last one, the update
log (``log``) and the parity traffic of ``ecrm`` with the updates themselves. The x-axis of the
study is therefore the **fraction of embedding rows updated per checkpoint interval**, varied two
ways: the Zipf exponent of the ids (more skew: fewer distinct rows per step) and the interval.

For each point of the grid (a cross: every exponent at the middle interval, every interval at
the middle exponent) the script runs one ``mpiec bench`` (the strategies failure-free and under
the same mid-run server kill, ``none`` as the baseline, the same seed), reads its result files
with ``analysis.metrics.compare`` (twin pairing, overhead vs ``none``, lossless from the
checksums), and writes ``docs/notes/crossover.md``: per point the failure-free overhead, memory
overhead, recovery latency, time lost per failure and lost samples of every strategy, the winner
of each column, and plots of each figure against the fraction updated per interval
(``docs/notes/figures/crossover-*.png``). The fraction is computed from the data itself (the ids the
trainers draw in the first interval, distinct per table, over all rows), not from any run.

A point whose bench directory in ``--work`` already holds a ``done`` marker is not run again, so
the page can be remade without training (``--work`` defaults to ``$TMPDIR/mpiec-crossover``).

    python scripts/crossover.py [--preset laptop] [--steps 300] [--zipf 0.9,1.05,1.2]
        [--intervals 10,40,160] [--strategies ckpt,cpr,cnr,log,ecsnap,ecrm,ecrm:parity_every=32]
        [--set KEY=VALUE ...] [--work DIR] [--page docs/notes/crossover.md] [--title TEXT] [--figure NAME]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
from cached_bench import run_cached_bench
from mpiec.analysis.metrics import RunMetrics, compare
from mpiec.analysis.read import load_results

from mpiec.config import Config
from mpiec.data.factory import make_source
from mpiec.launch.resolve import load_config

#: strategies whose checkpoint/snapshot interval the grid sets (``strategy.interval``, steps)
INTERVAL_STRATEGIES = ("ckpt", "cpr", "cpr-mfu", "cpr-ssu", "cnr", "log", "ecsnap")
DEFAULT_STRATEGIES = "ckpt,cpr,cnr,log,ecsnap,ecrm,ecrm:parity_every=32"

#: (column title, RunMetrics field of the failure-free run or of the failure run, format, lower wins)
COLUMNS = [
    ("overhead %", "ff", "overhead_pct", "{:+.1f}"),
    ("memory +MB", "ff", "memory_overhead_mb", "{:+.0f}"),
    ("protection MB", "ff", "protection_bytes", "{:.1f}"),
    ("recovery s", "fail", "recovery_latency_s", "{:.2f}"),
    ("time lost s", "fail", "time_lost_per_failure_s", "{:.2f}"),
    ("lost samples", "fail", "lost_samples", "{:,}"),
]


def parse_floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def grid(zipfs: list[float], intervals: list[int]) -> list[tuple[float, int]]:
    """A cross through the middle of the two axes: every exponent at the middle interval, every
    interval at the middle exponent (the full product would cost len(zipfs) * len(intervals)
    benches for little more insight)."""
    zm, im = zipfs[len(zipfs) // 2], intervals[len(intervals) // 2]
    points = [(z, im) for z in zipfs] + [(zm, i) for i in intervals if i != im]
    return sorted(set(points), key=lambda p: (p[1], p[0]))


def variants(strategies: list[str], interval: int) -> list[str]:
    """The bench's ``--strategies`` entries, the interval set on every interval strategy that
    has none of its own."""
    out = []
    for v in strategies:
        name, *keys = v.split(":")
        if name in INTERVAL_STRATEGIES and not any(k.startswith("interval") for k in keys):
            keys.append(f"interval={interval}")
        out.append(":".join([name, *keys]))
    return out


def rows_updated_fraction(cfg: Config, interval: int) -> float:
    """Distinct embedding rows the trainers' ids touch in the first ``interval`` steps, over all
    rows (every trainer's samples of a step: ``[step · T · B, (step + 1) · T · B)``)."""
    source = make_source(cfg)
    per_step = cfg.layout.trainers * cfg.training.batch_size
    seen = [np.zeros(c, dtype=bool) for c in cfg.data.cardinalities]
    from mpiec.data.source import column_tables

    tables = column_tables(cfg.data.multi_hot or [1] * len(cfg.data.cardinalities))
    chunk = max(1, 65536 // per_step)
    for s0 in range(0, interval, chunk):
        n = min(chunk, interval - s0) * per_step
        ids = source.batch(s0 * per_step, n).ids
        for col, t in enumerate(tables):
            seen[t][ids[:, col]] = True
    return float(sum(int(s.sum()) for s in seen)) / float(sum(cfg.data.cardinalities))


def run_bench(point_dir: Path, args: argparse.Namespace, zipf: float, interval: int) -> float:
    """One ``mpiec bench`` of the point (skipped when already run); its seconds."""
    bench = ["--preset", args.preset, "--steps", str(args.steps),
             "--strategies", ",".join(variants(args.strategies, interval)), "--scenario", "server",
             "--set", f"data.zipf_exponent={zipf}", "--no-report", "--quiet"]
    for s in args.set:
        bench += ["--set", s]
    return run_cached_bench(point_dir, bench, f"zipf {zipf}, interval {interval}", indent="  ")


def point_rows(point_dir: Path, interval: int) -> dict[str, dict[str, RunMetrics]]:
    """variant -> {"ff": failure-free metrics, "fail": failure-run metrics} of one bench; the
    interval the grid set is dropped from the names, so a strategy keeps one name over the grid."""
    out: dict[str, dict[str, RunMetrics]] = {}
    for m in compare(load_results(point_dir)):
        name = m.variant.replace(f":interval={interval}", "")
        out.setdefault(name, {})["fail" if m.failure else "ff"] = m
    return out


def cell(m: RunMetrics | None, field: str, fmt: str) -> tuple[str, float | None]:
    if m is None:
        return "—", None
    v = getattr(m, field)
    if field == "protection_bytes" and v is not None:
        v = v / 1e6
    if field in ("recovery_latency_s", "time_lost_per_failure_s", "lost_samples") and m.lost:
        return "run lost", None
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "—", None
    return fmt.format(v), float(v)


def point_table(rows: dict[str, dict[str, RunMetrics]]) -> tuple[list[str], dict[str, list[str]]]:
    """Markdown lines of one point's table (winners in bold) and each column's winners."""
    names = [v for v in rows if v != "none"]
    head = ["strategy", "lossless"] + [c[0] for c in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cells = {v: [cell(rows[v].get(kind), f, fmt) for _, kind, f, fmt in COLUMNS] for v in names}
    winners: dict[str, list[str]] = {}
    for j, (title, *_r) in enumerate(COLUMNS):
        vals = [(cells[v][j][1], v) for v in names if cells[v][j][1] is not None]
        if vals:
            best = min(x for x, _ in vals)
            winners[title] = [v for x, v in vals if x == best]
    for v in names:
        fail = rows[v].get("fail")
        lossless = "—" if fail is None or fail.lossless is None else ("yes" if fail.lossless else "no")
        if fail is not None and fail.lost:
            lossless = "run lost"
        shown = [
            f"**{t}**" if v in winners.get(COLUMNS[j][0], []) else t for j, (t, _x) in enumerate(cells[v])
        ]
        lines.append(f"| `{v}` | {lossless} | " + " | ".join(shown) + " |")
    return lines, winners


def plots(
    series: dict[str, list[tuple[float, dict[str, dict[str, RunMetrics]]]]], figdir: Path, stem: str
) -> list[str]:
    """One PNG per column: the figure against the fraction updated per interval, a line per strategy
    (points of the zipf axis and of the interval axis drawn as two markers)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  matplotlib missing: no figures", flush=True)
        return []
    figdir.mkdir(parents=True, exist_ok=True)
    made = []
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    names = sorted({v for pts in series.values() for _, rows in pts for v in rows if v != "none"})
    colors = {v: plt.cm.tab10(i % 10) for i, v in enumerate(names)}
    for ax, (title, kind, field, fmt) in zip(axes.flat, COLUMNS, strict=True):
        for axis_name, marker, style in (("zipf", "o", "-"), ("interval", "s", "--")):
            for v in names:
                xs, ys = [], []
                for frac, rows in sorted(series.get(axis_name, []), key=lambda p: p[0]):
                    _, y = cell(rows.get(v, {}).get(kind), field, fmt)
                    if y is not None:
                        xs.append(frac * 100)
                        ys.append(y)
                if xs:
                    ax.plot(
                        xs,
                        ys,
                        style,
                        marker=marker,
                        color=colors[v],
                        label=v if axis_name == "zipf" else None,
                    )
        ax.set_xlabel("rows updated per interval (% of all rows)")
        unit = {
            "overhead %": "failure-free overhead vs none (%)",
            "memory +MB": "peak memory vs none (MB)",
            "protection MB": "bytes written/sent for protection (MB)",
            "recovery s": "kill to resume (s)",
            "time lost s": "time lost per failure (s)",
            "lost samples": "samples lost",
        }[title]
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
    # under the panels, not in one: no curve hidden behind it
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(names), fontsize=9,
               title="strategy (o: zipf axis, □: interval axis)", title_fontsize=9)
    fig.suptitle("Crossover: costs against the fraction of rows updated per checkpoint interval")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = figdir / f"{stem}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    made.append(path.name)
    return made


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default="laptop")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--zipf", default="0.9,1.05,1.2", help="Zipf exponents (default: %(default)s)")
    p.add_argument(
        "--intervals", default="10,40,160", help="checkpoint intervals in steps (default: %(default)s)"
    )
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES, help="bench variants (default: %(default)s)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override for every run"
    )
    p.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "mpiec-crossover"))
    p.add_argument("--page", default="docs/notes/crossover.md")
    p.add_argument("--title", default="", help="heading of the page's section (default: from the preset)")
    p.add_argument("--figure", default="",
                   help="the figure's file name without .png (default: from the preset and the --set values)")
    a = p.parse_args(argv)
    a.strategies = [s for s in a.strategies.split(",") if s]
    zipfs, intervals = parse_floats(a.zipf), [int(x) for x in parse_floats(a.intervals)]
    if not zipfs or not intervals or min(intervals) < 1 or max(intervals) >= a.steps:
        raise SystemExit("crossover: need exponents, and intervals in [1, steps)")
    work = Path(a.work)
    points = grid(zipfs, intervals)
    print(
        f"crossover: {len(points)} benches of {len(a.strategies)} strategies (+ none), preset {a.preset}, "
        f"{a.steps} steps; work {work}",
        flush=True,
    )
    zm, im = zipfs[len(zipfs) // 2], intervals[len(intervals) // 2]
    series: dict[str, list] = {"zipf": [], "interval": []}
    sections, total_s = [], 0.0
    load, ran = os.getloadavg()[0], 0
    for i, (z, iv) in enumerate(points, 1):
        cfg = load_config(a.preset, sets=[f"data.zipf_exponent={z}", *a.set], steps=a.steps, memory=False)
        frac = rows_updated_fraction(cfg, iv)
        what = f"zipf {z}, interval {iv} steps: {100 * frac:.2f} % of rows updated per interval"
        print(f"[{i}/{len(points)}] {what}", flush=True)
        d = work / f"z{z}-i{iv}"
        d.mkdir(parents=True, exist_ok=True)
        cached = (d / "done").exists()
        total_s += run_bench(d, a, z, iv)
        ran += 0 if cached else 1
        rows = point_rows(d, iv)
        if z == zm:
            series["interval"].append((frac, rows))
        if iv == im:
            series["zipf"].append((frac, rows))
        lines, winners = point_table(rows)
        win = "; ".join(f"{t}: {', '.join(f'`{v}`' for v in vs)}" for t, vs in winners.items())
        sections += [
            f"### Zipf {z}, interval {iv} steps: {100 * frac:.2f} % of rows updated per interval",
            "",
            *lines,
            "",
            f"Lowest per column: {win}.",
            "",
        ]
    page = Path(a.page)
    stem = a.figure or (
        "crossover-"
        + a.preset
        + ("-" + "-".join(s.replace("=", "").replace(".", "") for s in a.set) if a.set else "")
    )
    figs = plots(series, page.parent / "figures", stem)
    title = a.title or f"{a.preset} preset, {a.steps} steps" + (f", {', '.join(a.set)}" if a.set else "")
    body = [
        f"## {title}",
        "",
        f"Made by `python scripts/crossover.py --preset {a.preset} --steps {a.steps} --zipf {a.zipf} "
        f"--intervals {a.intervals} --strategies {','.join(a.strategies)}"
        + "".join(f" --set {s}" for s in a.set)
        + f"`: {len(points)} benches, {total_s / 60:.0f} min, on "
        f"{os.cpu_count()} cores ({platform.machine()})"
        + (f", load average {load:.1f} at the start." if ran == len(points) else
           " (page remade from the benches' cached result files)."),
        "",
        "Columns: **overhead** = failure-free throughput lost vs `none`; **memory** = peak RSS vs `none`; "
        "**protection** = bytes written (checkpoints) or sent (parity) for protection, failure-free run; "
        "**recovery** = kill to resume; **time lost** = per failure (recovery, re-executed steps, rebuild "
        "tail); **lost samples** = samples whose updates the final model lacks. One server killed at half "
        "the `none` run's training time, the same moment for all. Bold: lowest in the column.",
        "",
        *sections,
    ]
    body += [f"![crossover]({Path('figures') / f})" for f in figs] + [""]
    write_section(page, title, body)
    print(f"crossover: wrote {page} ({len(points)} points, {total_s / 60:.1f} min of benches)", flush=True)


def write_section(page: Path, title: str, body: list[str]) -> None:
    """Replace (or append) the page's section ``## title``, keeping every other section (the
    hand-written reading included)."""
    head = [
        "# The crossover: which strategy wins where",
        "",
        "> Dated lab notes: made by `scripts/crossover.py`; each study states its command, machine and "
        "duration; not maintained as reference.",
        "",
        "Made by `scripts/crossover.py` (its docstring says how); each `##` section is one study, "
        "remade by the script, except the hand-written reading.",
        "",
    ]
    text = page.read_text().splitlines() if page.exists() else head
    start = next((i for i, ln in enumerate(text) if ln == f"## {title}"), None)
    if start is None:
        text = text + [""] + body if text and text[-1] != "" else text + body
    else:
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text = text[:start] + body + text[end:]
    page.write_text("\n".join(text).rstrip() + "\n")


if __name__ == "__main__":
    main()
