"""Typed run configuration: presets, config files and ``--set`` overrides.

Owns the ``Config`` dataclass tree, its TOML presets (``mpiec/presets/*.toml``)
and validation. Invariants:

* a config is resolved and validated on the launching process, before any rank
  starts; an unknown key or an invalid value raises ``ConfigError`` with one
  line naming the key (``training.steps must be >= 1, got 0``);
* precedence, lowest first: built-in defaults < preset < ``--config FILE`` <
  command-line shortcuts (``--strategy``, ``--kill``, ``--steps``) < ``--set``;
* values are checked for what a run can do, not only for their sign: floats
  finite, integers 64-bit, at most ``MAX_RANKS`` ranks and ``MAX_STEPS`` steps, every
  strategy number at most ``MAX_PARAM`` (what each strategy then derives stays in 64 bits),
  ``output.name`` a plain file name, and every rank's memory (estimated from the
  config by ``memory_estimate``) within this machine's ``MemTotal``, shared by
  the ranks on one host (``local_ranks``); a refusal names the key and the estimate;
* the resolved config round-trips through JSON (``to_json``/``from_json``), which
  is how the launcher hands it to every rank and how result files record it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mpiec.errors import ConfigError, did_you_mean
from mpiec.inputs import file_problem, read_input
from mpiec.inputs import one_line as _clean
from mpiec.limits import MAX_PARAM, MAX_RANKS, MAX_SECONDS, MAX_STEPS

PRESETS = ("tiny", "laptop", "criteo-kaggle", "mlperf-dlrmv2")
DEFAULT_PRESET = "laptop"


@dataclass
class ModelConfig:
    dim: int = 16
    bottom: list[int] = field(default_factory=lambda: [64, 32])
    top: list[int] = field(default_factory=lambda: [64, 32])


@dataclass
class DataConfig:
    source: str = "synthetic"  # synthetic | criteo-tsv | criteo-npz
    path: str = ""
    cardinalities: list[int] = field(default_factory=lambda: [1000] * 26)
    zipf_exponent: float = 1.05
    cat_mapping: str = "mod"  # mod | hash
    eval_samples: int = 20000
    eval_fraction: float = 0.1  # file sources only: the tail held out
    multi_hot: list[int] = field(default_factory=list)  # ids per sample and table (bag sizes); [] = one-hot

    @property
    def bags(self) -> list[int]:
        """Ids per sample of each table: ``multi_hot``, or one each (one-hot)."""
        return list(self.multi_hot) if self.multi_hot else [1] * len(self.cardinalities)


@dataclass
class LayoutConfig:
    trainers: int = 2
    servers: int = 2
    spares: int = 0
    parity_ranks: int = 0  # dedicated parity holders (ecrm); 0 = rotated parity on servers
    wait: str = "auto"  # spin | sleep | auto (sleep-poll when ranks outnumber cores)
    # spare: warmed-up spare ranks; spawn: MPI_Comm_spawn when no spare is left; shrink: when no spare
    # is left, go on with fewer trainers (the survivors take the dead one's virtual shards)
    replacement: str = "spare"
    # replacement = shrink: N steps after a shrink the run spawns processes for the missing slots and
    # re-places rows and virtual shards onto them at a step boundary (ULFM only); 0 = never
    grow_back_steps: int = 0
    # spawn, grow_back_steps: a run whose MPI_Comm_spawn a death cut (Open MPI never returns from it) is
    # ended, lost, this many seconds after the death (roles.spawn.SpawnWatch); a spawn that fails
    # with an error within it is recovered as usual
    spawn_grace_s: float = 10.0
    # shards of the global batch whose gradients sum in a fixed tree (layout.trainer_blocks): the
    # result is the same on any trainer count that divides into them; 0 = auto (4, or more trainers)
    virtual_trainers: int = 0
    ranks_per_node: int = 0  # emulated nodes of N ranks after the monitor (layout.rank_nodes); 0 = none


@dataclass
class TrainingConfig:
    seed: int = 1
    steps: int = 1000
    batch_size: int = 256  # per trainer
    optimizer: str = "adagrad"  # embeddings: sgd | adagrad (row-wise)
    lr: float = 0.05
    dense_optimizer: str = "adagrad"  # sgd | adagrad
    dense_lr: float = 0.05
    eps: float = 1e-8
    eval_every: int = 0  # steps between evaluations; 0 = only at the end
    eval_batch: int = 4096
    log_every: int = 50


@dataclass
class StrategyConfig:
    name: str = "none"
    params: dict[str, Any] = field(default_factory=dict)  # validated by the strategy plug-in


@dataclass
class FailuresConfig:
    kill: list[str] = field(default_factory=list)
    mtbf_s: float = 0.0  # expected mean time between failures (for checkpoint intervals)
    mtbf_steps: float = 0.0  # the same in steps (mpiec bench gives a failure-free run its scenario's)
    timeout_s: float = 0.0  # whole-run wall-clock bound; 0 = derived from steps
    mode: str = "auto"  # auto | ulfm | emulated
    detector: str = "runtime"  # runtime: the launcher's daemons report deaths; heartbeat: + ULFM's ring
    heartbeat_period_s: float = 2.0  # detector = heartbeat: each rank's heartbeat to its neighbour
    heartbeat_timeout_s: float = 10.0  # heartbeat: silence (> 3 periods, > start-up skew) = a dead peer


@dataclass
class StorageConfig:
    """Checkpoint storage (``mpiec.storage``): a named profile, each figure overridable.
    A number left at -1 takes the profile's; 0 means no cap (the real disk's speed)."""

    profile: str = "local"  # local | pfs-node | object-store
    write_mb_s: float = -1.0  # per rank
    read_mb_s: float = -1.0  # per rank
    latency_ms: float = -1.0  # per part operation (a part's write, a part's read)
    aggregate_mb_s: float = -1.0  # write bandwidth shared by every rank of the job
    cold_reads: bool = True  # a restore reads the disk, not the page cache


@dataclass
class OutputConfig:
    dir: str = "results"
    name: str = ""  # file stem; empty = <preset>-<strategy>-<seed>-<timestamp>
    progress: bool = True


@dataclass
class Config:
    preset: str = DEFAULT_PRESET
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    layout: LayoutConfig = field(default_factory=LayoutConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    failures: FailuresConfig = field(default_factory=FailuresConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    # -- derived quantities ------------------------------------------------
    @property
    def n_ranks(self) -> int:
        """monitor + trainers + servers + parity ranks + spares."""
        lay = self.layout
        return 1 + lay.trainers + lay.servers + lay.parity_ranks + lay.spares

    @property
    def global_batch(self) -> int:
        return self.training.batch_size * self.layout.trainers

    @property
    def row_floats(self) -> int:
        """float32 values of one embedding row as servers hold it: weights, then the row-wise
        Adagrad accumulator when used."""
        return self.model.dim + (1 if self.training.optimizer == "adagrad" else 0)

    @property
    def virtual_trainers(self) -> int:
        """``layout.virtual_trainers``, or its automatic value (``layout.auto_virtual_trainers``)."""
        from mpiec.layout import auto_virtual_trainers

        v = self.layout.virtual_trainers
        return v if v > 0 else auto_virtual_trainers(self.layout.trainers, self.global_batch)

    @property
    def variant(self) -> str:
        """The strategy and its own keys as `mpiec bench --strategies` spells them (ckpt:interval=10),
        then ``replacement=...`` unless the layout replaces dead ranks by spares (the default), and
        ``virtual_trainers=...`` when set."""
        params = sorted(self.strategy.params.items())
        layout = [f"replacement={self.layout.replacement}"] if self.layout.replacement != "spare" else []
        layout += [f"virtual_trainers={self.layout.virtual_trainers}"] if self.layout.virtual_trainers else []
        return ":".join([self.strategy.name] + [f"{k}={v}" for k, v in params] + layout)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Config:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config JSON is malformed: {exc}") from None
        cfg = cls()
        _merge(cfg, raw, "")
        validate(cfg)
        return cfg


# -- loading and merging -----------------------------------------------------

def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check ``value`` against a field type; ints are accepted for floats."""
    origin = typing.get_origin(hint)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(f"{key} must be a finite number, got a {int(value).bit_length()}-bit "
                                  "integer") from None
        raise ConfigError(f"{key} must be a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key} must be a string, got {value!r}")
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a table, got {value!r}")
        return dict(value)
    if isinstance(hint, types.UnionType):  # pragma: no cover - no such fields yet
        return value
    raise ConfigError(f"{key}: unsupported type {hint!r}")  # pragma: no cover


def _merge(obj: Any, raw: dict[str, Any], prefix: str) -> None:
    """Merge a nested dict into a dataclass tree, rejecting unknown keys."""
    hints = _hints(type(obj))
    for key, value in raw.items():
        full = f"{prefix}{key}"
        if key not in hints:
            raise ConfigError(f"unknown config key '{full}'{did_you_mean(key, hints)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"'{full}' is a section; set its keys, e.g. {full}.<key>=...")
            _merge(current, value, f"{full}.")
        elif typing.get_origin(hints[key]) is dict:
            merged = dict(current)
            merged.update(_coerce(value, hints[key], full))
            setattr(obj, key, merged)
        else:
            setattr(obj, key, _coerce(value, hints[key], full))


def _parse_value(text: str) -> Any:
    """A ``--set`` value is a TOML literal; a bare word is taken as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def set_to_dict(assignment: str) -> dict[str, Any]:
    """``'training.steps=10'`` -> ``{'training': {'steps': 10}}``."""
    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got '{assignment}'")
    key, _, text = assignment.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set has an empty key in '{assignment}'")
    parts = key.split(".")
    if parts[0] == "strategy" and len(parts) > 2 and parts[1] != "params":
        # strategy.k=4 style: strategy-specific keys live under strategy.params
        parts = ["strategy", "params", *parts[1:]]
    elif parts[0] == "strategy" and len(parts) == 2 and parts[1] not in ("name", "params"):
        parts = ["strategy", "params", parts[1]]
    out: dict[str, Any] = {}
    node = out
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = _parse_value(text.strip())
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    """A config file: TOML, or the JSON that ``mpiec config --write`` produces."""
    p = Path(path)
    if p.suffix == ".json":
        try:
            raw = json.loads(_read_text(p))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file '{p}' is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config file '{p}' must hold a JSON object")
        return raw
    try:
        return tomllib.loads(_read_text(p))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file '{p}' is not valid TOML: {exc}") from None


def _read_text(p: Path) -> str:
    return read_input(p, f"config file '{p}'", error=ConfigError).decode()


def preset_dict(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}' (choose from {', '.join(PRESETS)})")
    text = resources.files("mpiec").joinpath("presets", f"{name}.toml").read_text()
    return tomllib.loads(text)


def _normalise_strategy(raw: dict[str, Any]) -> dict[str, Any]:
    """Allow ``[strategy] name="ecrm" k=4`` in files: extra keys go to params."""
    strat = raw.get("strategy")
    if isinstance(strat, dict):
        params = dict(strat.get("params", {}))
        for key in [k for k in strat if k not in ("name", "params")]:
            params[key] = strat.pop(key)
        if params:
            strat["params"] = params
    return raw


def load_config(
    preset: str | None = None,
    config_file: str | Path | None = None,
    sets: list[str] | None = None,
    strategy: str | None = None,
    kill: list[str] | None = None,
    steps: int | None = None,
    memory: bool = True,
    base: dict[str, Any] | None = None,
) -> Config:
    """Resolve a config from its layers and validate it (raises ``ConfigError``); ``memory =
    False`` skips the check against this machine's memory (``mpiec config`` for a cluster).

    ``base``: a resolved config (a checkpoint's, for ``--resume``) that takes the preset's place
    and names it; ``preset`` must then be None (the caller refuses a conflicting one).
    """
    cfg = Config()
    from_file = _normalise_strategy(read_toml(config_file)) if config_file else {}
    if base is not None:
        _merge(cfg, _normalise_strategy(copy.deepcopy(base)), "")
        name = cfg.preset
        _need(name in PRESETS, f"the resumed config names an unknown preset '{name}'")
    else:
        # A resolved config (JSON from --write) names its preset; an explicit --preset wins.
        name = preset or from_file.get("preset") or DEFAULT_PRESET
        _merge(cfg, _normalise_strategy(preset_dict(name)), "")
    cfg.preset = name
    if from_file:
        _merge(cfg, from_file, "")
        cfg.preset = name
    if strategy is not None:
        cfg.strategy.name = strategy
    if kill:
        cfg.failures.kill = list(cfg.failures.kill) + list(kill)
    if steps is not None:
        cfg.training.steps = steps
    for assignment in sets or []:
        _merge(cfg, set_to_dict(assignment), "")
    validate(cfg, memory=memory)
    return cfg


# Keys that fix the shape of the trained state (rows and their width, the dense replica and its
# optimizer state): a checkpoint restores only into a model with the same values. The layout is
# not among them: servers, trainers and spares may change on --resume (rows load by global id).
STATE_KEYS = ("model.dim", "model.bottom", "model.top", "data.cardinalities", "training.optimizer",
              "training.dense_optimizer")


def _lookup(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _brief(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else f"'{value}'"
    return _clean(text if len(text) <= 40 else f"{text[:37]}...")


def state_changes(saved: dict[str, Any], cfg: Config) -> list[str]:
    """The ``STATE_KEYS`` whose value in ``cfg`` differs from ``saved`` (a checkpoint's resolved
    config), each as ``KEY: OLD in the checkpoint, NEW now`` (a list: ``N values, first
    difference at [i]: OLD vs NEW``)."""
    now = cfg.to_dict()
    out = []
    for key in STATE_KEYS:
        old, new = _lookup(saved, key), _lookup(now, key)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            i = next(i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b)
            out.append(f"{key}[{i}]: {_brief(old[i])} in the checkpoint, {_brief(new[i])} now")
        elif isinstance(old, list) and isinstance(new, list):
            out.append(f"{key}: {len(old)} values in the checkpoint, {len(new)} now")
        else:
            out.append(f"{key}: {_brief(old)} in the checkpoint, {_brief(new)} now")
    return out


# -- validation ---------------------------------------------------------------

def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(_clean(message))


def validate(cfg: Config, memory: bool = True) -> None:
    """Check ranges and cross-field rules; raise ``ConfigError`` on the first problem. ``memory``:
    also refuse what cannot fit in this machine's memory (``check_memory``)."""
    m, d, lay, t, f = cfg.model, cfg.data, cfg.layout, cfg.training, cfg.failures
    _check_numbers(cfg, "")
    _need(m.dim >= 1, f"model.dim must be >= 1, got {m.dim}")
    _need(all(w >= 1 for w in m.bottom), f"model.bottom widths must be >= 1, got {m.bottom}")
    _need(all(w >= 1 for w in m.top), f"model.top widths must be >= 1, got {m.top}")
    _need(d.source in ("synthetic", "criteo-tsv", "criteo-npz"),
          f"data.source must be synthetic, criteo-tsv or criteo-npz, got '{d.source}'")
    _need(len(d.cardinalities) >= 1, "data.cardinalities must list at least one table")
    _need(all(c >= 1 for c in d.cardinalities),
          f"data.cardinalities must all be >= 1, got {d.cardinalities}")
    _need(not d.multi_hot or len(d.multi_hot) == len(d.cardinalities),
          f"data.multi_hot must give one bag size per table ({len(d.cardinalities)} in "
          f"data.cardinalities), got {len(d.multi_hot)}")
    _need(all(1 <= m <= MAX_BAG for m in d.multi_hot),
          f"data.multi_hot sizes must be in [1, {MAX_BAG}], got {d.multi_hot}")
    _need(d.source == "synthetic" or all(m == 1 for m in d.multi_hot),
          f"data.multi_hot > 1 needs data.source = 'synthetic' (files are one-hot), got '{d.source}'")
    _need(d.zipf_exponent > 0, f"data.zipf_exponent must be > 0, got {d.zipf_exponent}")
    _need(d.cat_mapping in ("mod", "hash"),
          f"data.cat_mapping must be mod or hash, got '{d.cat_mapping}'")
    _need(d.eval_samples >= 2, f"data.eval_samples must be >= 2, got {d.eval_samples}")
    _need(0 < d.eval_fraction < 1, f"data.eval_fraction must be in (0, 1), got {d.eval_fraction}")
    if d.source != "synthetic":
        _need(bool(d.path), f"data.path must name a file when data.source = '{d.source}'")
        problem = file_problem(d.path, "data file")  # the ranks read it: checked, not read, here
        _need(problem is None, f"data.path '{d.path}' {problem}")
    _need(lay.trainers >= 1, f"layout.trainers must be >= 1, got {lay.trainers}")
    _need(lay.servers >= 1, f"layout.servers must be >= 1, got {lay.servers}")
    _need(lay.spares >= 0, f"layout.spares must be >= 0, got {lay.spares}")
    _need(lay.parity_ranks >= 0, f"layout.parity_ranks must be >= 0, got {lay.parity_ranks}")
    _need(lay.virtual_trainers >= 0,
          f"layout.virtual_trainers must be >= 0 (0 = auto), got {lay.virtual_trainers}")
    if t.batch_size >= 1:
        v = cfg.virtual_trainers
        _need(v & (v - 1) == 0 and v >= lay.trainers,
              f"layout.virtual_trainers must be a power of two >= layout.trainers ({lay.trainers}), "
              f"got {v}")
        _need(v <= cfg.global_batch,
              f"layout.virtual_trainers = {v} is more than the global batch ({cfg.global_batch} = "
              "training.batch_size x layout.trainers): every shard needs a sample")
    _need(lay.ranks_per_node >= 0, f"layout.ranks_per_node must be >= 0, got {lay.ranks_per_node}")
    _need(lay.replacement in ("spare", "spawn", "shrink"),
          f"layout.replacement must be spare, spawn or shrink, got '{lay.replacement}'")
    _need(lay.grow_back_steps >= 0, f"layout.grow_back_steps must be >= 0, got {lay.grow_back_steps}")
    _need(math.isfinite(lay.spawn_grace_s) and 0 < lay.spawn_grace_s <= 3600,
          f"layout.spawn_grace_s must be a number of seconds in (0, 3600], got {lay.spawn_grace_s}")
    _need(lay.grow_back_steps == 0 or lay.replacement == "shrink",
          f"layout.grow_back_steps = {lay.grow_back_steps} needs layout.replacement = 'shrink' "
          f"(got '{lay.replacement}')")
    _need(lay.wait in ("auto", "spin", "sleep"),
          f"layout.wait must be auto, spin or sleep, got '{lay.wait}'")
    _need(cfg.n_ranks <= MAX_RANKS,
          f"layout: at most {MAX_RANKS} ranks in all (1 monitor + layout.trainers + layout.servers + "
          f"layout.parity_ranks + layout.spares), got {cfg.n_ranks}")
    _check_name(cfg.output.name)
    _need(t.steps >= 1, f"training.steps must be >= 1, got {t.steps}")
    _need(t.steps <= MAX_STEPS, f"training.steps must be <= {MAX_STEPS:.0e}, got {t.steps}")
    _need(t.batch_size >= 1, f"training.batch_size must be >= 1, got {t.batch_size}")
    _need(t.optimizer in ("sgd", "adagrad"),
          f"training.optimizer must be sgd or adagrad, got '{t.optimizer}'")
    _need(t.dense_optimizer in ("sgd", "adagrad"),
          f"training.dense_optimizer must be sgd or adagrad, got '{t.dense_optimizer}'")
    _need(t.lr > 0, f"training.lr must be > 0, got {t.lr}")
    _need(t.dense_lr > 0, f"training.dense_lr must be > 0, got {t.dense_lr}")
    _need(t.eps > 0, f"training.eps must be > 0, got {t.eps}")
    _need(t.eval_every >= 0, f"training.eval_every must be >= 0, got {t.eval_every}")
    _need(t.eval_batch >= 1, f"training.eval_batch must be >= 1, got {t.eval_batch}")
    _need(t.log_every >= 1, f"training.log_every must be >= 1, got {t.log_every}")
    _need(0 <= t.seed < 2**63, f"training.seed must be in [0, 2^63), got {t.seed}")
    _need(f.mtbf_s >= 0, f"failures.mtbf_s must be >= 0, got {f.mtbf_s}")
    _need(0 <= f.mtbf_steps <= MAX_SECONDS, f"failures.mtbf_steps must be in [0, 1e9], got {f.mtbf_steps}")
    _need(f.timeout_s >= 0, f"failures.timeout_s must be >= 0, got {f.timeout_s}")
    _need(f.mtbf_s <= MAX_SECONDS, f"failures.mtbf_s must be <= {MAX_SECONDS:.0e}, got {f.mtbf_s}")
    _need(f.timeout_s <= MAX_SECONDS, f"failures.timeout_s must be <= {MAX_SECONDS:.0e}, got {f.timeout_s}")
    _need(f.mode in ("auto", "ulfm", "emulated"),
          f"failures.mode must be auto, ulfm or emulated, got '{f.mode}'")
    _need(f.detector in ("runtime", "heartbeat"),
          f"failures.detector must be runtime or heartbeat, got '{f.detector}'")
    _need(0 < f.heartbeat_period_s <= 60, f"failures.heartbeat_period_s must be in (0, 60], got "
          f"{f.heartbeat_period_s}")
    _need(3 * f.heartbeat_period_s < f.heartbeat_timeout_s <= 600,
          f"failures.heartbeat_timeout_s must be > 3 x failures.heartbeat_period_s "
          f"({3 * f.heartbeat_period_s:g}) and <= 600, got {f.heartbeat_timeout_s}")

    _check_storage(cfg.storage)

    from mpiec.faults import parse_kill_plans, unshrinkable_kill  # local: faults imports config types
    from mpiec.strategies import validate_strategy

    strategy_cls = validate_strategy(cfg)  # ConfigError, one line, also for a plug-in's own bug
    _, r = strategy_cls.stripe_shape(cfg)
    _need(lay.parity_ranks in (0, r),
          f"layout.parity_ranks must be 0 or the strategy's parity count r = {r} "
          f"(strategy '{cfg.strategy.name}'), got {lay.parity_ranks}")
    kills = parse_kill_plans(f.kill, cfg)  # raises KillPlanError, a ConfigError's sibling
    if strategy_cls.recovers:  # (one that does not is lost at the first kill anyway)
        _need(not (why := unshrinkable_kill(kills, cfg, strategy_cls.shrink_refusal(cfg))), why)
    if memory:
        check_memory(cfg)


# -- limits and the memory estimate ------------------------------------------------

MAX_BAG = 4096  # data.multi_hot: ids per sample and table
MAX_NAME_BYTES = 200  # output.name: leaves room for the suffixes a run adds (.h5.lock, -2, ...)
RANK_BASE_BYTES = 80 << 20  # interpreter, numpy, numba, MPI, h5py: ~76 MiB private, ~97 MiB PSS per rank
N_DENSE = 13  # dense features of every source (Criteo's 13 integer counts)


def _fmt_bytes(n: float) -> str:
    for unit, size in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20),
                       ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def mem_total(field: str = "MemTotal") -> int | None:
    """This machine's memory in bytes (``MemTotal`` of /proc/meminfo, or another ``field`` of it,
    e.g. ``MemAvailable``); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def local_ranks(n_ranks: int) -> int:
    """How many of the run's ranks share this host: all of them for ``mpiec run``; under a
    launcher that says so (Open MPI, MPICH, SLURM), its count of ranks on this node."""
    for var in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"):
        text = os.environ.get(var, "")
        if text.isdigit() and int(text) >= 1:
            return min(n_ranks, int(text))
    # SLURM_TASKS_PER_NODE: "3,2(x3)" = 3 tasks on the first node, 2 on each of the next three
    counts = [int(n) for n in re.findall(r"(\d+)(?:\(x\d+\))?", os.environ.get("SLURM_TASKS_PER_NODE", ""))]
    if counts and max(counts) >= 1:
        return min(n_ranks, max(counts))
    return n_ranks


def _data_file_bytes(cfg: Config) -> int:
    """Rough in-memory size of a file source held by every trainer and the monitor."""
    d = cfg.data
    if d.source == "synthetic" or not d.path:
        return 0
    try:
        size = Path(d.path).stat().st_size
    except OSError:
        return 0
    factor = 4 if d.path.endswith(".gz") else (1 if d.source == "criteo-npz" else 1.3)
    return int(size * factor)


def memory_estimate(cfg: Config) -> dict[str, list[tuple[str, int]]]:
    """Bytes each kind of rank needs beyond ``RANK_BASE_BYTES``, by part, from the config alone.

    A lower estimate of what the runtime allocates (shapes as in roles/, model/, data/): a
    config refused by it cannot run here; one accepted may still be tight.
    """
    m, d, lay, t = cfg.model, cfg.data, cfg.layout, cfg.training
    T, D, B, E, EB = len(d.cardinalities), m.dim, t.batch_size, d.eval_samples, t.eval_batch
    L = sum(d.bags)  # ids per sample (data.multi_hot)
    rows, state = sum(d.cardinalities), (1 if t.optimizer == "adagrad" else 0)
    n_inter = (T + 1) * T // 2
    bottom, top = [N_DENSE, *m.bottom, D], [D + n_inter, *m.top, 1]
    n_params = sum(a * b + b for a, b in zip(bottom[:-1], bottom[1:], strict=True)) \
        + sum(a * b + b for a, b in zip(top[:-1], top[1:], strict=True))
    widths = sum(bottom) + sum(top)
    sample = N_DENSE * 4 + L * 8 + 4  # dense float32, ids int64, label float32
    forward = 4 * ((L + T + 2) * D + n_inter + widths)  # pulled rows, Z, interactions, layers
    train = 4 * ((L + T + 2) * D * 2 + n_inter * 2 + widths * 2)  # + row gradients, backward
    per_trainer_eval = -(-E // lay.trainers)
    file_bytes = _data_file_bytes(cfg)
    k, r = _stripe_shape(cfg)
    shard_rows = -(-rows // lay.servers)
    row_bytes = (D + state) * 4
    on_servers = r / k if (r and not lay.parity_ranks) else 0.0
    step_rows = min(shard_rows, lay.trainers * B * L)
    eval_rows = min(shard_rows, lay.trainers * min(EB, per_trainer_eval) * L)
    shard_label = (f"embedding shard (data.cardinalities: {rows:,} rows x model.dim = {D}"
                   f"{' + 1 Adagrad column' if state else ''}, over layout.servers = {lay.servers})")
    trainer = [
        (f"dense model (model.bottom, model.top: {n_params:,} parameters)", n_params * 4 * 6),
        (f"batch (training.batch_size = {B}, model.dim = {D}, {T} tables)", B * (2 * sample + train)),
        (f"evaluation set (data.eval_samples = {E})", E * (sample + 4) + per_trainer_eval * sample),
        (f"evaluation batch (training.eval_batch = {EB}, model.dim = {D}, {T} tables)",
         min(EB, per_trainer_eval) * forward),
    ]
    server = [
        (shard_label, int(shard_rows * row_bytes * (1 + on_servers))),
        (f"rows of a step (training.batch_size = {B} x layout.trainers = {lay.trainers} x {L} ids)",
         step_rows * D * 4 * 4),
        (f"rows of an evaluation round (training.eval_batch = {EB}, model.dim = {D})", eval_rows * D * 4 * 2),
    ]
    monitor = [(f"evaluation set (data.eval_samples = {E}, teacher AUC)",
                E * (sample + 16) if d.source == "synthetic" else 0)]
    if file_bytes:
        part = (f"data file (data.path '{d.path}', about {_fmt_bytes(file_bytes)} in memory)", file_bytes)
        trainer.append(part)
        monitor.append(part)
    out = {"monitor": monitor, "trainer": trainer, "server": server,
           "parity": [(shard_label.replace("embedding shard", "parity of an embedding shard"),
                       shard_rows * row_bytes * max(r, 1) // max(lay.parity_ranks, 1))]}
    spare_of = max(("trainer", "server"), key=lambda role: sum(b for _, b in out[role]))
    out["spare"] = [(f"{label} (a spare may take a {spare_of}'s place)", b) for label, b in out[spare_of]]
    return out


def _stripe_shape(cfg: Config) -> tuple[int, int]:
    from mpiec.strategies import get_strategy_class

    try:
        k, r = get_strategy_class(cfg.strategy.name).stripe_shape(cfg)
        return max(int(k), 1), max(int(r), 0)
    except Exception:  # noqa: BLE001 - the strategy's own validation reports its problems
        return 1, 0


def check_memory(cfg: Config, total: int | None = None, on_host: int | None = None) -> None:
    """Refuse a config whose ranks cannot fit in this machine's memory (``ConfigError``
    naming the key of the largest part and the estimate)."""
    total = mem_total() if total is None else total
    if not total:
        return
    lay = cfg.layout
    parts = memory_estimate(cfg)
    need = {role: RANK_BASE_BYTES + sum(b for _, b in p) for role, p in parts.items()}
    counts = {"monitor": 1, "trainer": lay.trainers, "server": lay.servers,
              "parity": lay.parity_ranks, "spare": lay.spares}
    ranks = sorted((need[role] for role, n in counts.items() for _ in range(n)), reverse=True)
    here = local_ranks(len(ranks)) if on_host is None else min(on_host, len(ranks))
    host = sum(ranks[:here])
    if host <= total:
        return
    # the part that weighs most on this host: its size times the ranks that hold it
    _, label, size, role = max((size * min(n, here), label, size, role) for role, n in counts.items()
                               if n for label, size in parts[role])
    if RANK_BASE_BYTES * here > size * min(counts[role], here):
        label, size, role = (f"ranks themselves ({cfg.n_ranks} = 1 monitor + layout.trainers + "
                             "layout.servers + layout.parity_ranks + layout.spares), each before any data",
                             RANK_BASE_BYTES, "rank")
    who = "one rank" if here == 1 else f"the {here} ranks on this host"
    raise ConfigError(_clean(
        f"not enough memory: {who} would need about {_fmt_bytes(host)}, this machine has "
        f"{_fmt_bytes(total)} (MemTotal); the largest part is the {label}: about {_fmt_bytes(size)} "
        f"per {role}"))


def _check_numbers(obj: Any, prefix: str, limit: float | None = None) -> None:
    """Every float finite, every integer a 64-bit one (JSON configs can hold anything); every
    number under ``strategy.params`` (named ``strategy.KEY``, as ``--set`` spells it) at most
    ``limit`` = ``MAX_PARAM`` in magnitude, whatever strategy reads it."""
    items = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)) \
        if dataclasses.is_dataclass(obj) else obj.items()
    for name, value in items:
        key = f"{prefix}{name}"
        if isinstance(obj, StrategyConfig) and name == "params":
            _check_numbers(value, f"{prefix}", MAX_PARAM)
            continue
        if dataclasses.is_dataclass(value) or isinstance(value, dict):
            _check_numbers(value, f"{key}.", limit)
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, float):
                _need(math.isfinite(v), f"{key} must be a finite number, got {v}")
            elif isinstance(v, int) and not isinstance(v, bool):
                _need(-(2**63) <= v < 2**63, f"{key} must fit in 64 bits, got {_short(v)}")
            else:
                continue
            # A strategy's value passes its own range check (>= 0, ...) yet can still overflow what
            # the run derives from it (MB -> bytes, seconds -> steps: an int beyond 64 bits, which
            # the result file cannot store, after the whole run has trained).
            _need(limit is None or abs(v) <= limit,
                  f"{key} must be at most {MAX_PARAM:.0e} in magnitude (strategy values are steps, "
                  f"seconds, MB or fractions), got {v:.6g}")


def _check_storage(st: StorageConfig) -> None:
    """``[storage]``: a known profile; every figure -1 (the profile's) or in [0, its bound]."""
    from mpiec.storage import MAX_LATENCY_MS, MAX_MB_S, PROFILES

    _need(st.profile in PROFILES, f"storage.profile must be one of {', '.join(PROFILES)}, got '{st.profile}'")
    for key, bound in (("write_mb_s", MAX_MB_S), ("read_mb_s", MAX_MB_S), ("latency_ms", MAX_LATENCY_MS),
                       ("aggregate_mb_s", MAX_MB_S)):
        v = getattr(st, key)
        _need(v == -1 or 0 <= v <= bound,
              f"storage.{key} must be -1 (the profile's) or in [0, {bound:g}], got {v:g}")


def check_storage_time(cfg: Config, limit_s: float) -> None:
    """Refuse storage figures under which not one checkpoint can be written, or restored, within
    the run's time limit ``limit_s`` (``storage.write_mb_s = 1e-12`` ran until that limit). Only for
    a strategy that writes checkpoints (its ``checkpoint_root`` is not None). The bytes are a lower
    bound, so nothing a run could do is refused: one server's embedding shard at 1 bit per value,
    less than any strategy writes; the aggregate budget carries every server's shard."""
    from mpiec.storage import model_of
    from mpiec.strategies import get_strategy_class

    if get_strategy_class(cfg.strategy.name)(cfg).checkpoint_root(Path("run.h5")) is None:
        return
    model = model_of(cfg)
    servers = cfg.layout.servers
    shard = -(-sum(cfg.data.cardinalities) // servers) * cfg.model.dim / 8  # bytes
    for key, rate, nbytes, what in (
            ("write_mb_s", model.write_mb_s, shard, "writing one server's shard"),
            ("read_mb_s", model.read_mb_s, shard, "restoring one server's shard"),
            ("aggregate_mb_s", model.aggregate_mb_s, shard * servers,
             f"writing the {servers} servers' shards through the job's shared budget")):
        if rate > 0 and nbytes / (rate * 1e6) >= limit_s:
            legacy = cfg.strategy.params.get("bandwidth_mb_s") if key == "write_mb_s" else None
            where = ("strategy.bandwidth_mb_s" if legacy == rate else f"storage.{key}"
                     if getattr(cfg.storage, key) != -1 else f"storage.profile '{cfg.storage.profile}'")
            raise ConfigError(_clean(
                f"{where}: at {rate:g} MB/s, {what} (at least {_fmt_bytes(nbytes)}) takes "
                f"{_fmt_seconds(nbytes / (rate * 1e6))}, not less than the run's time limit of "
                f"{_fmt_seconds(limit_s)}: no {'restore' if key == 'read_mb_s' else 'checkpoint'} "
                "could finish"))


def _fmt_seconds(s: float) -> str:
    return f"{s:.3g} s" if s < 1e15 else "forever"


def _short(v: int) -> str:
    text = str(v) if v.bit_length() < 1000 else f"a {v.bit_length()}-bit integer"
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _check_name(name: str) -> None:
    """output.name: a plain file name (or empty for the automatic one)."""
    if not name:
        return
    shown = _clean(name)
    _need("/" not in name and "\\" not in name and name not in (".", ".."),
          f"output.name must be a file name without directories, got '{shown}' (use --out DIR)")
    _need(name.isprintable(),
          f"output.name must be a plain file name: no control characters (NUL, newline, tab, ...), "
          f"got '{shown}'")
    _need(name.strip() == name and not name.startswith("."),
          f"output.name must be a plain file name: no leading or trailing blanks, no leading '.', "
          f"got '{shown}'")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(f"output.name must be valid UTF-8 text, got '{shown}'") from None
    _need(size <= MAX_NAME_BYTES,
          f"output.name must be at most {MAX_NAME_BYTES} bytes (a run adds suffixes such as "
          f".h5.lock), got {size}")
