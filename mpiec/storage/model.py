"""The storage model every checkpoint store writes and reads through (no MPI in here).

Owns ``StorageModel`` (per-rank write and read bandwidth, a per-operation latency, an
**aggregate** write bandwidth shared by every rank of the job, cold reads), the named
``PROFILES`` (their sources are in ``docs/checkpoints.md``, "Storage model"), the resolution of
the ``[storage]`` config section into a model (``resolve``; ``mpiec.launch.resolve.storage_model`` adds the
strategy's own write cap), the ``Ledger`` that makes the aggregate budget a real budget shared across
processes.

Invariants:

* a model is a frozen value: every rank resolves the same model from the same config;
* bandwidths are MB/s (10^6 bytes/s), per rank unless named aggregate; 0 means "no cap: the
  real disk's speed"; a model is *emulated* when any of its figures is non-zero;
* the aggregate budget is a reservation ledger: one 8-byte file (``LEDGER``, in the checkpoint
  root) holding the wall-clock time at which the shared channel is next free. A writer takes
  the file's ``fcntl`` lock, reserves ``bytes / aggregate`` seconds starting no earlier than
  now and than the previous reservation's end, writes the new end, unlocks, and sleeps until
  its slot ends. Reservations never overlap, so the bytes all ranks of the job write within
  any period are at most ``aggregate × period`` (+ one chunk). The ledger works across
  processes on one host and, on a file system with POSIX locks and synchronised clocks
  (``time.time``), across hosts;
* the per-rank caps still hold: a writer waits for the later of its own rate's deadline and
  its ledger slot (the slower rule wins); reads are paced by ``read_mb_s`` per rank only;
* latency is one sleep per part operation (writing one part, reading one part);
* ``cold_reads``: a checkpoint file's pages are dropped from the page cache after its fsync
  and again before it is read (``posix_fadvise(POSIX_FADV_DONTNEED)``), so a restore reads
  from the disk, not from memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import math
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LEDGER", "MAX_MB_S", "MAX_LATENCY_MS", "PROFILES", "UNSET", "Ledger", "StorageModel",
           "drop_cache", "reserve_slot", "resolve", "summary_fields"]

#: The ledger's file name in a checkpoint root.
LEDGER = ".storage-ledger"
#: Upper bounds of the ``[storage]`` figures (10 TB/s; a minute per operation).
MAX_MB_S = 1e7
MAX_LATENCY_MS = 60_000.0
#: ``[storage]`` numbers left at this value take the profile's figure.
UNSET = -1.0
#: A "channel free at" further ahead than this is stale (a clock that jumped): ignored.
_STALE_S = 86_400.0


@dataclass(frozen=True)
class StorageModel:
    """What checkpoint storage costs: the figures every part write and read is held to.

    ``write_mb_s`` / ``read_mb_s``: per-rank bandwidth (0: the real disk's); ``latency_s``: per
    part operation; ``aggregate_mb_s``: the write bandwidth all ranks of the job share (0: no
    shared budget); ``cold_reads``: restores read from the disk, not the page cache."""

    name: str = "local"
    write_mb_s: float = 0.0
    read_mb_s: float = 0.0
    latency_s: float = 0.0
    aggregate_mb_s: float = 0.0
    cold_reads: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("write_mb_s", "read_mb_s", "latency_s", "aggregate_mb_s"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"StorageModel.{key} must be a finite number >= 0, not {v!r}")

    @property
    def emulated(self) -> bool:
        """True when any figure slows the real disk down (the storage is emulated)."""
        return any(v > 0 for v in (self.write_mb_s, self.read_mb_s, self.latency_s, self.aggregate_mb_s))

    def with_write_cap(self, mb_s: float) -> StorageModel:
        """This model with a per-rank write cap of ``mb_s`` too (the smaller cap wins; 0: none):
        how the older ``strategy.bandwidth_mb_s`` knob joins the model."""
        if not mb_s > 0:
            return self
        cap = min(self.write_mb_s, mb_s) if self.write_mb_s > 0 else float(mb_s)
        return dataclasses.replace(self, write_mb_s=float(cap))

    def describe(self) -> str:
        """``pfs-node (emulated: write 1000 MB/s per rank, ...)``; ``local (the real disk, cold reads)``."""
        cold = "cold reads" if self.cold_reads else "reads may hit the page cache"
        if not self.emulated:
            return f"{self.name} (the real disk, {cold})"

        def rate(v: float) -> str:
            return f"{v:g} MB/s" if v > 0 else "uncapped"

        return (f"{self.name} (emulated: write {rate(self.write_mb_s)} per rank, read {rate(self.read_mb_s)} "
                f"per rank, aggregate write {rate(self.aggregate_mb_s)}, latency {self.latency_s * 1e3:g} ms "
                f"per part, {cold})")


#: Named profiles. Where each figure comes from: docs/checkpoints.md, "Storage model".
PROFILES: dict[str, StorageModel] = {
    "local": StorageModel(
        "local",
        source="this machine's disk as it is (python -m mpiec.benchmarks.checkpoint_cost measures it)"),
    "pfs-node": StorageModel(
        "pfs-node", write_mb_s=1000.0, read_mb_s=1000.0, latency_s=0.001, aggregate_mb_s=2000.0,
        source="Lustre Operations Manual, table 1-1 (one client 2 GB/s, one OSS 2.0 GB/s in production); "
               "Lustre striping best practices (stripe count 1 by default: a file gets one OST)"),
    "object-store": StorageModel(
        "object-store", write_mb_s=80.0, read_mb_s=80.0, latency_s=0.05, aggregate_mb_s=1250.0,
        source="AWS S3 performance guidelines (small requests: median latency tens of ms; 16+ streams "
               "to fill a 10 Gb/s link, ~80 MB/s each)"),
}


def resolve(settings: Any, legacy_write_mb_s: float = 0.0) -> StorageModel:
    """The model of a ``[storage]`` section (a ``StorageConfig`` or a mapping with its keys):
    the profile's figures, each overridden by an explicit key (any value but ``UNSET``), then
    capped by ``legacy_write_mb_s`` (``strategy.bandwidth_mb_s``) where that is > 0.
    ``ValueError`` for an unknown profile or a bad figure."""
    get: Callable[[str, Any], Any]
    if isinstance(settings, Mapping):
        get = settings.get
    else:
        def get(key: str, default: Any) -> Any:
            return getattr(settings, key, default)
    name = get("profile", "local")
    if name not in PROFILES:
        raise ValueError(f"storage.profile must be one of {', '.join(PROFILES)}, got {name!r}")
    base = PROFILES[name]
    changes: dict[str, Any] = {}
    for key, field, scale in (("write_mb_s", "write_mb_s", 1.0), ("read_mb_s", "read_mb_s", 1.0),
                              ("latency_ms", "latency_s", 1e-3), ("aggregate_mb_s", "aggregate_mb_s", 1.0)):
        v = get(key, UNSET)
        if v is not None and v != UNSET:
            changes[field] = float(v) * scale
    cold = get("cold_reads", None)
    if cold is not None:
        changes["cold_reads"] = bool(cold)
    model = dataclasses.replace(base, **changes) if changes else base
    return model.with_write_cap(float(legacy_write_mb_s or 0.0))


def summary_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """The result file's storage summary attributes, from a run's resolved config (a dict, as the
    result file's ``config`` attribute holds it): profile, figures and ``storage_emulated``."""
    strategy = config.get("strategy") or {}
    params = strategy.get("params") or {} if isinstance(strategy, Mapping) else {}
    legacy = params.get("bandwidth_mb_s", 0.0) if isinstance(params, Mapping) else 0.0
    legacy = legacy if isinstance(legacy, int | float) and not isinstance(legacy, bool) else 0.0
    model = resolve(config.get("storage") or {}, legacy)
    return {"storage_profile": model.name, "storage_emulated": model.emulated,
            "storage_write_mb_s": model.write_mb_s, "storage_read_mb_s": model.read_mb_s,
            "storage_latency_ms": model.latency_s * 1e3, "storage_aggregate_mb_s": model.aggregate_mb_s,
            "storage_cold_reads": model.cold_reads}


# ---- the aggregate budget ---------------------------------------------------------------------

def reserve_slot(free_at: float, now: float, nbytes: int, rate: float) -> tuple[float, float]:
    """``(start, end)`` of a transfer of ``nbytes`` at ``rate`` bytes/s on a channel next free at
    ``free_at``: it starts no earlier than ``now`` nor than ``free_at`` (a ``free_at`` more than a
    day ahead is stale and ignored)."""
    if free_at - now > _STALE_S:
        free_at = now
    start = max(now, free_at)
    return start, start + nbytes / rate


_FILE_LOCKS: dict[str, threading.RLock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: Path) -> threading.RLock:
    """The one thread lock of ``path`` in this process (re-entrant: a ledger finalized by the garbage
    collector while this thread holds the lock closes without waiting for itself)."""
    key = os.path.realpath(path)
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(key, threading.RLock())


class Ledger:
    """The job's shared write channel: a reservation ledger in the file ``path``.

    ``transfer(n)`` reserves ``n / rate`` seconds of the channel (``reserve``) and sleeps until the
    reservation ends. Safe across processes (an ``fcntl`` lock on the file) and across the threads
    of one process (one re-entrant thread lock per file, shared by every ``Ledger`` of that file in
    the process: ``fcntl`` locks are per process, so two ledgers of one file — a store and a partial
    store under another root, written from two threads — would not exclude each other). ``clock``
    and ``sleep`` are injectable for tests; ``clock`` must be the same for every process that shares
    the file (wall-clock time by default)."""

    def __init__(self, path: str | Path, rate_bytes_s: float, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        if not rate_bytes_s > 0:
            raise ValueError(f"Ledger: rate must be > 0 bytes/s, not {rate_bytes_s!r}")
        self.path = Path(path)
        self.rate = float(rate_bytes_s)
        self.clock = clock
        self.sleep = sleep
        self._fd: int | None = None
        self._lock = _file_lock(self.path)

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def reserve(self, nbytes: int) -> tuple[float, float]:
        """Reserve the channel for ``nbytes``: ``(start, end)`` in ``clock`` time."""
        with self._lock:
            fd = self._open()
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(fd, 8, 0)
                free_at = struct.unpack("<d", raw)[0] if len(raw) == 8 else 0.0
                if not math.isfinite(free_at):
                    free_at = 0.0
                start, end = reserve_slot(free_at, self.clock(), nbytes, self.rate)
                os.pwrite(fd, struct.pack("<d", end), 0)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        return start, end

    def wait_until(self, end: float) -> None:
        delay = end - self.clock()
        if delay > 0:
            self.sleep(delay)

    def transfer(self, nbytes: int) -> None:
        """Reserve ``nbytes`` and sleep until the reservation ends."""
        self.wait_until(self.reserve(nbytes)[1])

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def drop_cache(fd: int) -> None:
    """Drop an open file's clean pages from the page cache (best effort: a file system or OS
    without ``posix_fadvise`` keeps them)."""
    with contextlib.suppress(AttributeError, OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
