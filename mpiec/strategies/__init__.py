"""Fault-tolerance strategies, one module (or package) each, behind ``strategies.base.Strategy``.

``STRATEGIES`` is the one registry every part of the suite reads (runs, bench, report, simulate,
the contract test): the built-in strategies listed here, and every strategy an installed package
registers in the entry-point group ``mpiec.strategies``::

    [project.entry-points."mpiec.strategies"]
    replica = "mpiec_replica:Replication"

A strategy's module is imported on first use, so a rank loads only the strategy it runs.
Invariants: a strategy's ``name`` equals its key; a plug-in cannot replace a built-in (the
built-in keeps the name, and ``problems`` says so); a plug-in that fails to load is reported by
name with its error, and never breaks the built-ins.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from importlib import metadata

from mpiec.errors import ConfigError
from mpiec.strategies.base import Strategy

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
        for ep in metadata.entry_points(group=group) if group else []:
            dist = ep.dist.name if ep.dist is not None else "?"
            if ep.name in self._paths:
                self.problems.append(f"plug-in '{ep.name}' of package {dist} ignored: "
                                     f"the name is taken by the {self._origin[ep.name]} strategy")
                continue
            self._paths[ep.name] = ep.value
            self._origin[ep.name] = f"plug-in ({dist})"

    def __getitem__(self, name: str) -> type[Strategy]:
        path = self._paths[name]
        module, _, attr = path.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"strategy '{name}' ({self._origin[name]}, {path}) does not load: "
                              f"{exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Strategy)) or cls.name != name:
            raise ConfigError(f"strategy '{name}' ({self._origin[name]}, {path}) is not a "
                              f"mpiec.strategies.base.Strategy subclass whose name is '{name}'")
        return cls

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
