"""``ecrm``: erasure-coded embedding tables (see ``strategy`` for the agents and invariants).

Modules: ``stripes`` (where every stripe member lives), ``parity`` (a holder's
parity rows and versions), ``pipeline`` (the per-step delta exchange),
``rebuild`` (the recovery), ``strategy`` (the plug-in).
"""

from mpiec.strategies.ecrm.strategy import ErasureCoded

__all__ = ["ErasureCoded"]
