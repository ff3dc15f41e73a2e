"""Fault-tolerance strategies, one module (or package) each, behind ``strategies.base.Strategy``.

``STRATEGIES`` is the one registry every part of the suite reads (runs, bench, report, simulate,
the contract test): the built-in strategies listed here, and every strategy an installed package
registers in the entry-point group ``mpiec.strategies``::

    [project.entry-points."mpiec.strategies"]
    replica = "mpiec_replica:Replication"

A strategy's module is imported on first use, so a rank loads only the strategy it runs.
Invariants: a strategy's ``name`` equals its key; a plug-in cannot replace a built-in (the
built-in keeps the name, and ``problems`` says so); a plug-in that fails to load (whatever its
import raises) or whose declarations are unusable (``base.check_declarations``: ``Params``, their
defaults, ``summary_rules``) is reported by name in one line (``ConfigError``) and never breaks the
others: commands that run every strategy take ``usable()`` and list the ones left out;
``validate_strategy`` turns what a plug-in's ``check``/``__init__`` raises into one line too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import TYPE_CHECKING

from mpiec.errors import ConfigError, MpiecError
from mpiec.failures.crashes import exception_text
from mpiec.strategies.api.base import Strategy, check_declarations

if TYPE_CHECKING:
    from mpiec.config import Config

ENTRY_POINT_GROUP = "mpiec.strategies"

BUILTIN: dict[str, str] = {
    "none": "mpiec.strategies.none:NoProtection",
    "ckpt": "mpiec.strategies.ckpt:FullCheckpoint",
    "cpr": "mpiec.strategies.cpr:PartialRecovery",
    "cpr-mfu": "mpiec.strategies.cpr:PartialRecoveryMFU",
    "cpr-ssu": "mpiec.strategies.cpr:PartialRecoverySSU",
    "cnr": "mpiec.strategies.cnr:CheckNRun",
    "ecrm": "mpiec.strategies.ecrm:ErasureCoded",
    "log": "mpiec.strategies.log:UpdateLog",
    "ecsnap": "mpiec.strategies.ecsnap:ErasureCodedSnapshots",
}


class Registry(Mapping[str, type[Strategy]]):
    """Strategy name -> class, importing a strategy's module only when that strategy is asked for.

    A rank needs one strategy; importing all nine (their kernels, codes and MPI plumbing) cost
    every rank of every run ~60 ms of CPU at start-up.
    """

    def __init__(self, builtin: dict[str, str], group: str | None = None) -> None:
        self._paths = dict(builtin)  # name -> "module:Class"
        self._origin = {name: "built-in" for name in builtin}
        self.problems: list[str] = []  # plug-ins left out, and why
        self._broken: dict[str, str] = {}  # name -> why its declarations are unusable (checked once)
        for ep in metadata.entry_points(group=group) if group else []:
            dist = ep.dist.name if ep.dist is not None else "?"
            if ep.name in self._paths:
                self.problems.append(f"plug-in '{ep.name}' of package {dist} ignored: "
                                     f"the name is taken by the {self._origin[ep.name]} strategy")
                continue
            self._paths[ep.name] = ep.value
            self._origin[ep.name] = f"plug-in ({dist})"

    def __getitem__(self, name: str) -> type[Strategy]:
        if name in self._broken:
            raise ConfigError(self._broken[name])
        path = self._paths[name]
        where = f"strategy '{name}' ({self._origin[name]}, {path})"
        module, _, attr = path.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except Exception as exc:  # a plug-in's import may raise anything: it must not break the others
            # (not cached: an ImportError may be fixed by installing a package in this process's life)
            raise ConfigError(f"{where} does not load: {exception_text(exc)}") from None
        if not (isinstance(cls, type) and issubclass(cls, Strategy)) or cls.name != name:
            raise ConfigError(f"{where} is not a mpiec.strategies.api.base.Strategy subclass whose name is "
                              f"'{name}'")
        try:
            check_declarations(cls)
        except ConfigError as exc:
            self._broken[name] = f"{where}: {exc}"
            raise ConfigError(self._broken[name]) from None
        return cls

    def usable(self) -> tuple[list[str], list[str]]:
        """(names of the strategies that load, one line per plug-in left out and why): what a
        command that runs "every strategy" runs; a broken plug-in is named, never fatal."""
        names, problems = [], list(self.problems)
        for name in self._paths:
            try:
                self[name]
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            names.append(name)
        return names, problems

    def __contains__(self, name: object) -> bool:  # without loading it (a broken plug-in is still "in")
        return name in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def origin(self, name: str) -> str:
        """``built-in`` or ``plug-in (<package>)``."""
        return self._origin[name]


STRATEGIES: Registry = Registry(BUILTIN, ENTRY_POINT_GROUP)


def get_strategy_class(name: str) -> type[Strategy]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown strategy '{name}' (available: {', '.join(STRATEGIES)})") from None


def available() -> list[str]:
    return list(STRATEGIES)


def validate_strategy(cfg: Config) -> type[Strategy]:
    """The class of ``cfg``'s strategy, its keys checked (``Strategy.validate``), an instance made
    from ``cfg`` and its stripe shape asked for: whatever a plug-in's code raises there becomes one
    ``ConfigError`` line naming the strategy (a ``ConfigError`` of its own passes as it is), so a
    broken plug-in is bad input (exit 2) before any rank starts, never a traceback."""
    cls = get_strategy_class(cfg.strategy.name)
    where = f"strategy '{cfg.strategy.name}' ({STRATEGIES.origin(cfg.strategy.name)})"
    for what, call in (("validate()/check()", lambda: cls.validate(cfg)), ("__init__", lambda: cls(cfg)),
                       ("stripe_shape()", lambda: cls.stripe_shape(cfg))):
        try:
            call()
        except MpiecError:
            raise
        except Exception as exc:  # a plug-in's bug, said in one line
            raise ConfigError(f"{where}: {what} raised {exception_text(exc)}") from None
    return cls
