"""Kill plans: parsing, validation and the victim's own death.

Owns the kill-plan syntax of DESIGN.md and the act of dying. Invariants:

* a plan names a *role slot* (``server:2``), not a world rank: after a spare
  takes over ``server:2`` a later kill of ``server:2`` hits the replacement;
* every rank expands the same plans to the same concrete kills (``random``
  plans are a pure function of their seed), so no coordination is needed;
* a victim dies by ``SIGKILL`` of its own process (never ``sys.exit``, which
  would run ``MPI_Finalize`` and can deadlock the survivors). In emulated mode
  (no ULFM) the victim instead stops participating and says so in-band.

Syntax (several plans: repeat ``--kill`` or separate with ``;``)::

    server:2@step=300       server 2 dies at the start of step 300
    trainer:0@time=12.5     trainer 0 dies 12.5 s after training started
    parity:1@step=40        dedicated parity rank 1 (needs layout.parity_ranks)
    random:mtbf=60s,seed=7  exponential inter-arrival times, uniform victims
                            among servers and trainers (optional
                            targets=server+trainer+parity, max=N kills)
"""

from __future__ import annotations

import math
import os
import re
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mpiec.errors import KillPlanError

if TYPE_CHECKING:
    from mpiec.config import Config

KILLABLE_ROLES = ("server", "trainer", "parity")
_FIXED = re.compile(r"^(server|trainer|parity):(\d+)@(step|time)=([0-9.eE+]+)(s)?$")
_DURATION = re.compile(r"^([0-9.eE+]+)\s*(ms|s|m|min|h)?$")
_UNITS = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
RANDOM_MAX_KILLS = 64


@dataclass(frozen=True)
class Kill:
    """One concrete planned death of whichever rank holds ``role:index``."""

    role: str
    index: int
    step: int | None = None
    time: float | None = None  # seconds since training started

    def __str__(self) -> str:
        when = f"step={self.step}" if self.step is not None else f"time={self.time:g}"
        return f"{self.role}:{self.index}@{when}"


def parse_duration(text: str, what: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise KillPlanError(f"{what}: '{text}' is not a duration (e.g. 60s, 2m, 1h)")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(value) or value <= 0:
        raise KillPlanError(f"{what}: duration must be > 0, got '{text}'")
    return value


def _role_count(role: str, cfg: Config) -> int:
    lay = cfg.layout
    return {"server": lay.servers, "trainer": lay.trainers, "parity": lay.parity_ranks}[role]


def _parse_random(plan: str, body: str, cfg: Config) -> list[Kill]:
    opts: dict[str, str] = {}
    for item in body.split(","):
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise KillPlanError(f"kill plan '{plan}': expected key=value, got '{item}'")
        opts[key.strip()] = value.strip()
    unknown = set(opts) - {"mtbf", "seed", "targets", "max"}
    if unknown:
        raise KillPlanError(f"kill plan '{plan}': unknown option '{sorted(unknown)[0]}' "
                            "(use mtbf, seed, targets, max)")
    if "mtbf" not in opts:
        raise KillPlanError(f"kill plan '{plan}': random plans need mtbf=<duration>")
    mtbf = parse_duration(opts["mtbf"], f"kill plan '{plan}'")
    try:
        seed = int(opts.get("seed", "0"))
        max_kills = int(opts.get("max", str(RANDOM_MAX_KILLS)))
    except ValueError:
        raise KillPlanError(f"kill plan '{plan}': seed and max must be integers") from None
    if max_kills < 1:
        raise KillPlanError(f"kill plan '{plan}': max must be >= 1, got {max_kills}")
    targets = opts.get("targets", "server+trainer").split("+")
    for role in targets:
        if role not in KILLABLE_ROLES:
            raise KillPlanError(f"kill plan '{plan}': unknown target role '{role}'")
    slots = [(role, i) for role in targets for i in range(_role_count(role, cfg))]
    if not slots:
        raise KillPlanError(f"kill plan '{plan}': the layout has no ranks of roles {targets}")
    rng = np.random.default_rng(seed)
    kills, t = [], 0.0
    for _ in range(max_kills):
        t += float(rng.exponential(mtbf))
        role, index = slots[int(rng.integers(len(slots)))]
        kills.append(Kill(role, index, time=round(t, 6)))
    return kills


def parse_kill_plan(plan: str, cfg: Config) -> list[Kill]:
    """Parse one plan string into concrete kills, validated against the layout."""
    text = plan.strip()
    if text.startswith("random:"):
        return _parse_random(text, text[len("random:"):], cfg)
    m = _FIXED.match(text)
    if not m:
        raise KillPlanError(
            f"malformed kill plan '{plan}': expected ROLE:INDEX@step=N or ROLE:INDEX@time=SECONDS "
            "(ROLE is server, trainer or parity) or random:mtbf=60s,seed=7")
    role, index, kind, value, unit = m.groups()
    idx = int(index)
    count = _role_count(role, cfg)
    if idx >= count:
        have = f"only {count} {role} rank{'s' if count != 1 else ''}" if count else f"no {role} ranks"
        raise KillPlanError(f"kill plan '{plan}': {role}:{idx} does not exist (the layout has {have})")
    if kind == "step":
        if unit or not value.isdigit():
            raise KillPlanError(f"kill plan '{plan}': step must be a whole number")
        step = int(value)
        if step >= cfg.training.steps:
            raise KillPlanError(f"kill plan '{plan}': step {step} is not before the last step "
                                f"(training.steps = {cfg.training.steps})")
        return [Kill(role, idx, step=step)]
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise KillPlanError(f"kill plan '{plan}': time must be >= 0")
    return [Kill(role, idx, time=seconds)]


def parse_kill_plans(plans: list[str], cfg: Config) -> list[Kill]:
    kills: list[Kill] = []
    for plan in plans:
        for part in plan.split(";"):
            if part.strip():
                kills.extend(parse_kill_plan(part, cfg))
    return kills


def die_now() -> None:
    """End this process the way a crash would: no cleanup, no MPI_Finalize."""
    os.kill(os.getpid(), signal.SIGKILL)


class KillSwitch:
    """The kills planned for the role slot this rank currently holds.

    ``at_step(step)`` is called at each step boundary and returns the kill due
    (ULFM mode dies inside it). Time kills fire from a timer thread so a rank
    can die mid-step, as a real crash does; in emulated mode they are reported
    at the next step boundary instead.
    """

    def __init__(self, kills: list[Kill], role: str, index: int, real: bool, t0: float,
                 on_fire: Callable[[Kill], None] | None = None) -> None:
        self.real = real
        self.steps = {k.step: k for k in kills if k.role == role and k.index == index
                      and k.step is not None}
        self.times = sorted((k for k in kills if k.role == role and k.index == index
                             and k.time is not None), key=lambda k: k.time or 0.0)
        self.t0 = t0
        self._timer: threading.Timer | None = None
        if real and self.times:
            import time

            delay = max(0.0, (self.times[0].time or 0.0) - (time.monotonic() - t0))
            first = self.times[0]

            def fire() -> None:
                if on_fire is not None:
                    on_fire(first)
                die_now()

            self._timer = threading.Timer(delay, fire)
            self._timer.daemon = True
            self._timer.start()

    def due(self, step: int, now: float) -> Kill | None:
        """The kill due at the start of ``step`` (``now`` is monotonic time)."""
        if step in self.steps:
            return self.steps[step]
        if self._timer is not None:
            return None  # the timer thread owns time kills (it may fire mid-step)
        if self.times and (now - self.t0) >= (self.times[0].time or 0.0):
            return self.times[0]
        return None

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
