"""How the simulator prices a strategy: the ``CostModel`` each strategy class carries (``cost``).

Owns the strategy side of ``mpiec simulate``: which recovery a strategy's failures cost (a
restart from scratch, a rollback to a checkpoint, a partial recovery of the lost shards, a rebuild
from survivors) and which rule picks its checkpoint interval. The simulator
(``mpiec.simulate.policies``) turns that plus the calibrated costs of measured runs into seconds;
it reads the strategies' ``cost`` from the one registry, so a plug-in with a ``cost`` is modelled
like a built-in. A strategy without one (``cost = None``) states why in ``cost_reason``.

Invariant: plain, immutable data; no import of the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["restart", "rollback", "partial", "rebuild"]


@dataclass(frozen=True)
class CostModel:
    """``kind``: what a failure costs (``restart``: the job starts over; ``rollback``: every rank
    restores a checkpoint and re-executes; ``partial``: only the lost shards restore, nothing is
    re-executed; ``rebuild``: the lost shards are rebuilt from survivors); ``interval``: the
    checkpoint interval rule (``young``: Young's; ``pls``: CPR's portion-of-lost-samples target,
    ``target_pls`` by default; ``none``: no checkpoints)."""

    kind: Kind
    interval: Literal["none", "young", "pls"] = "none"
    target_pls: float | None = None


__all__ = ["CostModel", "Kind"]
