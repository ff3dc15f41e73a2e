"""``checkfreq``: full checkpoints whose frequency keeps their cost within a budget (CheckFreq).

CheckFreq (Mohan, Phanishayee, Chidambaram, FAST'21) tunes the checkpoint frequency at run time
so that checkpointing costs at most a user-given fraction of the training time: with ``t_save``
the measured time of one checkpoint, it checkpoints every ``t_save / overhead`` seconds. This
plug-in is the checkpoint kit (``mpiec.strategies.checkpointing.kit``) with one part of its own:
trainer 0's ``SchedulePart`` decides through ``BudgetSchedule`` instead of the kit's
``Schedule`` rules. Writers, commits, rollback planning and restores are the kit's parts, as in
``ckpt``: a server failure rolls every trainer and server back to the newest complete
checkpoint and the steps since re-execute (lossless: training is deterministic).

Invariants:

* only trainer 0 decides (the kit's ``schedule.checkpoint`` header field), so a decision taken
  from its clock is the same on every rank;
* the first checkpoint comes after ``first`` steps (at most a tenth of the run) and measures
  ``t_save`` (the slowest part's write time, reported by the servers in their header words, as
  for Young's rule); until that measurement arrives no second checkpoint is taken;
* after a recovery the budget's clock starts again (``Schedule.restarted``).

Keys: the kit's (``interval`` / ``interval_s`` are not read: the budget decides) and
``strategy.overhead`` (the fraction of training time checkpoints may cost, default 0.05).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mpiec.strategies.api import compose
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.params import param
from mpiec.strategies.checkpointing.kit import KIT_RULES, CheckpointKit, CheckpointParams, SchedulePart
from mpiec.strategies.checkpointing.schedule import Interval, Schedule

if TYPE_CHECKING:
    from collections.abc import Callable

    from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState


@dataclass(frozen=True)
class CheckFreqParams(CheckpointParams):
    """The kit's keys and the budget."""

    overhead: float = param(0.05, "fraction of the training time checkpoints may cost: a checkpoint "
                                  "every t_save / overhead seconds", gt=0, le=1)


@dataclass(frozen=True)
class Budget(Interval):
    """The interval rule ``checkfreq``: no fixed steps or seconds, a fraction of the time."""

    overhead: float = 0.05

    def describe(self) -> str:
        return f"overhead <= {self.overhead:.0%} (CheckFreq)"


class BudgetSchedule(Schedule):
    """Trainer 0's decisions under the budget: ``due`` once ``t_save / overhead`` seconds passed
    since the last checkpoint started (or the last recovery ended)."""

    def __init__(self, budget: Budget, *, first: int, total_steps: int, now: Callable[[], float]) -> None:
        super().__init__(budget, first=first, total_steps=total_steps, mtbf=(None, None), now=now)
        self.overhead = budget.overhead

    def gap_s(self) -> float:
        """Seconds between checkpoints that keep their cost at the budget."""
        return self.t_save / self.overhead

    def due(self, step: int) -> bool:
        if step + 1 >= self.total_steps:
            return False  # the run ends: nothing left to protect
        if self.last_step < 0:  # the first checkpoint measures t_save
            return step + 1 >= min(self.first, max(1, self.total_steps // 10))
        if self.t_save <= 0:
            return False  # the measurement has not arrived yet
        return self.now() - self.last_t >= self.gap_s()

    def figures(self) -> dict[str, Any]:
        gaps = np.diff(sorted(set(self.taken)))
        t_step = float(np.median(self.step_times)) if self.step_times else math.nan
        steps = (int(round(float(np.median(gaps)))) if gaps.size
                 else max(1, int(round(self.gap_s() / t_step))) if t_step > 0 else -1)
        return {"checkpoint_interval_steps": steps, "checkpoint_interval_rule": self.interval.rule,
                "checkpoint_interval_s": self.gap_s(), "checkpoint_overhead_budget": self.overhead}


class CheckFreq(Strategy):
    """The kit, with trainer 0's schedule replaced by the overhead budget."""

    name = "checkfreq"
    description = "full checkpoints every t_save/overhead seconds (CheckFreq, FAST'21); rollback on a failure"
    Params = CheckFreqParams
    recovers = True
    shrinks = True
    lossless = True
    cost = CostModel("rollback", interval="young")
    summary_rules: ClassVar[dict[str, str]] = {**KIT_RULES, "checkpoint_overhead_budget": "first"}
    params: CheckFreqParams
    kit: CheckpointKit

    def __init__(self, cfg: object) -> None:
        super().__init__(cfg)  # type: ignore[arg-type]
        self.budget = Budget("checkfreq", overhead=self.params.overhead)
        self.kit = CheckpointKit(self.cfg, self.params, interval=self.budget)

    def coordinator(self, env: RankEnv) -> Coordinator:
        return compose.coordinator(self, env, *self.kit.coordinator_parts(env))

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        """The kit's trainer parts; trainer 0 decides by the budget (its own schedule, the kit's part)."""

        def by_budget(env: RankEnv, _kit: Schedule, part_time: Any, detail: str) -> SchedulePart:
            schedule = BudgetSchedule(self.budget, first=self.params.first,
                                      total_steps=self.cfg.training.steps, now=env.now)
            return SchedulePart(env, schedule, part_time, f"{detail} (budget)")

        return compose.trainer(self, env, *self.kit.trainer_parts(env, role, decider=by_budget))

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        return compose.server(self, env, *self.kit.server_parts(env, role))


__all__ = ["BudgetSchedule", "Budget", "CheckFreq", "CheckFreqParams"]
