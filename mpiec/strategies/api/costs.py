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

Kind = Literal["restart", "rollback", "partial", "replay", "rebuild"]


@dataclass(frozen=True)
class CostModel:
    """``kind``: what a failure costs (``restart``: the job starts over; ``rollback``: every rank
    restores a checkpoint and re-executes; ``partial``: only the lost shards restore, nothing is
    re-executed; ``replay``: only the lost shards restore and replay the trainers' logged gradients;
    ``rebuild``: the lost shards are rebuilt from survivors); ``interval``: the checkpoint interval
    rule (``young``: Young's; ``pls``: CPR's portion-of-lost-samples target, ``target_pls`` by
    default; ``none``: no checkpoints); ``medium``: where checkpoints go (``storage``: the job's
    storage model; ``memory``: peers' memory, priced by the calibrated snapshot costs, never by the
    storage model); ``diffs``: its checkpoints are differential and quantized (Check-N-Run), so
    their sizes follow the rows changed per interval (``mpiec.simulate.diffs``); ``partials_over``:
    the strategy is that one plus partial checkpoints between its full ones (``cpr-mfu``,
    ``cpr-ssu``: ``cpr``), so the calibration fits the partials' frequency and size from its
    checkpoints and the share of lost updates they save against that strategy's runs of the same
    config and kills (None: no partial checkpoints).

    What the simulator reads of a strategy comes from here, never from its name: ``restart`` saves
    nothing, so it costs nothing per step and needs no calibrated costs (its runs give the
    unprotected step, the reference of every overhead); ``rebuild`` does protection work every step
    (parity), which the step model prices; ``interval == "none"``: no checkpoints, so its servers'
    CPU holds no writes (``takes_checkpoints``)."""

    kind: Kind
    interval: Literal["none", "young", "pls"] = "none"
    target_pls: float | None = None
    medium: Literal["storage", "memory"] = "storage"
    diffs: bool = False  # differential, quantized checkpoints (cnr): sizes from the rows changed
    partials_over: str | None = None  # partial checkpoints between the full ones of this strategy's

    @property
    def unprotected(self) -> bool:
        """Saves nothing (``restart``): no per-step cost, no calibrated cost needed."""
        return self.kind == "restart"

    @property
    def takes_checkpoints(self) -> bool:
        return self.interval != "none"


__all__ = ["CostModel", "Kind"]
