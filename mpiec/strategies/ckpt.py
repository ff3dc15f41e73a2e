"""``ckpt``: periodic full checkpoints, full recovery (the XDL / TorchRec baseline).

The checkpoint kit alone (``strategies.checkpointing.kit``, composed by ``strategies.compose``):
trainer 0's agent holds the ``Schedule`` and writes the dense replica, every server writes its
shard (rows and optimizer state, with their global ids), each through a ``PartWriter``; the
coordinator's ``ManifestCommitter`` commits the manifest once every part of the step is there and
prunes old checkpoints; every trainer and server restores through a ``Restorer``.

Invariants:

* a checkpoint is taken after the same step on every rank: the decision is trainer 0's, carried
  in the ``checkpoint`` field of its step header word, so time-based and ``auto`` intervals stay
  consistent;
* on a server failure (or when every trainer died, or with ``on_trainer_failure = "rollback"``)
  every trainer and server rolls back to the newest complete checkpoint whose parts verify, and
  the steps since are re-executed; training is deterministic, so the run ends with the
  failure-free ``param_checksum``. With no checkpoint yet, the rollback goes to the initial
  state (step −1);
* a trainer-only failure needs no rollback by default: the servers hold the embeddings at the
  committed step and the replacement copies the dense replica from a surviving trainer (the
  runtime's peer copy);
* parts of a checkpoint that may never complete (written in an epoch that a failure ended) are
  never committed.

Interval (``strategy.interval``): a number of steps, or ``"auto"`` = Young's
``sqrt(2 · t_save · MTBF)`` with ``t_save`` the slowest part's write time measured at the first
checkpoint (taken after ``first`` steps; the servers put it in their header's ``writer.part_us`` field)
and the MTBF from ``failures.mtbf_s``, else from the kill plan, else one failure per run;
``strategy.interval_s`` sets a fixed interval in seconds instead (a number of steps, if given
too, decides). The summary says which rule chose the interval (``checkpoint_interval_rule``:
``given``, ``given-seconds``, ``young``; ``cpr`` adds ``pls``) and what it came to in steps
(``checkpoint_interval_steps``: the rule's steps, or for a rule in seconds the median gap between
the checkpoints taken).

Per checkpoint (the result's ``checkpoints`` dataset): kind, bytes and embedding rows of all its
parts, ``stall_s`` = the longest time a writer's training thread spent on it (the whole write in
``sync`` mode, the snapshot copy in ``async`` mode), ``seconds`` = the slowest part's total (its
stall plus, in ``async`` mode, its background write).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from mpiec.strategies.api import compose
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.checkpointing.kit import KIT_RULES, CheckpointKit, CheckpointParams

if TYPE_CHECKING:
    from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState


@dataclass(frozen=True)
class CkptParams(CheckpointParams):
    """The kit's keys, as they are."""


class FullCheckpoint(Strategy):
    """Periodic full checkpoints; no cross-key rule (``interval`` in steps wins over ``interval_s``)."""

    name = "ckpt"
    description = "periodic full checkpoints; on a failure every rank rolls back (XDL/TorchRec baseline)"
    Params = CkptParams
    recovers = True
    shrinks = True
    lossless = True
    cost = CostModel("rollback", interval="young")
    summary_rules: ClassVar[dict[str, str]] = dict(KIT_RULES)
    params: CkptParams
    kit: CheckpointKit

    def __init__(self, cfg: object) -> None:
        super().__init__(cfg)  # type: ignore[arg-type]
        self.kit = CheckpointKit(self.cfg, self.params)

    def coordinator(self, env: RankEnv) -> Coordinator:
        return compose.coordinator(self, env, *self.kit.coordinator_parts(env))

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        return compose.trainer(self, env, *self.kit.trainer_parts(env, role))

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        return compose.server(self, env, *self.kit.server_parts(env, role))


__all__ = ["CkptParams", "FullCheckpoint"]
