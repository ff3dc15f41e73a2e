"""What a strategy can see of a silent corruption, as it declares it: ``CorruptionCover``.

Owns the declaration ``Strategy.corruption_cover()`` returns and the corruption matrix test, the
docs' table and the bench read (no study branches on a strategy's name). The kinds are those of the
``flip:`` plans (``mpiec.failures.corruption``): an embedding row at rest between its updates, a
checkpoint part at rest, an element of a trainer's dense replica. Also the shape in which a server
agent hands its redundant rows to a planned flip (``Redundancy``).

Invariants: a claim is one the strategy meets *every time* under the flips the suite draws (the
matrix holds it to it); ``None`` or ``False`` claims nothing (a detection may still happen by
chance, e.g. a rollback to a checkpoint older than the flip undoes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class CorruptionCover:
    """What a strategy detects, locates and repairs of a silent corruption."""

    #: a flipped bit in an embedding row that no update absorbed is detected within this many steps
    #: after the flip's step (0: at the end of that step); None: never
    rows_within: int | None = None
    #: ... and the row is located and its flipped bits given back
    rows_repaired: bool = False
    #: a flipped bit in a checkpoint part at rest is refused when a restore reads that part (the
    #: checkpoint stores' CRC-32), and an older checkpoint (or the run's end) follows
    parts_refused: bool = False
    #: how, in a few words (the docs' table)
    how: str = "nothing checks the live state"

    def __post_init__(self) -> None:
        if self.rows_within is not None and self.rows_within < 0:
            raise ValueError(f"rows_within must be >= 0 or None, got {self.rows_within}")
        if self.rows_repaired and self.rows_within is None:
            raise ValueError("a strategy that repairs rows detects them: give rows_within")


class Redundancy(NamedTuple):
    """The redundant rows a server agent keeps in memory (``ServerAgent.redundancy``): ``rows`` a
    C-contiguous 2-D array (a row per slot), ``stripes[i]`` and ``members[i]`` the stripe and parity
    index of slot ``i`` (a planned flip of ``of=parity`` names them; a repair names them back)."""

    rows: np.ndarray
    stripes: np.ndarray
    members: np.ndarray


__all__ = ["CorruptionCover", "Redundancy"]
