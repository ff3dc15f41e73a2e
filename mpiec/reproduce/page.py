"""The reproduction's page: per paper, the regime, the claims with their verdicts, the figures, the runs.

Owns ``PaperReport`` (what one paper's reproduction produced), the tables built from it (the
paper's claims, mpiec's implementation checks, the regime, the realized ratios, the experiments, the
summary over papers), the Markdown page, the self-contained HTML page
(figures inlined) and ``write_page`` (``--page FILE``: the Markdown written elsewhere, e.g.
``docs/reproductions.md``, with its figures copied beside it).

Invariants:

* the tables show the findings as ``claims.judge`` made them: the verdict and its reason, cell for
  cell, never edited here;
* only the papers' claims are tallied: implementation checks (``Claim.check``) have a table of
  their own and no column in the summary;
* the measured column shows the judged figure itself, in its unit, and the criterion beside it
  (``Rule.short``: the direction and thresholds), never a derived factor;
* a page written over an existing one keeps that page's hand-written section (``READINGS``, from
  its heading to the end) verbatim, so a rerun never erases the reading of its verdicts;
* only a page this module wrote is ever written over (``is_page``: its ``MARKER`` line, or the
  page's title as the first line for pages from before the marker); any other existing file is
  refused by ``check_page`` before a reproduction runs, and again by ``write_page``;
* every text that comes from a run or a config is HTML-escaped in the HTML page.
"""

from __future__ import annotations

import base64
import html
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mpiec.analysis.html import CSS, table_html
from mpiec.analysis.tables import Table
from mpiec.errors import MpiecError

from .claims import VERDICTS, Finding
from .experiment import Machine, Regime, RunSet

__all__ = ["MARKER", "PAGE_FIGURE_PREFIX", "READINGS", "PaperReport", "check_page", "checks_table",
           "claims_table", "experiments_table", "is_page", "markdown", "page_html", "realized_table",
           "regime_table", "summary_table", "write_page"]

#: Figures copied beside a ``--page`` get this prefix (docs/figures/ holds other pages' figures).
PAGE_FIGURE_PREFIX = "reproduce-"
#: The heading of the hand-written section a rewrite keeps.
READINGS = "## Readings"
#: The page's title: its first line.
TITLE = "# mpiec reproduce: the papers' headline claims, re-measured"
#: The line (invisible in rendered Markdown) that marks a file as a page ``mpiec reproduce`` writes
#: over: ``--page`` refuses any other existing file, so a hand-written document is never replaced.
MARKER = ("<!-- written by mpiec reproduce --page: rewritten by the next reproduction; "
          "text under '## Readings' is kept -->")
#: Larger than any page (a few tens of kB): a bigger file is not one, and is not read whole.
_PAGE_MAX_BYTES = 16 << 20


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
    scope: str = ""  # the paper module's ``scope``: what this machine can and cannot establish


def _rows(findings: list[Finding], quote: bool) -> tuple[list[list[str]], list[str]]:
    rows, notes = [], []
    for f in findings:
        c = f.claim
        says = [f"{c.says} [{c.tag}]", c.paper_figure] if quote else [c.text, c.paper_figure]
        rows.append([c.key, *says, f.measured.text(c.unit), c.rule.short(c.unit), f.shown])
        notes.append(f"{c.key} — {f.shown}: {f.reason} Thresholds: {c.rule.text(c.unit)}"
                     + (f" How: {f.measured.how}." if f.measured.how else ""))
    return rows, notes


def claims_table(rep: PaperReport) -> Table:
    """The paper's claims (never mpiec's checks): claim | what the paper says (quoted, with its tag) |
    paper's figure | measured (the judged figure with its 95 % interval, its range or det., n) |
    criterion (direction and thresholds) | verdict; the reasons and the thresholds' why as notes."""
    rows, notes = _rows([f for f in rep.findings if not f.claim.check], quote=True)
    return Table(f"{rep.title}: claims", ["claim", "what the paper says", "paper's figure", "measured",
                                          "criterion", "verdict"], rows, notes=notes)


def checks_table(rep: PaperReport) -> Table | None:
    """mpiec's own implementation checks of this paper's strategies (None without any): judged by the
    same rule, not claims of the paper, not tallied."""
    found = [f for f in rep.findings if f.claim.check]
    if not found:
        return None
    rows, notes = _rows(found, quote=False)
    return Table(f"{rep.title}: implementation checks (mpiec's, not the paper's claims; not tallied)",
                 ["check", "what is checked", "expected", "measured", "criterion", "result"], rows,
                 notes=notes)


def regime_table(rep: PaperReport) -> Table:
    rows = [[r.quantity, r.paper, r.here, r.status,
             "; ".join(x for x in (r.note, f"calibrated: {r.calibrated}" if r.calibrated else "",
                                   f"band: {r.band}" if r.band else "") if x)]
            for r in rep.regime.rows]
    return Table(f"{rep.title}: regime", ["quantity", "paper", "this run", "kept", "how / why not"], rows)


def realized_table(rep: PaperReport) -> Table | None:
    """The ratios the experiments planned against those their runs realized (each check once), and
    whether the benches were quiet: what ``not judged`` verdicts rest on. None without any check."""
    seen: dict[str, list[str]] = {}
    disturbed: list[str] = []
    for f in rep.findings:
        g = f.gate
        if g is None:
            continue
        for c in g.checks:
            seen.setdefault(c.text(), [c.quantity, f"{c.planned:.3g}{c.unit}",
                                       f"{c.realized:.3g}{c.unit}", f"{c.lo:.3g}–{c.hi:.3g}{c.unit}",
                                       "yes" if c.ok else "NO", c.why])
        if g.disturbed and g.disturbed not in disturbed:
            disturbed.append(g.disturbed)
    if not seen and not disturbed:
        return None
    notes = [f"disturbed: {d}" for d in disturbed]
    return Table(f"{rep.title}: planned regime, realized", ["quantity", "planned", "realized", "tolerance",
                                                            "realized?", "why this tolerance"],
                 list(seen.values()), notes=notes)


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
        n = Counter(f.verdict for f in rep.findings if not f.claim.check)
        rows.append([rep.title, *(str(n.get(v, 0)) for v in VERDICTS), f"{rep.seconds / 60:.1f}"])
    return Table("Verdicts on the papers' claims (implementation checks not counted)",
                 ["paper", *VERDICTS, "minutes"], rows, right=set(range(1, len(VERDICTS) + 2)))


def _kept(reports: list[PaperReport]) -> str:
    """Which ratios the runs keep and which constants are calibrated, paper by paper, from the regime
    tables (the intro says exactly this, no more)."""
    parts = []
    for rep in reports:
        kept = [r.quantity for r in rep.regime.rows if r.kept and not r.calibrated]
        cal = [r.quantity for r in rep.regime.rows if r.calibrated]
        text = f"{rep.name}: " + (", ".join(kept) if kept else "none")
        parts.append(text + (f" (calibrated: {', '.join(cal)})" if cal else ""))
    return "; ".join(parts)


def _intro(command: str, date: str, seconds: float, machine: Machine, scale: str, remade: str,
           reports: list[PaperReport]) -> list[str]:
    made = f"Made by `{command}` ({scale} scale) on {date}, in {seconds / 60:.1f} min, on {machine.line()}."
    if remade:
        made += f" Page remade from those runs by `{remade}`."
    return [
        made,
        "",
        "Each paper's claims (quoted, with their source tag) are re-measured in a time-compressed regime "
        f"that keeps exactly these of the paper's ratios — {_kept(reports)} — and no others (each paper's "
        "regime table says what is not kept and why). A constant marked *calibrated* was chosen to produce a "
        "paper's figure: a claim judged on a figure that follows from it is *calibrated (not a test)*. "
        "Verdicts are computed from the figures by the thresholds written next to each claim, with why they "
        "are there (`mpiec/reproduce/claims.py`): *reproduced* needs the figure past the claim's threshold "
        "and either its whole 95 % interval past the *partly* threshold or a deterministic figure; *partly* "
        "needs the figure past the *partly* threshold and, where the claim has a no-effect figure (0, chance "
        "0.5, ρ = 0), its 95 % interval past it, else *inconclusive*; an assumption [U] a verdict rests on "
        "is varied over its stated band and a verdict that changes across it is *depends on …*; a bench "
        "that was disturbed or did not realize its planned ratios is *not judged*; *cannot be measured "
        "here* says what this machine cannot show and gives the figure that bounds it. Every interval comes "
        "from `mpiec.analysis.stats`. mpiec's own implementation checks stand in a table of their own and "
        "are not tallied. Source tags: P paper, C authors' code, S secondary summary, U inferred, M mpiec.",
    ]


def markdown(reports: list[PaperReport], *, command: str, date: str, seconds: float, machine: Machine,
             scale: str, remade: str = "", figure_prefix: str = "") -> str:
    """The page in Markdown; figures referenced as ``figures/<figure_prefix>NAME.png``."""
    out = [TITLE, "", MARKER, "",
           *_intro(command, date, seconds, machine, scale, remade, reports), "",
           summary_table(reports).markdown(), ""]
    for rep in reports:
        out += [f"## {rep.title}", "", *([rep.scope, ""] if rep.scope else []), rep.regime.summary, "",
                regime_table(rep).markdown(), "", claims_table(rep).markdown(), ""]
        out += [x for t in (realized_table(rep), checks_table(rep)) if t is not None
                for x in (t.markdown(), "")]
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
    intro = _intro(command, date, seconds, machine, scale, remade, reports)
    parts += [f"<p class='meta'>{e(p)}</p>" for p in intro if p]
    parts.append(table_html(summary_table(reports)))
    for rep in reports:
        scope = rep.scope.replace("**", "")  # the paragraph's bold lead-in is Markdown
        parts += [f"<h1>{e(rep.title)}</h1>", *([f"<p>{e(scope)}</p>"] if scope else []),
                  f"<p>{e(rep.regime.summary)}</p>",
                  table_html(regime_table(rep)), table_html(claims_table(rep))]
        parts += [table_html(t) for t in (realized_table(rep), checks_table(rep)) if t is not None]
        for p in rep.figures:
            if p.is_file():
                data = base64.b64encode(p.read_bytes()).decode("ascii")
                parts.append(f"<figure><img alt='{e(p.stem)}' src='data:image/png;base64,{data}'>"
                             f"<figcaption>{e(p.stem)}</figcaption></figure>")
        parts.append(table_html(experiments_table(rep)))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def is_page(text: str) -> bool:
    """Whether ``text`` is a page ``markdown`` wrote: its ``MARKER`` line, or (pages written before
    the marker) the page's title as its first line."""
    lines = text.splitlines()
    return MARKER in lines or (bool(lines) and lines[0].rstrip() == TITLE)


def _probe_folder(folder: Path, what: str) -> None:
    """Create and remove a file in ``folder`` (``os.access`` says yes to root on a read-only mount)."""
    probe = folder / f".mpiec-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise MpiecError(f"{what}: cannot write into {folder} ({exc.strerror or exc})") from None


def check_page(path: Path) -> None:
    """Refuse (``MpiecError``, one line) a ``--page`` that the reproduction could not write, or that
    is an existing file it did not write; checked before any run, so a refusal costs nothing."""
    what = f"--page {path}"
    folder = path.parent
    if not folder.is_dir():
        raise MpiecError(f"{what}: the folder {folder} does not exist" if not folder.exists()
                         else f"{what}: {folder} is not a folder")
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise MpiecError(f"{what}: exists and is not a regular file")
        try:
            size = path.stat().st_size
            text = path.read_text(encoding="utf-8") if 0 < size <= _PAGE_MAX_BYTES else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise MpiecError(f"{what}: cannot be read ({exc})") from None
        if size and not is_page(text):
            raise MpiecError(f"{what}: exists and is not a page mpiec reproduce wrote (no '{TITLE}' "
                             "first line): it would be replaced; choose another file or move it away")
    _probe_folder(folder, what)
    figures = folder / "figures"
    if figures.exists() and not figures.is_dir():
        raise MpiecError(f"{what}: {figures} (where its figures go) is not a folder")
    if figures.is_dir():
        _probe_folder(figures, what)


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
    a prefix keeps them from replacing other pages' figures of the same name). An existing file
    that is not such a page is refused (``check_page``), never replaced."""
    check_page(path)
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
