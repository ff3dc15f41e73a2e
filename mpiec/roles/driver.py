"""The step loop of every rank in it (trainer, server, parity): one owner of the hook order.

Owns the order in which a step runs and the strategy agent's hooks are called, for all three
roles, which implement ``SteppingRole`` (what differs: their exchange, their record, their
evaluation). Every step ``s``::

    kill switch → planned bit flips → world check (ULFM) → test stall → agent.before_step(s)
    → role.exchange(s, status, agent.header_word(s))   (calls the agent's in-exchange hooks)
    → completed = s → (shard digests, opt-in) → agent.after_step(s, words) → agent.background(s)
    → role.finish_step(...) → evaluation when due (failures now interrupt step s + 1)
    → role.after_step(s)

Invariants: ``ctx.progress.completed`` is ``s`` once the role's state holds step ``s`` and before the
agent's ``after_step``, on every role; a ``Diverged`` raised by an exchange (the trainers saw a
non-finite loss) ends the loop on every rank at the same step; every other exception (a peer
failure) propagates to the runner with ``completed`` at the last step this rank completed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from mpi4py import MPI

from mpiec.comm import PeerFailure, check_world
from mpiec.layout import TRAINER, Slot
from mpiec.roles import digests
from mpiec.roles.exchange import STATUS_DYING, STATUS_OK, Diverged
from mpiec.strategies.api.agents import ServerAgent

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.failures.stall import StallHook
    from mpiec.roles.context import RankContext
    from mpiec.strategies.api.agents import StepAgent
    from mpiec.strategies.api.plan import RecoveryPlan


class Role(Protocol):
    """Any role object (``runner.make_role``: ``Monitor``, ``Trainer``, ``Server``, ``Parity``,
    ``Spare``): what the runner and the recovery call on every rank."""

    def run(self) -> None:
        """Run until training ends on this rank (raises ``PeerFailure`` / ``EmulatedFailure``)."""

    def after_recovery(self, plan: RecoveryPlan) -> None:
        """After a recovery restored ``plan.restored``, before the role resumes."""

    def final_report(self) -> dict[str, Any]:
        """The role's part of this rank's final report (``runner.hand_in``)."""


class SteppingRole(Protocol):
    """A role in the step loop (``Trainer``, ``Server``, ``Parity``)."""

    stall: StallHook

    def resume(self) -> None:
        """Before the first step of a start or restart: redo an evaluation a failure interrupted."""

    def exchange(self, step: int, status: int, word: int) -> np.ndarray | None:
        """The step's communication and update, calling the agent's in-exchange hooks; returns every
        data rank's header word of the step (None on a parity rank). Raises ``Diverged``."""

    def finish_step(self, step: int, t_start: float, t_hooks: float) -> None:
        """After the agent's step hooks (``t_hooks`` seconds in them): the step's record."""

    def evaluate(self, step: int) -> None:
        """The evaluation after ``step`` (every role takes part in its pull rounds)."""

    def after_step(self, step: int) -> None:
        """Last thing of a step, after any evaluation (trainer 0: progress to the monitor)."""


class StateRole(Role, SteppingRole, Protocol):
    """A role with model state in the step loop (``Trainer``, ``Server``, ``Parity``): what the
    recovery's reconciliation and dense-replica copy call."""

    def state(self) -> dict[str, np.ndarray]:
        """The role's state (live arrays)."""

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Load a state ``state()`` returned (here or on a peer)."""

    def undo_last(self, committed: int) -> None:
        """Reconciliation: undo the update of step ``committed + 1`` (the one-step undo record)."""


def run_steps(ctx: RankContext, role: SteppingRole, agent: StepAgent) -> bool:
    """Run steps ``ctx.progress.completed + 1`` .. the last; False if the loss diverged (training stopped)."""
    cfg = ctx.cfg
    role.resume()
    digests.check(ctx, role, ctx.progress.completed, resumed=True)  # MPIEC_SHARD_DIGESTS (off: returns)
    for step in range(ctx.progress.completed + 1, cfg.training.steps):
        t_start = time.perf_counter()
        ctx.progress.current_step = step
        status = STATUS_DYING if ctx.faults.fire_if_due(step) else STATUS_OK
        if ctx.flips.due(step):  # a planned silent corruption of this rank's state (failures.corruption)
            ctx.flips.at_step(step, cast("StateRole", role).state(),
                              agent.redundancy if isinstance(agent, ServerAgent) else None)
        if step == ctx.grow_at and ctx.slot == Slot(TRAINER, 0):
            # layout.grow_back_steps: trainer 0 starts the growth at this step boundary; the revoke in
            # the recovery's detection brings every rank there (``recovery.plan_grow``)
            raise PeerFailure(MPI.ERR_REVOKED, f"the growth back planned before step {step}")
        if ctx.ulfm:
            check_world(ctx.comms.world)
        role.stall.at(step)
        agent.before_step(step)
        try:
            words = role.exchange(step, status, agent.header_word(step))
        except Diverged:
            return False
        ctx.progress.completed = step
        ctx.progress.steps_run += 1
        digests.check(ctx, role, step)
        t0 = time.perf_counter()
        agent.after_step(step, words)
        agent.background(step)
        role.finish_step(step, t_start, time.perf_counter() - t0)
        if eval_due(cfg, step):
            ctx.progress.current_step = step + 1  # a failure during the evaluation interrupts the next step
            role.evaluate(step)
        role.after_step(step)
    return True


def eval_due(cfg: Config, step: int) -> bool:
    """Evaluate after ``step`` (every ``eval_every`` steps and after the last)."""
    t = cfg.training
    return step + 1 == t.steps or (t.eval_every > 0 and (step + 1) % t.eval_every == 0)


def eval_rounds(cfg: Config, trainers: int) -> int:
    """Pull rounds of one evaluation over ``trainers`` trainers (the live count): the same on every
    trainer and server."""
    per_trainer = -(-cfg.data.eval_samples // trainers)
    return -(-per_trainer // cfg.training.eval_batch)


__all__ = ["Role", "StateRole", "SteppingRole", "eval_due", "eval_rounds", "run_steps"]
