"""A trainer's update log: the row gradients it pushed, by step, in memory up to a bound and
spilled to local files beyond it (no MPI in here).

Owns the records a trainer keeps for a replay (``mpiec.strategies.replay``): one per step,
``(slots, counts, grads)`` as the step's push sent them (every server's rows; a replay sends
the lost servers' share). It answers ``step in log`` and ``log[step]`` like a mapping, reading
a spilled record back (checksum verified) when it is not in memory.

Invariants:

* the records held in memory never take more than ``limit_bytes`` once ``append`` returns:
  when a new record would pass the bound, the *oldest* records in memory are written to the
  current spill file (format: ``spill``) until the rest fits (a record larger than the bound
  goes to disk at once), so memory holds the newest steps, the files the older ones;
* ``trim(c)`` drops every record of a step ``<= c`` (the steps a committed checkpoint covers)
  and starts a new spill file for what spills next; a file whose records are all dropped is
  deleted at once, so the files hold at most what the memory bound pushed out since the
  oldest record kept;
* ``drop_after(s)`` drops the records of steps ``> s`` (steps that will be executed again
  after a recovery); a record appended again for a step replaces the old one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mpiec.strategies.log.spill import SpillCorrupt, read_record, record_parts

Record = tuple[np.ndarray, np.ndarray, np.ndarray]  # slots, counts, grads


@dataclass
class Segment:
    """One spill file and the steps whose live records it holds."""

    path: Path
    live: set[int] = field(default_factory=set)
    size: int = 0


def record_bytes(rec: Record) -> int:
    return sum(int(a.nbytes) for a in rec)


class LogStore:
    """The log of one trainer: ``append`` after each push, ``trim`` at each committed checkpoint."""

    def __init__(self, limit_bytes: int, spill_dir: Path) -> None:
        self.limit = max(int(limit_bytes), 0)
        self.dir = Path(spill_dir)
        self.memory: dict[int, Record] = {}  # step -> record, in append order (oldest first)
        self.spilled: dict[int, tuple[Segment, int]] = {}  # step -> (file, offset)
        self.segments: list[Segment] = []
        self.current: Segment | None = None  # the file spills are appended to
        self._seq = 0
        # figures
        self.memory_bytes = 0
        self.peak_memory_bytes = 0
        self.spilled_bytes = 0  # bytes written to spill files
        self.spilled_records = 0
        self.read_bytes = 0  # spilled bytes read back (replays, checks)
        self.spill_s = 0.0  # time spent writing spill records

    # -- mapping protocol (what a replay reads) -------------------------------------------
    def __contains__(self, step: object) -> bool:
        return step in self.memory or step in self.spilled

    def __getitem__(self, step: int) -> Record:
        rec = self.memory.get(step)
        if rec is not None:
            return rec
        if step not in self.spilled:
            raise KeyError(step)
        seg, offset = self.spilled[step]
        rec = read_record(seg.path, offset, step)
        self.read_bytes += record_bytes(rec)
        return rec

    def __len__(self) -> int:
        return len(self.memory) + len(self.spilled)

    def __iter__(self) -> Iterator[int]:
        return iter(self.steps())

    def steps(self) -> list[int]:
        return sorted(set(self.memory) | set(self.spilled))

    def verify(self, steps: Sequence[int]) -> str:
        """"" if every record of ``steps`` is held and readable, else what is wrong (the first
        missing or corrupted record, named)."""
        for s in steps:
            if s not in self:
                return f"the update log has no record of step {s}"
            if s in self.spilled:
                try:
                    self[s]
                except SpillCorrupt as exc:
                    return f"corrupted update log: {exc}"
        return ""

    # -- writing ---------------------------------------------------------------------------
    def append(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        """Keep the push of ``step`` (the arrays are kept, not copied: the caller's are fresh)."""
        self._forget(step)
        rec = (slots, counts, grads)
        self.memory[step] = rec
        self.memory_bytes += record_bytes(rec)
        while self.memory_bytes > self.limit and self.memory:
            oldest = next(iter(self.memory))
            self._spill(oldest, self.memory.pop(oldest))
        self.peak_memory_bytes = max(self.peak_memory_bytes, self.memory_bytes)

    def _spill(self, step: int, rec: Record) -> None:
        t0 = time.perf_counter()
        self.memory_bytes -= record_bytes(rec)
        if self.current is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.current = Segment(self.dir / f"log-{self._seq:06d}.spill")
            self._seq += 1
            self.segments.append(self.current)
        head, views = record_parts(step, *rec)  # the arrays' own buffers: no joined copy
        size = len(head) + sum(v.nbytes for v in views)
        seg = self.current
        with open(seg.path, "ab") as f:
            f.write(head)
            for view in views:
                f.write(view)
        self.spilled[step] = (seg, seg.size)
        seg.live.add(step)
        seg.size += size
        self.spilled_bytes += size
        self.spilled_records += 1
        self.spill_s += time.perf_counter() - t0

    # -- dropping ----------------------------------------------------------------------------
    def _forget(self, step: int) -> None:
        rec = self.memory.pop(step, None)
        if rec is not None:
            self.memory_bytes -= record_bytes(rec)
        where = self.spilled.pop(step, None)
        if where is not None:
            where[0].live.discard(step)

    def _collect(self) -> None:
        """Delete the spill files none of whose records is kept any more."""
        for seg in [s for s in self.segments if not s.live]:
            self.segments.remove(seg)
            if seg is self.current:
                self.current = None
            try:
                os.unlink(seg.path)
            except FileNotFoundError:
                pass

    def trim(self, upto: int) -> None:
        """Drop the records of steps ``<= upto``; what spills next goes to a new file."""
        for s in [s for s in self.steps() if s <= upto]:
            self._forget(s)
        self.current = None
        self._collect()

    def drop_after(self, step: int) -> None:
        """Drop the records of steps ``> step``."""
        for s in [s for s in self.steps() if s > step]:
            self._forget(s)
        self._collect()

    def close(self) -> None:
        """Drop everything and delete the spill files (and the directory, if empty)."""
        self.drop_after(-(2**62))
        self.current = None
        self._collect()
        try:
            self.dir.rmdir()
        except OSError:
            pass

    def disk_bytes(self) -> int:
        """Bytes of the spill files on disk now."""
        return sum(s.size for s in self.segments)
