"""Parity role: a dedicated parity rank (``layout.parity_ranks``) of an erasure-coded strategy.

Owns the rank's place in the step loop: it is a member of the ``servers``
communicator only (never of ``data``: trainers do not talk to it), and it
steps in lockstep with the servers through the strategy's hooks, which hold
the parity rows and do the collective work on ``servers``: it calls every hook
a server calls, at the same point (``on_pull`` with no rows for every pull of a
step or an evaluation round, ``overlap``, ``after_step``, ``background``), so
the strategy's collectives on ``servers`` match. Invariant: a parity rank's ``completed``
step only paces the parity pipeline (it may run a step ahead of the servers),
so it votes neutral in the committed-step agreement and, after a recovery,
resumes at the step the trainers and servers agreed on.
"""

from __future__ import annotations

from typing import Any

from mpiec.failures.stall import StallHook
from mpiec.roles.context import RankContext
from mpiec.roles.driver import eval_due, eval_rounds, run_steps
from mpiec.strategies.api.plan import RecoveryPlan


class Parity:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self.eval_pending = False
        self.stall = StallHook(ctx)  # test hook (MPIEC_STALL): sleep at a known step

    # -- the step (``roles.driver``): the servers' hooks, at the servers' points -------------
    def resume(self) -> None:
        if self.eval_pending:  # the servers redo an evaluation a failure interrupted
            self.eval_pending = False
            self.evaluate(self.ctx.progress.completed)

    def exchange(self, step: int, status: int, word: int) -> None:
        agent = self.ctx.parity_agent()
        agent.on_pull(step)  # mirrors the servers' pull ...
        agent.overlap(step)  # ... and the point where they wait for the gradients

    def finish_step(self, step: int, t_start: float, t_hooks: float) -> None:
        pass

    def evaluate(self, step: int) -> None:
        for _ in range(eval_rounds(self.ctx.cfg, self.ctx.n_trainers)):
            self.ctx.parity_agent().on_pull(-1)

    def after_step(self, step: int) -> None:
        pass

    def run(self) -> None:
        run_steps(self.ctx, self, self.ctx.parity_agent())

    # -- state: none of its own (the parity agent keeps the parity rows) ---------------------
    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    def reset(self) -> None:
        pass

    def undo_last(self, committed: int) -> None:
        pass  # the strategy's parity agent keeps its own per-step records

    def after_recovery(self, plan: RecoveryPlan) -> None:
        self.eval_pending = plan.restored >= 0 and eval_due(self.ctx.cfg, plan.restored)

    def final_report(self) -> dict[str, Any]:
        return {}
