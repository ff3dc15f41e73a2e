"""When to checkpoint: trainer 0's decision, taken once and carried to every rank in the step header.

``Interval`` is the rule object: what an interval rule resolved to (``given`` steps,
``given-seconds``, Young's ``auto``; ``cpr`` resolves its ``pls`` rule into one too). ``Schedule``
applies it on trainer 0, step by step: ``due(step)`` before the step (its answer goes into the
header's ``checkpoint`` field), ``observe`` after every step (the step time, and the slowest part's
write time the servers put in their ``part_us`` field), ``started`` when a checkpoint begins.

Invariants:

* only trainer 0 holds a ``Schedule``: every other rank follows the ``checkpoint`` field of trainer
  0's header word, so a checkpoint is taken after the same step everywhere, even with a rule in
  seconds (each rank's clock would disagree);
* never after the run's last step (nothing is left to protect);
* Young's rule takes its first checkpoint after ``first`` steps (at most a tenth of the run) to
  measure the save time, and takes no second one before that measurement arrived (it travels in
  the servers' next header words, later for a background write) or ``first`` more steps passed:
  with no measurement its interval would be ~0;
* a given number of steps checkpoints after every multiple of it, whatever the clock says;
  with both ``interval`` and ``interval_s`` given, the steps decide.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpiec.strategies.checkpointing.rules import expected_mtbf_s, young_interval

#: the header field trainer 0's decision travels in (1: checkpoint after this step)
CHECKPOINT_FIELD = ("checkpoint", 1)


@dataclass(frozen=True)
class Interval:
    """An interval rule's result: ``rule`` names it (``given``, ``given-seconds``, ``young``,
    ``pls``, ...); ``steps`` and/or ``seconds`` fix the interval (steps decide when both are set);
    neither: Young's interval, measured during the run."""

    rule: str
    steps: int | None = None
    seconds: float | None = None

    @classmethod
    def given(cls, interval: int | str, interval_s: float) -> Interval:
        """``strategy.interval`` (steps or ``"auto"``) and ``strategy.interval_s`` (0: none)."""
        steps = int(interval) if interval != "auto" else None
        seconds = float(interval_s) or None
        rule = "given" if steps else "given-seconds" if seconds else "young"
        return cls(rule, steps, seconds)

    def describe(self) -> str:
        """The summary's ``checkpoint_interval``: ``10 steps``, ``2.5 s`` or ``auto (Young)``."""
        return (f"{self.steps} steps" if self.steps else f"{self.seconds:g} s" if self.seconds
                else "auto (Young)")


class Schedule:
    """Trainer 0's checkpoint decisions (see the module docstring for the rules).

    ``now`` is the run's clock (``env.now``); ``mtbf`` is (seconds, steps) of the expected time
    between failures, either None when unknown (``rules.expected_mtbf_s``)."""

    def __init__(self, interval: Interval, *, first: int, total_steps: int,
                 mtbf: tuple[float | None, float | None], now: Callable[[], float]) -> None:
        self.interval = interval
        self.first = int(first)
        self.total_steps = int(total_steps)
        self.mtbf = mtbf
        self.now = now
        self.taken: list[int] = []  # steps after which a checkpoint was started (re-executed ones again)
        self.last_t = 0.0  # when the last checkpoint started (or the last recovery ended)
        self.last_step = -1  # the step after which the last checkpoint started
        self.t_save = 0.0  # the slowest part's write time seen so far (s)
        self.step_times: deque[float] = deque(maxlen=50)  # recent step times (Young's MTBF in steps)
        self._step_t: float | None = None

    @classmethod
    def from_config(cls, cfg: Any, interval: Interval, first: int, now: Callable[[], float]) -> Schedule:
        """The schedule of a run of config ``cfg`` (its length and expected MTBF)."""
        return cls(interval, first=first, total_steps=cfg.training.steps, mtbf=expected_mtbf_s(cfg), now=now)

    def due(self, step: int) -> bool:
        """Checkpoint after ``step``? Trainer 0, before the step (the answer goes in its header)."""
        if step + 1 >= self.total_steps:
            return False  # the run ends: nothing left to protect
        if self.interval.steps:
            return (step + 1) % self.interval.steps == 0
        now = self.now()
        if self.interval.seconds:
            return now - self.last_t >= self.interval.seconds
        if self.last_step < 0:  # Young: the first checkpoint measures t_save
            return step + 1 >= min(self.first, max(1, self.total_steps // 10))
        if self.t_save <= 0 and step - self.last_step <= self.first:
            return False  # the measurement has not arrived yet
        return now - self.last_t >= self.young_interval_s()

    def observe(self, part_us: np.ndarray) -> None:
        """After every step: its time, and the servers' slowest part write time (µs) so far."""
        now = self.now()
        if self._step_t is not None:
            self.step_times.append(now - self._step_t)
        self._step_t = now
        self.t_save = max(self.t_save, float(np.max(part_us, initial=0)) * 1e-6)

    def started(self, step: int) -> None:
        """A checkpoint after ``step`` starts now."""
        self.last_t, self.last_step = self.now(), step
        self.taken.append(step)

    def restarted(self) -> None:
        """After a recovery: the interval in seconds counts from now."""
        self.last_t = self.now()

    def young_interval_s(self) -> float:
        """Young's ``sqrt(2 · t_save · MTBF)``; an MTBF in steps (or one failure per run) goes
        through the median recent step time."""
        mtbf_s, mtbf_steps = self.mtbf
        t_step = float(np.median(self.step_times)) if self.step_times else 0.01
        if mtbf_s is None:
            mtbf_s = (mtbf_steps if mtbf_steps is not None else self.total_steps) * t_step
        return young_interval(max(self.t_save, 1e-4), mtbf_s)

    def figures(self) -> dict[str, Any]:
        """The interval used, in steps (resolved), its rule, and in seconds for a rule in seconds
        (nan otherwise). A rule in seconds gives the median gap between the checkpoints taken
        (a re-executed one counts once), else (fewer than two) the seconds over the median step
        time."""
        iv = self.interval
        seconds = iv.seconds or (None if iv.steps else self.young_interval_s())
        steps = iv.steps or -1
        if not iv.steps:
            gaps = np.diff(sorted(set(self.taken)))
            if gaps.size:
                steps = int(round(float(np.median(gaps))))
            elif self.step_times and seconds is not None:  # (not None: no interval in steps)
                steps = max(1, int(round(seconds / float(np.median(self.step_times)))))
        return {"checkpoint_interval_steps": int(steps), "checkpoint_interval_rule": iv.rule,
                "checkpoint_interval_s": float(seconds) if seconds else math.nan}


__all__ = ["CHECKPOINT_FIELD", "Interval", "Schedule"]
