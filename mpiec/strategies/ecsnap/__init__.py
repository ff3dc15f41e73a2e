"""``ecsnap``: erasure-coded in-memory snapshots (see ``strategy`` for the agents and invariants).

Modules: ``geometry`` (which shards are coded together, who holds their parity),
``snapshot`` (a rank's snapshot buffers, block encode and decode), ``exchange``
(the nonblocking parity exchange and the recovery's decode/re-encode traffic),
``strategy`` (the plug-in).
"""

from mpiec.strategies.ecsnap.strategy import ErasureCodedSnapshots

__all__ = ["ErasureCodedSnapshots"]
