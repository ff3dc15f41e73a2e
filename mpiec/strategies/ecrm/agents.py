"""``ecrm``'s agents and parts, one per role, each holding only what its role needs.

* ``EcrmServer`` (a part): a data server's ``Member`` (with its ``Source``): after every apply it stages
  the old XOR new bytes of the updated rows for the parity holders of their stripes (batched in
  its commit window with ``parity_every > 1``), serves degraded reads while its rows are rebuilt;
  under rotated placement it is a holder too;
* ``EcrmParity``: a dedicated parity rank's ``Member`` (a holder only), in lockstep with the servers;
* ``EcrmTrainer`` (a part): the row gradients it pushed in the last steps, replayed to a rebuilt server;
* ``EcrmCoordinator`` (a part): the plan (the tolerance check, or the fallback's rollback; a shrink's
  handover of the dropped servers' rows to the survivors, ``handover``);
* ``EcrmSpare``: a spare; it loaded the code's kernels at start-up.

With ``strategy.fallback = "ckpt"`` the coordinator, trainers and servers are composed
(``strategies.compose``) of the checkpoint kit's parts for their role (``CheckpointKit.fallback``,
under the fallback's config) and ecrm's part: the kit's parts write, commit and restore the
checkpoints (a restore only in a ROLLBACK), ecrm's coordinator part plans and, beyond the code's
tolerance, asks the kit's ``RollbackPlanner`` (``rollback``) for the rollback. Without the
fallback the same parts are composed alone.

Invariants: the agents never change what training computes (parity work only reads the rows);
a hook of a member of ``servers`` runs its collectives in the same order on every member
(``member``'s invariants).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from mpiec.layout import TRAINER, servers_rank
from mpiec.strategies.api.agents import Agent, ParityAgent
from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.cover import Redundancy
from mpiec.strategies.api.plan import Failure, RecoveryPlan, Scope
from mpiec.strategies.ecrm.handover import handover_server, handover_trainer
from mpiec.strategies.ecrm.rebuild import rebuild_parity, rebuild_server, rebuild_trainer
from mpiec.strategies.ecrm.stripes import residue_holders, stripe_losses
from mpiec.strategies.ecrm.transfer import RebuildError

if TYPE_CHECKING:
    from mpiec.layout import Slot
    from mpiec.strategies.api.base import ServerShard
    from mpiec.strategies.api.env import RankEnv, ShardState
    from mpiec.strategies.checkpointing.kit import RollbackPlanner
    from mpiec.strategies.ecrm.member import Member
    from mpiec.strategies.replay import Pushed


class EcrmServer(Part):
    """A data server's part: its ``member`` (source, maybe holder), its ``shard`` (the replay
    applies to it); ``figures``: the strategy's own summary keys. After the fallback's parts."""

    def __init__(self, env: RankEnv, member: Member, shard: ShardState, figures: dict[str, Any]) -> None:
        self.env = env
        self.member = member
        self.shard = shard
        self.figures = figures

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        """While rows are lost, decode the requested ones before they are served (degraded read)."""
        if self.member.rebuilder is not None:
            self.member.rebuilder.degraded(slots)

    def overlap(self, step: int) -> None:
        self.member.overlap(step)

    def redundancy(self) -> Redundancy | None:
        """The parity rows this server holds (None: it holds none, e.g. with dedicated parity ranks)."""
        store = self.member.store
        if store is None or not store.stripes.size:
            return None
        return Redundancy(store.array, store.stripes, store.members)

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        """Stage the deltas of ``step`` and post them (at a commit), then drain when the step
        drains. A peer failure in the drain leaves ``step`` applied, not completed: this step's
        deltas may have reached only some holders, so the survivors agree on the step before and
        undo this one (``recovery.reconcile``); counted done, a lost member's parity would lag the
        agreed step and the rebuild replay it, needing every trainer's gradients (a trainer dying
        in the same recovery took its own: the run was lost)."""
        m = self.member
        src = m.source
        assert src is not None and old is not None  # a server is a source; ecrm needs the old rows
        global_rows = src.global_rows()
        rows = global_rows[slots]
        if not replayed:
            m.pipeline.poll()  # deltas of earlier steps that arrived meanwhile
        win = src.window
        if m.every > 1 and not replayed:
            commit = m.commit_now(step)
            if not commit or win.base != step - 1:  # batched: into the window, sent at the commit
                win.add(slots, old)
                if commit:
                    ws, wold = win.rows()
                    m.pipeline.stage(step, global_rows[ws], src.delta(ws, wold, m.width), base=win.base,
                                     old=(ws, wold))
                    self.commit(step)
                else:
                    m.pipeline.note_retained(win.nbytes)
                self.complete(step)
                return
        if m.code.name == "sum":
            new = src.table()[slots]
            payload = np.ascontiguousarray(m.code.delta(old, new)).view(np.uint8).reshape(slots.size, -1)
        else:
            assert delta is not None  # ecrm needs the deltas (``needs_delta``)
            payload = delta
        m.pipeline.stage(step, rows, payload)
        if replayed:
            win.reset(step)
        else:
            self.commit(step)
            self.complete(step)

    def commit(self, step: int) -> None:
        """The deltas of ``step`` are staged; post them, open the next window."""
        m = self.member
        assert m.source is not None
        m.source.window.reset(step)
        m.commits += 1
        m.pipeline.post(step)

    def complete(self, step: int) -> None:
        self.member.steps_run += 1
        self.member.drain(step)

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        self.member.end_step(step)

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool | None:
        if plan.scope is Scope.ROLLBACK:
            return None  # the fallback's restorer (none: no part loads it, the restore fails)
        return True  # a replaced server's rows come from ``rebuild``, not from a saved copy

    def rebuild(self, plan: RecoveryPlan) -> bool:
        return self.member.rebuild(plan, lambda: rebuild_server(self.member, self.shard, plan))

    def handover(self, plan: RecoveryPlan) -> ServerShard | None:
        """The dropped servers' rows decoded on the survivors (``handover``)."""
        return handover_server(self.member, self.shard, plan)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.member.on_recovered(plan)

    def summary(self) -> dict[str, Any]:
        return {**self.figures, **self.member.figures()}


class EcrmParity(ParityAgent):
    """A dedicated parity rank: a holder in lockstep with the servers (``member``)."""

    def __init__(self, env: RankEnv, member: Member, figures: dict[str, Any]) -> None:
        super().__init__(env)
        self.member = member
        self.figures = figures

    def on_pull(self, step: int) -> None:
        if self.member.rebuilder is not None:  # the servers' degraded reads
            self.member.rebuilder.degraded(None)

    def overlap(self, step: int) -> None:
        self.member.overlap(step)

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        """The servers posted ``step``'s deltas in their ``after_apply``: post this rank's part."""
        m = self.member
        m.steps_run += 1
        m.pipeline.poll()
        if m.commit_now(step):
            m.commits += 1
            m.pipeline.post(step)
        m.drain(step)
        m.end_step(step)

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        return True  # parity rows come from ``rebuild`` (or, after a rollback, ``on_recovered``)

    def rebuild(self, plan: RecoveryPlan) -> bool:
        return self.member.rebuild(plan, lambda: rebuild_parity(self.member, plan))

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.member.on_recovered(plan)

    def summary(self) -> dict[str, Any]:
        return {**self.figures, **self.member.figures()}


class EcrmTrainer(Part):
    """A trainer's part: it keeps the row gradients it pushed in the last ``keep`` steps
    (``pushed``): a rebuilt server replays them. After the fallback's parts."""

    def __init__(self, env: RankEnv, keep: int, figures: dict[str, Any]) -> None:
        self.env = env
        self.keep = keep
        self.figures = figures
        self.pushed: dict[int, Pushed] = {}
        self.peak = 0

    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        self.pushed[step] = (slots, counts, grads)  # fresh arrays every step: kept, not copied
        for s in [s for s in self.pushed if s <= step - self.keep]:
            del self.pushed[s]
        self.peak = max(self.peak, sum(a.nbytes + b.nbytes + c.nbytes for a, b, c in self.pushed.values()))

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool | None:
        if plan.scope is Scope.ROLLBACK:
            return None  # the fallback's restorer (none: no part loads it, the restore fails)
        return True

    def handover(self, plan: RecoveryPlan) -> None:
        """Send the dropped servers' hosts the gradients the rebuilt rows still need."""
        handover_trainer(self.env, self.pushed, plan)

    def rebuild(self, plan: RecoveryPlan) -> bool:
        try:
            rebuild_trainer(self.env, self.pushed, plan)
        except RebuildError as exc:
            self.env.event("rebuild_failed", plan.step, detail=str(exc)[:250])
            return False
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        for s in [s for s in self.pushed if s > plan.restored]:
            del self.pushed[s]

    def summary(self) -> dict[str, Any]:
        # a trainer sends the replay; the servers count the steps they replayed
        return {**self.figures, "retained_grads_peak_bytes": self.peak, "replayed_steps": 0}


class EcrmCoordinator(Part):
    """The coordinator's part: plans the recoveries: a rebuild from the survivors within the
    code's tolerance ``r``, else the fallback's rollback (``fallback``: the kit's planner, whose
    plan it re-labels), else the run is lost (the line names the stripe). Before the kit's
    ``CommitterPart`` (which commits the fallback's checkpoints and keeps their rows)."""

    def __init__(self, env: RankEnv, r: int, code: str, immediate: bool, figures: dict[str, Any],
                 fallback: RollbackPlanner | None = None) -> None:
        self.env = env
        self.r = r
        self.code = code
        self.immediate = immediate
        self.figures = figures
        self.fallback = fallback
        self.handing_over = False  # a handover planned and not completed (``on_shrink``)
        # a member's verification found stripes the code cannot locate: (step, stripes, the last
        # step before which every stripe passed a check), until a recovery completes
        self.unlocated: tuple[int, str, int] | None = None

    def on_message(self, source: Slot, payload: Any) -> None:
        """Member 0's ``("unlocated", step, stripes, clean_at)`` (``Member.unlocated``), received before
        the failure its members raise next."""
        if isinstance(payload, tuple) and payload and payload[0] == "unlocated":
            self.unlocated = (int(payload[1]), str(payload[2]), int(payload[3]))

    def resume_steps(self) -> list[int]:
        """Nothing to ``--resume`` from: a fallback checkpoint records ckpt's config, and resumes as
        ckpt."""
        return []

    def plan(self, failure: Failure) -> RecoveryPlan:
        if self.unlocated is not None and self.fallback is not None:  # whatever else happened meanwhile
            step, stripes, clean = self.unlocated
            before = dataclasses.replace(failure, committed=min(failure.committed, clean))
            plan = self.fallback.rollback(before)
            plan.reason = (f"stripe(s) {stripes} found corrupted after step {step} and not located (r = "
                           f"{self.r}): rollback to the newest fallback checkpoint at or before step "
                           f"{clean}, the last check every stripe passed")
            return plan
        if self.handing_over:  # the ranks' rows may be half re-placed: only a rollback is sure
            why = "a failure interrupted the handover of the dropped servers' rows"
            if self.fallback is None:
                return RecoveryPlan.abort(f"{why}; without strategy.fallback = 'ckpt' nothing can "
                                          "restore them")
            plan = self.fallback.plan(failure)
            plan.reason = f"{why}: rollback to the fallback checkpoint"
            return plan
        S = self.env.n_servers
        placement = self.env.placement
        lost = {r: s for s in failure.dead if (r := servers_rank(s, S)) is not None}
        r = self.r
        for residue, members in sorted(stripe_losses(placement, set(lost)).items()):
            if len(members) > r:
                holders = residue_holders(placement, residue)
                names = ", ".join(f"member {m} on {lost[holders[m]]}" for m in members)
                if self.fallback is not None:
                    plan = self.fallback.plan(failure)
                    plan.reason = (f"stripe {residue} lost {len(members)} members (r = {r}): rollback to the "
                                   f"fallback checkpoint")
                    return plan
                return RecoveryPlan.abort(
                    f"stripe {residue} (and every stripe s with s % {S} == {residue}) lost {len(members)} "
                    f"members ({names}); {self.code} with r = {r} rebuilds at most {r} per stripe")
        if (self.fallback is not None and not self.immediate and lost
                and any(s.role == TRAINER for s in failure.dead)):
            # the rebuild would replay the dead trainer's gradients of the steps the overlapped
            # parity exchange had not applied: gone with it (see rebuild.py), so roll back instead
            plan = self.fallback.plan(failure)
            plan.reason = "a trainer died with a server: rollback to the fallback checkpoint"
            return plan
        return RecoveryPlan(scope=Scope.COMMITTED)

    def on_grow(self, plan: RecoveryPlan) -> bool:
        """Every holder re-encodes the parity of the new stripes from the moved rows
        (``Member.on_recovered``); the fallback's checkpoints get their new parts. Not with
        dedicated parity ranks: they keep the placement they were built for. (After a yes, the
        fallback's planner, a later part, drops the checkpoint in flight.)"""
        return not self.env.cfg.layout.parity_ranks

    def on_shrink(self, failure: Failure, plan: RecoveryPlan) -> RecoveryPlan:
        """A handover (``handover``): the survivors decode the dropped servers' rows and re-place
        every row, nothing re-executed; every holder then re-encodes the parity of the new stripes
        (``Member.on_recovered``). Where a handover cannot be (``handover_refusal``), the
        fallback's rollback onto the new placement, else the run ends saying why."""
        # (dedicated parity ranks: the runtime refused the shrink already, ``shrink_refusal``)
        if plan.scope is Scope.ROLLBACK:
            # ``plan`` fell back already (a failure interrupted a handover: the rows may be half
            # re-placed; a stripe beyond r; a trainer with a server): the fallback's rollback loads
            # rows by global id onto the new placement. Handing over instead crashed every server
            # (its members still had the interrupted handover's placement)
            return plan
        why = self.handover_refusal(failure, plan)
        if not why:
            self.handing_over = True
            plan.handover = True
            plan.reason = "the dropped servers' rows decoded on the survivors, re-placed, parity re-encoded"
            return plan
        if self.fallback is None:
            return RecoveryPlan.abort(f"ecrm cannot re-place the rows onto fewer servers: {why}; set "
                                      "strategy.fallback = 'ckpt', or give the run spares")
        plan = self.fallback.on_shrink(failure, plan)
        plan.reason = f"rollback to the fallback checkpoint onto fewer servers ({why}), parity re-encoded"
        return plan

    def handover_refusal(self, failure: Failure, plan: RecoveryPlan) -> str:
        """Why the survivors cannot decode the dropped servers' rows themselves, or ""."""
        if any(s.role == TRAINER for s in failure.dead):
            return "a trainer died in the same failure (with the gradients the decoded rows may need)"
        if plan.assignments or plan.spawn:
            return "another dead slot is taken over in the same recovery"
        return ""

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.handing_over = False
        self.unlocated = None

    def summary(self) -> dict[str, Any]:
        return dict(self.figures)


class EcrmSpare(Agent):
    """A spare: nothing to protect; it reports the strategy's own figures like every rank."""

    def __init__(self, env: RankEnv, figures: dict[str, Any]) -> None:
        super().__init__(env)
        self.figures = figures

    def summary(self) -> dict[str, Any]:
        return dict(self.figures)


__all__ = ["EcrmCoordinator", "EcrmParity", "EcrmServer", "EcrmSpare", "EcrmTrainer"]
