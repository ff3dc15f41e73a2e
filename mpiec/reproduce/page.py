"""The reproduction's page: per paper, the regime, the claims with their verdicts, the figures, the runs.

Owns ``PaperReport`` (what one paper's reproduction produced), the tables built from it (claims,
regime, experiments, the summary over papers), the Markdown page, the self-contained HTML page
(figures inlined) and ``write_page`` (``--page FILE``: the Markdown written elsewhere, e.g.
``docs/reproductions.md``, with its figures copied beside it).

Invariants:

* the tables show the findings as ``claims.judge`` made them: the verdict and its reason, cell for
  cell, never edited here;
* a page written over an existing one keeps that page's hand-written section (``READINGS``, from
  its heading to the end) verbatim, so a rerun never erases the reading of its verdicts;
* every text that comes from a run or a config is HTML-escaped in the HTML page.
"""

from __future__ import annotations

import base64
import html
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mpiec.analysis.html import CSS, table_html
from mpiec.analysis.tables import Table

from .claims import VERDICTS, Finding
from .experiment import Machine, Regime, RunSet

__all__ = ["PAGE_FIGURE_PREFIX", "READINGS", "PaperReport", "claims_table", "experiments_table", "markdown",
           "page_html", "regime_table", "summary_table", "write_page"]

#: Figures copied beside a ``--page`` get this prefix (docs/figures/ holds other pages' figures).
PAGE_FIGURE_PREFIX = "reproduce-"
#: The heading of the hand-written section a rewrite keeps.
READINGS = "## Readings"


@dataclass
class PaperReport:
    """One paper's reproduction: its regime, findings, runs and figures."""

    name: str
    title: str
    regime: Regime
    findings: list[Finding]
    runs: dict[str, RunSet] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def claims_table(rep: PaperReport) -> Table:
    """Claim | paper's figure | measured (median [95 % interval], n) | verdict; the reasons and the
    thresholds as notes."""
    rows, notes = [], []
    for f in rep.findings:
        c = f.claim
        rows.append([c.key, c.text, f"{c.paper_figure} [{c.tag}]", f.measured.text(c.unit), f.verdict])
        notes.append(f"{c.key} — {f.verdict}: {f.reason} Thresholds: {c.rule.text(c.unit)}."
                     + (f" How: {f.measured.how}." if f.measured.how else ""))
    return Table(f"{rep.title}: claims", ["claim", "what the paper says", "paper's figure", "measured",
                                          "verdict"], rows, notes=notes)


def regime_table(rep: PaperReport) -> Table:
    rows = [[r.quantity, r.paper, r.here, {True: "kept", False: "not kept", None: "—"}[r.kept], r.note]
            for r in rep.regime.rows]
    return Table(f"{rep.title}: regime", ["quantity", "paper", "this run", "kept", "how / why not"], rows)


def experiments_table(rep: PaperReport) -> Table:
    rows, notes = [], []
    for key, rs in rep.runs.items():
        e = rs.experiment
        rows.append([key, e.what, ", ".join(e.strategies), "; ".join(e.kills) or "none", str(len(rs.results)),
                     f"{rs.seconds:.0f}" + (" (earlier run)" if rs.reused else "")])
        notes += [f"{key}: {p}" for p in rs.problems]
    return Table(f"{rep.title}: runs", ["experiment", "what", "variants", "kills", "result files", "seconds"],
                 rows, right={4, 5}, notes=notes)


def summary_table(reports: list[PaperReport]) -> Table:
    rows = []
    for rep in reports:
        n = Counter(f.verdict for f in rep.findings)
        rows.append([rep.title, *(str(n.get(v, 0)) for v in VERDICTS), f"{rep.seconds / 60:.1f}"])
    return Table("Verdicts", ["paper", *VERDICTS, "minutes"], rows, right=set(range(1, len(VERDICTS) + 2)))


def _intro(command: str, date: str, seconds: float, machine: Machine, scale: str, remade: str) -> list[str]:
    made = f"Made by `{command}` ({scale} scale) on {date}, in {seconds / 60:.1f} min, on {machine.line()}."
    if remade:
        made += f" Page remade from those runs by `{remade}`."
    return [
        made,
        "",
        "Each claim is re-measured in a time-compressed regime that keeps the paper's ratios (each paper's "
        "regime table says which ratios are kept and which are not). Verdicts are computed from the "
        "figures by the thresholds written next to each claim (`mpiec/reproduce/`): *reproduced* needs the "
        "median past the claim's threshold and its whole 95 % interval past the *partly* threshold; "
        "*cannot be measured here* says what this machine cannot show and gives the figure that bounds it. "
        "Source tags of the paper's figures: P paper, C authors' code, S secondary summary, U inferred "
        "(`../shared/notes/paper-regimes.md` in the project).",
    ]


def markdown(reports: list[PaperReport], *, command: str, date: str, seconds: float, machine: Machine,
             scale: str, remade: str = "", figure_prefix: str = "") -> str:
    """The page in Markdown; figures referenced as ``figures/<figure_prefix>NAME.png``."""
    out = ["# mpiec reproduce: the papers' headline claims, re-measured", "",
           *_intro(command, date, seconds, machine, scale, remade), "", summary_table(reports).markdown(), ""]
    for rep in reports:
        out += [f"## {rep.title}", "", rep.regime.summary, "", regime_table(rep).markdown(), "",
                claims_table(rep).markdown(), ""]
        out += [f"![{p.stem}](figures/{figure_prefix}{p.name})" for p in rep.figures]
        out += ["", experiments_table(rep).markdown(), ""]
    return "\n".join(out).rstrip() + "\n"


def page_html(reports: list[PaperReport], *, command: str, date: str, seconds: float, machine: Machine,
              scale: str, remade: str = "") -> str:
    """The same page as one self-contained HTML file (figures inlined)."""
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>mpiec reproduce</title>"
             f"<style>{CSS}</style></head><body>",
             "<h1>mpiec reproduce: the papers' headline claims, re-measured</h1>"]
    intro = _intro(command, date, seconds, machine, scale, remade)
    parts += [f"<p class='meta'>{e(p)}</p>" for p in intro if p]
    parts.append(table_html(summary_table(reports)))
    for rep in reports:
        parts += [f"<h1>{e(rep.title)}</h1>", f"<p>{e(rep.regime.summary)}</p>",
                  table_html(regime_table(rep)), table_html(claims_table(rep))]
        for p in rep.figures:
            if p.is_file():
                data = base64.b64encode(p.read_bytes()).decode("ascii")
                parts.append(f"<figure><img alt='{e(p.stem)}' src='data:image/png;base64,{data}'>"
                             f"<figcaption>{e(p.stem)}</figcaption></figure>")
        parts.append(table_html(experiments_table(rep)))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def kept_readings(path: Path) -> str:
    """The hand-written section of an existing page (from ``READINGS`` to the end), or ''."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8")
    at = text.find(f"\n{READINGS}")
    return text[at + 1:] if at >= 0 else ""


def write_page(path: Path, page: str, figures: list[Path], prefix: str = "") -> Path:
    """``page`` written to ``path`` with its hand-written section kept, figures copied to
    ``path.parent/figures/<prefix>NAME`` (the page references them there: ``markdown(figure_prefix=)``;
    a prefix keeps them from replacing other pages' figures of the same name)."""
    readings = kept_readings(path)
    figdir = path.parent / "figures"
    if figures:
        figdir.mkdir(parents=True, exist_ok=True)
    for p in figures:
        if p.is_file():
            shutil.copyfile(p, figdir / f"{prefix}{p.name}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page + (f"\n{readings}" if readings else ""), encoding="utf-8")
    tmp.replace(path)
    return path
