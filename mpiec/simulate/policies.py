"""Calibrated costs + a job + a failure rate → one strategy's ``Policy`` in seconds.

Owns how each strategy's costs scale with the job and how its checkpoint interval is chosen —
with the suite's own rules, called, not copied. Which strategies are modelled, and as what, is
each strategy's own ``cost`` (``strategies.costs.CostModel``) read from the one registry, so a
plug-in strategy with a cost model is simulated like a built-in; ``log`` and ``ecsnap`` say why
they are not (``not_modelled``):

* ``ckpt``, ``cnr``: Young's interval ``sqrt(2 · stall · MTBF_job)``
  (``mpiec.strategies.checkpointing.young_interval``) in seconds, then in steps;
* ``cpr*``: the interval of the PLS target (``interval_for_pls``: ``2 · N_shards · MTBF · PLS``),
  divided by the shards one failure takes (a node with two servers loses two of ``N``);
  ``cpr-mfu`` / ``cpr-ssu`` add partial checkpoints every quarter interval, as the suite does;
* ``ecrm``: per-step parity work = ``parity.seconds`` of the bytes a server sends per step,
  those bytes = distinct rows updated per step (``unique_fraction`` × ids looked up, at most
  every row) / servers × (row + 8-byte word) × ``r``; a rebuild fetches ``k`` members per row of
  the lost server's data and parity rows: ``(k + r) × shard_rows × row_bytes`` bytes (rotated
  placement);
* checkpoint stall = ``write.seconds`` of the slowest part (a server's rows, ids and state ×
  ``bytes_ratio``, or the dense replica); a restore reads one part (× ``restore_ratio``): in a
  rollback every server reads its own part in parallel, so it lasts as long as one;
* the recovery latency is ``RuntimeCosts.latency_s`` at the job's rank count.

Invariants: a strategy with no calibrated costs is refused with the strategies that have some;
every duration of a policy is finite and >= 0, or the policy is refused (``MpiecError`` naming the
strategy and the quantity); an infinite MTBF (no failure expected) uses the failure-free job's
wall time as the MTBF (one failure per run, the suite's fallback).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mpiec.errors import MpiecError
from mpiec.strategies import STRATEGIES as STRATEGY_REGISTRY
from mpiec.strategies.checkpointing import interval_for_pls, young_interval
from mpiec.strategies.costs import CostModel

from .costs import Costs, StrategyCosts
from .job import Job
from .model import Policy

__all__ = ["build_policy", "cost_model", "modelled", "not_modelled", "parity_bytes_per_server_step"]

PARITY_WORD_BYTES = 8  # each delta row travels with one int64 word (row id / version)


def modelled() -> dict[str, CostModel]:
    """Every registered strategy that carries a cost model (plug-ins included), in registry order."""
    out: dict[str, CostModel] = {}
    for name in STRATEGY_REGISTRY:
        try:
            cost = STRATEGY_REGISTRY[name].cost
        except MpiecError:  # a plug-in that does not load: not_modelled() says why
            continue
        if cost is not None:
            out[name] = cost
    return out


def not_modelled() -> dict[str, str]:
    """Registered strategies the simulator does not model, with each one's reason."""
    out: dict[str, str] = {}
    for name in STRATEGY_REGISTRY:
        try:
            cls = STRATEGY_REGISTRY[name]
        except MpiecError as exc:
            out[name] = str(exc)
            continue
        if cls.cost is None:
            out[name] = cls.cost_reason
    return out


def cost_model(name: str) -> CostModel:
    """``name``'s cost model; ``MpiecError`` naming the modelled strategies, or the reason it is not."""
    models = modelled()
    if name in models:
        return models[name]
    why = not_modelled().get(name)
    if why:
        raise MpiecError(f"strategy '{name}' is {why}")
    raise MpiecError(f"unknown strategy '{name}' for the simulator (known: {', '.join(models)})")


def parity_bytes_per_server_step(sc: StrategyCosts, job: Job) -> float:
    """Parity delta bytes one server sends per step (see the module docstring)."""
    rows = min(float(job.rows), sc.unique_fraction * job.lookups_per_step)
    return rows / max(1, job.servers) * (job.row_bytes + PARITY_WORD_BYTES) * job.r


def build_policy(name: str, costs: Costs, job: Job, mtbf_job_s: float, *,
                 interval_steps: int | None = None, target_pls: float | None = None,
                 scale_agree: bool = True) -> Policy:
    """``name``'s policy on ``job`` when the job fails every ``mtbf_job_s`` seconds on average."""
    model = cost_model(name)
    sc = costs.strategies.get(name)
    if sc is None:
        if name != "none":
            have = ", ".join(sorted(costs.strategies)) or "none"
            raise MpiecError(f"no calibrated costs for strategy '{name}' (calibrated: {have}); "
                             f"add a measured {name} run to the calibration files")
        sc = StrategyCosts("none", "restart")
    kind = model.kind
    rt = costs.runtime
    latency = rt.latency_s(job.ranks, scale_agree)
    common: dict[str, Any] = dict(name=name, kind=kind, step_s=job.step_s, latency_s=latency,
                                  servers=job.servers, trainers=job.trainers, global_batch=job.global_batch,
                                  k=job.k, r=job.r, resume_extra_s=sc.resume_extra_s,
                                  trainer_restore_s=sc.trainer_restore_s)
    if kind == "restart":
        return _checked(Policy(**common))
    if kind == "rebuild":
        overhead = sc.parity.seconds(parity_bytes_per_server_step(sc, job)) if sc.parity else 0.0
        fetched = (job.k + job.r) * job.shard_rows * job.row_bytes
        rebuild = sc.rebuild.seconds(fetched) if sc.rebuild else 0.0
        return _checked(Policy(**common, overhead_s=overhead, sync_restore_s=sc.sync_restore_s,
                               rebuild_s=rebuild, rebuild_slowdown=sc.rebuild_slowdown))
    if sc.write is None or sc.read is None:
        raise MpiecError(f"strategy '{name}': the calibration has no checkpoint write or restore to "
                         "measure its bandwidth from")
    stall = sc.write.seconds(max(job.part_bytes * sc.bytes_ratio, job.dense_bytes))
    restore = sc.read.seconds(job.part_bytes * sc.restore_ratio)
    mtbf = mtbf_job_s if math.isfinite(mtbf_job_s) and mtbf_job_s > 0 else job.steps * job.step_s
    if interval_steps is not None:
        interval, rule = int(interval_steps), "given"
    elif model.interval == "pls":
        pls = (model.target_pls or 0.0) if target_pls is None else target_pls
        if not 0 < pls <= 1:  # also nan: the suite's rule for strategy.target_pls
            raise MpiecError(f"cpr's PLS target must be a number in (0, 1], got {pls!r}")
        per_failure = max(1, job.servers_per_node)
        seconds = interval_for_pls(pls, max(1, job.servers), mtbf) / per_failure
        interval, rule = _steps(name, "checkpoint interval", seconds, job.step_s), f"pls {pls:g}"
    else:
        interval = _steps(name, "checkpoint interval", young_interval(stall, mtbf), job.step_s)
        rule = "young"
    partial_every, partial_stall = None, 0.0
    if sc.partial_every > 0:
        partial_every = max(1, round(interval / sc.partial_every))
        partial_stall = sc.write.seconds(job.part_bytes * sc.partial_ratio)
    return _checked(Policy(**common, interval_steps=interval, interval_rule=rule, ckpt_stall_s=stall,
                           restore_s=restore, partial_every_steps=partial_every,
                           partial_stall_s=partial_stall))


def _steps(name: str, what: str, seconds: float, step_s: float) -> int:
    """``seconds`` in whole steps (at least 1); a non-finite number is an input out of range."""
    steps = seconds / step_s
    if not math.isfinite(steps):
        raise MpiecError(f"strategy '{name}': its {what} comes out as {seconds!r} s with these costs and "
                         "this job: a cost or an input is out of range")
    return max(1, round(steps))


def _checked(p: Policy) -> Policy:
    """Every duration of ``p`` finite: costs and job sizes each in range can still multiply out of
    floating point (a huge part at a tiny rate), and the engine would turn that into an endless run."""
    for f in dataclasses.fields(p):
        value = getattr(p, f.name)
        if isinstance(value, float) and not (math.isfinite(value) and value >= 0):
            raise MpiecError(f"strategy '{p.name}': its {f.name} comes out as {value!r} with these costs "
                             "and this job: a cost or an input is out of range")
    return p
