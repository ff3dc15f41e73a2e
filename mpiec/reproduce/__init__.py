"""``mpiec reproduce``: each source paper's headline claims re-measured in a regime that keeps the
paper's ratios, with a computed verdict per claim.

Layout: ``claims`` (claims, measured figures, the verdict rule), ``experiment`` (scales, the benches a
paper runs, the regime rows, the machine, the ``Paper`` protocol), one module per paper (``ecrec``,
``cpr``, ``cnr``: claims, regime, experiments, findings, plots), ``page`` (Markdown and HTML), ``cli``
(the command, its progress and ETA).

Invariants: verdicts come only from ``claims.judge``; every run goes through ``mpiec bench``; a
paper module never writes a verdict or a figure by hand; every interval, test and "significant" comes
from ``mpiec.analysis.stats`` (no statistics code in this package).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PAPERS", "paper"]

#: name -> module holding ``PAPER`` (an ``experiment.Paper``), in the page's order.
PAPERS = {"ecrec": "mpiec.reproduce.ecrec", "cpr": "mpiec.reproduce.cpr", "cnr": "mpiec.reproduce.cnr"}


def paper(name: str) -> Any:
    """The ``Paper`` object of ``name`` (a key of ``PAPERS``)."""
    return importlib.import_module(PAPERS[name]).PAPER
