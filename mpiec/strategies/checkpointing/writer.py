"""Writing one rank's part of a checkpoint: a server's shard, or trainer 0's dense replica.

``PartWriter`` writes the part named ``part`` of checkpoint ``step`` through the rank's store,
either on the training thread (``sync``) or from a snapshot through ``mpiec.storage.checkpoint``'s
``BackgroundWriter`` (``async``), and tells the coordinator (``env.tell_monitor``) what it wrote:

* ``("part", step, epoch, PartInfo.to_dict(), {"rows", "stall_s", "total_s"})`` once written;
* ``("failed", step, epoch, {"part": name}, {})`` when the write failed (the store removed the
  part's own files; a ``checkpoint_fail`` event says why).

Invariants:

* a part is reported with the epoch it was written in; a background write finished after a
  failure ended its epoch is not reported (its checkpoint can never complete), nor is its stall
  kept;
* background writes finish in submission order (the writer's thread runs one at a time), so the
  n-th finished write is the n-th submitted;
* ``stall_s`` is what the training thread spent on the part (the whole write in ``sync`` mode,
  the snapshot copy in ``async`` mode); ``total_s`` adds a background write's own time;
* the figures only grow: ``critical_s`` (training-thread seconds, polls included, and those of
  the checkpoints the rank writes beside its parts: ``stalled``), ``write_s``,
  ``max_part_s`` (the slowest part this rank wrote: what it puts in the header's ``part_us``),
  ``checkpoint_writer_cpu_s`` (the background writer thread's own CPU seconds: what it took
  from a core training may share; 0 in ``sync`` mode, where the write is in the step's CPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mpiec.storage.checkpoint import BackgroundWriter, CheckpointError, PartInfo

if TYPE_CHECKING:
    from mpiec.strategies.api.env import RankEnv

#: the header field a writer puts its slowest part's write time in (µs; trainer 0's Young rule)
PART_US_FIELD = ("part_us", 40)
_PART_US_LIMIT = (1 << PART_US_FIELD[1]) - 1


class PartStore(Protocol):
    """What a ``PartWriter`` writes through (a ``CheckpointStore``, or a store wrapping one, such as
    cnr's quantizing store)."""

    def write_part(self, step: int, part: str, arrays: Mapping[str, np.ndarray]) -> PartInfo: ...


class PartWriter:
    """One rank's checkpoint part: ``state()`` gives the live arrays, ``rows()`` the embedding rows
    the part holds (0 for the dense replica); ``background``: write through a background thread.
    ``on_written(step, epoch)``, if given, is called instead of ``rows()`` when a part is written,
    before it is reported, and returns its rows (cnr tells the coordinator its chain link there)."""

    def __init__(self, env: RankEnv, store: PartStore, part: str,
                 state: Callable[[], Mapping[str, np.ndarray]], rows: Callable[[], int] = lambda: 0,
                 background: bool = False, on_written: Callable[[int, int], int] | None = None) -> None:
        self.env = env
        self.store = store
        self.part = part
        self.state = state
        self.rows = rows
        self.on_written = on_written
        self.writer = BackgroundWriter(store) if background else None  # type: ignore[arg-type]
        self.critical_s = self.write_s = self.max_part_s = 0.0
        self.parts_sent = 0
        self.submitted: list[tuple[int, int]] = []  # (step, epoch) of background writes, in order
        self.stalls: dict[tuple[int, int], float] = {}  # (step, epoch) -> stall of a background write

    def part_us(self) -> int:
        """The slowest part written so far, in µs (the header's ``part_us``; saturates)."""
        return min(int(self.max_part_s * 1e6), _PART_US_LIMIT)

    def pending(self) -> set[int]:
        """Steps whose background write is not reported yet."""
        return {s for s, _ in self.submitted}

    def save(self, step: int) -> bool:
        """Write this rank's part of checkpoint ``step`` from ``state()`` (or snapshot it for the
        background). False: the write failed (reported)."""
        t0 = time.perf_counter()
        state = self.state()
        if self.writer is not None:  # snapshot on the training thread, write in the background
            state = {k: np.array(v, copy=True) for k, v in state.items()}
        return self.save_snapshot(step, state, t0)

    def save_snapshot(self, step: int, arrays: Mapping[str, np.ndarray], t0: float) -> bool:
        """Write ``arrays`` as this part of ``step``, or hand them to the background (then they must
        be private copies); the training thread's time on it counts from ``t0``. False: the write
        failed (reported)."""
        epoch = self.env.epoch
        ok = True
        if self.writer is not None:
            self.writer.submit(step, self.part, arrays)
            self.submitted.append((step, epoch))
            self.stalls[(step, epoch)] = time.perf_counter() - t0
        else:
            info = self.write(step, arrays)
            ok = info is not None
            if info is not None:
                self.report(step, info, epoch, stall=time.perf_counter() - t0)
        self.critical_s += time.perf_counter() - t0
        return ok

    def write(self, step: int, state: Mapping[str, np.ndarray],
              store: PartStore | None = None) -> PartInfo | None:
        """Write ``state`` as this part of ``step`` now (into ``store``, default the rank's); None
        when the write failed (reported)."""
        try:
            info = (store or self.store).write_part(step, self.part, state)
        except CheckpointError as exc:
            self.failed(step, self.env.epoch, exc)
            return None
        self.count(info)
        return info

    def count(self, info: PartInfo) -> None:
        self.write_s += info.seconds
        self.max_part_s = max(self.max_part_s, info.seconds)

    def report(self, step: int, info: PartInfo, epoch: int, stall: float | None = None,
               rows: int | None = None) -> None:
        """Tell the coordinator that ``info`` of checkpoint ``step`` is written, with its embedding
        ``rows`` (default ``rows()``), the training thread's ``stall`` and the total (``stall=None``:
        a background write, whose stall was recorded at the snapshot)."""
        self.parts_sent += 1
        background = stall is None
        stall = self.stalls.pop((step, epoch), 0.0) if stall is None else stall
        total = stall + info.seconds if background else stall
        if rows is None:
            rows = self.on_written(step, epoch) if self.on_written is not None else self.rows()
        self.env.tell_monitor(("part", step, epoch, info.to_dict(),
                               {"rows": rows, "stall_s": stall, "total_s": total}))

    def failed(self, step: int, epoch: int, exc: Exception) -> None:
        """The part of ``step`` could not be written: the event, and a word to the coordinator,
        which abandons the step once every part answered."""
        self.env.event("checkpoint_fail", step, detail=str(exc)[:250])
        self.env.tell_monitor(("failed", step, epoch, {"part": self.part}, {}))

    def poll(self) -> None:
        """Between steps: report the background writes finished since (of the current epoch)."""
        if self.writer is None:
            return
        t0 = time.perf_counter()
        try:
            done = self.writer.poll()
        except CheckpointError as exc:
            failed = self.submitted.pop(0)
            self.stalls.pop(failed, None)
            self.failed(*failed, exc)
            done = []
        for info in done:
            written, epoch = self.submitted.pop(0)
            if epoch != self.env.epoch:
                self.stalls.pop((written, epoch), None)
            self.count(info)
            if epoch == self.env.epoch:
                self.report(written, info, epoch)
        self.critical_s += time.perf_counter() - t0

    def stalled(self, seconds: float) -> None:
        """Training-thread ``seconds`` this rank spent on a checkpoint written beside its parts (cpr's
        partials, written and committed by the server itself): counted in ``critical_s``."""
        self.critical_s += seconds

    def finish(self) -> None:
        """At the end: let the background writes finish and report them."""
        if self.writer is not None:
            self.writer.close()
            self.poll()

    def figures(self) -> dict[str, Any]:
        return {"checkpoint_critical_s": self.critical_s, "checkpoint_write_s": self.write_s,
                "checkpoint_max_part_s": self.max_part_s, "checkpoint_parts_sent": self.parts_sent,
                "checkpoint_writer_cpu_s": self.writer.cpu_s if self.writer is not None else 0.0}


__all__ = ["PART_US_FIELD", "PartStore", "PartWriter"]
