"""Predict measured runs from calibrated costs, and set the predictions against the measurements.

Owns the validation figures of ``mpiec simulate --predict`` and ``tests/simulate``: for a result
file the calibration did not see, the model replays its config and kill plan and predicts

* **time lost** of each recovery and in total (the runtime's definition: ``summary.
  recovery_breakdown``'s ``time_lost_s``);
* **failure-free overhead** vs ``none``: ``1 − T_none / T_strategy`` over the **training time**
  ``T`` of failure-free runs of the same config (first step's start → last step's end, so the
  launch and the final evaluation are out; runs meant for this comparison set
  ``training.eval_every = 0`` so no evaluation sits between steps);
* **lost samples** (``cpr*``: the summary's ``lost_samples``).

The step time the model is given for the predicted config is that config's own ``none`` step time
(measured: the step time is an input of the model at any scale, not one of its predictions); when no
``none`` run of that config is at hand, the run's own normal step time minus the predicted per-step
overhead.

Invariants: a prediction never reads the measured quantity it predicts; the kill plan is parsed
by ``mpiec.faults.parse_kill_plans`` (what the runtime fires); kills of spares, parity ranks or nodes
are refused with one line (not modelled in a measured layout).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from mpiec.errors import MpiecError
from mpiec.faults import parse_kill_plans

from .calibrate import Measured, same_config
from .costs import Costs
from .model import Failure, Outcome, simulate
from .policies import build_policy

__all__ = ["Comparison", "failures_of", "predict", "training_time"]


@dataclass(frozen=True)
class Comparison:
    run: str
    strategy: str
    quantity: str  # "time lost, recovery 1", "time lost, total", "overhead", "lost samples"
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        """predicted / measured − 1 (nan when the measurement is 0 or missing)."""
        if not (math.isfinite(self.measured) and self.measured != 0 and math.isfinite(self.predicted)):
            return math.nan
        return self.predicted / self.measured - 1.0


def training_time(m: Measured) -> float:
    """First step's start → last step's end, seconds."""
    tl = m.timeline
    return float(tl["t_end"][-1] - (tl["t_end"][0] - tl["dt"][0])) if len(tl) else math.nan


def failures_of(m: Measured) -> tuple[list[Failure], list[Failure]]:
    """(timed, by step) failures of the run's kill plan, as the runtime fires them."""
    timed, by_step = [], []
    for k in parse_kill_plans(m.cfg.failures.kill, m.cfg):
        if k.role == "server":
            f = Failure(step=k.step, time_s=k.time, servers=(k.index,), label=str(k))
        elif k.role == "trainer":
            f = Failure(step=k.step, time_s=k.time, trainers=1, label=str(k))
        else:
            raise MpiecError(f"{m.label}: kill {k} of a {k.role} is not modelled for a measured layout "
                             "(server and trainer kills are)")
        (by_step if k.step is not None else timed).append(f)
    return sorted(timed, key=lambda f: f.time_s), by_step


def _simulate_run(costs: Costs, m: Measured, step_s: float, failures: bool) -> Outcome:
    job = dataclasses.replace(m.job, step_s=step_s)
    interval = m.summary.get("checkpoint_interval_steps")
    interval = int(interval) if isinstance(interval, int | float) and interval > 0 else None
    policy = build_policy(m.strategy, costs, job, math.inf, interval_steps=interval)
    timed, by_step = failures_of(m) if failures else ([], [])
    return simulate(policy, job.steps, timed, by_step)


def _base_step(costs: Costs, m: Measured, nones: list[Measured]) -> float:
    twins = [n.normal_step_s for n in nones if same_config(n.cfg, m.cfg, ignore_steps=True)]
    if twins:
        return float(np.mean(twins))
    job = m.job
    policy = build_policy(m.strategy, costs, job, math.inf)
    return max(0.5 * m.normal_step_s, m.normal_step_s - policy.overhead_s)


def predict(costs: Costs, runs: list[Measured]) -> list[Comparison]:
    """Predicted vs measured for every run of ``runs`` with a failure (time lost, lost samples) and
    every failure-free run with a failure-free ``none`` run of the same config (overhead)."""
    nones = [m for m in runs if m.strategy == "none" and m.failure_free]
    out: list[Comparison] = []
    for m in runs:
        if m.strategy == "none":
            continue
        step_s = _base_step(costs, m, nones)
        if not m.failure_free:
            sim = _simulate_run(costs, m, step_s, failures=True)
            for i, (p, rec) in enumerate(zip(sim.recoveries, m.recoveries, strict=False)):
                out.append(Comparison(m.label, m.strategy, f"time lost, recovery {i + 1}",
                                      p.time_lost_s, rec.time_lost_s))
            if m.recoveries:
                out.append(Comparison(m.label, m.strategy, "time lost, total", sim.time_lost_s,
                                      sum(r.time_lost_s for r in m.recoveries)))
            if sim.lost_samples or m.summary.get("lost_samples"):
                out.append(Comparison(m.label, m.strategy, "lost samples", float(sim.lost_samples),
                                      float(m.summary.get("lost_samples", 0))))
            continue
        twins = [n for n in nones if same_config(n.cfg, m.cfg)]
        if not twins:
            continue
        sim = _simulate_run(costs, m, step_s, failures=False)
        predicted = 1.0 - m.job.steps * step_s / sim.wall_s
        t_none = float(np.mean([training_time(n) for n in twins]))
        out.append(Comparison(m.label, m.strategy, "overhead", predicted, 1.0 - t_none / training_time(m)))
    return out
