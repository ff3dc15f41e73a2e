"""The resolve step: a config's layers become a run's config, its typed strategy and its kill plans.

Above ``mpiec.config`` (which knows only its own sections) and the strategy registry: ``resolve``
builds the strategy with its typed ``Params`` and does every check across sections — the strategy's
keys and rules (``Strategy.validate``), the layout against its stripe (``layout.parity_ranks``),
the kill plans (and whether a shrink they may cause can be recovered), every rank's memory.
``load_config`` is the layers plus this step. Used by the launcher (``mpiec run``, ``bench``,
``config``) before any rank starts and by every rank on the JSON config it is handed, also when
``srun`` or a job script starts the ranks without the launcher.

Invariants: nothing outside ``strategies.params.typed_params`` reads the strategy's raw table — the
rest asks the resolved strategy (``Resolved.params``, ``typed_params``: the registry's class, then
that helper); a refusal is one ``ConfigError`` line naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpiec.config import Config, check_memory, fmt_bytes, fmt_seconds, load_layers
from mpiec.config.inputs import one_line as _clean
from mpiec.errors import ConfigError, MpiecError

if TYPE_CHECKING:
    from mpiec.failures.faults import Kill
    from mpiec.storage.model import StorageModel
    from mpiec.strategies.api.base import Strategy


@dataclass(frozen=True)
class Resolved:
    """A checked run: its config, its strategy's class and typed keys, its kill plans."""

    cfg: Config
    strategy_cls: type[Strategy]
    params: Any  # the strategy's frozen ``Params`` instance
    kills: list[Kill]

    def strategy(self) -> Strategy:
        """A fresh instance of the run's strategy (one per rank)."""
        return self.strategy_cls(self.cfg)


def resolve(cfg: Config, memory: bool = True) -> Resolved:
    """Check ``cfg`` across its sections (see the module's docstring) and return the resolved run;
    ``memory = False`` skips the check against this machine's memory (a cluster's config)."""
    from mpiec.failures.corruption import parse_flips
    from mpiec.failures.faults import (  # local: faults imports config types
        parse_kill_plans,
        unshrinkable_kill,
    )
    from mpiec.strategies import validate_strategy

    strategy_cls = validate_strategy(cfg)  # ConfigError, one line, also for a plug-in's own bug
    params = typed_params(cfg, strategy_cls)
    k, r = strategy_cls.stripe_shape(cfg)
    lay = cfg.layout
    _need(lay.parity_ranks in (0, r),
          f"layout.parity_ranks must be 0 or the strategy's parity count r = {r} "
          f"(strategy '{cfg.strategy.name}'), got {lay.parity_ranks}")
    kills = parse_kill_plans(cfg.failures.kill, cfg)  # raises KillPlanError, a ConfigError's sibling
    parse_flips(cfg.failures.kill, cfg)  # the silent corruptions among them, checked alike
    if strategy_cls.recovers:  # (one that does not is lost at the first kill anyway)
        _need(not (why := unshrinkable_kill(kills, cfg, strategy_cls.shrink_refusal(cfg))), why)
    if memory:
        check_memory(cfg, stripe=(k, r))
    return Resolved(cfg, strategy_cls, params, kills)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(_clean(message))


def typed_params(cfg: Config, strategy_cls: type[Strategy] | None = None) -> Any:
    """The typed keys of ``cfg``'s strategy (default: the registered one of ``strategy.name``), by
    ``strategies.params.typed_params``."""
    from mpiec.strategies import get_strategy_class
    from mpiec.strategies.api.params import typed_params as typed

    return typed(cfg, strategy_cls or get_strategy_class(cfg.strategy.name))


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
    """A config from its layers (``config.load_layers``: the arguments are its), resolved
    (``resolve``); raises ``ConfigError``. ``memory = False`` skips the check against this
    machine's memory (``mpiec config`` for a cluster)."""
    cfg = load_layers(preset=preset, config_file=config_file, sets=sets, strategy=strategy, kill=kill,
                      steps=steps, base=base)
    resolve(cfg, memory=memory)
    return cfg


def storage_model(cfg: Config) -> StorageModel:
    """The storage model of a run: its ``[storage]`` section under its strategy's own per-rank write
    cap (``strategy.bandwidth_mb_s`` of the checkpointing strategies, the older knob; 0 = none)."""
    from mpiec.storage.model import resolve as resolve_storage

    cap = getattr(typed_params(cfg), "bandwidth_mb_s", 0.0)
    return resolve_storage(cfg.storage, float(cap))


def storage_line(cfg: Config) -> str:
    """One line for a table's header: ``storage: object-store (emulated: write 80 MB/s ...)``."""
    return f"storage: {storage_model(cfg).describe()}"


def config_from_json(text: str, memory: bool = True) -> Resolved:
    """A rank's config (the launcher's JSON, or ``mpiec config --write``'s), resolved."""
    return resolve(Config.from_json(text), memory=memory)


def check_storage_time(cfg: Config, limit_s: float) -> None:
    """Refuse storage figures under which not one checkpoint can be written, or restored, within
    the run's time limit ``limit_s`` (``storage.write_mb_s = 1e-12`` ran until that limit). Only for
    a strategy that writes checkpoints (its ``checkpoint_root`` is not None). The bytes are a lower
    bound, so nothing a run could do is refused: one server's embedding shard at 1 bit per value,
    less than any strategy writes; the aggregate budget carries every server's shard."""
    from mpiec.strategies import get_strategy_class

    if get_strategy_class(cfg.strategy.name)(cfg).checkpoint_root(Path("run.h5")) is None:
        return
    model = storage_model(cfg)
    servers = cfg.layout.servers
    shard = -(-sum(cfg.data.cardinalities) // servers) * cfg.model.dim / 8  # bytes
    for key, rate, nbytes, what in (
            ("write_mb_s", model.write_mb_s, shard, "writing one server's shard"),
            ("read_mb_s", model.read_mb_s, shard, "restoring one server's shard"),
            ("aggregate_mb_s", model.aggregate_mb_s, shard * servers,
             f"writing the {servers} servers' shards through the job's shared budget")):
        if rate > 0 and nbytes / (rate * 1e6) >= limit_s:
            legacy = getattr(typed_params(cfg), "bandwidth_mb_s", None) if key == "write_mb_s" else None
            where = ("strategy.bandwidth_mb_s" if legacy == rate else f"storage.{key}"
                     if getattr(cfg.storage, key) != -1 else f"storage.profile '{cfg.storage.profile}'")
            raise ConfigError(_clean(
                f"{where}: at {rate:g} MB/s, {what} (at least {fmt_bytes(nbytes)}) takes "
                f"{fmt_seconds(nbytes / (rate * 1e6))}, not less than the run's time limit of "
                f"{fmt_seconds(limit_s)}: no {'restore' if key == 'read_mb_s' else 'checkpoint'} "
                "could finish"))


def explain(name: str = "") -> list[str]:
    """``mpiec config --explain [KEY]``: one line per key (``schema.describe``: type = default,
    range or choices, help). KEY: a key (``training.steps``), a section (``training``), a strategy's
    key (``strategy.interval``: every strategy that declares it) or ``NAME.KEY`` (``ckpt.interval``);
    none: every key of the config's sections. An unknown KEY is a ``ConfigError`` with a "did you mean"."""
    from mpiec.config import core_keys
    from mpiec.config.schema import describe
    from mpiec.config.schema import keys as declared
    from mpiec.strategies import STRATEGIES

    core = core_keys()
    if not name:
        return describe(core) + [
            "strategy.KEY  the strategy's own keys: mpiec config --explain strategy.KEY, or "
            "mpiec strategies --keys"]
    chosen = [k for k in core if k.name.startswith(f"{name}.") or k.name == name]
    head, _, tail = name.partition(".")
    strategy_keys: list[str] = []
    for strategy in STRATEGIES:
        try:
            cls = STRATEGIES[strategy]
        except MpiecError:  # a plug-in that does not load: mpiec strategies says why
            continue
        for k in declared(cls.Params, "strategy."):
            strategy_keys += [k.name, f"{strategy}.{k.name.removeprefix('strategy.')}"]
            if tail and k.name == f"strategy.{tail}" and head in ("strategy", strategy):
                chosen.append(dataclasses.replace(k, name=f"{k.name} ({strategy})"))
    lines = describe(chosen)
    if lines:
        return lines
    from mpiec.errors import did_you_mean

    sections = sorted({k.name.rsplit(".", 1)[0] for k in core})
    known = [k.name for k in core] + sections + strategy_keys
    raise ConfigError(f"unknown config key '{name}'{did_you_mean(name, known)} (mpiec config --explain "
                      "lists every key)")


__all__ = ["Resolved", "check_storage_time", "config_from_json", "explain", "load_config", "resolve",
           "storage_line", "storage_model", "typed_params"]
