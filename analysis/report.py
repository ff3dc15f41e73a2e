"""``mpiec report PATH… [--plots OUTDIR] [--csv FILE]``: tables (and plots) of result files.

Owns the report command. Invariants: tables go to stdout; nothing is ever written
onto a result file or an input (``check_output_path``, also used by ``mpiec config
--write``): checked before anything is read or written; a bad result file
raises ``ResultFileError`` to the caller (the CLI prints
``mpiec: error: …`` and exits 2) unless ``--skip-bad``; a missing optional
dependency or no result file at all is one error line on stderr and exit
code 2; the CSV has one row per run with the raw (unformatted) summary values.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from mpiec.errors import MpiecError, ResultFileError

from .plots import matplotlib_available, plot_results
from .read import load_results
from .tables import comparison_table, format_events, phase_table, summary_rows

__all__ = ["build_parser", "check_output_path", "main", "write_csv"]

PROG = "mpiec report"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Compare mpiec runs: a summary table, phase breakdowns and events "
        "of every result file (*.h5) in the given directories (recursively) or files.",
    )
    p.add_argument("paths", nargs="+", metavar="DIR", help="result directory or .h5 file")
    p.add_argument("--plots", metavar="OUTDIR", help="write PNG plots here (needs matplotlib)")
    p.add_argument("--csv", metavar="FILE", help="write the summary rows as CSV to FILE")
    p.add_argument("--baseline", default="none", metavar="STRATEGY",
                   help="strategy the overhead is measured against (default: none)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="steps excluded from the phase breakdown (default: min(10, steps/5))")
    p.add_argument("--no-events", action="store_true", help="do not list each run's events")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip unreadable result files (each is reported on stderr)")
    return p


def _is_hdf5(path: Path) -> bool:
    try:
        import h5py

        return bool(h5py.is_hdf5(path))
    except (OSError, ImportError):
        return False


def check_output_path(target: str | Path, inputs: list[str | Path], what: str) -> None:
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.csv:
        check_output_path(args.csv, args.paths, "--csv")
    if args.plots and Path(args.plots).exists() and not Path(args.plots).is_dir():
        raise MpiecError(f"--plots {args.plots} is a file, not a directory")
    if args.plots and not matplotlib_available():
        print(f"{PROG}: error: --plots needs matplotlib (pip install 'mpiec[plot]')",
              file=sys.stderr)
        return 2
    results = load_results(args.paths, skip_bad=args.skip_bad)
    if not results:
        raise ResultFileError(f"no result files (*.h5) found in {' '.join(args.paths)}")

    out = sys.stdout
    print(comparison_table(results, baseline=args.baseline), file=out)
    print("\nphase breakdown (share of step time):", file=out)
    print(phase_table(results, warmup=args.warmup), file=out)
    if not args.no_events:
        for r in results:
            print("", file=out)
            print(format_events(r), file=out)
    if args.csv:
        write_csv(summary_rows(results, baseline=args.baseline), args.csv)
        print(f"\nwrote {args.csv}", file=out)
    if args.plots:
        for path in plot_results(results, args.plots):
            print(f"wrote {path}", file=out)
    return 0


if __name__ == "__main__":  # python -m mpiec.analysis.report
    try:
        sys.exit(main())
    except MpiecError as exc:
        print(f"mpiec: error: {exc}", file=sys.stderr)
        sys.exit(2)
