"""``cpr``, ``cpr-mfu``, ``cpr-ssu``: checkpoints with partial recovery (Maeng et al., MLSys'21).

Full checkpoints are the checkpoint kit's parts (``strategies.checkpointing.kit``: the same
``Schedule`` on trainer 0's header word, the same parts through ``mpiec.storage.checkpoint``, the
coordinator commits the manifests), composed with cpr's own parts. What differs is
the recovery: on a server failure the plan is ``Scope.REPLACED``: only the replacement loads its
shard's newest complete checkpoint (``cpr-mfu`` / ``cpr-ssu``: then the newer partial
checkpoints on top), every other rank keeps its state and training goes on from the agreed
committed step. The failed shard's updates since its checkpoint are lost: the run is **not**
lossless (its checksum differs from the failure-free one). A trainer-only failure loses nothing
(``COMMITTED``: the runtime's peer copy of the dense replica). When every trainer died, ``cpr``
falls back to ``ckpt``'s full rollback.

Interval: ``strategy.interval`` (steps), or ``strategy.interval_s``, else from the target PLS
(``strategy.target_pls``): ``T_ckpt = 2 · N_shards · MTBF · PLS`` with the MTBF from
``failures.mtbf_s`` or the kill plan (``checkpointing.expected_mtbf_s``), else one failure per run.

Variants (partial checkpoints of a row subset only, every ``mfu_every`` / ``ssu_every`` steps, by
default a quarter of the full interval — in seconds when that is in seconds —, decided by trainer
0 like the full ones (the ``schedule.partial`` field of its header word); each server writes and
commits its own partial into ``<ckpt dir>/partial/server-<i>``, so a partial is complete as soon as its
server wrote it):

* ``cpr-mfu``: per-row access counters on the servers' pull path (``on_pull``); the
  ``mfu_fraction`` most frequently pulled rows are saved;
* ``cpr-ssu``: the rows pulled in a sub-sample of the steps (``ssu_rate``; step ``s`` is in the
  sample when a hash of ``(seed, s)`` falls below the rate) during the current and the previous
  full-checkpoint interval are saved (the sample's picture of the hot rows).

Figures (``summary``): ``lost_updates`` = row updates of the failed shards that the restore did
not bring back (``ledger``: the servers' counts travel in the ``ledger.updates`` field of their
header words). ``pls`` = the paper's portion of lost samples: samples whose embedding updates were lost /
samples trained = Σ over failures of (steps since the restored *full* checkpoint × shards lost /
N_shards) / steps (partial checkpoints do not shorten it: their gain shows in ``lost_updates``).
``pls_predicted`` = ``T_ckpt / (2 · N_shards · MTBF)``. The ``checkpoints`` dataset gets one row
per checkpoint: kind ``full``, ``mfu`` or ``ssu`` with the bytes of all its parts.

Modules: ``strategy`` (the three strategies, their keys and interval rule, their agents composed
of the kit's parts and these), ``recovery`` (the coordinator's partial-recovery plan and PLS
figures, a replacement's restore), ``partials`` (row selections, trainer 0's full-or-partial
decision, a server's partial store, the coordinator's record of the partials), ``ledger`` (the
lost-update accounting).
"""

from mpiec.strategies.cpr.partials import ssu_sampled
from mpiec.strategies.cpr.strategy import (
    CprMfuParams,
    CprParams,
    CprSsuParams,
    PartialRecovery,
    PartialRecoveryMFU,
    PartialRecoverySSU,
    cpr_interval,
    pls_interval,
)

__all__ = ["CprMfuParams", "CprParams", "CprSsuParams", "PartialRecovery", "PartialRecoveryMFU",
           "PartialRecoverySSU", "cpr_interval", "pls_interval", "ssu_sampled"]
