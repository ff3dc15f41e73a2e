"""The on-disk format of a trainer's spilled update-log records (no MPI in here).

A spill file is a sequence of records, appended; nothing else is in the file. A record is
one training step's push of one trainer, exactly as ``after_push`` gave it::

    header (52 bytes, little-endian, struct "<4sHHqqqqqI")
        magic     4s   b"MLOG"
        version   u16  1
        flags     u16  0
        step      i64  the training step
        rows      i64  gradient rows pushed (all servers)
        ranks     i64  entries of ``counts`` (the ``data`` communicator's size)
        dim       i64  floats per gradient row
        payload   i64  payload bytes = 8·ranks + 8·rows + 4·rows·dim
        crc32     u32  zlib.crc32 of the header's first 48 bytes, then of the payload
    payload
        counts    i64[ranks]      rows pushed to each data rank
        slots     i64[rows]       local slot of each row on its server, grouped by server
        grads     f32[rows, dim]  the row gradients

The checksum covers the header fields and the payload, so a flipped bit anywhere in a record,
a torn record or a record read at a wrong offset is detected; ``read_record`` then raises
``SpillCorrupt`` naming the file, the offset and the step it expected. CRC-32 as the checkpoint
store (``mpiec.storage.checkpoint``): it detects accidental damage, not tampering. Records are not
fsynced: a log is only ever read by the process that wrote it (a trainer that dies loses its
log whatever is on disk), so the page cache is as good as the disk here.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

MAGIC = b"MLOG"
VERSION = 1
HEADER = struct.Struct("<4sHHqqqqqI")
_CRC_AT = HEADER.size - 4  # the checksum is the header's last field


class SpillCorrupt(Exception):
    """A spilled record is unreadable or its checksum does not match."""


def record_parts(step: int, slots: np.ndarray, counts: np.ndarray,
                 grads: np.ndarray) -> tuple[bytes, list[memoryview]]:
    """One record as its header (checksum included) and its payload's three buffers, views of
    the arrays (no copy when they are contiguous little-endian ``i8``/``f4`` already, as a push's
    are): written one after the other they are ``encode_record``'s bytes."""
    slots = np.ascontiguousarray(slots, dtype="<i8")
    counts = np.ascontiguousarray(counts, dtype="<i8")
    grads = np.ascontiguousarray(grads, dtype="<f4")
    rows, dim = (grads.shape[0], grads.shape[1]) if grads.ndim == 2 else (0, 0)
    if slots.shape != (rows,):
        raise ValueError(f"step {step}: {slots.shape[0]} slots for {rows} gradient rows")
    views = [a.reshape(-1).view(np.uint8).data for a in (counts, slots, grads)]  # flat byte views
    nbytes = sum(v.nbytes for v in views)
    head = HEADER.pack(MAGIC, VERSION, 0, int(step), rows, counts.size, dim, nbytes, 0)[:_CRC_AT]
    crc = zlib.crc32(head)
    for v in views:  # the CRC of the concatenation, computed part by part
        crc = zlib.crc32(v, crc)
    return head + struct.pack("<I", crc), views


def encode_record(step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> bytes:
    """The bytes of one record (header and payload)."""
    head, views = record_parts(step, slots, counts, grads)
    return b"".join([head, *views])


def read_record(path: Path, offset: int, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slots, counts, grads) of the record of ``step`` at ``offset`` of ``path``: views of one
    fresh buffer the payload is read into (no copy after the read)."""
    where = f"spill file {path}, record at byte {offset} (step {step})"
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            head = f.read(HEADER.size)
            if len(head) < HEADER.size:
                raise SpillCorrupt(f"{where}: truncated header ({len(head)} of {HEADER.size} bytes)")
            magic, version, _flags, s, rows, ranks, dim, nbytes, crc = HEADER.unpack(head)
            if magic != MAGIC or version != VERSION:
                raise SpillCorrupt(f"{where}: not a log record (magic {magic!r}, version {version})")
            if min(rows, ranks, dim, nbytes) < 0 or nbytes != 8 * ranks + 8 * rows + 4 * rows * dim:
                raise SpillCorrupt(f"{where}: inconsistent header (rows {rows}, ranks {ranks}, dim {dim}, "
                                   f"payload {nbytes} bytes)")
            payload = np.empty(nbytes, dtype=np.uint8)  # numpy's allocation: aligned for the views
            got_bytes = 0
            while got_bytes < nbytes:
                k = f.readinto(payload.data[got_bytes:])
                if not k:
                    break
                got_bytes += k
    except OSError as exc:
        raise SpillCorrupt(f"{where}: {exc.strerror or exc}") from None
    if got_bytes < nbytes:
        raise SpillCorrupt(f"{where}: truncated payload ({got_bytes} of {nbytes} bytes)")
    got = zlib.crc32(payload.data, zlib.crc32(head[:_CRC_AT]))
    if got != crc:
        raise SpillCorrupt(f"{where}: checksum mismatch (crc32:{got:08x}, record says crc32:{crc:08x})")
    if s != step:
        raise SpillCorrupt(f"{where}: holds step {s}")
    counts = payload[:8 * ranks].view("<i8").astype(np.int64, copy=False)
    slots = payload[8 * ranks:8 * (ranks + rows)].view("<i8").astype(np.int64, copy=False)
    grads = payload[8 * (ranks + rows):].view("<f4").astype(np.float32, copy=False).reshape(rows, dim)
    return slots, counts, grads
