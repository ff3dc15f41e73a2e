"""``ecrm``: erasure-coded embedding tables (see ``strategy`` for the factory and invariants).

Modules: ``strategy`` (the plug-in: parameters, rules, the factory of agents), ``agents``
(one per role), ``member`` (a member of ``servers``: parity rows, exchange, rebuild state),
``stripes`` (where every stripe member lives), ``parity`` (a holder's parity rows and
versions), ``window`` (a source's open commit window), ``pipeline`` (the per-step delta
exchange), ``rebuild`` (the recovery), ``rebuilder`` (the rebuild in rounds), ``transfer``
(the collective row transfers).

The names below are the package's public surface: the strategy, and the parts of its per-step
parity path that ``mpiec.benchmarks.parity_pipeline`` times (a benchmark imports no inner module).
"""

from mpiec.strategies.ecrm.parity import ParityStore
from mpiec.strategies.ecrm.pipeline import DeltaPipeline
from mpiec.strategies.ecrm.strategy import ErasureCoded
from mpiec.strategies.ecrm.stripes import parity_stripes

__all__ = ["DeltaPipeline", "ErasureCoded", "ParityStore", "parity_stripes"]
