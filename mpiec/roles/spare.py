"""Spare role: an idle, warmed-up rank that waits to take over a failed slot.

Owns nothing but its wait: it blocks on a control message from the monitor
("stop" at the end, "failure" in emulated mode). Under ULFM a failure revokes
``world`` and the spare leaves its receive with ``MPI_ERR_REVOKED``, joining
the recovery like every other survivor; strategies that replace failed ranks
hand it a slot there.
"""

from __future__ import annotations

from typing import Any

from mpiec.comm import recv
from mpiec.roles.context import TAG_CONTROL, RankContext
from mpiec.roles.exchange import EmulatedFailure


class Spare:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx

    def run(self) -> None:
        kind, payload = recv(self.ctx.comms.world, self.ctx.monitor_rank, TAG_CONTROL, "spare wait",
                             max_pause=0.05)
        if kind == "failure":
            raise EmulatedFailure(*payload)

    def final_report(self) -> dict[str, Any]:
        return {}
