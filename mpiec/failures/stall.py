"""Test hook: stall one rank for a known time at a known step (validates the time-lost measure).

``MPIEC_STALL="server:0@step=20:0.5"`` makes server 0 sleep 0.5 s at the start of step 20
(inside the step, so every trainer's record of step 20 carries it: the other ranks wait for it);
several stalls are separated by commas (``"server:0@step=20:0.5,trainer:1@step=30:0.2"``). A stall
fires once per role instance (a spare promoted to the slot would stall again), on the first
execution of its step, and is logged as a ``stall`` event
(step, the rank, ``detail`` = the seconds slept) from which the monitor measures the time it cost
(``mpiec.results.accounting.stall_losses``). No stall without the variable: the step loop pays one
dictionary lookup.

The launcher checks the variable before any rank starts (``check_stalls``): a malformed item, a
slot the layout does not have, a step outside ``0 .. training.steps - 1`` (it would never fire)
or a stall of more than ``MAX_SECONDS`` (``time.sleep`` overflows past ~9e9 s) or of at least the
run's time limit (it could only end in that limit) is one ``ConfigError`` line, exit 2.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from mpiec.config.limits import MAX_SECONDS
from mpiec.errors import ConfigError

ENV = "MPIEC_STALL"
# digits bounded: int() of thousands of digits raises, and no layout or run is that large
_ONE = re.compile(r"^\s*(trainer|server):(\d{1,18})@step=(\d{1,18}):([0-9]{0,18}\.?[0-9]{1,18})\s*$")


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
        seconds = float(m[4])
        if seconds > MAX_SECONDS:
            raise ConfigError(f"{ENV}: {item!r}: a stall of {m[4]} s is more than {MAX_SECONDS:.0e} s")
        out.append(Stall(m[1], int(m[2]), int(m[3]), seconds))
    return out


def check_stalls(cfg: Any, limit_s: float, text: str | None = None) -> list[Stall]:
    """The launcher's check of ``MPIEC_STALL`` (``text``, default the environment's) against the
    run ``cfg`` with the time limit ``limit_s``: every stall aimed at a slot of the layout, at a step
    the run has, and shorter than the limit; one ``ConfigError`` line otherwise."""
    text = os.environ.get(ENV, "") if text is None else text
    stalls = parse_stalls(text)
    counts = {"trainer": cfg.layout.trainers, "server": cfg.layout.servers}
    steps = cfg.training.steps
    for s in stalls:
        what = f"{ENV}: '{s.role}:{s.index}@step={s.step}:{s.seconds:g}'"
        if s.index >= counts[s.role]:
            raise ConfigError(f"{what}: {s.role}:{s.index} does not exist (the layout has "
                              f"{counts[s.role]} {s.role}s, 0 to {counts[s.role] - 1})")
        if s.step >= steps:
            raise ConfigError(f"{what}: step {s.step} is not a step of the run (training.steps = "
                              f"{steps}: steps 0 to {steps - 1}); the stall would never fire")
    for (role, index), seconds in _per_slot(stalls).items():
        if seconds >= limit_s:
            raise ConfigError(f"{ENV}: {role}:{index} stalls {seconds:g} s in all, not less than the "
                              f"run's time limit of {limit_s:g} s: the run could only end in that limit")
    return stalls


def _per_slot(stalls: list[Stall]) -> dict[tuple[str, int], float]:
    out: dict[tuple[str, int], float] = {}
    for s in stalls:
        out[(s.role, s.index)] = out.get((s.role, s.index), 0.0) + s.seconds
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


__all__ = ["ENV", "Stall", "StallHook", "check_stalls", "parse_stalls"]
