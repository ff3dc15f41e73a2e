"""Spare role: an idle, warmed-up rank that waits to take over a failed slot.

Owns nothing but its wait: it blocks on a control message from the monitor
("stop" at the end, "failure" in emulated mode). Under ULFM a failure revokes
``world`` and the spare leaves its receive with ``MPI_ERR_REVOKED``, joining
the recovery like every other survivor; strategies that replace failed ranks
hand it a slot there.
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from mpiec.comm import PeerFailure, failure_class
from mpiec.roles.context import TAG_CONTROL, RankContext
from mpiec.roles.exchange import EmulatedFailure


class Spare:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx

    def run(self) -> None:
        try:
            kind, payload = self.ctx.comms.world.recv(source=self.ctx.monitor_rank, tag=TAG_CONTROL)
        except MPI.Exception as exc:
            cls = failure_class(exc)
            if cls is None:
                raise
            raise PeerFailure(cls, "spare wait") from None
        if kind == "failure":
            raise EmulatedFailure(payload)

    def final_report(self) -> dict[str, Any]:
        return {}
