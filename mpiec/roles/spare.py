"""Spare role: an idle, warmed-up rank that waits to take over a failed slot.

Owns nothing but its wait: it blocks on control messages from the monitor
(``stop`` at the end, ``failure`` in emulated mode, ``step`` progress notices
when a kill plan targets a spare by step). Under ULFM a failure revokes
``world`` and the spare leaves its receive with ``MPI_ERR_REVOKED``, joining
the recovery like every other survivor; ``recovery`` may promote it to a slot
(the lowest spare for the lowest dead slot; with ``layout.grow_from = "spares"`` only at a
planned growth, into a slot the layout lacks: it waits through failures).
"""

from __future__ import annotations

from typing import Any

from mpiec.comm import recv
from mpiec.roles.context import TAG_CONTROL, RankContext
from mpiec.roles.exchange import EmulatedFailure
from mpiec.strategies.api.plan import RecoveryPlan


class Spare:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx

    def run(self) -> None:
        # A step kill planned for a spare fires when the monitor's step notice arrives: poll often
        # then, or the run may pass (or lose) the step before the spare hears of it. Otherwise every
        # 5 ms at most: the survivors' shrink waits for the spare to see the failure, and a 50 ms
        # pause added ~25-70 ms to every recovery (the spare saw a server's death 64 ms after the
        # monitor in an 8x-laptop run); the waiting spare then takes 0.6-1 % of a core (0.2 %
        # at 50 ms; measured alone, docs/runtime.md).
        by_step = self.ctx.faults.by_step("spare", "node")
        while True:
            kind, payload = recv(self.ctx.comms.world, self.ctx.monitor_rank, TAG_CONTROL, "spare wait",
                                 max_pause=0.002 if by_step else 0.005)
            if kind == "failure":
                raise EmulatedFailure(*payload)
            if kind == "step":  # a step kill of a spare fires when the run reaches its step
                self.ctx.progress.current_step = payload
                self.ctx.faults.fire_if_due(payload)
                continue
            return

    def after_recovery(self, plan: RecoveryPlan) -> None:
        pass

    def final_report(self) -> dict[str, Any]:
        return {}
