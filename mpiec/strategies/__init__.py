"""Fault-tolerance strategies, one module each, behind ``strategies.base.Strategy``.

``STRATEGIES`` is the registry: adding a strategy means adding its module and
one line here; ``mpiec bench`` then runs it automatically.
"""

from __future__ import annotations

from mpiec.errors import ConfigError
from mpiec.strategies.base import Strategy
from mpiec.strategies.ckpt import FullCheckpoint
from mpiec.strategies.cnr import CheckNRun
from mpiec.strategies.cpr import PartialRecovery, PartialRecoveryMFU, PartialRecoverySSU
from mpiec.strategies.ecrm import ErasureCoded
from mpiec.strategies.ecsnap import ErasureCodedSnapshots
from mpiec.strategies.log import UpdateLog
from mpiec.strategies.none import NoProtection

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (
    NoProtection, FullCheckpoint, PartialRecovery, PartialRecoveryMFU, PartialRecoverySSU, CheckNRun,
    ErasureCoded, UpdateLog, ErasureCodedSnapshots)}


def get_strategy_class(name: str) -> type[Strategy]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown strategy '{name}' (available: {', '.join(STRATEGIES)})") from None


def available() -> list[str]:
    return list(STRATEGIES)
