"""``ecrm``: erasure-coded embedding tables (see ``strategy`` for the factory and invariants).

Modules: ``strategy`` (the plug-in: parameters, rules, the factory of agents), ``agents``
(one per role), ``member`` (a member of ``servers``: parity rows, exchange, rebuild state),
``stripes`` (where every stripe member lives), ``parity`` (a holder's parity rows and
versions), ``window`` (a source's open commit window), ``pipeline`` (the per-step delta
exchange), ``rebuild`` (the recovery), ``rebuilder`` (the rebuild in rounds), ``transfer``
(the collective row transfers).
"""

from mpiec.strategies.ecrm.strategy import ErasureCoded

__all__ = ["ErasureCoded"]
