"""A rank's snapshot buffers and the GF(2^8) block arithmetic of ``ecsnap`` (no MPI).

Owns what one rank keeps of one snapshot (``Snapshot``): a server its shard's
bytes and the parity blocks it holds for other stripes, a trainer its copy of
the dense replica; which snapshots a rank holds (``SnapshotSet``: the committed
one, the one building, and a released one's buffers for the next); and the
codes' use on whole blocks of unequal size (``mac_into``, ``encode_block``,
``decode_block``): a block shorter than its stripe's ``L_t`` is read as
zero-padded to ``L_t``, the padding never stored.

Invariants:

* ``Snapshot.complete`` on a server: its shard is copied *and* every parity block
  it holds is the encoding of the stripe members' copies of the same step;
  parity is exact (GF codes on raw bytes), so a decode returns the lost shard
  byte for byte;
* a snapshot's buffers are never written once it is complete, except by a
  recovery that restores the lost blocks of a replaced rank (which had none);
* a ``SnapshotSet`` holds at most two snapshots (the committed one and the one
  building): the building one's commit releases the previous committed one,
  whose buffers the next snapshot reuses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mpiec.kernels.codes import Code
from mpiec.kernels.gf256 import gf_mac


@dataclass
class Snapshot:
    step: int
    data: np.ndarray | None = None  # server: the shard's bytes (uint8, 1-D), a copy
    dense: dict[str, np.ndarray] | None = None  # trainer: a copy of the dense replica
    parity: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # (stripe, i) -> block
    complete: bool = False
    promoted_at: int | None = None  # the step after which every rank committed it
    started: float = field(default_factory=time.perf_counter)
    stall: float = 0.0  # this rank's critical-path time spent on it (copy, progress between steps)

    @property
    def data_bytes(self) -> int:
        dense = sum(a.nbytes for a in self.dense.values()) if self.dense else 0
        return (self.data.nbytes if self.data is not None else 0) + dense

    @property
    def parity_bytes(self) -> int:
        return sum(b.nbytes for b in self.parity.values())


class SnapshotSet:
    """The snapshots one rank holds, by step: ``committed`` (the one to restore), ``building`` (taken,
    not committed yet) and ``spare`` (a released snapshot, whose buffers the next one reuses)."""

    def __init__(self) -> None:
        self.by_step: dict[int, Snapshot] = {}
        self.committed: Snapshot | None = None
        self.building: Snapshot | None = None
        self.spare: Snapshot | None = None

    def take(self, step: int, started: float) -> Snapshot:
        """The snapshot of ``step``, building from now (the spare's buffers, to be filled)."""
        snap = self.spare or Snapshot(step)
        self.spare = None
        snap.step, snap.complete, snap.promoted_at, snap.started, snap.stall = step, False, None, started, 0.0
        self.by_step[step] = self.building = snap
        return snap

    def commit(self, step: int) -> Snapshot:
        """The building snapshot is committed after ``step``: it is the one to restore now, and the
        previous committed one is released."""
        snap = self.building
        assert snap is not None, "no snapshot is building"
        snap.promoted_at = step
        old = self.committed
        self.committed, self.building = snap, None
        if old is not None:
            self.by_step.pop(old.step, None)
            self.spare = old
        return snap

    def get(self, step: int) -> Snapshot | None:
        return self.by_step.get(step)

    def put(self, snap: Snapshot) -> None:
        """A snapshot a recovery brought back (decoded, or received from a peer)."""
        self.by_step[snap.step] = snap

    def complete_steps(self) -> list[int]:
        return [s.step for s in self.by_step.values() if s.complete]

    def keep_only(self, keep: Snapshot | None, restored: int) -> None:
        """After a recovery: ``keep`` (None: nothing) is the committed snapshot, as of step
        ``restored``; the others are released."""
        if keep is not None:
            keep.complete, keep.promoted_at = True, restored
        for snap in self.by_step.values():
            if snap is not keep:
                self.spare = snap
        self.by_step = {keep.step: keep} if keep is not None else {}
        self.committed, self.building = keep, None

    def held(self) -> list[Snapshot]:
        """Every snapshot whose buffers this rank holds (the spare included)."""
        return list(self.by_step.values()) + ([self.spare] if self.spare is not None else [])


def as_bytes(table: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes as a 1-D uint8 view."""
    return np.ascontiguousarray(table).view(np.uint8).reshape(-1)


def mac_into(parity: np.ndarray, block: np.ndarray, c: int) -> None:
    """``parity ^= c · block`` with ``block`` zero-padded to ``parity``'s size."""
    if block.size > parity.size:
        raise ValueError(f"a block of {block.size} bytes is larger than its stripe's {parity.size}")
    if c and block.size:
        gf_mac(parity[: block.size], block, int(c))


def encode_block(code: Code, i: int, blocks: list[np.ndarray], size: int) -> np.ndarray:
    """Parity member ``i`` of a stripe whose data members are ``blocks`` (``k_t <= k`` of them,
    of any sizes ``<= size``; missing members are zero)."""
    out = np.zeros(size, dtype=np.uint8)
    for j, block in enumerate(blocks):
        mac_into(out, block, int(code.parity_rows[i, j]))
    return out


def decode_block(code: Code, kt: int, lost: int, pieces: dict[int, np.ndarray], block: int,
                 size: int) -> np.ndarray:
    """Data member ``lost`` (``size`` bytes) of a stripe of ``kt`` data members and ``block``-byte
    blocks, from ``kt`` other blocks: ``pieces[m]`` is data member ``m`` (``m < k``, its own size)
    or parity member ``m - k`` (``block`` bytes)."""
    k, r = code.k, code.r
    if len(pieces) < kt:
        raise ValueError(f"a decode needs {kt} blocks, got {len(pieces)}")

    def padded(a: np.ndarray) -> np.ndarray:
        out = np.zeros((1, block), dtype=np.uint8)
        out[0, : a.size] = a
        return out

    members: list[np.ndarray | None] = [None] * k
    parity: list[np.ndarray | None] = [None] * r
    for j in range(kt, k):  # the members a short stripe lacks are zero blocks, always at hand
        members[j] = np.zeros((1, block), dtype=np.uint8)
    for m, a in pieces.items():
        if m < k:
            members[m] = padded(a)
        else:
            parity[m - k] = padded(a)
    (out,) = code.decode(members, parity, [lost])
    return out.reshape(-1)[:size].copy()
