"""``ecsnap``: erasure-coded in-memory snapshots (see ``strategy`` for the lifecycle and invariants).

Modules: ``geometry`` (which shards are coded together, who holds their parity),
``snapshot`` (a rank's snapshot buffers, block encode and decode), ``exchange``
(the nonblocking parity exchange and the recovery's decode/re-encode traffic),
``schedule`` (trainer 0's snapshot decisions), ``agents`` (the per-role agents),
``strategy`` (the plug-in: parameters and the factory of the agents).

The names below are the package's public surface: the strategy, and the snapshot copy and block
encode that ``mpiec.benchmarks.checkpoint_paths`` times (a benchmark imports no inner module).
"""

from mpiec.strategies.ecsnap.snapshot import as_bytes, mac_into
from mpiec.strategies.ecsnap.strategy import ErasureCodedSnapshots

__all__ = ["ErasureCodedSnapshots", "as_bytes", "mac_into"]
