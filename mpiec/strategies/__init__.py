"""Fault-tolerance strategies, one module each, behind ``strategies.base.Strategy``.

``STRATEGIES`` is the registry: adding a strategy means adding its module and
one line here; ``mpiec bench`` then runs it automatically. It imports a
strategy's module on first use, so a rank loads only the strategy it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from mpiec.errors import ConfigError
from mpiec.strategies.base import Strategy


class Registry(Mapping[str, type[Strategy]]):
    """Strategy name -> class, importing a strategy's module only when that strategy is asked for.

    A rank needs one strategy; importing all nine (their kernels, codes and MPI plumbing) cost
    every rank of every run ~60 ms of CPU at start-up.
    """

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = dict(paths)  # name -> "module:Class"

    def __getitem__(self, name: str) -> type[Strategy]:
        module, _, cls = self._paths[name].partition(":")
        return getattr(importlib.import_module(module), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


# Each class's ``name`` equals its key here (tests/strategies/test_registry.py checks it).
STRATEGIES: Registry = Registry({
    "none": "mpiec.strategies.none:NoProtection",
    "ckpt": "mpiec.strategies.ckpt:FullCheckpoint",
    "cpr": "mpiec.strategies.cpr:PartialRecovery",
    "cpr-mfu": "mpiec.strategies.cpr:PartialRecoveryMFU",
    "cpr-ssu": "mpiec.strategies.cpr:PartialRecoverySSU",
    "cnr": "mpiec.strategies.cnr:CheckNRun",
    "ecrm": "mpiec.strategies.ecrm:ErasureCoded",
    "log": "mpiec.strategies.log:UpdateLog",
    "ecsnap": "mpiec.strategies.ecsnap:ErasureCodedSnapshots",
})


def get_strategy_class(name: str) -> type[Strategy]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown strategy '{name}' (available: {', '.join(STRATEGIES)})") from None


def available() -> list[str]:
    return list(STRATEGIES)
