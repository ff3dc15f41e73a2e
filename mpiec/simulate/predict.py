"""Predict measured runs from calibrated costs, and set the predictions against the measurements.

Owns the validation figures of ``mpiec simulate --predict`` and ``tests/simulate``: for a result
file the calibration did not see, the model replays its config and kill plan and predicts

* **time lost** of each recovery and in total (the runtime's definition: ``summary.
  recovery_breakdown``'s ``time_lost_s``);
* **failure-free overhead**: the protection time on the critical path — checkpoint stalls
  (``checkpoint_critical_s``, the stall the run's ETTR counts) and ``ecrm``'s parity stage
  (``parity_stage_s_per_step``; failure-free ``ecrm`` runs only: during a rebuild the stage also
  applies the step's deltas, so a failure run's mean is not its failure-free overhead) — over the
  failure-free training time (first step's start → last
  step's end, minus the time lost). Measured inside the run, not against a separate ``none`` run:
  on a shared machine two runs' step times differ by more than the overhead (docs/simulate.md).
  The prediction is of the protection time; the failure-free training time it is a share of is the
  run's (the step time is an input, below; before 2026-11-27 it was the simulated wall of normal
  steps, which leaves out a short run's slower warm-up steps and overstated every overhead);
* **lost samples** (``cpr*``: the summary's ``lost_samples``);
* **throughput in rebuild** (``ecrm``): samples per second while a lost shard is rebuilt over the
  normal rate, ``1 / (1 + rebuild_slowdown)``, against the run's median step in each rebuild window
  over its normal step (``MeasuredRecovery.window_slowdown``), averaged over its rebuilds.

The step time is an input of the model at any scale, not one of its predictions: for a measured run
it is the run's own mean failure-free step (``calibrate``) minus the predicted per-step protection
work. So is the machine's speed: on shared cores every CPU-bound cost stretches with the step
(``costs.py``), and the costs are taken at the run's speed, ``speed_factor`` = its step over the
calibration's mean step for the same model (``predict(..., speed=False)`` leaves them at the
calibration's).

A run that wrote through an emulated storage model (``[storage]``, ``strategy.bandwidth_mb_s``) has
its checkpoint writes and reads priced by that model (``checkpoint_io``, reads at the per-rank figure
as the runtime paces them), not by the calibration's fit of other runs' writes: that is how a run on
another storage profile is predicted.

Invariants: a prediction never reads the measured quantity it predicts; the kill plan is parsed
by ``mpiec.failures.faults.parse_kill_plans`` (what the runtime fires); kills of spares, parity ranks or nodes
are refused with one line (not modelled in a measured layout).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from mpiec.errors import MpiecError
from mpiec.failures.faults import parse_kill_plans
from mpiec.launch.resolve import storage_model, typed_params

from .calibrate import Measured, speed_key
from .costs import Costs
from .model import Failure, Outcome, simulate
from .policies import Setup, build_policy, cost_model

__all__ = ["Comparison", "failures_of", "measured_overhead", "predict", "speed_factor", "training_time"]


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
    timed: list[Failure] = []
    by_step: list[Failure] = []
    for k in parse_kill_plans(m.cfg.failures.kill, m.cfg):
        if k.at_end:
            raise MpiecError(f"{m.label}: kill {k} (after training) is not modelled: it costs no "
                             "training time")
        if k.role == "server":
            f = Failure(step=k.step, time_s=k.time, servers=(k.index,), label=str(k))
        elif k.role == "trainer":
            f = Failure(step=k.step, time_s=k.time, trainers=1, label=str(k))
        else:
            raise MpiecError(f"{m.label}: kill {k} of a {k.role} is not modelled for a measured layout "
                             "(server and trainer kills are)")
        (by_step if k.step is not None else timed).append(f)
    return sorted(timed, key=lambda f: f.time_s if f.time_s is not None else 0.0), by_step  # (all timed)


def speed_factor(costs: Costs, m: Measured) -> float:
    """How much slower the machine ran ``m`` than the calibration ran runs of the same model: its step
    over theirs (1 when the calibration has no run of that model)."""
    ref = costs.runtime.speed_steps.get(speed_key(m.cfg))
    return m.normal_step_s / ref if ref else 1.0


def _simulate_run(costs: Costs, m: Measured) -> tuple[Outcome, float]:
    """The run replayed: its config, its interval, its kill plan; (outcome, per-step overhead)."""
    interval = m.summary.get("checkpoint_interval_steps")
    interval = int(interval) if isinstance(interval, int | float) and interval > 0 else None
    # No log2 growth of shrink + agree with the rank count between measured layouts: on one host it
    # did not grow from 7 to 9 ranks (docs/simulate.md); the growth is for extrapolating to clusters.
    setup = _run_storage(m)
    overhead = build_policy(m.strategy, costs, m.job, math.inf, interval_steps=interval,
                            scale_agree=False, setup=setup).overhead_s
    # the run's normal step holds its per-step protection work: the model's step is the rest
    job = dataclasses.replace(m.job, step_s=max(0.5 * m.normal_step_s, m.normal_step_s - overhead))
    policy = build_policy(m.strategy, costs, job, math.inf, interval_steps=interval, scale_agree=False,
                          setup=setup)
    timed, by_step = failures_of(m)
    return simulate(policy, job.steps, timed, by_step), policy.overhead_s


def _run_storage(m: Measured) -> Setup:
    """What the run did that the costs do not say: the storage model it wrote and read through
    (``mpiec.launch.resolve.storage_model`` of its config), when it emulated one — its writes and reads are
    priced by that model, as the runtime paced them (reads by the per-rank figure only), not by the
    calibration's fit of another run's — and, for a differential strategy, its diff policy and bits
    (the run's ``strategy.diff``, ``quantization`` and ``bits``, not the strategy's defaults)."""
    model = storage_model(m.cfg)
    params = typed_params(m.cfg)  # defaults filled in: quantization "none", bits "auto" for cnr
    bits = None
    if getattr(params, "quantization", "none") != "none":
        b = params.bits
        bits = 0 if b == "auto" else int(b)
    diff = getattr(params, "diff", None)
    return Setup(storage=model if model.emulated else None, aggregate_reads=False,
                 diff=str(diff) if diff is not None else None, bits=bits)


def _failure_free_time(m: Measured) -> float:
    """The run's training time minus its time lost (seconds): what an overhead is a share of."""
    return training_time(m) - float(m.summary.get("time_lost_s", 0.0) or 0.0)


def measured_overhead(m: Measured) -> float:
    """Protection time on the critical path over the failure-free training time, as the run measured it:
    checkpoint stalls (``checkpoint_critical_s``, what its ETTR counts) plus ecrm's parity stage
    (``parity_stage_s_per_step`` x steps executed), over the training time minus the time lost."""
    s = m.summary
    stall = float(s.get("checkpoint_critical_s", 0.0) or 0.0)
    if len(m.checkpoints):  # files before the runtime summed the slowest parts' stalls (ckpt.summary)
        stall = max(stall, float(m.checkpoints["stall_s"].sum()))
    parity = float(s.get("parity_stage_s_per_step", 0.0) or 0.0) * len(m.timeline)
    return (stall + parity) / _failure_free_time(m)


def predict(costs: Costs, runs: list[Measured], speed: bool = True) -> list[Comparison]:
    """Predicted vs measured for every run of ``runs`` but ``none``: time lost per recovery and in total,
    protection overhead, lost samples. ``speed``: the costs at the run's speed (``speed_factor``)."""
    out: list[Comparison] = []
    for m in runs:
        model = cost_model(m.strategy)
        if model.unprotected:
            continue
        sim, per_step = _simulate_run(costs.at_speed(speed_factor(costs, m)) if speed else costs, m)
        for i, (p, rec) in enumerate(zip(sim.recoveries, m.recoveries, strict=False)):
            out.append(Comparison(m.label, m.strategy, f"time lost, recovery {i + 1}", p.time_lost_s,
                                  rec.time_lost_s))
        if len(m.recoveries) > 1:
            out.append(Comparison(m.label, m.strategy, "time lost, total", sim.time_lost_s,
                                  sum(r.time_lost_s for r in m.recoveries)))
        if model.kind != "rebuild" or not m.recoveries:  # ecrm's stage grows in its rebuild windows
            executed = sim.steps_done + sum(r.reexec_steps for r in sim.recoveries)
            # the protection time is predicted; the time it is a share of is the run's own (its
            # steps are an input of the model: a short run's warm-up steps are slower than its
            # normal step, which a simulated wall of normal steps would leave out)
            predicted = (sim.stall_s + per_step * executed) / _failure_free_time(m)
            out.append(Comparison(m.label, m.strategy, "overhead", predicted, measured_overhead(m)))
        windows = [r.window_slowdown for r in m.recoveries if math.isfinite(r.window_slowdown)]
        if model.kind == "rebuild" and windows:
            # throughput while a shard is rebuilt, over normal: the model's 1 / (1 + slowdown)
            measured = statistics.fmean(1.0 / (1.0 + w) for w in windows)
            policy = build_policy(m.strategy, costs, m.job, math.inf, scale_agree=False)
            out.append(Comparison(m.label, m.strategy, "throughput in rebuild",
                                  1.0 / (1.0 + policy.rebuild_slowdown), measured))
        if sim.lost_samples or m.summary.get("lost_samples"):
            out.append(Comparison(m.label, m.strategy, "lost samples", float(sim.lost_samples),
                                  float(m.summary.get("lost_samples", 0))))
    return out
