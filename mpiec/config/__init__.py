"""Typed run configuration: presets, config files and ``--set`` overrides.

Owns the ``Config`` dataclass tree, its TOML presets (``mpiec/config/presets/*.toml``), its layering
(``load_layers``) and the validation of its own sections. Every key is declared once with
``schema.key`` (type, default, range or choices, help: what ``mpiec config --explain`` prints).
The package's other modules are its foundations: ``schema`` (typed keys), ``limits`` (every input's
numeric bounds), ``inputs`` (the check of an input file); plug-ins import ``from mpiec.config``.
Invariants:

* an unknown key or an invalid value raises ``ConfigError`` with one line naming the key
  (``training.steps must be >= 1 and <= 1e+09, got 0``; a misspelt key or choice gets a "did you mean");
* precedence, lowest first: built-in defaults < preset < ``--config FILE`` <
  command-line shortcuts (``--strategy``, ``--kill``, ``--steps``) < ``--set``;
* values are checked for what a run can do, not only for their sign: floats
  finite, integers 64-bit, at most ``MAX_RANKS`` ranks and ``MAX_STEPS`` steps, every
  strategy number at most ``MAX_PARAM`` (what each strategy then derives stays in 64 bits),
  ``output.name`` a plain file name;
* this module knows no strategy: the checks across sections (the strategy's keys and layout, kill
  plans, every rank's memory against ``memory_estimate``) are ``mpiec.launch.resolve``'s, the step above;
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
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mpiec.config.inputs import file_problem, read_input
from mpiec.config.inputs import one_line as _clean
from mpiec.config.limits import MAX_PARAM, MAX_RANKS, MAX_SECONDS, MAX_STEPS
from mpiec.config.schema import Key, check, coerce, fields_of, key, keys
from mpiec.errors import ConfigError, did_you_mean
from mpiec.storage.model import MAX_LATENCY_MS, MAX_MB_S, PROFILES, UNSET

PRESETS = ("tiny", "laptop", "criteo-kaggle", "mlperf-dlrmv2")
DEFAULT_PRESET = "laptop"
MAX_BAG = 4096  # data.multi_hot: ids per sample and table


@dataclass
class ModelConfig:
    dim: int = key(16, "embedding width (floats per row)", ge=1)
    bottom: list[int] = key(help="widths of the bottom MLP's hidden layers (dense features -> model.dim)",
                            default_factory=lambda: [64, 32], ge=1)
    top: list[int] = key(help="widths of the top MLP's hidden layers (interactions -> the click logit)",
                         default_factory=lambda: [64, 32], ge=1)


@dataclass
class DataConfig:
    source: str = key("synthetic", "where samples come from: a generator, or a Criteo file (data.path)",
                      choices=("synthetic", "criteo-tsv", "criteo-npz"))
    path: str = key("", "the data file of a criteo-* source")
    cardinalities: list[int] = key(help="rows of each embedding table (one entry per table)",
                                   default_factory=lambda: [1000] * 26, ge=1)
    zipf_exponent: float = key(1.05, "skew of the synthetic ids' popularity (Zipf)", gt=0)
    cat_mapping: str = key("mod", "how a file's categorical value becomes a row id", choices=("mod", "hash"))
    eval_samples: int = key(20000, "samples of the evaluation set", ge=2)
    eval_fraction: float = key(0.1, "file sources only: the tail held out for evaluation", gt=0, lt=1)
    multi_hot: list[int] = key(help="ids per sample and table (bag sizes); [] = one-hot",
                               default_factory=list, ge=1, le=MAX_BAG)

    @property
    def bags(self) -> list[int]:
        """Ids per sample of each table: ``multi_hot``, or one each (one-hot)."""
        return list(self.multi_hot) if self.multi_hot else [1] * len(self.cardinalities)


@dataclass
class LayoutConfig:
    trainers: int = key(2, "trainer ranks (data parallel)", ge=1)
    servers: int = key(2, "embedding server ranks (rows sharded over them)", ge=1)
    spares: int = key(0, "warmed-up spare ranks that take a dead rank's place", ge=0)
    parity_ranks: int = key(0, "dedicated parity holders (ecrm); 0 = rotated parity on servers", ge=0)
    wait: str = key("auto", "how ranks wait: spin, sleep-poll, or auto (sleep when ranks outnumber cores)",
                    choices=("spin", "sleep", "auto"))
    replacement: str = key(
        "spare", "how a dead rank is replaced: a warmed-up spare; spawn (MPI_Comm_spawn when no spare is "
        "left); shrink (when no spare is left, go on with fewer ranks: the survivors take the dead one's "
        "virtual shards)", choices=("spare", "spawn", "shrink"))
    grow_back_steps: int = key(
        0, "replacement = shrink: N steps after a shrink, spawn processes for the missing slots and "
        "re-place rows and virtual shards onto them at a step boundary (ULFM only); 0 = never", ge=0)
    grow_from: str = key(
        "spawn", "grow_back_steps: where a growth's new processes come from: spawn (MPI_Comm_spawn at the "
        "growth); spares (the layout.spares launched at the start, held waiting for the growth: a failure "
        "still shrinks, and no spawn is on the path, so a death during the growth is recovered like any "
        "failure during a recovery)", choices=("spawn", "spares"))
    spawn_grace_s: float = key(
        10.0, "spawn, grow_back_steps: a run whose MPI_Comm_spawn a death cut is ended, lost, this many "
        "seconds after the death; a spawn that fails with an error within it is recovered as usual",
        gt=0, le=3600)
    virtual_trainers: int = key(
        0, "shards of the global batch whose gradients sum in a fixed tree: the result is the same on any "
        "trainer count that divides into them; a power of two >= layout.trainers; 0 = auto (4, or more "
        "trainers)", ge=0)
    ranks_per_node: int = key(0, "emulated nodes of N ranks after the monitor (kill plans' node:N); 0 = none",
                              ge=0)

    @property
    def n_ranks(self) -> int:
        """The processes of a run: monitor + trainers + servers + parity ranks + spares (the one place
        this sum is written)."""
        return 1 + self.trainers + self.servers + self.parity_ranks + self.spares


@dataclass
class TrainingConfig:
    seed: int = key(1, "seed of the data, the model's initial values and the kill plans' random picks", ge=0)
    steps: int = key(1000, "training steps", ge=1, le=MAX_STEPS)
    batch_size: int = key(256, "samples per trainer and step", ge=1)
    optimizer: str = key("adagrad", "embeddings' optimizer (adagrad: row-wise)", choices=("sgd", "adagrad"))
    lr: float = key(0.05, "embeddings' learning rate", gt=0)
    dense_optimizer: str = key("adagrad", "dense MLPs' optimizer", choices=("sgd", "adagrad"))
    dense_lr: float = key(0.05, "dense MLPs' learning rate", gt=0)
    eps: float = key(1e-8, "Adagrad's epsilon", gt=0)
    eval_every: int = key(0, "steps between evaluations; 0 = only at the end", ge=0)
    eval_batch: int = key(4096, "samples per evaluation batch", ge=1)
    log_every: int = key(50, "steps between progress lines", ge=1)


@dataclass
class StrategyConfig:
    name: str = key("none", "the fault-tolerance strategy (mpiec strategies lists them)")
    params: dict[str, Any] = key(
        help="the strategy's own keys, set as strategy.KEY (mpiec config --explain strategy.KEY)",
        default_factory=dict)


@dataclass
class FailuresConfig:
    kill: list[str] = key(help="kill plans, e.g. server:1@step=10 (docs/running.md 'Kill plans')",
                          default_factory=list)
    mtbf_s: float = key(0.0, "expected mean time between failures in seconds (for checkpoint intervals)",
                        ge=0, le=MAX_SECONDS)
    mtbf_steps: float = key(0.0, "the same in steps (mpiec bench gives a failure-free run its scenario's)",
                            ge=0, le=MAX_SECONDS)
    timeout_s: float = key(0.0, "whole-run wall-clock bound; 0 = derived from steps", ge=0, le=MAX_SECONDS)
    dense_check_every: int = key(0, "every N steps the trainers compare a digest of their dense "
                                 "replicas (in the step's dense all-gather): a silent corruption of one "
                                 "is detected, and with 3+ trainers its replica replaced by the majority's; "
                                 "0 = off", ge=0, le=MAX_STEPS)
    shard_check_every: int = key(0, "every server folds each of its rows (an XOR of its words) when it "
                                 "updates it, checks a row before its next update and every row every N "
                                 "steps: a row changed at rest (a silent corruption) is found and named, "
                                 "not repaired; rows not updated since the last recovery are not checked; "
                                 "0 = off", ge=0, le=MAX_STEPS)
    message_checksums: bool = key(False, "each trainer's embedding-gradient message carries a checksum per "
                                  "server (an XOR-fold of its words), checked before the server applies "
                                  "it: a corrupted message is a detected fault and the step is executed "
                                  "again")
    mode: str = key("auto", "failure handling: ULFM, emulated (the launcher restarts nothing), or auto",
                    choices=("auto", "ulfm", "emulated"))
    detector: str = key("runtime", "runtime: the launcher's daemons report deaths; heartbeat: also "
                        "ULFM's heartbeat ring", choices=("runtime", "heartbeat"))
    heartbeat_period_s: float = key(2.0, "detector = heartbeat: each rank's heartbeat to its neighbour",
                                    gt=0, le=60)
    heartbeat_timeout_s: float = key(10.0, "detector = heartbeat: silence that means a dead peer "
                                     "(> 3 periods, > start-up skew)", gt=0, le=600)


@dataclass
class StorageConfig:
    """Checkpoint storage (``mpiec.storage.model``): a named profile, each figure overridable.
    A number left at -1 takes the profile's; 0 means no cap (the real disk's speed)."""

    profile: str = key("local", "named storage profile (docs/checkpoints.md 'Storage model')",
                       choices=tuple(PROFILES))
    write_mb_s: float = key(UNSET, "write bandwidth per rank, MB/s; 0 = no cap", ge=0, le=MAX_MB_S,
                            unset=(UNSET, "the profile's"))
    read_mb_s: float = key(UNSET, "read bandwidth per rank, MB/s; 0 = no cap", ge=0, le=MAX_MB_S,
                           unset=(UNSET, "the profile's"))
    latency_ms: float = key(UNSET, "latency per part operation (a part's write, a part's read), ms",
                            ge=0, le=MAX_LATENCY_MS, unset=(UNSET, "the profile's"))
    aggregate_mb_s: float = key(UNSET, "write bandwidth shared by every rank of the job, MB/s; 0 = no cap",
                                ge=0, le=MAX_MB_S, unset=(UNSET, "the profile's"))
    cold_reads: bool = key(True, "a restore reads the disk, not the page cache")


@dataclass
class OutputConfig:
    dir: str = key("results", "folder of the result file (--out)")
    name: str = key("", "result file stem, a plain file name; empty = <preset>-<strategy>-<seed>-<timestamp>")
    progress: bool = key(True, "print progress lines")
    final_model: bool = key(False, "write the trained model into the result file (group final_model: "
                            "the dense parameters and every embedding row's weights) when the run "
                            "completes; a bench compares it with the failure-free twin's")


@dataclass
class Config:
    preset: str = key(DEFAULT_PRESET, "the preset the other keys start from", choices=PRESETS)
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
        """``layout.n_ranks``: monitor + trainers + servers + parity ranks + spares."""
        return self.layout.n_ranks

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
        then ``replacement=...`` unless the layout replaces dead ranks by spares (the default),
        ``virtual_trainers=...`` when set, and the runtime's corruption detectors when on
        (``dense_check_every=N``, ``shard_check_every=N``, ``message_checksums=true``)."""
        params = sorted(self.strategy.params.items())
        layout = [f"replacement={self.layout.replacement}"] if self.layout.replacement != "spare" else []
        layout += [f"virtual_trainers={self.layout.virtual_trainers}"] if self.layout.virtual_trainers else []
        f = self.failures
        layout += [f"dense_check_every={f.dense_check_every}"] if f.dense_check_every else []
        layout += [f"shard_check_every={f.shard_check_every}"] if f.shard_check_every else []
        layout += ["message_checksums=true"] if f.message_checksums else []
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


def _merge(obj: Any, raw: dict[str, Any], prefix: str) -> None:
    """Merge a nested dict into a dataclass tree, rejecting unknown keys."""
    hints = _hints(type(obj))
    for name, value in raw.items():
        full = f"{prefix}{name}"
        if name not in hints:
            raise ConfigError(f"unknown config key '{full}'{did_you_mean(name, hints)}")
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"'{full}' is a section; set its keys, e.g. {full}.<key>=...")
            _merge(current, value, f"{full}.")
        elif typing.get_origin(hints[name]) is dict:
            merged = dict(current)
            merged.update(coerce(value, hints[name], full))
            setattr(obj, name, merged)
        else:
            setattr(obj, name, coerce(value, hints[name], full))


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
    text = resources.files("mpiec.config").joinpath("presets", f"{name}.toml").read_text()
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


def load_layers(
    preset: str | None = None,
    config_file: str | Path | None = None,
    sets: list[str] | None = None,
    strategy: str | None = None,
    kill: list[str] | None = None,
    steps: int | None = None,
    base: dict[str, Any] | None = None,
) -> Config:
    """A config from its layers, each key checked against its declaration and the rules across the
    config's own keys (``validate``; raises ``ConfigError``). ``mpiec.launch.resolve.load_config`` adds the
    checks across sections (strategy, kill plans, memory): callers that run something use that.

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
    validate(cfg)
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
    for name in STATE_KEYS:
        old, new = _lookup(saved, name), _lookup(now, name)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            i = next(i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b)
            out.append(f"{name}[{i}]: {_brief(old[i])} in the checkpoint, {_brief(new[i])} now")
        elif isinstance(old, list) and isinstance(new, list):
            out.append(f"{name}: {len(old)} values in the checkpoint, {len(new)} now")
        else:
            out.append(f"{name}: {_brief(old)} in the checkpoint, {_brief(new)} now")
    return out


# -- validation ---------------------------------------------------------------

def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(_clean(message))


def validate(cfg: Config) -> None:
    """Check every key against its declaration (type limits, range, choices: ``check_keys``) and the
    rules across keys of the config's own sections; raise ``ConfigError`` on the first problem.
    What needs the strategy, the kill plans or this machine is ``mpiec.launch.resolve``'s."""
    d, lay, f = cfg.data, cfg.layout, cfg.failures
    _check_numbers(cfg, "")
    check_keys(cfg)
    _need(len(d.cardinalities) >= 1, "data.cardinalities must list at least one table")
    _need(not d.multi_hot or len(d.multi_hot) == len(d.cardinalities),
          f"data.multi_hot must give one bag size per table ({len(d.cardinalities)} in "
          f"data.cardinalities), got {len(d.multi_hot)}")
    _need(d.source == "synthetic" or all(m == 1 for m in d.multi_hot),
          f"data.multi_hot > 1 needs data.source = 'synthetic' (files are one-hot), got '{d.source}'")
    if d.source != "synthetic":
        _need(bool(d.path), f"data.path must name a file when data.source = '{d.source}'")
        problem = file_problem(d.path, "data file")  # the ranks read it: checked, not read, here
        _need(problem is None, f"data.path '{d.path}' {problem}")
    v = cfg.virtual_trainers
    _need(v & (v - 1) == 0 and v >= lay.trainers,
          f"layout.virtual_trainers must be a power of two >= layout.trainers ({lay.trainers}), got {v}")
    _need(v <= cfg.global_batch,
          f"layout.virtual_trainers = {v} is more than the global batch ({cfg.global_batch} = "
          "training.batch_size x layout.trainers): every shard needs a sample")
    _need(lay.grow_back_steps == 0 or lay.replacement == "shrink",
          f"layout.grow_back_steps = {lay.grow_back_steps} needs layout.replacement = 'shrink' "
          f"(got '{lay.replacement}')")
    _need(lay.grow_from == "spawn" or (lay.replacement == "shrink" and lay.grow_back_steps > 0
                                      and lay.spares >= 1),
          f"layout.grow_from = 'spares' needs layout.replacement = 'shrink', layout.grow_back_steps > 0 "
          f"and layout.spares >= 1 (got '{lay.replacement}', {lay.grow_back_steps}, {lay.spares})")
    _need(cfg.n_ranks <= MAX_RANKS,
          f"layout: at most {MAX_RANKS} ranks in all (1 monitor + layout.trainers + layout.servers + "
          f"layout.parity_ranks + layout.spares), got {cfg.n_ranks}")
    _check_name(cfg.output.name)
    _need(3 * f.heartbeat_period_s < f.heartbeat_timeout_s,
          f"failures.heartbeat_timeout_s must be > 3 x failures.heartbeat_period_s "
          f"({3 * f.heartbeat_period_s:g}) and <= 600, got {f.heartbeat_timeout_s}")


def check_keys(obj: Any, prefix: str = "") -> None:
    """Every field of ``obj`` (a config or one of its sections, recursively) against its declared
    range and choices (``schema.check``)."""
    for f, hint in fields_of(type(obj)):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(hint):
            check_keys(value, f"{prefix}{f.name}.")
        else:
            check(value, f, f"{prefix}{f.name}")


def core_keys() -> list[Key]:
    """Every key of the config's sections, as ``mpiec config --explain`` lists them."""
    out = keys(Config)
    for f, hint in fields_of(Config):
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            out += keys(hint, f"{f.name}.")
    return out


# -- limits and the memory estimate ------------------------------------------------

MAX_NAME_BYTES = 200  # output.name: leaves room for the suffixes a run adds (.h5.lock, -2, ...)
RANK_BASE_BYTES = 80 << 20  # interpreter, numpy, numba, MPI, h5py: ~76 MiB private, ~97 MiB PSS per rank
N_DENSE = 13  # dense features of every source (Criteo's 13 integer counts)


def fmt_bytes(n: float) -> str:
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


def memory_estimate(cfg: Config, stripe: tuple[int, int] = (1, 0)) -> dict[str, list[tuple[str, int]]]:
    """Bytes each kind of rank needs beyond ``RANK_BASE_BYTES``, by part, from the config and the
    strategy's ``stripe`` = (k, r) (its ``stripe_shape``: r parity rows per k data rows).

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
    k, r = max(int(stripe[0]), 1), max(int(stripe[1]), 0)
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
        part = (f"data file (data.path '{d.path}', about {fmt_bytes(file_bytes)} in memory)", file_bytes)
        trainer.append(part)
        monitor.append(part)
    out = {"monitor": monitor, "trainer": trainer, "server": server,
           "parity": [(shard_label.replace("embedding shard", "parity of an embedding shard"),
                       shard_rows * row_bytes * max(r, 1) // max(lay.parity_ranks, 1))]}
    spare_of = max(("trainer", "server"), key=lambda role: sum(b for _, b in out[role]))
    out["spare"] = [(f"{label} (a spare may take a {spare_of}'s place)", b) for label, b in out[spare_of]]
    return out


def check_memory(cfg: Config, total: int | None = None, on_host: int | None = None,
                 stripe: tuple[int, int] = (1, 0)) -> None:
    """Refuse a config whose ranks cannot fit in this machine's memory (``ConfigError``
    naming the key of the largest part and the estimate); ``stripe`` as for ``memory_estimate``."""
    total = mem_total() if total is None else total
    if not total:
        return
    lay = cfg.layout
    parts = memory_estimate(cfg, stripe)
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
        f"not enough memory: {who} would need about {fmt_bytes(host)}, this machine has "
        f"{fmt_bytes(total)} (MemTotal); the largest part is the {label}: about {fmt_bytes(size)} "
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


def fmt_seconds(s: float) -> str:
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
