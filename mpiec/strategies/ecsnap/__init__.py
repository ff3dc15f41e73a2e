"""``ecsnap``: erasure-coded in-memory snapshots (see ``strategy`` for the lifecycle and invariants).

Modules: ``geometry`` (which shards are coded together, who holds their parity),
``snapshot`` (a rank's snapshot buffers, block encode and decode), ``exchange``
(the nonblocking parity exchange and the recovery's decode/re-encode traffic),
``schedule`` (trainer 0's snapshot decisions), ``agents`` (the per-role agents),
``strategy`` (the plug-in: parameters and the factory of the agents).
"""

from mpiec.strategies.ecsnap.strategy import ErasureCodedSnapshots

__all__ = ["ErasureCodedSnapshots"]
