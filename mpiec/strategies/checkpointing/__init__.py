"""Checkpointing as components that strategies compose (never inherit), and the rules they share.

* ``rules``: where checkpoints go, the storage model, Young's interval, CPR's PLS model (pure
  functions of the config; re-exported here, ``from mpiec.strategies.checkpointing import
  young_interval``);
* ``store``: a rank's ``CheckpointStore`` on the run's root, the names of a checkpoint's parts;
* ``schedule``: ``Interval`` (a rule's result) and ``Schedule`` (trainer 0 decides when);
* ``writer``: ``PartWriter`` (one rank's part, sync or in the background, reported to the
  coordinator);
* ``committer``: ``ManifestCommitter`` (the coordinator commits a checkpoint once every part is in);
* ``restorer``: ``Restorer`` (a rank loads a checkpointed step) and ``rollback_plan``;
* ``chain``: ``ChainTracker`` (the rows changed since a baseline: differential checkpoints).

``strategies.ckpt`` shows how they fit: trainer 0's agent holds the ``Schedule`` and a
``PartWriter`` of the dense replica, each server's agent a ``PartWriter`` of its shard, every
trainer and server a ``Restorer``, the coordinator the ``ManifestCommitter``.
"""

from mpiec.strategies.checkpointing.chain import ChainTracker
from mpiec.strategies.checkpointing.committer import ManifestCommitter
from mpiec.strategies.checkpointing.restorer import Restorer, load_shard, rollback_plan
from mpiec.strategies.checkpointing.rules import (
    checkpoint_root,
    expected_mtbf_s,
    interval_for_pls,
    measured_pls,
    predicted_pls,
    root_directories,
    storage_of,
    young_interval,
)
from mpiec.strategies.checkpointing.schedule import CHECKPOINT_FIELD, Interval, Schedule
from mpiec.strategies.checkpointing.store import TRAINER_PART, claim_root, full_parts, open_store, server_part
from mpiec.strategies.checkpointing.writer import PART_US_FIELD, PartWriter

__all__ = [
    "CHECKPOINT_FIELD", "PART_US_FIELD", "TRAINER_PART", "ChainTracker", "Interval", "ManifestCommitter",
    "PartWriter", "Restorer", "Schedule", "checkpoint_root", "claim_root", "expected_mtbf_s", "full_parts",
    "interval_for_pls", "load_shard", "measured_pls", "open_store", "predicted_pls", "rollback_plan",
    "root_directories", "server_part", "storage_of", "young_interval",
]
