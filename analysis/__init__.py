"""Result-file readers, comparison metrics, tables, plots and the report (installed as ``mpiec.analysis``).

Owns the offline side of the result files: loading a set of runs (``read``), the derived figures and
how runs are paired (``metrics``: overhead vs ``none``, the failure-free twin, ΔAUC, lossless, ETTR,
recovery breakdown), text/Markdown/CSV tables (``tables``), optional matplotlib figures (``plots``),
every interval and test (``stats``), a pandas DataFrame with one row per run (``frame``), the
self-contained HTML page (``html``) and the ``mpiec report`` command with ``write_report`` for
``mpiec bench`` (``report``). Invariants: nothing here imports MPI or
matplotlib at import time, and a bad result file is never skipped silently (``ResultFileError``
unless ``skip_bad`` is asked for, which reports each skipped file on stderr).
"""

from mpiec.results import RunResult, read_result

from .frame import frame, frame_rows
from .metrics import RunMetrics, compare
from .read import load_results, repeat_of
from .stats import Comparison, Estimate, analyse_table, median, paired
from .tables import (
    comparison_table,
    comparison_tables,
    format_events,
    format_phase_breakdown,
    phase_breakdown,
    phase_table,
    runs_table,
    summary_rows,
    trust_line,
)

__all__ = [
    "Comparison",
    "Estimate",
    "RunMetrics",
    "RunResult",
    "analyse_table",
    "compare",
    "frame",
    "frame_rows",
    "median",
    "paired",
    "repeat_of",
    "trust_line",
    "comparison_table",
    "comparison_tables",
    "format_events",
    "format_phase_breakdown",
    "load_results",
    "phase_breakdown",
    "phase_table",
    "read_result",
    "runs_table",
    "summary_rows",
]
