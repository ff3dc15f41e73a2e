"""``mpiec reproduce ecrec|cpr|cnr|all [--quick|--smoke]``: the command, its progress, its outputs.

Owns the arguments, the order of the work (per paper: its experiments, each one ``mpiec bench``,
then its findings and figures), the progress line with an ETA over the whole reproduction, the
tables printed per paper, and the outputs in ``--out``: ``reproduce.json`` (machine-readable:
every finding with its figure, interval and reason, every experiment with its runs and seconds),
``reproductions.md`` and ``reproductions.html`` (``page``), ``figures/``, one directory of result
files per experiment (``PAPER/EXPERIMENT/``).

Invariants: bad arguments fail before any run starts (exit 2, one line): among them a ``--page`` that
cannot be written or is a file the reproduction did not write (``page.check_page``), and an occupied
experiment folder, the last as much as the first (``experiment.check_directory``); a malformed
``reproduce.json`` or ``bench.json`` under ``--reuse`` is one line, never a traceback; the page and
the JSON are written even when runs crash (the claims they feed say why they have no figure); exit 3
when a run crashed or timed out, else 0 — a verdict never changes the exit code. A paper's findings
are computed for the machine the runs were made on (``Machine.of_runs``: under ``--reuse``, the one
``reproduce.json`` recorded, with the runs' own core count), never for the machine remaking the page.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from mpiec.errors import MpiecError
from mpiec.launch.bench import Bench, clock

from . import PAPERS, paper
from .claims import Finding
from .experiment import SCALES, Machine, RunSet, check_directory, run_experiment
from .page import (
    PAGE_FIGURE_PREFIX,
    PaperReport,
    check_page,
    checks_table,
    claims_table,
    markdown,
    page_html,
    realized_table,
    regime_table,
    summary_table,
    write_page,
)

__all__ = ["build_parser", "main"]

EPILOG = """what it runs (about, on 2 idle cores):
  --smoke   a few tiny runs per paper: checks the tables and the verdict logic, not the papers' numbers
  --quick   fewer repetitions, smaller tables, the same ratios: under 20 minutes for all three papers
  (full)    the default: 5 repetitions, under an hour for all three papers
outputs in --out DIR: reproductions.md, reproductions.html, reproduce.json, figures/, and the result
files of every experiment in DIR/PAPER/EXPERIMENT/ (each an 'mpiec bench' directory: 'mpiec report' reads it)
examples:
  mpiec reproduce all --quick
  mpiec reproduce ecrec --out results/ecrec-repro
  mpiec reproduce all --out results/repro --reuse --page docs/reproductions.md   remake the page, no new runs
  mpiec reproduce cnr --list                                                       claims and runs, no run
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mpiec reproduce",
        description="Re-measure the headline claims of the source papers (ECRM/ECRec, CPR, Check-N-Run) in a "
                    "time-compressed regime that keeps each paper's ratios, and print one table per paper: "
                    "claim | paper's figure | measured (with its 95 % interval, its range below 6 runs, or "
                    "det.) | verdict, the verdict "
                    "computed from the figures by the thresholds written next to each claim.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paper", choices=[*PAPERS, "all"], help="which paper's claims (all: the three in turn)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="fewer repetitions and smaller tables, the same ratios (under 20 min on 2 idle "
                           "cores)")
    size.add_argument("--smoke", action="store_true",
                      help="a few tiny runs per paper (seconds): checks the tables and verdict logic only")
    p.add_argument("--out", metavar="DIR",
                   help="directory for the runs, the page and reproduce.json "
                        "(default: results/reproduce-TIME)")
    p.add_argument("--reuse", action="store_true",
                   help="keep the experiments of --out DIR that completed (remake the page without new "
                        "runs)")
    p.add_argument("--page", metavar="FILE.md",
                   help="also write the Markdown page here (figures into FILE's folder/figures/), keeping "
                        "the page's hand-written section ('## Readings' to the end) if FILE exists; an "
                        "existing FILE that is not a page mpiec reproduce wrote is refused, never replaced")
    p.add_argument("--list", action="store_true", help="print the claims and the runs they need, run nothing")
    p.add_argument("--verbose", action="store_true", help="show every run's progress lines")
    return p


class Progress:
    """``[mpiec reproduce] ...`` lines: the experiment, the runs done of all, elapsed and ETA."""

    def __init__(self, total_runs: int) -> None:
        self.total, self.done, self.t0 = total_runs, 0, time.monotonic()

    def line(self, text: str) -> None:
        elapsed = time.monotonic() - self.t0
        eta = ""
        if self.done and self.total > self.done:
            eta = f", ETA {clock(elapsed / self.done * (self.total - self.done))}"
        print(f"[mpiec reproduce] {text} (runs {self.done}/{self.total}, elapsed {clock(elapsed)}{eta})",
              flush=True)


def _finding_json(f: Finding) -> dict:
    m = f.measured
    num = (lambda x: x if math.isfinite(x) else None)  # noqa: E731 - JSON has no nan
    c = f.claim
    return {"claim": c.key, "text": c.text, "paper_figure": c.paper_figure, "tag": c.tag,
            "rule": f.claim.rule.text(f.claim.unit), "unit": f.claim.unit, "verdict": f.verdict,
            "shown": f.shown, "check": c.check, "quote": c.quote, "reason": f.reason,
            "ends": [{"assumption": k, "at": num(x), "verdict": v, "figure": num(y)}
                     for k, x, v, y in f.ends],
            "unrealized": list(f.gate.unrealized) if f.gate is not None else [],
            "disturbed": f.gate.disturbed if f.gate is not None else "",
            "median": num(m.value), "lo": num(m.lo), "hi": num(m.hi), "n": m.n,
            "level": num(m.level), "method": m.method, "deterministic": m.deterministic,
            "how": m.how,
            "extra": {k: v for k, v in f.extra.items() if isinstance(v, str | int | float | bool)}}


def _runs_json(runs: dict[str, RunSet]) -> list[dict]:
    return [{"experiment": k, "what": rs.experiment.what, "directory": str(rs.directory),
             "strategies": list(rs.experiment.strategies), "kills": list(rs.experiment.kills),
             "sets": list(rs.experiment.sets), "repeat": rs.experiment.repeat,
             "result_files": len(rs.results),
             "seconds": round(rs.seconds, 1), "reused": rs.reused, "problems": rs.problems}
            for k, rs in runs.items()]


def _experiment_key(directory: str | Path) -> str:
    """``PAPER/EXPERIMENT``: an experiment's folder under ``--out`` as the seconds are looked up by, so a
    reproduction folder moved or copied elsewhere keeps its experiments' seconds."""
    return "/".join(Path(directory).parts[-2:])


def _earlier(out: Path) -> dict:
    """What an earlier reproduction in ``out`` recorded (its command, date, seconds, and the seconds of
    each experiment by directory); {} without a readable ``reproduce.json``, and with one line when it
    is there but malformed (its figures are then unknown: the runs themselves are still reused)."""
    path = out / "reproduce.json"
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        exps = {_experiment_key(e["directory"]): float(e["seconds"]) for p in doc["papers"].values()
                for e in p["experiments"]}
        seconds = float(doc["seconds"])
        if not all(math.isfinite(x) and x >= 0 for x in (seconds, *exps.values())):
            raise ValueError("a number of seconds that is not a finite number >= 0")
        return {"command": str(doc["command"]), "date": str(doc["date"]), "seconds": seconds,
                "machine": Machine(**doc["machine"]), "experiments": exps}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, KeyError) else f"no key {exc}"
        print(f"[mpiec reproduce] --reuse: {path} is malformed ({why}): the earlier runs' seconds and "
              "command are unknown; its complete experiments are still reused", flush=True)
        return {}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.page and not args.page.endswith(".md"):
        raise MpiecError(f"--page {args.page}: expected a Markdown file name (FILE.md)")
    if args.page and not args.list:
        check_page(Path(args.page))  # before any run: a refusal at the end would cost every run
    scale = SCALES["smoke" if args.smoke else "quick" if args.quick else "full"]
    names = list(PAPERS) if args.paper == "all" else [args.paper]
    papers = [paper(n) for n in names]
    plans = {p.name: p.experiments(scale) for p in papers}
    if args.list:
        for p in papers:
            print(f"{p.title}")
            for c in p.claims():
                kind = "check" if c.check else "claim"  # mpiec's own checks are not the paper's claims
                print(f"  {kind} {c.key}: {c.text} — {'expected' if c.check else 'paper'}: {c.paper_figure} "
                      f"[{c.tag}]; {c.rule.text(c.unit)}")
            for e in plans[p.name]:
                print(f"  runs  {e.key}: {e.what} — {e.n_runs} runs ({', '.join(e.strategies)})")
        return 0
    out = Path(args.out or f"results/reproduce-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and not out.is_dir():
        raise MpiecError(f"--out {out}: not a directory")
    for p in papers:  # every experiment's configs and folder validated before the first run starts
        for e in plans[p.name]:
            Bench(e.args(out / p.name / e.key))
            check_directory(out / p.name / e.key, reuse=args.reuse)
    out.mkdir(parents=True, exist_ok=True)
    machine = Machine.here()
    command = "mpiec " + shlex.join(["reproduce", *(sys.argv[2:] if argv is None else argv)])
    progress = Progress(sum(e.n_runs for plan in plans.values() for e in plan))
    print(f"[mpiec reproduce] {', '.join(p.title for p in papers)} at {scale.name} scale: "
          f"{progress.total} runs; results in {out}; machine: {machine.line()}", flush=True)
    t_start, date = time.monotonic(), time.strftime("%Y-%m-%d %H:%M %Z")
    earlier = _earlier(out) if args.reuse else {}
    reports: list[PaperReport] = []
    crashed = False
    for p in papers:
        t0 = time.monotonic()
        runs: dict[str, RunSet] = {}
        plan = plans[p.name]
        for i, e in enumerate(plan, 1):
            progress.line(f"{p.name} {i}/{len(plan)} '{e.key}': {e.what}, {e.n_runs} runs")
            try:
                rs = run_experiment(e, out / p.name / e.key, reuse=args.reuse, quiet=not args.verbose)
            except KeyboardInterrupt:
                print(f"[mpiec reproduce] interrupted: the finished experiments are in {out}; the same "
                      "command with --reuse keeps them and runs the rest", flush=True)
                return 130
            if rs.reused:  # the seconds the earlier reproduction spent on it
                rs.seconds = float(earlier.get("experiments", {}).get(_experiment_key(rs.directory), 0.0))
            runs[e.key] = rs
            progress.done += e.n_runs
            crashed |= bool(rs.problems)
        # the machine the runs were made on (--reuse: the recorded one, with the runs' core count)
        ran_on = Machine.of_runs([r for rs in runs.values() for r in rs.results],
                                 earlier.get("machine") if args.reuse else None)
        findings = p.findings(runs, scale, ran_on)
        figdir = out / "figures"
        figdir.mkdir(exist_ok=True)
        try:
            figures = p.plots(runs, figdir)
        except Exception as exc:  # noqa: BLE001 - a figure that fails must not lose the verdicts
            print(f"[mpiec reproduce] {p.name}: figures not made ({type(exc).__name__}: {exc})", flush=True)
            figures = []
        spent = time.monotonic() - t0 + sum(rs.seconds for rs in runs.values() if rs.reused)
        rep = PaperReport(p.name, p.title, p.regime(scale), findings, runs, figures, spent, p.scope)
        reports.append(rep)
        print()
        print(regime_table(rep).text())
        print()
        print(claims_table(rep).text())
        for t in (realized_table(rep), checks_table(rep)):
            if t is not None:
                print()
                print(t.text())
        print(flush=True)
    seconds = time.monotonic() - t_start
    meta: dict[str, Any] = {"command": command, "date": date, "seconds": seconds, "machine": machine,
                            "scale": scale.name, "remade": ""}
    if all(rs.reused for r in reports for rs in r.runs.values()) and earlier.get("command"):
        # no new run: the page says which reproduction made the runs, and that this one remade it
        meta.update(command=earlier["command"], date=earlier["date"], seconds=earlier["seconds"],
                    machine=earlier["machine"], remade=command)
    md = markdown(reports, **meta)
    (out / "reproductions.md").write_text(md, encoding="utf-8")
    (out / "reproductions.html").write_text(page_html(reports, **meta), encoding="utf-8")
    doc = {"command": meta["command"], "date": meta["date"], "scale": scale.name,
           "seconds": round(meta["seconds"], 1), "remade_by": meta["remade"],
           "machine": dataclasses.asdict(meta["machine"]),
           "papers": {r.name: {"title": r.title, "seconds": round(r.seconds, 1),
                               "findings": [_finding_json(f) for f in r.findings],
                               "experiments": _runs_json(r.runs)} for r in reports}}
    (out / "reproduce.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if args.page:
        write_page(Path(args.page), markdown(reports, **meta, figure_prefix=PAGE_FIGURE_PREFIX),
                   [f for r in reports for f in r.figures], prefix=PAGE_FIGURE_PREFIX)
    print(summary_table(reports).text())
    print(f"\npage: {out / 'reproductions.md'}, {out / 'reproductions.html'}; figures and runs in {out}"
          + (f"; also {args.page}" if args.page else ""), flush=True)
    return 3 if crashed else 0
