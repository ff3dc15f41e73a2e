"""Calibrated costs + a job + a failure rate → one strategy's ``Policy`` in seconds.

Owns how each strategy's costs scale with the job and how its checkpoint interval is chosen —
with the suite's own rules, called, not copied. Which strategies are modelled, and as what, is
each strategy's own ``cost`` (``strategies.costs.CostModel``) read from the one registry, so a
plug-in strategy with a cost model is simulated like a built-in; one without says why
(``not_modelled``). Nothing here branches on a strategy's name: the unprotected step is the
``restart`` strategy's (``baseline``), the rest follows the kind, interval rule, medium, diffs and
partials the cost model declares. For the built-ins:

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
from dataclasses import dataclass
from typing import Any

from mpiec.errors import MpiecError
from mpiec.storage.model import StorageModel
from mpiec.strategies import STRATEGIES as STRATEGY_REGISTRY
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.checkpointing import interval_for_pls, young_interval
from mpiec.strategies.cnr import bits_for_restores

from .access import distinct_rows
from .checkpoint_io import transfer_s
from .costs import Costs, StrategyCosts
from .diffs import chain_ratios
from .job import Job
from .model import Policy
from .step import Hardware, StepTimes, step_times

__all__ = ["Setup", "baseline", "build_policy", "cost_model", "modelled", "not_modelled",
           "parity_bytes_per_server_step", "step_model"]

PARITY_WORD_BYTES = 8  # each delta row travels with one int64 word (row id / version)
#: the share of a step a server must have idle (after its parity work) to pace a rebuild into it
IDLE_FOR_REBUILD = 0.05


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


def baseline() -> str:
    """The strategy that protects nothing (the first modelled one whose cost model is
    ``unprotected``: ``none``): its step is the unprotected step every overhead is measured against."""
    for name, model in modelled().items():
        if model.unprotected:
            return name
    raise MpiecError("no registered strategy declares an unprotected cost model (CostModel('restart')): "
                     "the simulator has no unprotected step to price the others against")


def param_default(strategy: str, key: str) -> Any:
    """The default of ``strategy``'s key ``key`` (its ``Params``: the defaults are stated once)."""
    from mpiec.strategies import get_strategy_class

    for f in dataclasses.fields(get_strategy_class(strategy).Params):
        if f.name == key:
            return f.default
    raise KeyError(f"{strategy} has no key {key}")


def parity_bytes_per_server_step(sc: StrategyCosts, job: Job) -> float:
    """Parity delta bytes one server sends per step (see the module docstring): the rows a step
    updates from the access model (``access.distinct_rows``) times the calibrated ``access_ratio``;
    costs from before that ratio use ``unique_fraction`` x the ids looked up."""
    if sc.access_ratio > 0:
        rows = min(float(job.rows), sc.access_ratio * distinct_rows(job, 1))
    else:
        rows = min(float(job.rows), sc.unique_fraction * job.lookups_per_step)
    return rows / max(1, job.servers) * (job.row_bytes + PARITY_WORD_BYTES) * job.r


@dataclass(frozen=True)
class Setup:
    """How the cluster runs the job, beyond the calibrated costs (every field optional: the default
    is a measured run's replay, with the calibrated step, writes and reads, and warm spares).

    ``hardware``: price the step with the step model (``step.py``) instead of taking the job's
    ``step_s`` and the critical-path parity fit; ``storage``: checkpoint writes and reads through
    this model (``checkpoint_io``) instead of the calibrated ones (strategies whose ``medium`` is
    ``memory`` keep theirs); ``interval_s``: a checkpoint interval fixed in seconds (Ckpt-30-like
    baselines) instead of the strategy's rule; ``reschedule_s``: no warm spare, a failed rank is
    replaced by the scheduler after that many seconds (instead of the calibrated ``replace_s``);
    ``shrink``: no spare, the job goes on without the failed ranks and grows back when the scheduler's
    replacements join ``reschedule_s`` later (``model.Policy.shrink``); ``spares``: idle spare nodes
    the job holds (they train nothing: the figures per node count them)."""

    hardware: Hardware | None = None
    storage: StorageModel | None = None
    interval_s: float | None = None
    reschedule_s: float | None = None
    shrink: bool = False
    spares: int = 0
    # the job's aggregate caps reads too (a parallel file system's is shared both ways); a measured
    # run's replay turns it off: the runtime paces reads by the per-rank figure only
    aggregate_reads: bool = True
    diff: str | None = None  # cnr's diff policy (None: its default strategy.diff)
    # cnr's bits per saved weight: 0 = its rule on the expected restores (strategy.bits = "auto"),
    # None = its default strategy.quantization (none: 32 bits)
    bits: int | None = None


def build_policy(name: str, costs: Costs, job: Job, mtbf_job_s: float, *,
                 interval_steps: int | None = None, target_pls: float | None = None,
                 scale_agree: bool = True, setup: Setup | None = None,
                 servers_per_failure: float | None = None) -> Policy:
    """``name``'s policy on ``job`` when the job fails every ``mtbf_job_s`` seconds on average, each
    failure taking ``servers_per_failure`` servers on average (default: a node's, or in a dedicated
    layout the servers' share of the nodes): CPR's PLS rule scales its interval by it."""
    setup = setup or Setup()
    model = cost_model(name)
    sc = costs.strategies.get(name)
    if sc is None:
        if not model.unprotected:  # an unprotected strategy has no cost to calibrate
            have = ", ".join(sorted(costs.strategies)) or "none"
            raise MpiecError(f"no calibrated costs for strategy '{name}' (calibrated: {have}); "
                             f"add a measured {name} run to the calibration files")
        sc = StrategyCosts(name, "restart")
    kind = model.kind
    rt = costs.runtime
    latency = rt.latency_s(job.ranks, scale_agree)
    if setup.reschedule_s is not None and not setup.shrink:
        latency += setup.reschedule_s - rt.replace_s
    step_s, overhead, times = job.step_s, 0.0, None
    if setup.hardware is not None:
        times = step_model(costs, sc, job, setup.hardware)
        step_s, overhead = times.step_s, times.exposed_s
        job = dataclasses.replace(job, step_s=step_s)
    elif kind == "rebuild" and sc.parity:
        overhead = sc.parity.seconds(parity_bytes_per_server_step(sc, job))
    common: dict[str, Any] = dict(name=name, kind=kind, step_s=step_s, latency_s=latency,
                                  servers=job.servers, trainers=job.trainers, global_batch=job.global_batch,
                                  k=job.k, r=job.r, resume_extra_s=sc.resume_extra_s,
                                  trainer_restore_s=sc.trainer_restore_s, overhead_s=overhead,
                                  shrink=setup.shrink, grow_back_s=setup.reschedule_s or 0.0)
    if kind == "restart":
        return _checked(Policy(**common))
    if kind == "rebuild":
        fetched = (job.k + job.r) * job.shard_rows * job.row_bytes
        rebuild = sc.rebuild.seconds(fetched) if sc.rebuild else 0.0
        slowdown = sc.rebuild_slowdown
        idle = times.window_s - times.protection_s if times is not None else 0.0
        if times is not None and setup.hardware is not None and setup.hardware.overlap and \
                idle > IDLE_FOR_REBUILD * times.step_s:
            # dedicated cores: the rebuild is paced into what the parity work leaves of the servers'
            # idle window (the runtime's rebuild rounds at the idle point), so steps keep their speed
            # and the rebuild lasts as many steps as its CPU needs windows; with (almost) no idle time
            # left it runs with the measured slowdown instead
            # its CPU (measured apart from its pacing where the runs record it), over the threads
            cpu_s = sc.rebuild_cpu.seconds(fetched) if sc.rebuild_cpu is not None else rebuild
            cpu = cpu_s / setup.hardware.server_threads * setup.hardware.speed
            rebuild = math.ceil(cpu / idle) * times.run_step_s if cpu > 0 else 0.0
            slowdown = 0.0
        return _checked(Policy(**common, sync_restore_s=sc.sync_restore_s, rebuild_s=rebuild,
                               rebuild_slowdown=slowdown))
    run_step = step_s + overhead
    mtbf = mtbf_job_s if math.isfinite(mtbf_job_s) and mtbf_job_s > 0 else job.steps * run_step
    if model.diffs:
        # the chain's sizes follow the interval, Young's interval the stall: a few rounds settle both
        bits = setup.bits
        if bits is None:
            bits = 32 if param_default(name, "quantization") == "none" else 0
        if bits == 0:
            bits = bits_for_restores(job.steps * run_step / mtbf)
        ratio = 1.0
        for _ in range(4):
            sc = dataclasses.replace(sc, bytes_ratio=ratio)
            stall, _ = _checkpoint_io(name, model, sc, job, setup)
            every = interval_steps or _steps(name, "checkpoint interval", setup.interval_s or
                                             young_interval(stall, mtbf), run_step)
            ratio, restore_ratio = chain_ratios(job, sc.access_ratio or 1.0, every, setup.diff or
                                                str(param_default(name, "diff")), bits)
        sc = dataclasses.replace(sc, bytes_ratio=ratio, restore_ratio=restore_ratio)
    stall, restore = _checkpoint_io(name, model, sc, job, setup)
    if interval_steps is not None:
        interval, rule = int(interval_steps), "given"
    elif setup.interval_s is not None:
        interval = _steps(name, "checkpoint interval", setup.interval_s, run_step)
        rule = f"every {setup.interval_s:g} s"
    elif model.interval == "pls":
        pls = (model.target_pls or 0.0) if target_pls is None else target_pls
        if not 0 < pls <= 1:  # also nan: the suite's rule for strategy.target_pls
            raise MpiecError(f"cpr's PLS target must be a number in (0, 1], got {pls!r}")
        per_failure = servers_per_failure if servers_per_failure is not None else (
            job.servers / max(1, job.nodes) if job.dedicated else max(1, job.servers_per_node))
        seconds = interval_for_pls(pls, max(1, job.servers), mtbf) / max(per_failure, 1e-9)
        interval, rule = _steps(name, "checkpoint interval", seconds, run_step), f"pls {pls:g}"
    else:
        interval = _steps(name, "checkpoint interval", young_interval(stall, mtbf), run_step)
        rule = "young"
    partial_every, partial_stall = None, 0.0
    if sc.partial_every > 0 and sc.write is not None:
        partial_every = max(1, round(interval / sc.partial_every))
        partial_bytes = job.part_bytes * sc.partial_ratio
        partial_stall = (transfer_s(setup.storage, partial_bytes, job.servers) if setup.storage is not None
                         and model.medium == "storage" and (setup.storage.write_mb_s > 0 or
                                                            setup.storage.aggregate_mb_s > 0)
                         else sc.write.seconds(partial_bytes))
    replay = 0.0
    if kind == "replay" and sc.replay is not None:
        # per step replayed; the fixed part joins the restore
        replay = sc.replay.seconds(1.0) - sc.replay.latency_s
        restore += sc.replay.latency_s
    return _checked(Policy(**common, interval_steps=interval, interval_rule=rule, ckpt_stall_s=stall,
                           ckpt_bytes=job.part_bytes * sc.bytes_ratio * job.servers + job.dense_bytes,
                           restore_bytes=job.part_bytes * sc.restore_ratio * job.servers + job.dense_bytes,
                           restore_s=restore, partial_every_steps=partial_every,
                           partial_stall_s=partial_stall, partial_coverage=sc.partial_coverage,
                           replay_s_per_step=replay))


def step_model(costs: Costs, sc: StrategyCosts, job: Job, hw: Hardware) -> StepTimes:
    """The step of ``job`` for the strategy of ``sc`` on ``hw`` (``ecrm``: with its parity work)."""
    if costs.step is None:
        raise MpiecError("these costs have no CPU per step by role (calibrated before the step model): "
                         "recalibrate from failure-free runs (schema v4) or give --no-step-model")
    cpu = nbytes = 0.0
    if sc.kind == "rebuild":
        nbytes = parity_bytes_per_server_step(sc, job)
        if sc.parity_cpu is not None:
            cpu = sc.parity_cpu.seconds(nbytes)
        elif sc.parity is not None:
            cpu = sc.parity.seconds(nbytes)
    return step_times(costs.step, job, hw, cpu, nbytes)


def _checkpoint_io(name: str, model: CostModel, sc: StrategyCosts, job: Job,
                   setup: Setup) -> tuple[float, float]:
    """(stall of one checkpoint on the critical path, one recovery's restore), seconds."""
    part = job.part_bytes * sc.bytes_ratio
    read_bytes = job.part_bytes * sc.restore_ratio
    st = setup.storage if model.medium == "storage" else None
    # A direction the storage model leaves uncapped (a 0 figure: "the real disk's speed") is the
    # disk the calibration measured: its fit prices it.
    writes = st is not None and (st.write_mb_s > 0 or st.aggregate_mb_s > 0)
    reads = st is not None and (st.read_mb_s > 0 or (setup.aggregate_reads and st.aggregate_mb_s > 0))
    if (not writes and sc.write is None) or (not reads and sc.read is None):
        raise MpiecError(f"strategy '{name}': the calibration has no checkpoint write or restore to "
                         "measure its bandwidth from")
    if writes:
        assert st is not None
        # every server writes its part, one trainer the dense replica, all through the job's share
        stall = transfer_s(st, part, job.servers, extra_bytes=job.dense_bytes)
    else:
        assert sc.write is not None
        # the calibrated fit is of one part's stall: the slowest part, a server's or the dense one
        stall = sc.write.seconds(max(part, job.dense_bytes))
    if reads:
        assert st is not None
        # a rollback reads every part at once; a partial recovery only the lost shard's (one node's)
        readers = job.servers if model.kind == "rollback" else max(1, job.servers_per_node)
        restore = transfer_s(st, read_bytes, readers, write=False, aggregate=setup.aggregate_reads)
    else:
        assert sc.read is not None
        restore = sc.read.seconds(read_bytes)
    return stall, restore


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
