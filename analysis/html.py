"""The report as one self-contained HTML page: the comparison tables, the figures, the runs.

Owns the page ``mpiec report --html FILE`` and ``write_report`` write. Invariants: the page
references nothing outside itself (inline CSS, PNG figures inlined as base64 ``data:`` URIs, no
script), so it can be mailed or attached to a ticket; every text from a result file is
HTML-escaped; the tables are the ``tables.Table`` objects the text report prints, cell for cell;
without matplotlib the page still has the tables and says why it has no figures.
"""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from mpiec.results import RunResult

from .plots import FIGURES, matplotlib_available, plot_results
from .tables import Table, comparison_tables, runs_table

__all__ = ["CSS", "render_html", "table_html", "write_html"]

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
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
    return (f"<h2>{e(t.title)}</h2>\n<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>\n"
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


def render_html(results: list[RunResult], pngs: list[Path], *, baseline: str = "none",
                title: str = "mpiec comparison", no_plots_reason: str = "") -> str:
    """The page for ``results`` with the PNG figures ``pngs`` inlined, in the order given."""
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n",
             f"<h1>{html.escape(title)}</h1>\n", _meta(results) if results else ""]
    parts += [table_html(t) for t in comparison_tables(results, baseline)]
    parts.append("<h2>figures</h2>\n")
    if pngs:
        parts += [_figure_html(p) for p in pngs]
    else:
        parts.append(f"<p>No figures: {html.escape(no_plots_reason or 'none was drawn')}.</p>\n")
    parts.append(table_html(runs_table(results, baseline)))
    parts.append("</body></html>\n")
    return "".join(parts)


def write_html(results: list[RunResult], path: str | Path, *, pngs: list[Path] | None = None,
               baseline: str = "none") -> Path:
    """Write the page to ``path``. Its figures are ``pngs`` (the PNGs ``plot_results`` just
    wrote) or, when None, drawn in a temporary directory that is removed afterwards."""
    path = Path(path)
    reason = "" if matplotlib_available() else "matplotlib is not installed (pip install 'mpiec[plot]')"
    with tempfile.TemporaryDirectory(prefix="mpiec-report-") as tmp:
        if reason:
            pngs = []
        elif pngs is None:
            pngs = plot_results(results, tmp, formats=("png",), baseline=baseline)
        text = render_html(results, [p for p in pngs if p.suffix == ".png"], baseline=baseline,
                           no_plots_reason=reason)
    path.write_text(text, encoding="utf-8")
    return path
