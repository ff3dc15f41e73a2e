"""The strategy plug-in interface: every fault-tolerance strategy is one subclass.

A strategy sees the run only through these hooks; roles call the hooks and
never branch on a strategy's name. Invariants every strategy keeps:

* hooks are deterministic functions of (config, step, data they are given):
  they may add work and traffic but never change what training computes in a
  failure-free run (the parameter checksum of every strategy equals ``none``'s);
* ``on_failure`` is called with the same arguments on every survivor and must
  return the same decision everywhere (it is a pure function of them);
* figures a strategy reports (bytes written, parity bytes, ...) come from
  ``summary()`` and land in the result file's ``summary`` group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.layout import Slot


class Decision(Enum):
    ABORT = "abort"  # the run is lost: everyone stops, the result says lost = True
    CONTINUE = "continue"  # the strategy recovered: training goes on


@dataclass
class Failure:
    """What the survivors agreed on after a failure."""

    step: int  # the step during which the failure was detected
    committed: int  # last step every survivor completed (agreed minimum)
    dead: list[Slot] = field(default_factory=list)  # role slots whose rank died
    emulated: bool = False


@dataclass
class ServerShard:
    """A server's state, as strategies see it (arrays are the live ones)."""

    index: int
    table: np.ndarray  # float32 [n_local, dim + state]: weights then optimizer state
    global_rows: np.ndarray  # int64 global row id of each local slot (padding: -1)
    dim: int


class Strategy:
    """Base class: the ``none`` behaviour (no protection) for every hook."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs_delta: ClassVar[bool] = False  # servers compute old XOR new row bytes on apply (fused)
    needs_old: ClassVar[bool] = False  # servers keep a copy of the rows before apply

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.params = dict(cfg.strategy.params)

    # -- configuration ------------------------------------------------------
    @classmethod
    def validate_params(cls, cfg: Config) -> None:
        """Raise ``ConfigError`` for unknown or invalid ``strategy.params``."""
        from mpiec.errors import ConfigError

        if cfg.strategy.params:
            key = sorted(cfg.strategy.params)[0]
            raise ConfigError(f"unknown config key 'strategy.{key}' for strategy '{cls.name}'")

    @classmethod
    def stripe_shape(cls, cfg: Config) -> tuple[int, int]:
        """(k, r) of the row placement: data rows and parity rows per stripe."""
        return 1, 0

    # -- server hooks -------------------------------------------------------
    def attach_server(self, shard: ServerShard) -> None:
        """Called once on each server after its shard is initialised."""

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None) -> None:
        """Rows ``slots`` (sorted, unique) were updated at ``step``.

        The new rows are ``shard.table[slots]``; ``old`` is a copy of the rows
        before the update (``needs_old``), ``delta`` their old XOR new bytes as
        uint8 ``[len(slots), row_bytes]`` (``needs_delta``); ``None`` otherwise.
        """

    # -- every role ---------------------------------------------------------
    def after_step(self, step: int) -> None:
        """Step ``step`` is complete on this rank."""

    def on_failure(self, failure: Failure) -> Decision:
        """Decide, identically on every survivor, what a failure means."""
        return Decision.ABORT

    def recover(self, ctx: Any, role: Any, failure: Failure) -> Any:
        """After ``on_failure`` returned CONTINUE: rebuild state, return the role to run."""
        raise NotImplementedError(f"strategy {self.name} continues after failures but "
                                  "does not implement recover()")

    def summary(self) -> dict[str, Any]:
        """Strategy figures for the result file's ``summary`` group."""
        return {}
