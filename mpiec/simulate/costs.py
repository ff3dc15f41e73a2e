"""The calibrated costs the simulator runs on: what they are, their units, their JSON form.

Owns the cost vocabulary of ``mpiec simulate``. Every number here is either measured from
result files (``calibrate.py``) or read back from a costs JSON that was; nothing is made up.

* ``Linear(latency_s, rate_Bps)``: seconds to move ``b`` bytes = ``latency_s + b / rate_Bps``
  (a checkpoint part written, a shard read back, the bytes a rebuild fetches). ``fit`` says how
  it was obtained: ``"linear"`` (least squares over at least two distinct sizes) or
  ``"rate"`` (one size only: the latency is taken as 0, so all the time scales with bytes).
* ``RuntimeCosts``: what every recovery pays whatever the strategy (ULFM detection, shrink and
  agree, the plan, the replacement), the calibration job's normal step time, and the rank count
  the latencies were measured at (``shrink_agree_s`` may be scaled with ``log2`` of the ranks).
* **speed**: on a machine whose cores are shared (oversubscribed ranks, other jobs), every CPU-bound
  duration stretches with the run's CPU share, the step time as much as a detection or a restore.
  The calibration expresses its costs at the mean speed of its runs of each model
  (``RuntimeCosts.speed_steps``: their mean step time); ``Costs.at_speed(f)`` gives the costs on a
  machine ``f`` times slower. At cluster scale the factor is 1 (a dedicated node is taken to run at
  the calibration's speed).
* ``StrategyCosts``: one strategy's failure-free and failure costs (all optional: a strategy pays
  only what applies to it). Per-step overhead is a function of the protection bytes
  (``parity``: critical-path seconds per step from the parity bytes a server sends per step), so
  it extrapolates to other table sizes and server counts; ``resume_extra_s`` is the measured time
  between "training resumes" and "back to 95 % of the normal step rate" beyond what the model
  explains (slow first steps of a replacement).

Invariants: every field is finite and >= 0 (``Linear.rate_Bps`` > 0); ``Costs.from_json`` of
``Costs.to_json()`` is equal to the original; unknown or missing keys in a costs file are a
``MpiecError`` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpiec.errors import ConfigError, MpiecError

__all__ = ["MAX_COST", "Costs", "Linear", "RuntimeCosts", "StepCosts", "StrategyCosts", "fit_linear",
           "load_costs"]

#: The largest number a costs file may hold (seconds, bytes per second, ratios, counts): far above
#: any measurement, and low enough that no product of costs and job sizes overflows a float.
MAX_COST = 1e15


@dataclass(frozen=True)
class Linear:
    """``seconds(bytes) = latency_s + bytes / rate_Bps``."""

    latency_s: float
    rate_Bps: float
    fit: str = "linear"  # "linear" | "rate"
    samples: int = 0

    def seconds(self, nbytes: float) -> float:
        return self.latency_s + max(0.0, nbytes) / self.rate_Bps


def fit_linear(samples: list[tuple[float, float]]) -> Linear | None:
    """Least-squares ``latency + bytes / rate`` over ``(bytes, seconds)`` samples.

    With fewer than two distinct sizes (or a fit that comes out with a negative latency or a
    non-positive slope) the latency is 0 and the rate is Σ bytes / Σ seconds: the honest
    reading of one size, whose fixed and per-byte parts cannot be told apart. None when there
    is no usable sample (no bytes or no time)."""
    pts = [(float(b), float(s)) for b, s in samples if b > 0 and s > 0 and math.isfinite(b + s)]
    if not pts:
        return None
    sizes = {b for b, _ in pts}
    if len(sizes) >= 2:
        n = len(pts)
        mb = sum(b for b, _ in pts) / n
        ms = sum(s for _, s in pts) / n
        var = sum((b - mb) ** 2 for b, _ in pts)
        slope = sum((b - mb) * (s - ms) for b, s in pts) / var
        latency = ms - slope * mb
        # a spread of sizes too small against the noise gives nonsense: fall back to the rate
        if slope > 0 and latency >= 0:
            return Linear(latency, 1.0 / slope, "linear", n)
    total_b = sum(b for b, _ in pts)
    total_s = sum(s for _, s in pts)
    return Linear(0.0, total_b / total_s, "rate", len(pts))


@dataclass(frozen=True)
class RuntimeCosts:
    """Shared recovery latencies (means over the calibration's recoveries) and the job they came from."""

    detect_s: float
    shrink_agree_s: float
    plan_s: float
    replace_s: float
    step_s: float  # normal step time of the calibration job's `none` run (median after warm-up)
    ranks: int  # ranks of the calibration runs (for the log2 scaling of shrink + agree)
    recoveries: int  # how many recoveries the latencies average
    # speed key (calibrate.speed_key) -> the mean step of the calibration runs of that model: the
    # machine speed every CPU-bound cost here is expressed at (see Costs.at_speed)
    speed_steps: dict[str, float] = field(default_factory=dict)

    def latency_s(self, ranks: int | None = None, scale_agree: bool = True) -> float:
        """Kill → replacement in place: detection + shrink/agree (× log2 ratio of ranks) + plan + replace."""
        agree = self.shrink_agree_s
        if scale_agree and ranks and ranks > self.ranks > 1:
            # ULFM's revoke, shrink and agreement are tree-based: O(log n) rounds
            agree *= math.log2(ranks) / math.log2(self.ranks)
        return self.detect_s + agree + self.plan_s + self.replace_s


@dataclass(frozen=True)
class StepCosts:
    """CPU seconds a rank spends per failure-free step, by role (``step.py`` turns them into a step's
    critical path). ``Linear`` here maps work, not only bytes: ``trainer`` takes a trainer's
    multiply-adds per step (samples × ``Job.trainer_work_per_sample``), ``server`` the bytes of the
    rows a server looks up and updates per step (its gather, gradient sums and optimizer; parity work
    aside). Fitted from the ``*_cpu_s_per_step`` figures of
    failure-free runs (schema v4): CPU time, so a rank's share of oversubscribed cores does not
    inflate it the way it inflates wall time."""

    trainer: Linear
    server: Linear
    runs: int = 0
    sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StrategyCosts:
    """One strategy's calibrated costs; ``None`` / 0 where the strategy has no such cost."""

    name: str
    kind: str  # "restart" | "rollback" | "partial" | "rebuild" (what a server failure does)
    write: Linear | None = None  # checkpoint stall on the critical path per server part
    read: Linear | None = None  # restore of one server's part
    bytes_ratio: float = 1.0  # bytes a checkpoint writes / a full checkpoint's (cnr's diffs: < 1)
    restore_ratio: float = 1.0  # bytes a restore reads / one full part (cnr's chain: may be > 1)
    partial_every: float = 0.0  # cpr-mfu / ssu: partial checkpoints per full interval
    partial_ratio: float = 0.0  # bytes of a partial / a full part
    parity: Linear | None = None  # ecrm: critical-path seconds per step from a server's parity bytes
    unique_fraction: float = 0.0  # ecrm: distinct rows updated per step / ids looked up per step
    # rows updated (ecrm's parity rows, cnr's diffs) / the access model's (access.py); 0: not measured
    access_ratio: float = 0.0
    rebuild: Linear | None = None  # ecrm: background rebuild duration from the bytes it fetches
    rebuild_slowdown: float = 0.0  # ecrm: step time during the rebuild / normal − 1
    sync_restore_s: float = 0.0  # ecrm: the part of the recovery before training resumes (sync, replay)
    resume_extra_s: float = 0.0  # resume → back to 95 % speed, beyond the steps the model counts
    trainer_restore_s: float = 0.0  # a trainer-only failure: the peer copy of the dense replica
    write_paced: bool = False  # every calibration run wrote at an emulated bandwidth (sleep-paced)
    # ecrm: server CPU per step (parity stage + drain) from its parity bytes per step (failure-free runs)
    parity_cpu: Linear | None = None
    # cpr-mfu / cpr-ssu: share of the lost updates their partial checkpoints save (1 - lost / cpr's)
    partial_coverage: float = 0.0
    # log: the lost shard's replay, seconds from the steps replayed (restore - read, per recovery)
    replay: Linear | None = None
    # ecrm: the rebuilding rank's CPU (rebuild_cpu_s) from the bytes a rebuild fetched; ``rebuild``
    # is its wall duration, paced over steps on the calibration machine
    rebuild_cpu: Linear | None = None
    recoveries: int = 0
    sources: list[str] = field(default_factory=list)  # result files it was calibrated from


@dataclass(frozen=True)
class Costs:
    runtime: RuntimeCosts
    strategies: dict[str, StrategyCosts]
    sources: list[str] = field(default_factory=list)
    note: str = ""
    step: StepCosts | None = None  # CPU per step by role (None: costs saved before the step model)

    def at_speed(self, factor: float) -> Costs:
        """The costs on a machine ``factor`` times slower (a run whose CPU share is 1/factor of the
        calibration's): every CPU-bound duration × factor, every rate / factor; checkpoint writes at
        an emulated bandwidth (sleep-paced) and the dimensionless ratios stay."""
        if factor == 1.0:
            return self

        def scaled(x: Linear) -> Linear:
            return dataclasses.replace(x, latency_s=x.latency_s * factor, rate_Bps=x.rate_Bps / factor)

        def lin(x: Linear | None) -> Linear | None:
            return None if x is None else scaled(x)

        r = self.runtime
        rt = dataclasses.replace(r, detect_s=r.detect_s * factor, shrink_agree_s=r.shrink_agree_s * factor,
                                 plan_s=r.plan_s * factor, replace_s=r.replace_s * factor)
        out = {}
        for name, sc in self.strategies.items():
            out[name] = dataclasses.replace(
                sc, read=lin(sc.read), rebuild=lin(sc.rebuild), parity=lin(sc.parity),
                parity_cpu=lin(sc.parity_cpu), replay=lin(sc.replay), rebuild_cpu=lin(sc.rebuild_cpu),
                write=sc.write if sc.write_paced else lin(sc.write),
                sync_restore_s=sc.sync_restore_s * factor, resume_extra_s=sc.resume_extra_s * factor,
                trainer_restore_s=sc.trainer_restore_s * factor)
        step = None
        if self.step is not None:
            step = dataclasses.replace(self.step, trainer=scaled(self.step.trainer),
                                       server=scaled(self.step.server))
        return dataclasses.replace(self, runtime=rt, strategies=out, step=step)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "costs") -> Costs:
        """Costs from their JSON form: every key checked against its field's type (unknown or
        missing keys and mistyped values are one ``MpiecError`` naming ``where`` and the key),
        then every number against ``check``'s ranges."""
        out = _build(cls, raw, "", where)
        out.check(where)
        return out

    @classmethod
    def from_json(cls, text: str, where: str = "costs") -> Costs:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MpiecError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(raw, dict):
            raise MpiecError(f"{where}: expected a JSON object")
        return cls.from_dict(raw, where)

    def check(self, where: str = "costs") -> None:
        """Every number finite, >= 0 and at most ``MAX_COST``, every rate > 0 (MpiecError naming
        the key otherwise)."""
        def walk(obj: Any, path: str) -> None:
            if dataclasses.is_dataclass(obj):
                for f in dataclasses.fields(obj):
                    walk(getattr(obj, f.name), f"{path}.{f.name}")
            elif isinstance(obj, dict):
                for k, v in obj.items():
                    walk(v, f"{path}.{k}")
            elif isinstance(obj, bool) or obj is None or isinstance(obj, str | list):
                return
            elif not isinstance(obj, int | float) or not math.isfinite(obj) or not 0 <= obj <= MAX_COST:
                raise MpiecError(f"{where}: {path.lstrip('.')} must be a finite number in [0, {MAX_COST:g}], "
                                 f"got {_shown(obj)}")
            if isinstance(obj, Linear) and not obj.rate_Bps > 0:
                raise MpiecError(f"{where}: {path.lstrip('.')}.rate_Bps must be > 0")
        walk(self, "")
        if self.runtime.step_s <= 0:
            raise MpiecError(f"{where}: runtime.step_s must be > 0")


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _build(cls: type, raw: Any, path: str, where: str) -> Any:
    """``cls`` (a dataclass) from a JSON object, each field held to its type hint by the config's
    validator (``mpiec.config._coerce``): a costs file is as untrusted as a config file."""
    if not isinstance(raw, dict):
        raise MpiecError(f"{where}: {path or 'the costs'} must be an object, got {_shown(raw)}")
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    for key in raw:
        if key not in names:
            raise MpiecError(f"{where}: unknown key '{_join(path, key)}'")
    kwargs = {}
    for f in fields:
        if f.name in raw:
            kwargs[f.name] = _typed(raw[f.name], hints[f.name], _join(path, f.name), where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise MpiecError(f"{where}: missing key '{_join(path, f.name)}'")
    return cls(**kwargs)


def _typed(value: Any, hint: Any, key: str, where: str) -> Any:
    from mpiec.config.schema import coerce

    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and type(None) in args:  # ``Linear | None``
        if value is None:
            return None
        (hint,) = (a for a in args if a is not type(None))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _build(hint, value, key, where)
    try:
        if typing.get_origin(hint) is dict:  # the config's validator checks the table, not its values
            table = coerce(value, hint, key, finite=False)
            return {k: _typed(v, args[1], _join(key, k), where) for k, v in table.items()}
        return coerce(value, hint, key, finite=False)  # finite: the costs' own rule, below
    except ConfigError as exc:
        raise MpiecError(f"{where}: {exc}") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def load_costs(path: str | Path) -> Costs:
    """A costs JSON written by ``mpiec simulate --save-costs``."""
    from mpiec.config.inputs import read_input

    p = Path(path)
    raw = read_input(p, f"costs file {p}")  # a regular file of bounded size: a pipe would hang
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise MpiecError(f"costs file {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return Costs.from_json(text, f"costs file {p}")
