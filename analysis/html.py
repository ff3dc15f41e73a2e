"""The report as one self-contained HTML page: the comparison tables, the figures, the runs.

Owns the page ``mpiec report --html FILE`` and ``write_report`` write. Invariants: the page
references nothing outside itself (inline CSS, PNG figures inlined as base64 ``data:`` URIs, no
script), so it can be mailed or attached to a ticket; every text from a result file is
HTML-escaped; the tables are the ``tables.Table`` objects the text report prints, cell for cell;
without matplotlib the page still has the tables and says why it has no figures; runs of several
configurations (``configs.config_groups``) get one section each (tables, figures, runs), never a
pooled table; a table wider than the page scrolls sideways inside its own box (``div.wide``), so the
page and its notes keep the window's width.
"""

from __future__ import annotations

import base64
import html
import tempfile
from collections.abc import Mapping
from pathlib import Path

from mpiec.results import RunResult

from .configs import ConfigGroup, config_groups, mixed_line
from .plots import FIGURES, matplotlib_available, plot_groups
from .tables import Table, comparison_tables, runs_table

__all__ = ["CSS", "render_html", "table_html", "write_html"]

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
div.wide { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.notes { font-size: 0.85em; color: #444; margin-top: 0.2em; }
ul.verdicts { font-weight: 600; margin: 0.4em 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
.meta { font-size: 0.85em; color: #555; }
"""


def table_html(t: Table) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in t.header)
    body = []
    for row in t.rows:
        cells = "".join(f'<td class="num">{e(c)}</td>' if i in t.right else f"<td>{e(c)}</td>"
                        for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    notes = "".join(f"<li>{e(n)}</li>" for n in t.notes)
    verdicts = "".join(f"<li>{e(n)}</li>" for n in t.verdicts)
    rows = "".join(body) or f'<tr><td colspan="{len(t.header)}">(no runs)</td></tr>'
    return (f"<h2>{e(t.title)}</h2>\n"
            f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>\n'
            + (f'<ul class="verdicts">{verdicts}</ul>\n' if verdicts else "")
            + (f'<ul class="notes">{notes}</ul>\n' if notes else ""))


def _figure_html(png: Path) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    caption = FIGURES.get(png.stem, png.stem)
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>\n")


def _meta(results: list[RunResult]) -> str:
    def values(key: str) -> str:
        found = sorted({str(r.attrs.get(key)) for r in results if r.attrs.get(key) not in (None, "")})
        return ", ".join(found) or "—"

    items = [("runs", str(len(results))), ("mpiec", values("mpiec_version")),
             ("git commit", values("git_commit")[:80]), ("MPI", values("mpi_library")),
             ("failure mode", values("failure_mode")), ("preset", values("preset")),
             ("created", f"{min(r.created for r in results)} … {max(r.created for r in results)}")]
    return '<p class="meta">' + " · ".join(f"{html.escape(k)}: {html.escape(v)}" for k, v in items) + "</p>\n"


Figures = list[Path] | Mapping[str, list[Path]]


def _group_figures(pngs: Figures, group: ConfigGroup) -> list[Path]:
    if isinstance(pngs, Mapping):
        return list(pngs.get(group.label, []))
    return list(pngs)


def _section(group: ConfigGroup, pngs: list[Path], baseline: str, no_plots_reason: str,
             level: str) -> list[str]:
    parts = [table_html(t) for t in comparison_tables(group.results, baseline)]
    parts.append(f"<{level}>figures</{level}>\n")
    if pngs:
        parts += [_figure_html(p) for p in pngs if p.suffix == ".png"]
    else:
        parts.append(f"<p>No figures: {html.escape(no_plots_reason or 'none was drawn')}.</p>\n")
    parts.append(table_html(runs_table(group.results, baseline)))
    return parts


def render_html(results: list[RunResult], pngs: Figures, *, baseline: str = "none",
                title: str = "mpiec comparison", no_plots_reason: str = "") -> str:
    """The page for ``results`` with the PNG figures ``pngs`` inlined, in the order given: a list for
    runs of one configuration, else per group label (``plots.plot_groups``) the figures of that group."""
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n",
             f"<h1>{html.escape(title)}</h1>\n", _meta(results) if results else ""]
    groups = config_groups(results) if results else [ConfigGroup({}, [])]
    if len(groups) > 1:
        parts.append(f"<p><strong>{html.escape(mixed_line(groups))}</strong></p>\n")
    for g in groups:
        if len(groups) > 1:
            parts.append(f'<h1 class="config">{html.escape(g.heading)}</h1>\n')
        parts += _section(g, _group_figures(pngs, g), baseline, no_plots_reason, "h2")
    parts.append("</body></html>\n")
    return "".join(parts)


def write_html(results: list[RunResult], path: str | Path, *, pngs: Figures | None = None,
               baseline: str = "none") -> Path:
    """Write the page to ``path``. Its figures are ``pngs`` (the PNGs ``plot_groups`` or
    ``plot_results`` just wrote) or, when None, drawn in a temporary directory that is removed
    afterwards."""
    path = Path(path)
    reason = "" if matplotlib_available() else "matplotlib is not installed (pip install 'mpiec[plot]')"
    with tempfile.TemporaryDirectory(prefix="mpiec-report-") as tmp:
        figures: Figures
        if reason:
            figures = []
        elif pngs is None:
            figures = plot_groups(config_groups(results), tmp, formats=("png",), baseline=baseline)
        else:
            figures = pngs
        text = render_html(results, figures, baseline=baseline, no_plots_reason=reason)
    path.write_text(text, encoding="utf-8")
    return path
