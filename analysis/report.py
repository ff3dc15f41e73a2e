"""``mpiec report PATH… [--plots OUTDIR] [--csv FILE] [--markdown FILE] [--html FILE]`` and ``write_report``.

Owns the report command and the report ``mpiec bench`` writes next to its result files.
Invariants: tables go to stdout; nothing is ever written onto a result file or an input
(``check_output_path``, also used by ``mpiec config --write``): every output is checked before
anything is read or written; a bad result file raises ``ResultFileError`` to the caller (the CLI
prints ``mpiec: error: …`` and exits 2) unless ``--skip-bad``; ``--plots`` without matplotlib or
no result file at all is one error line on stderr and exit code 2 (``--html`` without matplotlib
writes the page without figures, saying so); the CSV has one row per run with the raw
(unformatted) figures of ``metrics.RunMetrics``, plus its ``configuration``.

**Mixed configurations** (``configs.config_groups``): result files of different configurations (e.g.
a 40- and an 80-step bench) are never pooled: every output has one set of tables per configuration
under a heading naming the keys that differ (``configuration training.steps=40 (10 runs)``), after a
first line saying so; the figures of each go to a subdirectory named after it (one configuration:
straight into the figures directory).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from mpiec.errors import MpiecError, ResultFileError
from mpiec.results import RunResult

from .configs import ConfigGroup, config_groups, config_label, differing_keys, mixed_line
from .html import write_html
from .plots import matplotlib_available, plot_groups
from .read import load_results
from .tables import comparison_table, comparison_tables, format_events, phase_table, runs_table, summary_rows

__all__ = ["REPORT_FILES", "build_parser", "check_output_path", "config_rows", "main", "markdown_text",
           "report_text", "write_csv", "write_markdown", "write_report", "write_table_csv"]

PROG = "mpiec report"
#: What ``write_report`` writes into its directory (the figures go to ``plots/``).
REPORT_FILES = {"text": "comparison.txt", "markdown": "comparison.md", "csv": "summary.csv",
                "table_csv": "comparison.csv",
                "html": "report.html", "plots": "plots"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Compare mpiec runs: the failure-free and the failure table, the recovery "
        "breakdown, one row per run and phase breakdowns of every result file (*.h5) in the given "
        "directories (recursively) or files (their events with --events). Repeats of a variant "
        "(mpiec bench --repeat) are grouped: medians with 95 %% intervals, one line on whether the "
        "comparison is trustworthy.",
    )
    p.add_argument("paths", nargs="+", metavar="DIR", help="result directory or .h5 file")
    p.add_argument("--plots", metavar="OUTDIR", help="write the figures here, PNG and PDF (needs matplotlib)")
    p.add_argument("--csv", metavar="FILE", help="write every run's figures as CSV to FILE")
    p.add_argument("--markdown", metavar="FILE", help="write the comparison tables as Markdown to FILE")
    p.add_argument("--html", metavar="FILE",
                   help="write one self-contained HTML page (tables and figures) to FILE")
    p.add_argument("--baseline", default="none", metavar="STRATEGY",
                   help="strategy the overhead is measured against (default: none)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="steps excluded from the phase breakdown (default: min(10, steps/5))")
    p.add_argument("--events", action="store_true", help="also list each run's events")
    p.add_argument("--no-events", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.add_argument("--skip-bad", action="store_true",
                   help="skip unreadable result files (each is reported on stderr)")
    return p


def _is_hdf5(path: Path) -> bool:
    try:
        import h5py

        return bool(h5py.is_hdf5(path))
    except (OSError, ImportError):
        return False


def check_output_path(target: str | Path, inputs: Sequence[str | Path], what: str) -> None:
    """Refuse an output that would overwrite an input or a result file (``MpiecError``).

    Refused: a directory; a name ending in ``.h5`` (result files; a later ``mpiec report``
    would read it as one); an existing HDF5 file of any name; any of ``inputs``.
    """
    t = Path(target)
    if t.is_dir():
        raise MpiecError(f"{what} {t} is a directory")
    if t.suffix.lower() in (".h5", ".hdf5"):
        raise MpiecError(f"{what} {t}: .h5 names are for result files; choose another name")
    if not t.exists():
        return
    if _is_hdf5(t):
        raise MpiecError(f"{what} {t} is an existing HDF5 (result) file; it is never overwritten")
    resolved = t.resolve()
    for given in inputs:
        if resolved == Path(given).resolve():
            raise MpiecError(f"{what} {t} is an input of this command; it is never overwritten")


def _check_plots_dir(target: str | Path, what: str) -> None:
    if Path(target).exists() and not Path(target).is_dir():
        raise MpiecError(f"{what} {target} is a file, not a directory")


def write_csv(rows: list[dict], path: str | Path) -> None:
    """Write summary rows (from ``summary_rows``) as CSV; nan/None as empty."""
    path = Path(path)
    fields = list(rows[0]) if rows else []
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for row in rows:
            w.writerow({
                k: "" if v is None or (isinstance(v, float) and v != v) else v
                for k, v in row.items()
            })


def config_rows(results: list[RunResult], baseline: str = "none") -> list[dict]:
    """``summary_rows`` with each run's ``configuration`` (the label of its ``config_groups`` group, ""
    when the runs share one configuration)."""
    keys = differing_keys(results)
    rows = summary_rows(results, baseline)
    for row, r in zip(rows, results, strict=True):
        row["configuration"] = config_label(r, keys) if keys else ""
    return rows


def write_table_csv(results: list[RunResult], path: str | Path, baseline: str = "none") -> Path:
    """The comparison tables as displayed (medians with their intervals for repeats), one CSV block per
    table under a ``# title`` line (``# configuration …`` before each configuration's blocks when the
    runs mix several)."""
    path = Path(path)
    groups = config_groups(results)
    blocks = []
    for g in groups:
        if len(groups) > 1:
            blocks.append(f"# {g.heading}\n")
        blocks += [f"# {t.title}\n{t.csv()}" for t in comparison_tables(g.results, baseline)]
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path


def write_markdown(results: list[RunResult], path: str | Path, baseline: str = "none") -> Path:
    """The comparison tables and the runs table as Markdown (a ``## configuration …`` section each
    when the runs mix several configurations)."""
    path = Path(path)
    path.write_text(markdown_text(results, baseline), encoding="utf-8")
    return path


def markdown_text(results: list[RunResult], baseline: str = "none") -> str:
    groups = config_groups(results)
    parts = [mixed_line(groups)] if len(groups) > 1 else []
    for g in groups:
        if len(groups) > 1:
            parts.append(f"## {g.heading}")
        tables = [*comparison_tables(g.results, baseline), runs_table(g.results, baseline)]
        parts += [t.markdown() for t in tables]
    return "\n\n".join(parts) + "\n"


def report_text(groups: list[ConfigGroup], baseline: str = "none") -> str:
    """The comparison tables and the runs table of each configuration, as text (what ``main`` prints
    and ``comparison.txt`` holds)."""
    parts = [mixed_line(groups)] if len(groups) > 1 else []
    for g in groups:
        body = comparison_table(g.results, baseline) + "\n\n" + runs_table(g.results, baseline).text()
        if len(groups) > 1:
            rule = "=" * len(g.heading)
            body = f"{rule}\n{g.heading}\n{rule}\n\n{body}"
        parts.append(body)
    return "\n\n".join(parts) + "\n"


def write_report(results: list[RunResult], out_dir: str | Path, baseline: str = "none") -> list[Path]:
    """Write the whole report of ``results`` into ``out_dir`` and return the paths written.

    Contract: ``out_dir`` is created if missing; it receives ``REPORT_FILES``: the comparison
    tables as text (``comparison.txt``, what ``comparison_table`` prints, plus the runs table) and
    Markdown (``comparison.md``), every run's raw figures (``summary.csv``), the figures as PNG and
    PDF in ``plots/`` (only when matplotlib is installed) and the self-contained page
    (``report.html``, without figures when matplotlib is missing). Files of those names are
    overwritten, nothing else in ``out_dir`` is touched; a target that is an HDF5 file or a
    directory raises ``MpiecError`` before anything is written; an empty ``results`` raises
    ``ResultFileError``.
    """
    if not results:
        raise ResultFileError("no result files to report on")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    inputs = [r.path for r in results]
    files = {k: out / v for k, v in REPORT_FILES.items()}
    for key, target in files.items():
        if key == "plots":
            _check_plots_dir(target, "report figures directory")
        else:
            check_output_path(target, inputs, f"report {key} file")
    groups = config_groups(results)
    files["text"].write_text(report_text(groups, baseline), encoding="utf-8")
    write_markdown(results, files["markdown"], baseline)
    write_csv(config_rows(results, baseline), files["csv"])
    write_table_csv(results, files["table_csv"], baseline)
    written = [files["text"], files["markdown"], files["csv"], files["table_csv"]]
    figures: dict[str, list[Path]] | None = None
    if matplotlib_available():
        figures = plot_groups(groups, files["plots"], baseline=baseline)
        written += [p for paths in figures.values() for p in paths]
    written.append(write_html(results, files["html"], pngs=figures, baseline=baseline))
    return written


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for value, what in ((args.csv, "--csv"), (args.markdown, "--markdown"), (args.html, "--html")):
        if value:
            check_output_path(value, args.paths, what)
    outs = [Path(v).resolve() for v in (args.csv, args.markdown, args.html) if v]
    if len(set(outs)) < len(outs):
        raise MpiecError("--csv, --markdown and --html name the same file")
    if args.plots:
        _check_plots_dir(args.plots, "--plots")
        if not matplotlib_available():
            print(f"{PROG}: error: --plots needs matplotlib (pip install 'mpiec[plot]')", file=sys.stderr)
            return 2
    results = load_results(args.paths, skip_bad=args.skip_bad)
    if not results:
        raise ResultFileError(f"no result files (*.h5) found in {' '.join(args.paths)}")

    out = sys.stdout
    groups = config_groups(results)
    print(report_text(groups, args.baseline), end="", file=out)
    print("\nphase breakdown (share of step time):", file=out)
    print(phase_table(results, warmup=args.warmup), file=out)
    if args.events and not args.no_events:
        for r in results:
            print("", file=out)
            print(format_events(r), file=out)
    print("", file=out)
    if args.csv:
        write_csv(config_rows(results, baseline=args.baseline), args.csv)
        print(f"wrote {args.csv}", file=out)
    if args.markdown:
        print(f"wrote {write_markdown(results, args.markdown, args.baseline)}", file=out)
    figures: dict[str, list[Path]] | None = None
    if args.plots:
        figures = plot_groups(groups, args.plots, baseline=args.baseline)
        for path in (p for paths in figures.values() for p in paths):
            print(f"wrote {path}", file=out)
    if args.html:
        if not matplotlib_available():
            print(f"{PROG}: note: matplotlib is not installed: the page has no figures", file=sys.stderr)
        path = write_html(results, args.html, pngs=figures, baseline=args.baseline)
        print(f"wrote {path}", file=out)
    return 0


if __name__ == "__main__":  # python -m mpiec.analysis.report
    try:
        sys.exit(main())
    except MpiecError as exc:
        print(f"mpiec: error: {exc}", file=sys.stderr)
        sys.exit(2)
