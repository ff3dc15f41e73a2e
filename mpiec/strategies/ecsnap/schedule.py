"""When ``ecsnap`` snapshots: trainer 0's decision, carried to every rank in its step header word.

Owns ``SnapshotSchedule``, held by trainer 0's agent only: ``due(step)`` before the step (its answer
goes into the header's ``snapshot`` field), ``observe`` after every step (the step time, and the
slowest server's stall of the last snapshot, from the servers' ``stall_us`` fields), ``started``
when a snapshot is taken, ``restarted`` after a recovery.

Invariants:

* never while the previous snapshot is still building, nor after the run's last step;
* a fixed ``interval`` snapshots after every multiple of it; ``auto`` takes the first snapshot
  after ``first`` steps (at most a tenth of the run), then none until its stall is measured, then
  one every Young's ``sqrt(2 · t_snap · MTBF)`` in steps (the median recent step time);
* step times come from the process clock (``time.perf_counter``), as the stalls do.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from mpiec.strategies.checkpointing import young_interval


class SnapshotSchedule:
    """Trainer 0's snapshot decisions; ``interval`` None: Young's ``auto``; ``mtbf`` is (seconds,
    steps) of the expected time between failures, either None when unknown."""

    def __init__(self, interval: int | None, *, first: int, total_steps: int,
                 mtbf: tuple[float | None, float | None]) -> None:
        self.interval = interval
        self.first = int(first)
        self.total_steps = int(total_steps)
        self.mtbf = mtbf
        self.taken: list[int] = []  # steps after which a snapshot was taken (re-executed ones again)
        self.step_times: deque[float] = deque(maxlen=50)
        self.t_snap = 0.0  # the slowest server's stall of the last snapshot (s)
        self._last_t: float | None = None

    def due(self, step: int, building: bool) -> bool:
        """Snapshot after ``step``? Never while one is ``building``, nor after the last step."""
        if step + 1 >= self.total_steps or building:
            return False
        if self.interval:
            return (step + 1) % self.interval == 0
        last = max(self.taken, default=None)
        if last is None:
            return step + 1 >= min(self.first, max(1, self.total_steps // 10))
        if self.t_snap <= 0:
            return False  # the first snapshot's stall is not measured yet
        return step - last >= self.auto_steps()

    def observe(self, stall_us: np.ndarray) -> None:
        """After every step: its time, and the servers' stall of their last snapshot (µs)."""
        now = time.perf_counter()
        if self._last_t is not None:
            self.step_times.append(now - self._last_t)
        self._last_t = now
        self.t_snap = max([int(us) * 1e-6 for us in stall_us], default=0.0)

    def started(self, step: int) -> None:
        """A snapshot of ``step`` is taken."""
        self.taken.append(step)

    def restarted(self, restored: int) -> None:
        """After a recovery to ``restored``: the steps after it are executed again."""
        self.taken = [s for s in self.taken if s <= restored]
        self._last_t = None

    def auto_steps(self) -> int:
        """Young's interval ``sqrt(2 · t_snap · MTBF)`` in steps (median step time)."""
        mtbf_s, mtbf_steps = self.mtbf
        t_step = float(np.median(self.step_times)) if self.step_times else 0.01
        if mtbf_s is None:
            mtbf_s = (mtbf_steps if mtbf_steps is not None else self.total_steps) * t_step
        return max(1, int(round(young_interval(max(self.t_snap, 1e-6), mtbf_s) / max(t_step, 1e-6))))

    def figures(self) -> dict[str, Any]:
        """The interval used, in steps: the given one, else the median gap between the snapshots
        taken, else (fewer than two) Young's."""
        gaps = np.diff(sorted(set(self.taken)))
        return {"snapshot_interval_steps": int(self.interval or (np.median(gaps) if gaps.size else
                                                                 self.auto_steps()))}


__all__ = ["SnapshotSchedule"]
