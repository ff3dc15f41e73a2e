"""CPR's partial recovery, as parts (``strategies.compose``) beside the checkpoint kit's.

* ``PartialRecoveryPlanner`` (coordinator): on a server failure the plan is ``Scope.REPLACED``
  (only the replacements restore, everybody else keeps its state); with no dead server nothing
  was lost (``COMMITTED``, whatever ``on_trainer_failure`` says); when no original trainer
  survives it abstains, and the kit's ``RollbackPlanner`` after it plans the full rollback. It
  keeps the PLS figures (``pls``, ``pls_predicted``, ``pls_target``, ``pls_failures``);
* ``ReplacementRestore`` (server): a replacement's restore in a recovery other than a rollback
  (the kit's ``RestorerPart`` answers those): the newest full checkpoint whose part verifies,
  then the variant's partials on top; the data ranks then agree on the full checkpoint each
  replaced server restored (``ledger.exchange_restored``).

Invariants: ``pls`` = Σ over failures of (steps since the restored *full* checkpoint × shards
lost) / (N_shards × steps); ``pls_predicted`` = ``T_ckpt / (2 · N_shards · MTBF)``. A partial
recovery counts in the shared ``Restorer``'s figures (``restores``, ``restore_s``), as a rollback's
restore does; the servers are not grown back (``on_grow``), as before the kit's parts.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore
from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.plan import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing import expected_mtbf_s, measured_pls, predicted_pls
from mpiec.strategies.cpr.ledger import exchange_restored

if TYPE_CHECKING:
    from mpiec.strategies.api.env import RankEnv, ShardState
    from mpiec.strategies.checkpointing import Interval, ManifestCommitter, Restorer
    from mpiec.strategies.cpr.partials import ServerPartials


class PartialRecoveryPlanner(Part):
    """The coordinator's plan of a failure (placed before the kit's ``RollbackPlanner``, which
    plans the rollback it leaves) and the PLS figures of the run."""

    def __init__(self, env: RankEnv, store: CheckpointStore, committer: ManifestCommitter, interval: Interval,
                 target_pls: float) -> None:
        self.env = env
        self.store = store
        self.committer = committer
        self.interval = interval
        self.target_pls = target_pls
        self.pending_loss: dict[Slot, int] = {}  # dead server -> steps since the full checkpoint
        self.losses: list[tuple[int, int]] = []  # (steps since the restored full checkpoint, shards)

    def plan(self, failure: Failure) -> RecoveryPlan | None:
        dead_servers = [s for s in failure.dead if s.role == SERVER]
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not dead_servers:
            return RecoveryPlan(Scope.COMMITTED, reason="no embedding state lost")
        if not originals:  # no dense replica survives: the RollbackPlanner's full rollback
            return None
        self.committer.drop_pending()
        fulls = [s for s in self.store.complete_steps() if s <= failure.committed]
        since = failure.committed - (fulls[0] if fulls else -1)
        self.pending_loss = {s: since for s in dead_servers}
        return RecoveryPlan(Scope.REPLACED, reason=f"partial recovery of {[str(s) for s in dead_servers]}: "
                            f"{since} steps of their updates lost")

    def on_grow(self, plan: RecoveryPlan) -> bool:
        """The servers are not grown back: a replacement restores its own shard's parts (the run
        cannot shrink either: ``shrinks`` is not declared)."""
        return False

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if plan.scope is Scope.REPLACED:
            self.losses += [(since, 1) for since in self.pending_loss.values()]
            self.pending_loss = {}

    def predicted(self) -> float:
        """``pls_predicted``: the interval and the MTBF in one unit (a step's time from the run's)."""
        cfg = self.env.cfg
        mtbf_s, mtbf_steps = expected_mtbf_s(cfg)
        steps, shards = cfg.training.steps, cfg.layout.servers
        t_step = self.env.now() / max(steps, 1)
        interval = float(self.interval.steps) if self.interval.steps else None
        if mtbf_s is not None:
            interval_s = self.interval.seconds or (interval * t_step if interval else 0.0)
            return predicted_pls(interval_s, shards, mtbf_s) if interval_s > 0 else math.nan
        mtbf = mtbf_steps if mtbf_steps is not None else float(steps)
        if interval is None:
            interval = (self.interval.seconds or 0.0) / t_step if t_step > 0 else 0.0
        return predicted_pls(interval, shards, mtbf) if interval > 0 else math.nan

    def summary(self) -> dict[str, Any]:
        cfg = self.env.cfg
        return {"lost_updates": 0, "pls": measured_pls(self.losses, cfg.layout.servers, cfg.training.steps),
                "pls_predicted": self.predicted(), "pls_target": self.target_pls,
                "pls_failures": len(self.losses)}


class ReplacementRestore(Part):
    """A server's restore outside a rollback (abstains in one): the newest full checkpoint at or
    before the committed step whose part verifies (else the initial shard), through the shared
    ``Restorer``'s ``load`` / ``reset``, then ``partials`` on top (None: plain cpr)."""

    def __init__(self, env: RankEnv, role: ShardState, store: CheckpointStore, restorer: Restorer,
                 partials: ServerPartials | None) -> None:
        self.env, self.role, self.store, self.restorer, self.partials = env, role, store, restorer, partials
        self.restored_base = -1  # a replacement: the full checkpoint its restore used

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool | None:
        if plan.scope is Scope.ROLLBACK:
            return None  # the kit's RestorerPart
        t0 = time.perf_counter()
        base = -1
        for s in [s for s in self.store.complete_steps() if s <= step] + [-1]:
            try:  # the newest full checkpoint whose part verifies
                if s < 0:
                    self.restorer.reset()
                else:
                    self.restorer.load(s)
                base = s
                break
            except (CheckpointError, ValueError) as exc:
                self.env.event("restore_failed", plan.step, detail=str(exc)[:250])
        self.restored_base = base
        applied = self.partials.load_on_top(plan, base, step, self.role) if self.partials is not None else []
        kind = self.partials.kind if self.partials is not None else "partial"
        self.env.event("restore", plan.step, detail=f"partial recovery: full checkpoint {base}, "
                       f"{len(applied)} {kind} checkpoints on top, committed step {step}")
        self.restorer.record(time.perf_counter() - t0)
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if plan.scope is Scope.REPLACED:
            mine = (self.env.slot.index, self.restored_base) if self.env.slot in plan.replaced else None
            exchange_restored(self.env, mine)


__all__ = ["PartialRecoveryPlanner", "ReplacementRestore"]
