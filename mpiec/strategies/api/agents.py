"""The per-role agents a strategy is made of: each with only its own hooks and state.

A strategy (``strategies.base.Strategy``) is a factory: on every rank the runtime asks it for the
agent of the rank's role — the ``Coordinator`` on the monitor, a ``TrainerAgent``, a
``ServerAgent``, a ``ParityAgent`` on a dedicated parity rank, a plain ``Agent`` on a spare — and
calls that agent's hooks. A spare promoted to a slot gets a fresh agent of the slot's role. The
classes here are the ``none`` behaviour (no protection): a strategy overrides what it needs.

Call order on a trainer, server or parity rank, every step ``s`` (``roles.driver`` owns it)::

    before_step(s) → header_word(s) into the step header → the step's exchange
      (servers: on_pull, rows sent, overlap, gradients in, apply, after_apply;
       trainers: pull, compute, push, after_push, dense all-reduce;
       parity: on_pull, overlap)
    → after_step(s, words) → background(s)

Recovery (``roles.recovery``): the coordinator's ``plan(failure)``; every rank reconciles;
replacements are built (fresh agents); under ROLLBACK, ``restore(plan, step, replaced)`` on
every trainer, server and parity agent (in step: it may communicate) and no ``rebuild``; under
other scopes the runtime copies the dense replica to replaced trainers, ``restore`` runs on
replaced servers only, then ``rebuild(plan)`` on every agent (collective); the outcome is agreed;
then ``on_recovered(plan)`` on every agent.

Invariants every agent keeps: hooks are deterministic functions of (config, step, data given):
they may add work and traffic but never change what training computes in a failure-free run;
state moves through the role's ``state()`` / ``load_state()`` (``strategies.env``), never by
reaching into another object's fields; figures for the result file come from ``summary()``,
whose every key has a merge rule in the strategy's ``summary_rules``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mpiec.strategies.api.plan import Failure, RecoveryPlan

if TYPE_CHECKING:
    from mpiec.layout import Slot
    from mpiec.strategies.api.base import ServerShard
    from mpiec.strategies.api.cover import Redundancy
    from mpiec.strategies.api.env import RankEnv


class Agent:
    """Hooks every agent has (every rank, spares included): recovery and results."""

    def __init__(self, env: RankEnv) -> None:
        self.env = env

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Every rank, scopes REPLACED and COMMITTED, after the replacements are built and the
        dense replica is copied, before the restore is agreed: rebuild lost state from the
        survivors. Collective: every rank calls it (agents with nothing to do return at once;
        others may communicate on ``servers`` / ``data``). False: the state cannot be rebuilt and
        the run is lost (say why in a ``rebuild_failed`` event). A peer's death raises
        ``PeerFailure`` and restarts the recovery, so what it changes must survive a second try
        (communicate inside ``mpiec.comm.guard``, which turns an MPI error into ``PeerFailure``).
        ``comms.servers`` includes the dedicated parity ranks (``layout.parity_ranks``): a strategy
        whose servers run collectives on it must have its ``ParityAgent`` join them."""
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        """Every rank, after the restore, before training resumes at ``plan.restored + 1``.
        Drop per-step bookkeeping of steps that will be re-executed. Local."""

    def summary(self) -> dict[str, Any]:
        """Figures for the result's ``summary`` group (keys in the strategy's ``summary_rules``).
        Every rank, once, after training (a background writer is finished here). Local."""
        return {}


class StepAgent(Agent):
    """Hooks of a rank in the step loop (trainer, server, parity)."""

    def before_step(self, step: int) -> None:
        """Before ``step`` starts on this rank. Local."""

    def header_word(self, step: int) -> int:
        """A non-negative int64 this rank puts in ``step``'s header (trainers and servers; build it
        with the strategy's ``HeaderLayout``). Every data rank receives every data rank's word in
        ``after_step(words=...)``: how a decision taken on one rank (e.g. trainer 0's time-based
        checkpoint) reaches all, in step. Local."""
        return 0

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        """``step`` is complete on this rank; ``words`` are every data rank's ``header_word`` of
        the step, indexed by data rank (None on a parity rank). Local (may tell the monitor)."""

    def background(self, step: int) -> None:
        """Right after ``after_step``: poll background work (writers, ...). Local."""

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        """Load the state of ``step``. ROLLBACK: called on every trainer, server and parity rank, in
        step, with the same candidate, until one works everywhere: it may communicate among them
        (ecsnap gathers a replaced server's shard here), and it restores a replaced trainer's dense
        state too (the runtime copies none under a rollback, and ``rebuild`` is not called). Other
        scopes: replaced servers only, at ``plan.committed``: local. False: the state is unusable
        (e.g. a corrupted part); the runtime agrees on the outcome over every rank and tries the
        plan's next candidate."""
        return False

    def handover(self, plan: RecoveryPlan) -> ServerShard | None:
        """A shrink without a rollback (``plan.handover``, which only this strategy's
        ``Coordinator.on_shrink`` answers): the dropped servers' rows at ``plan.committed``.

        On every trainer, server and parity rank that was in the step loop, with the agent built
        for the layout before the failure (its placement, its kept state), after the survivors'
        communicators are rebuilt and reconciled, before the roles are rebuilt for the new layout;
        collective over ``data`` and ``servers``. A server returns the rows of a dropped server it
        rebuilt (a shard of the old placement) or None; the runtime then moves every row to its
        owner under the new placement (``roles.server.move_rows``) and the fresh agents run
        ``rebuild`` and ``on_recovered`` with ``plan.relayout`` as after a growth. Raises
        ``RebuildError`` on every rank alike when the rows cannot be rebuilt (the run is lost)."""
        raise NotImplementedError(f"strategy {self.env.cfg.strategy.name} answered a shrink with a "
                                  "handover but its agents do not implement it")


class TrainerAgent(StepAgent):
    """A trainer's agent."""

    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        """The row gradients this trainer pushed at ``step`` (local slots grouped by server in
        data-rank order, ``counts`` per data rank), while they travel: e.g. keep them for replay.
        Local."""


class ServerAgent(StepAgent):
    """A server's agent."""

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        """Local ``slots`` were requested by the trainers at ``step`` (−1: an evaluation round).
        Every server calls it at the same point of every pull (collectives on ``servers`` match)."""

    def overlap(self, step: int) -> None:
        """Every training step, once the rows are sent and while the gradients are awaited (the
        trainers compute): work here is off the critical path. Every server and parity rank calls
        it at the same point (collectives on ``servers`` match)."""

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        """Rows ``slots`` (sorted, unique) were updated at ``step``.

        The new rows are the shard's table at ``slots``; ``old`` is a copy of the rows before the
        update (the strategy's ``needs_old``), ``delta`` their old XOR new bytes as uint8
        ``[len(slots), row_bytes]`` (``needs_delta``); None otherwise. ``replayed``: the update
        re-applies logged gradients.

        Right after the table took ``step``, before ``step`` completes on this server. A peer
        failure raised here leaves ``step`` applied but not completed; reconciliation undoes it
        from the server's undo record, so the hook needs no cleanup of the rows."""

    def redundancy(self) -> Redundancy | None:
        """The redundant rows this agent keeps in its server's memory (a code's parity rows), live:
        a planned silent corruption (``flip:server:I@step=N:of=parity``) flips a bit of one of them.
        Called at the start of a step, before its exchange, only when such a flip is due on this
        server. Default: None (no redundant rows kept here)."""
        return None


class ParityAgent(StepAgent):
    """A dedicated parity rank's agent (``layout.parity_ranks``): a member of ``servers`` only,
    in lockstep with the servers' ``on_pull`` and ``overlap``."""

    def on_pull(self, step: int) -> None:
        """Mirrors every server's ``on_pull`` (each pull of a step or an evaluation round, −1)."""

    def overlap(self, step: int) -> None:
        """Mirrors the servers' ``overlap`` of every training step."""


class Coordinator(Agent):
    """The monitor's agent: the run's coordinator. Decides recoveries and commits what the ranks
    report; never in the step loop."""

    def on_message(self, source: Slot, payload: Any) -> None:
        """A message an agent sent with ``env.tell_monitor`` (in order per source)."""

    def plan(self, failure: Failure) -> RecoveryPlan:
        """What the survivors do about ``failure``, after every survivor agreed on it; the runtime
        broadcasts the plan, so every rank acts on one plan. Default: the run is lost."""
        return RecoveryPlan.abort(f"strategy {self.env.cfg.strategy.name} does not recover from failures")

    def on_no_spare(self, failure: Failure, slot: Slot, plan: RecoveryPlan) -> RecoveryPlan:
        """``plan`` needs a spare for ``slot`` and none is left. Default: abort."""
        return RecoveryPlan.abort(f"no spare left for {slot.role} {slot.index}")

    def on_shrink(self, failure: Failure, plan: RecoveryPlan) -> RecoveryPlan:
        """``layout.replacement = "shrink"``: servers died with no spare left and the runtime
        re-places every row over the ``env.n_servers - len(dead)`` survivors (the placement of a
        run started with that many). Called on the monitor, before the plan is broadcast, with
        ``plan`` (this agent's ``plan(failure)``, a ROLLBACK too), only for a strategy that declares
        ``Strategy.shrinks`` (the runtime refuses the others with ``shrink_refusal``'s line); the
        answer must restore every server onto the new placement: a ROLLBACK (``checkpointing.rollback_plan``),
        or ``plan`` with ``handover`` set (the step agents rebuild the dropped servers' rows at the
        committed step, ``StepAgent.handover``, and nothing is re-executed), or abort. It is asked
        again when a failure cut the first answer short (the ranks' state may be half re-placed).
        Default: abort, saying why."""
        return RecoveryPlan.abort(f"strategy {self.env.cfg.strategy.name} cannot restore rows onto "
                                  "fewer servers (layout.replacement = shrink): give the run spares")

    def on_grow(self, plan: RecoveryPlan) -> bool:
        """``layout.grow_back_steps``: the runtime is about to grow the servers back at a step
        boundary (spawned processes; every row moves to its owner under the larger placement, the
        survivors' rows are sent, not restored, so no step is re-executed; every server gets a fresh
        agent). Monitor only, before the plan is broadcast. True if this strategy's state survives
        that (its agents rebuild what they need in ``on_recovered``, ``plan.relayout``); False keeps
        the servers as they are (trainers still grow). Default: False."""
        return False

    def resume_steps(self) -> list[int]:
        """``mpiec run --resume``, before training: the checkpointed steps every trainer and server
        can restore (``restore`` with scope ROLLBACK), newest first; [] when there is none."""
        return []

    def checkpoint_rows(self) -> list[tuple[Any, ...]]:
        """At the end: ``(step, kind, bytes, seconds, bits, rows, stall_s)`` of every checkpoint
        committed (``ResultWriter.add_checkpoint``'s arguments), for the ``checkpoints`` dataset."""
        return []


__all__ = ["Agent", "Coordinator", "ParityAgent", "ServerAgent", "StepAgent", "TrainerAgent"]
