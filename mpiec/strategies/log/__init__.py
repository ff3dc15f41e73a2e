"""``log``: checkpoints + trainers' update logs, lossless partial recovery (see ``strategy``).

Modules: ``spill`` (the on-disk record format, checksummed), ``store`` (a trainer's log:
memory up to a bound, spill files beyond, trimmed at committed checkpoints), ``strategy``
(the factory and its agents: ``ckpt``'s agents for the checkpoints, the trainers' logs, the
coordinator's plan, the replacement's restore and the replay through
``mpiec.strategies.replay``).

The names below are the package's public surface: the strategy, and the log's spill and read-back
that ``mpiec.benchmarks.checkpoint_paths`` times (a benchmark imports no inner module).
"""

from mpiec.strategies.log.spill import read_record
from mpiec.strategies.log.store import LogStore
from mpiec.strategies.log.strategy import UpdateLog

__all__ = ["LogStore", "UpdateLog", "read_record"]
