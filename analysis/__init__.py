"""Result-file readers, tables and plots (installed as ``mpiec.analysis``).

Owns the offline side of the result files: loading a set of runs
(``read``), text tables (``tables``), optional matplotlib plots (``plots``)
and the ``mpiec report`` command (``report``). Invariants: nothing here
imports MPI or matplotlib at import time, and a bad result file is never
skipped silently (``ResultFileError`` unless ``skip_bad`` is asked for, which
reports each skipped file on stderr).
"""

from mpiec.results import RunResult, read_result

from .read import load_results
from .tables import (
    comparison_table,
    format_events,
    format_phase_breakdown,
    phase_breakdown,
    phase_table,
    summary_rows,
)

__all__ = [
    "RunResult",
    "comparison_table",
    "format_events",
    "format_phase_breakdown",
    "load_results",
    "phase_breakdown",
    "phase_table",
    "read_result",
    "summary_rows",
]
