"""``mpiec reproduce``: each source paper's headline claims re-measured in a regime that keeps the
paper's ratios, with a computed verdict per claim.

Layout: ``claims`` (claims, measured figures, the verdict rule), ``experiment`` (scales, the benches a
paper runs, the regime rows, the machine, the ``Paper`` protocol), one module per paper (``ecrec``,
``cpr``, ``cnr``: claims, regime, experiments, findings, plots), ``page`` (Markdown and HTML), ``cli``
(the command, its progress and ETA), ``papers`` (which papers there are, ``PAPERS``, and their setups: the
one registry ``mpiec simulate --paper`` reads too).

Invariants: verdicts come only from ``claims.judge``; every run goes through ``mpiec bench``; a
paper module never writes a verdict or a figure by hand; every interval, test and "significant" comes
from ``mpiec.analysis.stats`` (no statistics code in this package); this ``__init__`` imports only
``papers``, so ``mpiec simulate`` reads the registry without loading a reproduction.
"""

from __future__ import annotations

from typing import Any

from mpiec.reproduce.papers import PAPERS

__all__ = ["PAPERS", "paper"]


def paper(name: str) -> Any:
    """The ``Paper`` object of ``name`` (a key of ``PAPERS``, the one registry of papers in
    ``mpiec.reproduce.papers``, in the page's order)."""
    return PAPERS[name].reproduction()
