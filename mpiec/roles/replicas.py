"""Cross-checking the trainers' dense replicas during training (``failures.dense_check_every``): a
generic detector of silent corruption, whatever the strategy.

Owns the digest each trainer adds to a step's dense all-gather when a check is due, the verdict
every trainer draws from all of them, and the repair: with three or more trainers the replicas that
disagree with the majority are replaced by a majority trainer's (``broadcast_replica``, the same
copy a recovery makes for a replaced trainer); with two, a mismatch is detected and not located.

Invariants:

* the digest travels in the all-gather the step makes anyway (``SLOTS`` float32 slots after the
  gradients and the loss sum): no extra message; the slots are cleared before the gradients are
  summed, and with the check off (0) the buffers are those of a run without it;
* a digest is exact for any one changed element (a sum of odd multiples of the 32-bit words, mod
  2**64: one changed word never cancels), taken of the replica the step's forward pass uses;
* every trainer sees every digest, so every trainer decides alike, and the repair's broadcast is
  collective over the trainers;
* what the step computed with a flipped weight is in the step's gradients (the model keeps it);
  the repair only makes the replicas one again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mpiec.comm import guard

if TYPE_CHECKING:
    from mpi4py import MPI

    from mpiec.roles.driver import StateRole

SLOTS = 2  # a 64-bit digest as two float32 slots of raw bits


class ReplicaCheck:
    """When a check is due and what a step's digests say."""

    def __init__(self, every: int) -> None:
        self.every = int(every)
        self._keys: np.ndarray | None = None

    @property
    def slots(self) -> int:
        """The slots the dense all-gather carries for the check (0: off)."""
        return SLOTS if self.every else 0

    def due(self, step: int) -> bool:
        return self.every > 0 and (step + 1) % self.every == 0

    def digest(self, params: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The replica's digest as ``SLOTS`` float32 of raw bits."""
        words = np.concatenate([params.view(np.uint32), state.view(np.uint32)]).astype(np.uint64)
        if self._keys is None or self._keys.size != words.size:
            self._keys = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.size, dtype=np.uint64)
            self._keys |= np.uint64(1)  # odd: a changed word changes the sum
        with np.errstate(over="ignore"):
            total = np.array([((words + np.uint64(1)) * self._keys).sum(dtype=np.uint64)], dtype=np.uint64)
        return total.view(np.float32)

    @staticmethod
    def verdict(digests: np.ndarray) -> tuple[list[int], int | None]:
        """(the trainers whose replica disagrees with the majority, a majority trainer) from every
        trainer's digest (``[n, SLOTS]`` float32 of raw bits); ``([], None)`` when all agree;
        ``(every trainer, None)`` when no digest has a strict majority (two trainers disagreeing)."""
        keys = [bytes(d.tobytes()) for d in np.ascontiguousarray(digests)]
        if len(set(keys)) <= 1:
            return [], None
        counts = {k: keys.count(k) for k in keys}
        best = max(counts.values())
        major = [k for k, c in counts.items() if c == best]
        if len(major) > 1 or best * 2 <= len(keys):
            return list(range(len(keys))), None
        odd = [i for i, k in enumerate(keys) if k != major[0]]
        return odd, keys.index(major[0])


def broadcast_replica(comm: MPI.Intracomm, role: StateRole, source: int, where: str) -> None:
    """Collective over the trainers: every trainer loads trainer ``source``'s dense replica."""
    state = role.state()
    for name in sorted(state):
        buf = np.ascontiguousarray(state[name])
        with guard(where, nonblocking_collective=True):
            comm.Bcast(buf, root=source)
        state[name] = buf
    role.load_state(state)


__all__ = ["SLOTS", "ReplicaCheck", "broadcast_replica"]
