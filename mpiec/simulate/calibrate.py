"""Measured result files → the simulator's ``Costs``.

Owns what is read from a result file for the model (``measure``) and how costs are fitted from a
set of them (``calibrate``). Every cost comes from these files; where a file cannot tell a cost
apart it says so in ``Costs.note`` instead of inventing one.

* **normal step time** of a run: the mean step of the whole run after ``WARMUP_STEPS``, steps
  executed again and checkpoint steps (and the step after one) left out: its failure-free speed,
  what ``steps × step`` of its training time is. Not the runtime's first-epoch median (what its
  back-to-normal threshold uses): on a shared machine the speed drifts by 2-3x over a minute and
  step times have a heavy tail, so a median undercounts the time steps take (by 10-45 % in the
  validation runs); the job's step time is the ``none`` runs' median of these;
* **speed**: runs of the same model and layout (``speed_key``: model, tables, batch, trainers,
  servers and the number of ranks — not the strategy) are brought to their mean step time before
  anything is averaged: every duration of a run is multiplied by (mean step / its step),
  checkpoint writes at an emulated bandwidth aside
  (``costs.py``: on shared cores every CPU-bound duration stretches with the step); the means are
  ``RuntimeCosts.speed_steps``;
* **recovery latencies** (shared): means over every recovery of every file of ``detection_s``,
  ``shrink_agree_s``, ``plan_s``, ``replace_s`` (``summary.recovery_breakdown``, read by
  ``mpiec.results.recoveries``);
* **checkpoint write** (``ckpt``, ``cpr*``, ``cnr``): ``fit_linear`` of each checkpoint's
  ``stall_s`` (the critical-path part) against one server's part of it —
  ``(bytes − dense replica) / servers`` for a full / baseline / diff checkpoint (the trainer's
  dense part is written in parallel), ``bytes / servers`` for a partial one;
* **restore**: ``fit_linear`` of each server recovery's ``restore_s`` against the bytes one server
  reads (its part; ``cnr``: its share of the newest chain, ``capacity_bytes``);
* **cnr** ``bytes_ratio`` / ``restore_ratio``: mean checkpoint / chain bytes over a full one;
  **cpr-mfu / ssu**: partial checkpoints per full one and their size over a full part;
* **ecrm**: ``parity`` = ``fit_linear`` of the critical-path parity time per step
  (``parity_stage_s_per_step``, measured inside the run) against the parity bytes a server sends per
  step. Not
  the step time against a ``none`` run: on a shared machine two runs' step times differ by more than
  the parity work (concurrent tiny runs here measured ecrm 17 % and 35 % *faster* than ``none``),
  and the delta exchange overlapped with the trainers' compute is off the critical path by design;
  ``unique_fraction`` = parity rows per step / r / ids looked up per step; rebuild:
  ``fit_linear`` of each rebuild's duration (events ``rebuild_start`` → ``rebuild_end``) against
  the bytes it fetched; ``rebuild_slowdown`` = median
  step time inside the rebuild windows over the normal one − 1; ``sync_restore_s`` = the
  recoveries' ``restore_s``;
* **resume_extra_s**: per recovery, the measured time lost minus what the model accounts for
  (recovery, re-executed steps at the normal speed, the counted rebuild window); a strategy's is the
  median of its own recoveries when it has at least ``OWN_EXTRA_MIN`` of them, else the median
  over every strategy's (the slow first steps after a replacement are the runtime's, and one
  recovery on a shared machine is mostly noise); at least 0.

Invariants: incomplete (partial) files, lost runs and emulated failures are not used (emulated
failures do not measure ULFM); a file of another schema raises ``ResultFileError`` naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpiec.config import Config
from mpiec.errors import MpiecError
from mpiec.launch.resolve import typed_params
from mpiec.results import RunResult, decode, recoveries

from .access import changed_fraction, distinct_rows
from .costs import Costs, Linear, RuntimeCosts, StepCosts, StrategyCosts, fit_linear
from .job import Job
from .model import BACK_TO_NORMAL_SLOWDOWN
from .policies import modelled

__all__ = ["Measured", "MeasuredRecovery", "calibrate", "measure", "same_config", "speed_key"]

OWN_EXTRA_MIN = 3
WARMUP_STEPS = 5  # the runtime's warm-up too (accounting._normal_step_time)
FULL_KINDS = ("full", "baseline", "diff")  # written with the dense part
PARTIAL_KINDS = ("mfu", "ssu")
SNAPSHOT_KINDS = ("snapshot",)  # ecsnap's in-memory snapshots: one part per server, no dense part
_IGNORED_CONFIG = ("strategy", "failures", "output")


@dataclass
class MeasuredRecovery:
    """One recovery of a result file, as the model needs it."""

    kill_s: float
    roles: list[str]  # roles killed (server, trainer, node, ...)
    detection_s: float
    shrink_agree_s: float
    plan_s: float
    replace_s: float
    restore_s: float
    recovery_s: float  # kill -> resume
    time_lost_s: float
    reexec_steps: int
    rebuild_s: float = math.nan  # ecrm: rebuild_start -> rebuild_end
    window_s: float = math.nan  # ecrm: resume -> rebuild_end
    window_slowdown: float = math.nan  # ecrm: mean step in the window / normal - 1

    @property
    def server_failure(self) -> bool:
        return any(r in ("server", "node") for r in self.roles)


@dataclass
class Measured:
    """What one result file tells the model."""

    path: str
    strategy: str
    cfg: Config
    job: Job  # the run's own job, step_s = its normal step time
    normal_step_s: float
    throughput_sps: float
    wall_s: float
    failure_free: bool
    summary: dict[str, Any]
    checkpoints: np.ndarray
    timeline: np.ndarray
    recoveries: list[MeasuredRecovery] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def same_config(a: Config, b: Config, ignore_steps: bool = False) -> bool:
    """Equal configs apart from strategy, failures and output (the analysis' baseline rule);
    ``ignore_steps``: and the number of steps (the normal step time does not depend on it)."""
    da, db = a.to_dict(), b.to_dict()
    if ignore_steps:
        da["training"] = {**da["training"], "steps": 0}
        db["training"] = {**db["training"], "steps": 0}
    return all(da[k] == db[k] for k in da if k not in _IGNORED_CONFIG)


def speed_key(cfg: Config) -> str:
    """Runs whose step times differ only by the machine's speed: same model, tables, bags, batch and
    layout (trainers, servers, every rank: another layout's step differs by its own work and by
    how many ranks share the cores, which is no sign of a slower machine)."""
    d = cfg.to_dict()
    what = json.dumps([d["model"], d["data"]["cardinalities"], d["data"]["multi_hot"],
                       d["training"]["batch_size"], d["layout"]["trainers"], d["layout"]["servers"],
                       cfg.n_ranks], sort_keys=True)
    return f"{cfg.preset}/{hashlib.sha256(what.encode()).hexdigest()[:8]}"


def _at_speed(m: Measured, f: float) -> Measured:
    """``m`` with every duration × ``f`` (checkpoint writes at an emulated bandwidth aside)."""
    recs = [dataclasses.replace(r, **{k: getattr(r, k) * f for k in _DURATIONS}) for r in m.recoveries]
    summary = dict(m.summary)
    for k in ("parity_stage_s_per_step", "parity_drain_s_per_step"):
        if isinstance(summary.get(k), int | float):
            summary[k] = summary[k] * f
    ck = m.checkpoints.copy()
    if not m.summary.get("emulated_bandwidth") and len(ck):
        ck["stall_s"] = ck["stall_s"] * f
        ck["seconds"] = ck["seconds"] * f
    return dataclasses.replace(m, normal_step_s=m.normal_step_s * f, job=dataclasses.replace(
        m.job, step_s=m.job.step_s * f), summary=summary, checkpoints=ck, recoveries=recs)


_DURATIONS = ("detection_s", "shrink_agree_s", "plan_s", "replace_s", "restore_s", "recovery_s",
              "time_lost_s", "rebuild_s", "window_s")


def _step_time(tl: np.ndarray, checkpoints: np.ndarray) -> float:
    """Mean first-execution step after the warm-up, checkpoint steps and the steps after them aside."""
    if not len(tl):
        return math.nan
    ck = {int(s) for s in checkpoints["step"]} if len(checkpoints) else set()
    plain = np.array([int(s) not in ck and int(s) - 1 not in ck for s in tl["step"]], dtype=bool)
    keep = plain & ~tl["reexec"] & (tl["step"] >= WARMUP_STEPS)
    dt = tl["dt"][keep] if keep.any() else tl["dt"]
    return float(np.mean(dt))


def _events(res: RunResult) -> list[tuple[float, str, str, int]]:
    ev = res.events
    return [(float(e["time"]), decode(e["kind"]), decode(e["role"]), int(e["role_index"])) for e in ev]


def measure(res: RunResult) -> Measured:
    """The model's view of one result file."""
    where = str(res.path)
    try:
        cfg = Config.from_json(json.dumps(res.config))
    except MpiecError as exc:
        raise MpiecError(f"result {where}: its config does not load here ({exc})") from None
    tl = res.timeline
    s = res.summary
    normal = _step_time(tl, res.checkpoints)
    if not normal > 0:
        raise MpiecError(f"result {where}: no steps in its timeline to measure a step time from")
    events = _events(res)
    kills = [(t, role) for t, kind, role, _ in events if kind in ("kill", "emulated_kill")]
    out = Measured(
        path=str(where), strategy=res.strategy, cfg=cfg, job=Job.from_config(cfg, normal),
        normal_step_s=normal, throughput_sps=float(s.get("throughput_sps", math.nan)),
        wall_s=float(tl["t_end"][-1]) if len(tl) else math.nan,
        failure_free=not kills and not cfg.failures.kill, summary=s, checkpoints=res.checkpoints,
        timeline=tl)
    breakdown = recoveries(res)
    ends = [t for t, kind, _, _ in events if kind == "rebuild_end"]
    starts = [t for t, kind, _, _ in events if kind == "rebuild_start"]
    for b in breakdown:
        epoch = int(b["epoch"])
        roles = [role for t, role in kills if abs(t - b["kill"]) < 1e-3] or ["?"]
        reexec = int(np.sum((tl["epoch"] == epoch) & tl["reexec"])) if len(tl) else 0
        rec = MeasuredRecovery(
            kill_s=float(b["kill"]), roles=roles, detection_s=b["detection_s"],
            shrink_agree_s=b["shrink_agree_s"], plan_s=b["plan_s"], replace_s=b["replace_s"],
            restore_s=b["restore_s"], recovery_s=b["recovery_s"], time_lost_s=b["time_lost_s"],
            reexec_steps=reexec)
        resume = rec.kill_s + rec.recovery_s
        end = min((t for t in ends if t >= resume - 1e-6), default=math.nan)
        start = max((t for t in starts if t <= resume + 1e-6 and t >= rec.kill_s), default=math.nan)
        if math.isfinite(end) and math.isfinite(start):
            rec.rebuild_s = end - start
            rec.window_s = max(0.0, end - resume)
            inside = tl[(tl["epoch"] == epoch) & (tl["t_end"] > resume) & (tl["t_end"] - tl["dt"] < end)]
            if len(inside):
                rec.window_slowdown = float(np.median(inside["dt"])) / normal - 1.0
        out.recoveries.append(rec)
    return out


def _usable(m: Measured) -> bool:
    """A complete, real run of the strategy as it is: not lost, not emulated, and without the
    runtime's corruption detectors (their cost is no strategy's; ``mpiec bench`` variants
    ``none:message_checksums=true`` would otherwise count as ``none``)."""
    s = m.summary
    f = m.cfg.failures
    return (bool(s.get("complete", True)) and not s.get("lost", False) and not s.get("emulated", False)
            and not f.message_checksums and not f.dense_check_every and not f.shard_check_every)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return statistics.fmean(xs) if xs else math.nan


def _write_samples(m: Measured) -> list[tuple[float, float]]:
    out = []
    for row in m.checkpoints:
        kind, stall = decode(row["kind"]), float(row["stall_s"])
        servers = m.job.servers
        if kind in FULL_KINDS:
            part = (int(row["bytes"]) - m.job.dense_bytes) / servers
        elif kind in PARTIAL_KINDS:
            part = int(row["bytes"]) / servers
        elif kind in SNAPSHOT_KINDS:
            if int(row["step"]) < 2 * WARMUP_STEPS:  # the first snapshot compiles the encoder
                continue
            part = int(row["bytes"]) / servers
        else:
            continue
        out.append((part, stall))
    return out


def _full_bytes(m: Measured) -> float:
    """Bytes of one full checkpoint of the run's model (servers' parts and the dense part)."""
    full = m.summary.get("full_checkpoint_bytes")
    if isinstance(full, int | float) and full > 0:
        return float(full)
    return float(m.job.part_bytes * m.job.servers + m.job.dense_bytes)


def _ratio(values: list[float]) -> float:
    v = _mean(values)
    return v if math.isfinite(v) and v > 0 else 1.0


def calibrate(results: list[RunResult]) -> Costs:
    """Fit the costs from measured result files (see the module docstring)."""
    measured = [measure(r) for r in results]
    used = [m for m in measured if _usable(m)]
    notes: list[str] = []
    if len(used) < len(measured):
        left = len(measured) - len(used)
        notes.append(f"{left} lost, emulated, incomplete or detector-on file(s) not used")
    groups: dict[str, list[Measured]] = {}
    for m in used:
        groups.setdefault(speed_key(m.cfg), []).append(m)
    speed_steps = {k: _mean([m.normal_step_s for m in ms]) for k, ms in groups.items()}
    used = [_at_speed(m, speed_steps[speed_key(m.cfg)] / m.normal_step_s) for m in used]
    recs = [rec for m in used for rec in m.recoveries]
    if not recs:
        raise MpiecError("calibration needs at least one run that recovered from a failure "
                         "(e.g. mpiec run --strategy ckpt --set layout.spares=1 --kill server:1@step=30)")
    models = modelled()
    nones = [m for m in used if m.strategy in models and models[m.strategy].unprotected]
    if nones:
        step_s = statistics.median(m.normal_step_s for m in nones)
    else:
        step_s = statistics.median(m.normal_step_s for m in used)
        notes.append("no `none` run: the step time is the median of the protected runs' (overhead included)")
    with_rec = [m for m in used if m.recoveries]
    runtime = RuntimeCosts(
        detect_s=_mean([r.detection_s for r in recs]), shrink_agree_s=_mean([r.shrink_agree_s for r in recs]),
        plan_s=_mean([r.plan_s for r in recs]), replace_s=_mean([r.replace_s for r in recs]),
        step_s=float(step_s), ranks=int(statistics.median(m.job.ranks for m in with_rec)),
        recoveries=len(recs), speed_steps=speed_steps)
    strategies: dict[str, StrategyCosts] = {}
    extras: dict[str, list[float]] = {}  # per recovery: time lost the model does not explain
    for name in sorted({m.strategy for m in used}):
        if name not in models:
            notes.append(f"strategy '{name}' is not modelled: its files only calibrate the runtime latencies")
            continue
        runs = [m for m in used if m.strategy == name]
        strategies[name], extras[name] = _strategy_costs(name, runs, notes)
    _partial_coverage(used, strategies)
    pooled = [x for xs in extras.values() for x in xs]
    for name, sc in strategies.items():
        own = extras[name] if len(extras[name]) >= OWN_EXTRA_MIN else pooled
        extra = max(0.0, statistics.median(own)) if own else 0.0
        strategies[name] = dataclasses.replace(sc, resume_extra_s=extra)
    step = step_costs(used)
    if step is None:
        notes.append("no failure-free run with CPU per step by role (schema v4): the step model "
                     "(mpiec simulate's default at scale) cannot run on these costs")
    return Costs(runtime, strategies, sources=[m.path for m in used], note="; ".join(notes), step=step)


def _cpu(m: Measured, key: str) -> float:
    v = m.summary.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) and v > 0 else math.nan


def _parity_cpu(m: Measured) -> float:
    """A server's parity CPU per step (ecrm's stage + drain; 0 where the run has none)."""
    parts = (_cpu(m, "parity_stage_cpu_s_per_step"), _cpu(m, "parity_drain_cpu_s_per_step"))
    return sum(x for x in parts if math.isfinite(x))


def step_costs(used: list[Measured]) -> StepCosts | None:
    """CPU per step by role from the failure-free runs: ``trainer`` against a trainer's work per step
    (samples × ``Job.trainer_work_per_sample``; every strategy: a trainer's work does not depend on
    it); ``server`` against the bytes of the rows a server looks up per step, from the runs of
    strategies that take no checkpoints (``none``, ``ecrm``: their parity CPU taken out; a
    checkpointing server's CPU also holds its writes). None without such runs."""
    models = modelled()
    free = [m for m in used if m.failure_free]
    trainer = [(float(m.cfg.training.batch_size) * m.job.trainer_work_per_sample,
                _cpu(m, "trainer_cpu_s_per_step")) for m in free]
    server = []
    for m in free:
        model = models.get(m.strategy)
        if model is None or model.takes_checkpoints:
            continue
        cpu = _cpu(m, "server_cpu_s_per_step")
        row_bytes = m.job.lookups_per_step / max(1, m.job.servers) * m.job.row_bytes
        server.append((row_bytes, cpu - _parity_cpu(m)))
    t = fit_linear([p for p in trainer if math.isfinite(p[1])])
    sv = fit_linear([p for p in server if math.isfinite(p[1])])
    if t is None or sv is None:
        return None
    runs = [m for m in free if math.isfinite(_cpu(m, "trainer_cpu_s_per_step"))]
    return StepCosts(trainer=t, server=sv, runs=len(runs), sources=[m.path for m in runs])


def _partial_coverage(used: list[Measured], strategies: dict[str, StrategyCosts]) -> None:
    """A strategy with partial checkpoints (``CostModel.partials_over``: ``cpr-mfu`` / ``cpr-ssu``
    over ``cpr``): 1 − its lost updates / the strategy's it adds them to, over runs of one config and
    kill plan (the same failures at the same steps); left 0 (no credit) without such a pair."""
    for name, model in modelled().items():
        if model.partials_over is None or name not in strategies:
            continue
        bases = [m for m in used if m.strategy == model.partials_over and m.recoveries]
        ratios = []
        for m in (x for x in used if x.strategy == name and x.recoveries):
            base = [c for c in bases
                    if same_config(c.cfg, m.cfg) and c.cfg.failures.kill == m.cfg.failures.kill]
            lost = float(m.summary.get("lost_updates", math.nan))
            ref = _mean([float(c.summary.get("lost_updates", math.nan)) for c in base])
            if math.isfinite(lost) and math.isfinite(ref) and ref > 0:
                ratios.append(min(1.0, lost / ref))
        if ratios:
            strategies[name] = dataclasses.replace(strategies[name], partial_coverage=1.0 - _mean(ratios))


def _strategy_costs(name: str, runs: list[Measured], notes: list[str]) -> tuple[StrategyCosts, list[float]]:
    """The strategy's costs (``resume_extra_s`` still 0) and its recoveries' unexplained time lost."""
    kind = modelled()[name].kind
    recs = [(m, r) for m in runs for r in m.recoveries]
    server_recs = [(m, r) for m, r in recs if r.server_failure]
    trainer_recs = [r for _, r in recs if r.roles and all(x == "trainer" for x in r.roles)]
    common: dict[str, Any] = dict(name=name, kind=kind, recoveries=len(recs), sources=[m.path for m in runs],
                                  write_paced=all(bool(m.summary.get("emulated_bandwidth")) for m in runs),
                                  trainer_restore_s=_mean([r.restore_s for r in trainer_recs]) if trainer_recs
                                  else 0.0)
    if kind == "restart":
        return StrategyCosts(**common), []
    if kind == "rebuild":
        return _ecrm_costs(runs, server_recs, notes, common)
    write = fit_linear([p for m in runs for p in _write_samples(m)])
    bytes_ratio = restore_ratio = 1.0
    partial_every = partial_ratio = 0.0
    access = 0.0
    if modelled()[name].diffs:
        access = _diff_access_ratio(runs)
        bytes_ratio = _ratio([(int(row["bytes"]) - m.job.dense_bytes) / (_full_bytes(m) - m.job.dense_bytes)
                              for m in runs for row in m.checkpoints])
        restore_ratio = _ratio([(float(m.summary.get("capacity_bytes", math.nan)) - m.job.dense_bytes)
                                / (_full_bytes(m) - m.job.dense_bytes) for m in runs])
    if modelled()[name].partials_over is not None:  # partial checkpoints between the full ones
        fulls = sum(1 for m in runs for row in m.checkpoints if decode(row["kind"]) == "full")
        partial_rows = [(m, row) for m in runs for row in m.checkpoints
                        if decode(row["kind"]) in PARTIAL_KINDS]
        if fulls and partial_rows:
            partial_every = len(partial_rows) / fulls
            partial_ratio = _mean([int(row["bytes"]) / m.job.servers / m.job.part_bytes
                                   for m, row in partial_rows])
    replay = None
    if kind == "replay":  # log: the restore holds the replay of the logged steps; fitted apart
        replay = fit_linear([(float(m.summary.get("log_replayed_steps", 0)),
                              float(m.summary.get("log_replay_s", 0))) for m in runs if m.recoveries])
    read = fit_linear([(m.job.part_bytes * restore_ratio, r.restore_s - _replay_share(m))
                       for m, r in server_recs])
    if write is None:
        notes.append(f"{name}: no checkpoint with a measured stall (schema v3): cannot calibrate its writes")
    if read is None:
        notes.append(f"{name}: no server recovery to measure its restore from")
    extras = [r.time_lost_s - r.recovery_s - r.reexec_steps * m.normal_step_s for m, r in recs]
    return StrategyCosts(**common, write=write, read=read, bytes_ratio=bytes_ratio,
                         restore_ratio=restore_ratio, partial_every=partial_every,
                         partial_ratio=partial_ratio, replay=replay, access_ratio=access), extras


def _diff_access_ratio(runs: list[Measured]) -> float:
    """Rows a differential checkpoint held over the rows the access model says changed: a diff of
    fraction ``f`` of its baseline's bytes covering ``n`` steps (since the baseline, or since the
    previous checkpoint for ``consecutive``) against ``access.changed_fraction(job, n)``; the median
    of the diffs, 0 without any."""
    out = []
    for m in runs:
        policy = str(typed_params(m.cfg).diff)  # the run's, else its strategy's default
        base_bytes, base_step, prev = math.nan, 0, 0
        for row in m.checkpoints:
            kind, step = decode(row["kind"]), int(row["step"])
            nbytes = int(row["bytes"]) - m.job.dense_bytes
            if kind == "baseline":
                base_bytes, base_step = nbytes, step
            elif kind == "diff" and base_bytes > 0:
                n = step - (prev if policy == "consecutive" else base_step)
                model = changed_fraction(m.job, n)
                if n > 0 and model > 0:
                    out.append(nbytes / base_bytes / model)
            prev = step
    return statistics.median(out) if out else 0.0


def _replay_share(m: Measured) -> float:
    """A ``log`` recovery's replay seconds (the run's replay over its server recoveries); 0 otherwise."""
    n = sum(1 for r in m.recoveries if r.server_failure)
    v = m.summary.get("log_replay_s")
    return float(v) / n if n and isinstance(v, int | float) and math.isfinite(v) else 0.0


def _ecrm_costs(runs: list[Measured], server_recs: list[tuple[Measured, MeasuredRecovery]],
                notes: list[str], common: dict[str, Any]) -> tuple[StrategyCosts, list[float]]:
    parity: list[tuple[float, float]] = []
    unique: list[float] = []
    free = [m for m in runs if not m.recoveries]
    if not free:  # a rebuild applies deltas at the end of its steps: the stage then holds more than parity
        notes.append("ecrm: parity cost from runs with rebuilds (no failure-free ecrm run): the critical-"
                     "path stage of their rebuild windows is counted in it")
    parity_cpu: list[tuple[float, float]] = []
    access: list[float] = []
    for m in free or runs:
        s = m.summary
        per_server = float(s.get("parity_bytes_per_step", 0.0)) / m.job.servers
        parity.append((per_server, float(s.get("parity_stage_s_per_step", 0.0))))
        cpu = _parity_cpu(m)
        if m in free and cpu > 0:
            parity_cpu.append((per_server, cpu))
        rows = float(s.get("parity_rows_per_step", 0.0))
        if rows > 0:
            unique.append(rows / m.job.r / m.job.lookups_per_step)
            access.append(rows / m.job.r / distinct_rows(m.job, 1))
    rebuilds = [(m, r) for m, r in server_recs if math.isfinite(r.rebuild_s)]
    samples = []
    for m, r in rebuilds:
        n_rebuilt = sum(1 for x in m.recoveries if math.isfinite(x.rebuild_s))
        per = float(m.summary.get("rebuild_bytes", 0)) / max(1, n_rebuilt)
        samples.append((per, r.rebuild_s))
    rebuild: Linear | None = fit_linear(samples)
    cpu_samples = []
    for m, _ in rebuilds:
        n_rebuilt = sum(1 for x in m.recoveries if math.isfinite(x.rebuild_s))
        cpu = _cpu(m, "rebuild_cpu_s")
        if math.isfinite(cpu):
            per = float(m.summary.get("rebuild_bytes", 0)) / max(1, n_rebuilt)
            cpu_samples.append((per, cpu / max(1, n_rebuilt)))
    slow = _mean([r.window_slowdown for _, r in rebuilds])
    slow = max(0.0, slow) if math.isfinite(slow) else 0.0
    counted = slow > BACK_TO_NORMAL_SLOWDOWN
    extras = [r.time_lost_s - r.recovery_s - (r.window_s if counted and math.isfinite(r.window_s) else 0.0)
              for _, r in server_recs]
    if not rebuilds:
        notes.append("ecrm: no rebuild measured (no server failure): rebuild cost unknown, taken as 0")
    return StrategyCosts(**common, parity=fit_linear(parity), parity_cpu=fit_linear(parity_cpu),
                         unique_fraction=_mean(unique) if unique else 0.0,
                         access_ratio=_mean(access) if access else 0.0, rebuild=rebuild,
                         rebuild_cpu=fit_linear(cpu_samples),
                         rebuild_slowdown=slow, sync_restore_s=_mean([r.restore_s for _, r in server_recs])
                         if server_recs else 0.0), extras
