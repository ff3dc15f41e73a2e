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

from mpiec.comm import check_world
from mpiec.roles.context import RankContext
from mpiec.roles.trainer import eval_due, eval_rounds


class Parity:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self.eval_pending = False

    def run(self) -> None:
        ctx, strategy = self.ctx, self.ctx.strategy
        if self.eval_pending:  # the servers redo an evaluation a failure interrupted
            self.eval_pending = False
            self.mirror_eval()
        for step in range(ctx.completed + 1, ctx.cfg.training.steps):
            ctx.current_step = step
            ctx.kill_status(step)
            if ctx.ulfm:
                check_world(ctx.comms.world)
            strategy.before_step(step)
            strategy.on_pull(step, None)  # mirrors the servers' pull ...
            strategy.overlap(step)  # ... and the point where they wait for the gradients
            ctx.completed = step
            strategy.after_step(step, None)
            strategy.background(step)
            if eval_due(ctx.cfg, step):
                self.mirror_eval()

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    def reset(self) -> None:
        pass

    def undo_last(self, committed: int) -> None:
        pass  # the strategy's parity agent keeps its own per-step records

    def mirror_eval(self) -> None:
        for _ in range(eval_rounds(self.ctx.cfg)):
            self.ctx.strategy.on_pull(-1, None)

    def after_recovery(self, plan: Any) -> None:
        self.eval_pending = plan.restored >= 0 and eval_due(self.ctx.cfg, plan.restored)

    def final_report(self) -> dict[str, Any]:
        return {}
