"""How long a simulated job's checkpoint writes and reads take on its storage.

Owns the storage side of ``mpiec simulate``: the runtime's ``mpiec.storage.model.StorageModel`` (the same
named profiles and figures every checkpoint store of a measured run is paced by), applied to a
job of many ranks that share the storage:

* a part of ``b`` bytes written or read by each of ``n`` ranks at once takes
  ``latency + max(b / per_rank, n · b / aggregate)``: every rank at its own bandwidth, all of them
  within the job's aggregate (``aggregate_mb_s``; the runtime's ledger shares writes the same way);
* a full checkpoint writes every server's part at once (``n = servers``), a rollback reads them all at
  once; a partial recovery (``cpr``, ``log``) reads only the lost shards' parts, so it gets the
  per-rank bandwidth, not a share of the aggregate: the asymmetry partial recovery lives on;
* the aggregate also caps reads here (a parallel file system's aggregate is shared both ways; the
  runtime paces its reads by the per-rank figure only, which is what a one-host run can show);
* a figure of 0 is "no cap" (``StorageModel``'s convention); the ``local`` profile, all zeros, is
  no model: the calibrated write and read of measured runs are used instead (``None`` here).

Invariants: times are finite and >= 0; more ranks sharing the aggregate never take less time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mpiec.errors import MpiecError
from mpiec.storage.model import MAX_LATENCY_MS, MAX_MB_S, PROFILES, StorageModel

__all__ = ["storage_model", "transfer_s"]


def transfer_s(model: StorageModel, part_bytes: float, ranks: int, write: bool = True,
               extra_bytes: float = 0.0, aggregate: bool = True) -> float:
    """Seconds for ``ranks`` ranks to each write (or read) a part of ``part_bytes`` at once, and one
    more rank a part of ``extra_bytes`` (a checkpoint's dense replica, written by one trainer);
    ``aggregate``: the job's aggregate caps reads too (writes always)."""
    per_rank = model.write_mb_s if write else model.read_mb_s
    t = 0.0
    if per_rank > 0:
        t = max(part_bytes, extra_bytes) / (per_rank * 1e6)
    if model.aggregate_mb_s > 0 and (write or aggregate):
        t = max(t, (max(1, ranks) * part_bytes + extra_bytes) / (model.aggregate_mb_s * 1e6))
    return model.latency_s + t


def storage_model(profile: str | None, aggregate_gbps: float | None = None, node_gbps: float | None = None,
                  latency_ms: float | None = None) -> StorageModel | None:
    """The storage of ``mpiec simulate``'s flags: a named profile (``mpiec.storage.model.PROFILES``)
    with its figures overridden (GB/s in, the model's MB/s out); None for ``calibrated`` (use the
    measured writes and reads). ``MpiecError`` naming the flag for a figure out of range."""
    if profile in (None, "calibrated"):
        if any(x is not None for x in (aggregate_gbps, node_gbps, latency_ms)):
            profile = "pfs-node"
        else:
            return None
    if profile not in PROFILES:
        raise MpiecError(f"--storage-profile must be calibrated or one of {', '.join(PROFILES)}, "
                         f"got {profile!r}")
    base = PROFILES[profile]
    changes: dict[str, Any] = {}
    for flag, value, keys, scale, high in (
            ("--storage-gbps", aggregate_gbps, ("aggregate_mb_s",), 1e3, MAX_MB_S),
            ("--node-storage-gbps", node_gbps, ("write_mb_s", "read_mb_s"), 1e3, MAX_MB_S),
            ("--storage-latency-ms", latency_ms, ("latency_s",), 1e-3, MAX_LATENCY_MS * 1e-3)):
        if value is None:
            continue
        if not (math.isfinite(value) and value >= 0 and value * scale <= high):
            raise MpiecError(f"{flag} must be a number >= 0 and <= {high / scale:g}, got {value:g}")
        for key in keys:
            changes[key] = value * scale
    model = dataclasses.replace(base, **changes)
    if not model.emulated:
        raise MpiecError(f"storage profile {profile} with these figures sets no bandwidth or latency: "
                         "use --storage-profile calibrated for the measured writes")
    return model
