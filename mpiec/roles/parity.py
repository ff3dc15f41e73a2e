"""Parity role: a dedicated parity rank (``layout.parity_ranks``) of an erasure-coded strategy.

Owns the rank's place in the step loop: it is a member of the ``servers``
communicator only (never of ``data``: trainers do not talk to it), and it
steps in lockstep with the servers through the strategy's hooks, which hold
the parity rows and do the collective work on ``servers`` (``before_step`` /
``after_step`` / ``background``). Invariant: a parity rank's ``completed``
step only paces the parity pipeline (it may run a step ahead of the servers),
so it votes neutral in the committed-step agreement and, after a recovery,
resumes at the step the trainers and servers agreed on.
"""

from __future__ import annotations

from typing import Any

from mpiec.comm import check_world
from mpiec.roles.context import RankContext


class Parity:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx

    def run(self) -> None:
        ctx, strategy = self.ctx, self.ctx.strategy
        for step in range(ctx.completed + 1, ctx.cfg.training.steps):
            ctx.current_step = step
            ctx.kill_status(step)
            if ctx.ulfm:
                check_world(ctx.comms.world)
            strategy.before_step(step)
            ctx.completed = step
            strategy.after_step(step, None)
            strategy.background(step)

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    def reset(self) -> None:
        pass

    def undo_last(self, committed: int) -> None:
        pass  # the strategy's parity agent keeps its own per-step records

    def after_recovery(self, plan: Any) -> None:
        pass

    def final_report(self) -> dict[str, Any]:
        return {}
