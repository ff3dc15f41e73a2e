"""Test hook: stall one rank for a known time at a known step (validates the time-lost measure).

``MPIEC_STALL="server:0@step=20:0.5"`` makes server 0 sleep 0.5 s at the start of step 20
(inside the step, so every trainer's record of step 20 carries it: the other ranks wait for it);
several stalls are separated by commas (``"server:0@step=20:0.5,trainer:1@step=30:0.2"``). A stall
fires once per role instance (a spare promoted to the slot would stall again), on the first
execution of its step, and is logged as a ``stall`` event
(step, the rank, ``detail`` = the seconds slept) from which the monitor measures the time it cost
(``mpiec.accounting.stall_losses``). No stall without the variable: the step loop pays one
dictionary lookup.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from mpiec.errors import ConfigError

ENV = "MPIEC_STALL"
_ONE = re.compile(r"^\s*(trainer|server):(\d+)@step=(\d+):([0-9]*\.?[0-9]+)\s*$")


@dataclass(frozen=True)
class Stall:
    """Sleep ``seconds`` on ``role`` ``index`` at the start of step ``step``."""

    role: str
    index: int
    step: int
    seconds: float


def parse_stalls(text: str) -> list[Stall]:
    """The stalls of an ``MPIEC_STALL`` value ("" → none); a malformed item is a ``ConfigError``."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        m = _ONE.match(item)
        if m is None:
            raise ConfigError(f"{ENV}: {item!r} is not ROLE:INDEX@step=STEP:SECONDS "
                              "(e.g. server:0@step=20:0.5)")
        out.append(Stall(m[1], int(m[2]), int(m[3]), float(m[4])))
    return out


class StallHook:
    """The stalls planned for one slot; ``at(step)`` sleeps when one is due (once each)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.todo: dict[int, float] = {}
        text = os.environ.get(ENV, "")
        if text:
            for s in parse_stalls(text):
                if s.role == ctx.slot.role and s.index == ctx.slot.index:
                    self.todo[s.step] = self.todo.get(s.step, 0.0) + s.seconds

    def at(self, step: int) -> None:
        """Sleep the stall planned at ``step`` (if any, and only the first time), log a ``stall`` event."""
        if not self.todo:
            return
        seconds = self.todo.pop(step, None)
        if seconds is None:
            return
        self.ctx.event("stall", step, self.ctx.rank, detail=f"{seconds:.6f}")
        time.sleep(seconds)


__all__ = ["ENV", "Stall", "StallHook", "parse_stalls"]
