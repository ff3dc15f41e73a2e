"""The checkpoint store every checkpointing strategy uses (no MPI in here).

One checkpoint is one training step. It holds one *part* per rank, named by the
caller (``server-1``, ``trainer``, ``parity-0``), each part a dict of
``name -> numpy array``. On disk it is plain ``.npy`` files plus a JSON
manifest, readable with numpy alone (``docs/checkpoints.md``)::

    ROOT/step-000000025/server-1.table.npy
    ROOT/step-000000025/server-1.global_rows.npy
    ROOT/step-000000025/trainer.params.npy
    ROOT/step-000000025/MANIFEST.json      # written last

Invariants:

* A checkpoint is **complete or absent**: complete means ``MANIFEST.json`` is
  present and valid and every file it lists exists with the listed size and
  checksum. A step directory without a manifest is an unfinished (or
  abandoned) checkpoint and is never offered for a restore.
* Every ``.npy`` file is written to a temporary name in the step directory,
  fsynced and renamed (``os.replace``) into place, so a file under its final
  name is always whole.
* The manifest is committed only after every part is written and the step
  directory fsynced; it too goes through a temporary name, fsync and rename,
  followed by an fsync of the step directory and of the root.
* A committed step is never rewritten (``write_part`` refuses it).
* Reads check each file's size against the manifest and, by default, its
  checksum: a missing, truncated or corrupted file raises ``CheckpointError``
  naming the file.
* A failed write (a full disk, ``ENOSPC``; a quota; an I/O error) raises ``CheckpointError``
  naming the file and the error, removes what the failed part had written (and the step
  directory when that leaves it empty), and prints a warning line on stderr (rate-limited per
  process): a rank whose checkpoint failed says so on the console, not only in the result file.
  The checkpoint is then never committed, so it stays absent for every rank. A failed commit
  removes the whole step directory (every part is in when a commit runs): the space a failed
  checkpoint took is given back for the next one.
* Every part write and read goes through the store's storage model (``mpiec.storage.model``): per-rank
  bandwidth, a latency per part operation, the job's aggregate write budget (a ledger file in
  the root, ``.storage-ledger``, which is not a step directory and never listed) and cold reads.
  A store given no model (``PLAIN``) uses the real disk as it is.

Checksum: CRC-32 (``zlib.crc32``) of the whole ``.npy`` file (header and
data), written as ``"crc32:%08x"``. It is computed while the file is written,
in 8 MiB chunks. Measured on this machine for a 256 MiB float32 array: crc32
2.05 GB/s, sha256 1.47 GB/s (OpenSSL with SHA-NI), blake2b 0.56 GB/s; so
crc32. Both ``zlib.crc32`` (buffers > 5 KiB) and unbuffered
``FileIO.write(memoryview)`` release the GIL, so a ``BackgroundWriter`` thread
leaves the training thread almost all of the interpreter. CRC-32 detects
accidental damage (flipped bits, torn or zeroed blocks), not tampering.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import queue
import re
import shutil
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mpiec.errors import CheckpointError  # an MpiecError: the CLI prints it as one line
from mpiec.storage.model import LEDGER, Ledger, StorageModel, drop_cache

__all__ = [
    "FORMAT", "VERSION", "MANIFEST", "PLAIN", "WARN_EVERY_S", "CheckpointError", "PartInfo",
    "CheckpointStore", "BackgroundWriter", "check_unused", "find_checkpoint_root", "resolve_checkpoint",
    "step_dir_name",
]

FORMAT = "mpiec-checkpoint"
VERSION = 1
MANIFEST = "MANIFEST.json"
CHUNK = 8 << 20  # bytes per write/read/checksum call

_STEP_RE = re.compile(r"^step-(\d{9,})$")
_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")  # no dots: "<part>.<name>.npy" stays unambiguous
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def step_dir_name(step: int) -> str:
    """The directory name of ``step``: ``step-000000025``."""
    return f"step-{int(step):09d}"


def _check_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
        raise ValueError(f"checkpoint step must be an integer >= 0, not {step!r}")
    return int(step)


def _check_part(part: str) -> str:
    if not isinstance(part, str) or not _PART_RE.match(part):
        raise ValueError(f"checkpoint part name {part!r}: use letters, digits, '_' and '-' (no dots)")
    return part


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"checkpoint array name {name!r}: use letters, digits, '_', '-' and '.'")
    return name


def _why(exc: BaseException) -> str:
    """An OSError's reason and its errno name ("No space left on device [ENOSPC]"): the name is
    what users search for and what tells a full disk from a quota (EDQUOT) or an I/O error."""
    text = getattr(exc, "strerror", None) or str(exc)
    code = errno.errorcode.get(getattr(exc, "errno", None) or 0)
    return f"{text} [{code}]" if code and code not in text else text


def _size_problem(path: Path, expected: int, source: str) -> str:
    """Why ``path`` is not the ``expected`` bytes that ``source`` lists ("" if it is)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"missing (listed in the {source})"
    if size == expected:
        return ""
    what = "truncated" if size < expected else "has the wrong size"
    return f"{what} ({size} bytes, {source} says {expected})"


def _write_failed(tmp: Path, final: Path, exc: OSError) -> CheckpointError:
    """Remove a temporary file that will never be renamed; the error to raise."""
    try:
        tmp.unlink()
    except OSError:
        pass
    return CheckpointError(f"{final}: cannot write ({_why(exc)})")


def _write_some(f: io.RawIOBase, buf: memoryview) -> int:
    """One raw write: the single place bytes go to a checkpoint file (tests replace it to
    emulate a full disk without mounting one)."""
    return f.write(buf)


def _write_all(f: io.RawIOBase, buf: memoryview) -> None:
    while buf:  # a raw write may be partial
        n = _write_some(f, buf)
        if not n:  # no progress and no error: looping would spin for ever
            raise OSError(errno.EIO, "the file system accepted no bytes")
        buf = buf[n:]


def _open_in(d: Path, path: Path, attempts: int = 8) -> io.FileIO:
    """``path`` (in directory ``d``) opened for writing, unbuffered. Another rank's failed part of
    the same step removes the directory when it is empty (``_rmdir_if_empty``), also between a
    re-creation here and the open (seen once: a trainer's part failed with ENOENT on a full disk
    where the real cause was ENOSPC); so re-create and retry a few times."""
    for attempt in range(attempts):
        try:
            return open(path, "wb", buffering=0)
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
            d.mkdir(parents=True, exist_ok=True)
    raise AssertionError("unreachable")


def _rmdir_if_empty(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:  # not empty (another part of the step is there) or already gone
        pass


#: At most one warning line per this many seconds per process (the first failure is always shown):
#: a full disk fails every checkpoint, and a long run must not bury its console in them.
WARN_EVERY_S = 60.0


class _FailureWarnings:
    """The console side of failed checkpoint writes, for the whole process (a rank may hold
    several stores, e.g. ``cpr``'s partial store, and a background writer thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = -math.inf
        self.hidden = 0
        self.emit: Callable[[str], None] = self._stderr

    @staticmethod
    def _stderr(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def __call__(self, step: int, exc: BaseException) -> None:
        with self.lock:
            now = time.monotonic()
            if now - self.last < WARN_EVERY_S:
                self.hidden += 1
                return
            hidden, self.hidden, self.last = self.hidden, 0, now
        more = f" ({hidden} more failed checkpoint writes in this process not shown)" if hidden else ""
        self.emit(f"[mpiec] warning: checkpoint of step {step} failed, it will not be committed: "
                  f"{exc}{more}")


warn_failure = _FailureWarnings()


def _fsync_dir(path: Path) -> None:
    """fsync a directory so the renames in it are durable (tolerates filesystems that refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EACCES):
            raise
    finally:
        os.close(fd)


def _bytes_view(arr: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array (any non-object dtype, any shape incl. empty and 0-d)."""
    return arr.reshape(-1).view(np.uint8).data


def _npy_header(arr: np.ndarray) -> bytes:
    fmt = np.lib.format
    d = fmt.header_data_from_array_1_0(arr)
    buf = io.BytesIO()
    try:
        fmt.write_array_header_1_0(buf, d)
    except ValueError:  # header over 64 KiB (a huge structured dtype)
        buf = io.BytesIO()
        fmt.write_array_header_2_0(buf, d)
    return buf.getvalue()


def _descr(dtype: np.dtype) -> Any:
    """The dtype as the ``.npy`` header spells it, in its JSON form (a string for plain dtypes)."""
    return json.loads(json.dumps(np.lib.format.dtype_to_descr(dtype)))


class _Pacer:
    """Sleeps so that bytes go out no faster than ``rate`` bytes/s (0: no cap) and, with a
    ``ledger``, within the job's shared aggregate budget: each chunk waits for the later of its
    own rate's deadline and the end of its ledger slot (the slower rule wins)."""

    def __init__(self, rate: float, ledger: Ledger | None = None):
        self.rate = rate
        self.ledger = ledger
        self.start = time.perf_counter()
        self.sent = 0

    def chunk(self) -> int:
        # ~20 ms of data per chunk when capped, so the rate is smooth at the scale of a step
        rates = [r for r in (self.rate, self.ledger.rate if self.ledger else 0.0) if r > 0]
        return CHUNK if not rates else int(min(CHUNK, max(64 << 10, min(rates) * 0.02)))

    def sent_bytes(self, n: int) -> None:
        self.sent += n
        delay = self.start + self.sent / self.rate - time.perf_counter() if self.rate > 0 else 0.0
        if self.ledger is not None:
            end = self.ledger.reserve(n)[1]
            delay = max(delay, end - self.ledger.clock())
        if delay > 0:
            time.sleep(delay)


@dataclass
class PartInfo:
    """What ``write_part`` wrote: the part's entry in the manifest. Strategies send ``to_dict()``
    to the coordinator rank, which rebuilds it with ``from_dict`` and commits."""

    part: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    bytes: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "files": {k: dict(v) for k, v in self.files.items()},
                "bytes": int(self.bytes), "seconds": float(self.seconds)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PartInfo:
        try:
            info = cls(part=str(d["part"]), files={str(k): dict(v) for k, v in d["files"].items()},
                       bytes=int(d["bytes"]), seconds=float(d["seconds"]))
            for name, entry in info.files.items():
                _check_file_entry(name, entry)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"malformed checkpoint part info ({exc!r})") from None
        return info

    def manifest_entry(self) -> dict[str, Any]:
        d = self.to_dict()
        del d["part"]
        return d


def _check_file_entry(name: str, entry: Mapping[str, Any]) -> None:
    if not isinstance(entry.get("file"), str) or "/" in entry["file"] or entry["file"].startswith("."):
        raise ValueError(f"array {name!r}: bad file name {entry.get('file')!r}")
    if not isinstance(entry.get("bytes"), int) or entry["bytes"] < 0:
        raise ValueError(f"array {name!r}: bad byte count {entry.get('bytes')!r}")
    if not isinstance(entry.get("checksum"), str) or not entry["checksum"].startswith("crc32:"):
        raise ValueError(f"array {name!r}: bad checksum {entry.get('checksum')!r}")
    if not isinstance(entry.get("shape"), list):
        raise ValueError(f"array {name!r}: bad shape {entry.get('shape')!r}")


#: The storage of a store given no model: the real disk, page cache allowed (tools, tests).
PLAIN = StorageModel("plain", cold_reads=False, source="no model: the real disk, page cache allowed")


class CheckpointStore:
    """Checkpoints under ``root``, one directory per step.

    ``storage`` (``mpiec.storage.model.StorageModel``; default ``PLAIN``) is what every part write and
    read is held to: per-rank write and read bandwidth, a latency per part operation, the job's
    aggregate write budget (a ledger shared by every store of the job: ``ledger``, by default
    ``ROOT/.storage-ledger``; a store under another root of the same job passes the main one's)
    and cold reads. ``bandwidth_mb_s > 0`` (the older knob) caps the per-rank write rate too.
    Caps are applied by writing in small chunks and sleeping: an *emulation* of slower remote
    storage on top of the real disk. ``warn=False`` keeps failed writes off stderr (the
    ``CheckpointError`` is raised either way).
    """

    def __init__(self, root: str | Path, bandwidth_mb_s: float = 0.0, warn: bool = True,
                 storage: StorageModel | None = None, ledger: str | Path | None = None):
        if not bandwidth_mb_s >= 0:
            raise ValueError(f"bandwidth_mb_s must be >= 0, not {bandwidth_mb_s!r}")
        self.root = Path(root)
        self.bandwidth_mb_s = float(bandwidth_mb_s)
        self.warn = bool(warn)
        self.storage = storage or PLAIN  # as given: a store of the same job under another root shares it
        self.model = self.storage.with_write_cap(self.bandwidth_mb_s)  # what this store applies
        self.ledger_path = Path(ledger) if ledger is not None else self.root / LEDGER
        self._ledger = (Ledger(self.ledger_path, self.model.aggregate_mb_s * 1e6)
                        if self.model.aggregate_mb_s > 0 else None)
        self.read_s = 0.0  # wall seconds spent in read_part (the storage's share of a restore)

    @property
    def emulated_bandwidth(self) -> bool:
        """True when the storage is emulated (a bandwidth cap, a latency or an aggregate budget)."""
        return self.model.emulated

    def __repr__(self) -> str:
        cap = f", bandwidth_mb_s={self.bandwidth_mb_s:g}" if self.bandwidth_mb_s > 0 else ""
        model = f", storage={self.storage.name!r}" if self.storage is not PLAIN else ""
        return f"CheckpointStore({str(self.root)!r}{cap}{model})"

    def _latency(self) -> None:
        if self.model.latency_s > 0:
            time.sleep(self.model.latency_s)

    def step_dir(self, step: int) -> Path:
        return self.root / step_dir_name(_check_step(step))

    def _failed(self, step: int, exc: CheckpointError) -> CheckpointError:
        if self.warn:
            warn_failure(step, exc)
        return exc

    # ---- writing -----------------------------------------------------------------------------

    def write_part(self, step: int, part: str, arrays: Mapping[str, np.ndarray]) -> PartInfo:
        """Write one rank's part of checkpoint ``step`` (blocking) and return its manifest entry.

        Each array goes to a temporary file in the step directory, checksummed while written,
        fsynced and renamed to ``<part>.<name>.npy``; the step directory is fsynced at the end.
        A failure (``CheckpointError``) removes the files this call wrote, and the step directory
        when nothing else is in it, and warns on stderr.
        """
        step = _check_step(step)
        _check_part(part)
        items = [(_check_name(name), np.asarray(arr)) for name, arr in arrays.items()]
        for name, arr in items:
            if arr.dtype.hasobject:
                raise TypeError(f"checkpoint array {name!r} has an object dtype; store numeric arrays")
        t0 = time.perf_counter()
        d = self.step_dir(step)
        if (d / MANIFEST).exists():
            raise CheckpointError(f"{d} is already a committed checkpoint; it is never rewritten")
        self._latency()  # one operation per part
        try:
            created = not d.is_dir()
            d.mkdir(parents=True, exist_ok=True)
            if created:
                _fsync_dir(self.root)
        except OSError as exc:
            raise self._failed(step, CheckpointError(
                f"{d}: cannot create the checkpoint directory ({_why(exc)})")) from None
        pacer = _Pacer(self.model.write_mb_s * 1e6, self._ledger)
        files: dict[str, dict[str, Any]] = {}
        try:
            for name, arr in items:
                files[name] = self._write_npy(d, f"{part}.{name}.npy", arr, pacer, self.model.cold_reads)
            try:
                _fsync_dir(d)
            except OSError as exc:
                raise CheckpointError(f"{d}: cannot fsync the checkpoint directory ({_why(exc)})") from None
        except CheckpointError as exc:
            # Whole files of a part that failed are never committed: they would only hold the space
            # (on a full disk, the space the next checkpoint needs).
            for entry in files.values():
                (d / entry["file"]).unlink(missing_ok=True)
            _rmdir_if_empty(d)
            raise self._failed(step, exc) from None
        return PartInfo(part=part, files=files, bytes=sum(f["bytes"] for f in files.values()),
                        seconds=time.perf_counter() - t0)

    @staticmethod
    def _write_npy(d: Path, fname: str, arr: np.ndarray, pacer: _Pacer, cold: bool = False) -> dict[str, Any]:
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        header = _npy_header(arr)
        data = _bytes_view(arr)
        final = d / fname
        tmp = d / f".{fname}.tmp-{os.getpid()}-{threading.get_ident()}"
        step = pacer.chunk()
        crc = 0
        try:
            f = _open_in(d, tmp)
            with f:
                for buf in (memoryview(header), data):
                    for i in range(0, len(buf), step):
                        chunk = buf[i:i + step]
                        crc = zlib.crc32(chunk, crc)
                        _write_all(f, chunk)
                        pacer.sent_bytes(min(step, len(buf) - i))
                os.fsync(f.fileno())
                if cold:  # clean after the fsync: a restore must read the disk, not memory
                    drop_cache(f.fileno())
            os.replace(tmp, final)
        except OSError as exc:
            raise _write_failed(tmp, final, exc) from None
        return {"file": fname, "bytes": len(header) + len(data), "dtype": _descr(arr.dtype),
                "shape": list(arr.shape), "checksum": f"crc32:{crc:08x}"}

    def commit(self, step: int, parts: Mapping[str, PartInfo] | Iterable[PartInfo],
               meta: Mapping[str, Any] | None = None) -> Path:
        """Make checkpoint ``step`` complete: check every listed file exists with its size (a stat,
        no re-read), then write ``MANIFEST.json`` atomically. Returns the manifest's path.

        A manifest that cannot be written (``CheckpointError``, with a warning on stderr) leaves the
        step uncommitted and removes its directory: every part is in when a commit runs, so nothing
        writes there any more, and on a full disk its space is what the next checkpoint needs. Once
        the manifest is renamed into place the step is committed (every rank can see it); a failed
        fsync of the directories after that is only warned about, as it cannot be undone safely."""
        step = _check_step(step)
        d = self.step_dir(step)
        infos: dict[str, PartInfo] = {}
        items = parts.items() if isinstance(parts, Mapping) else ((None, p) for p in parts)
        for key, info in items:
            if not isinstance(info, PartInfo):
                info = PartInfo.from_dict(info)
            if key is not None and key != info.part:
                raise ValueError(f"commit: part {info.part!r} filed under key {key!r}")
            if info.part in infos:
                raise ValueError(f"commit: part {info.part!r} given twice")
            infos[info.part] = info
        if not infos:
            raise ValueError(f"commit of step {step}: no parts")
        if (d / MANIFEST).exists():
            raise CheckpointError(f"{d} is already a committed checkpoint")
        for info in infos.values():
            for entry in info.files.values():
                path = d / entry["file"]
                problem = _size_problem(path, entry["bytes"], "the part info")
                if problem:
                    raise CheckpointError(f"{path}: {problem}; cannot commit step {step}")
        manifest = {"format": FORMAT, "version": VERSION, "step": step, "meta": dict(meta or {}),
                    "parts": {name: infos[name].manifest_entry() for name in sorted(infos)}}
        try:
            text = json.dumps(manifest, indent=1, allow_nan=False) + "\n"
        except (TypeError, ValueError) as exc:
            raise TypeError(f"commit of step {step}: meta is not JSON-serialisable ({exc})") from None
        final = d / MANIFEST
        tmp = d / f".{MANIFEST}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            _fsync_dir(d)  # every part's rename is durable before the manifest can be
            with open(tmp, "wb", buffering=0) as f:
                _write_all(f, memoryview(text.encode()))
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except OSError as exc:
            error = _write_failed(tmp, final, exc)
            self.abandon(step)
            raise self._failed(step, error) from None
        try:
            _fsync_dir(d)
            _fsync_dir(self.root)
        except OSError as exc:
            # Readers already see the manifest (a trainer of ``log`` may have trimmed its log on it):
            # taking it back would make ranks disagree on whether the step committed.
            if self.warn:
                warn_failure.emit(f"[mpiec] warning: checkpoint of step {step} committed, but the fsync of "
                                  f"{d} failed ({_why(exc)}): it may not survive a power loss")
        return final

    def abandon(self, step: int) -> bool:
        """Delete the directory of uncommitted checkpoint ``step`` (a failed one, whose parts will
        never all be there); the caller makes sure no rank still writes into it. A committed step is
        refused (``CheckpointError``). True when a directory was removed."""
        d = self.step_dir(step)
        if (d / MANIFEST).exists():
            raise CheckpointError(f"{d} is a committed checkpoint; abandon() deletes only unfinished ones")
        if not d.is_dir():
            return False
        shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(OSError):
            _fsync_dir(self.root)
        return not d.exists()

    # ---- listing -----------------------------------------------------------------------------

    def _step_dirs(self) -> list[tuple[int, Path]]:
        """(step, dir) of every step directory under the root, newest first."""
        try:
            entries = list(os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            m = _STEP_RE.match(e.name)
            if m and e.is_dir() and e.name == step_dir_name(int(m.group(1))):
                out.append((int(m.group(1)), Path(e.path)))
        return sorted(out, reverse=True)

    def complete_steps(self) -> list[int]:
        """Steps with a valid manifest, newest first (a torn or foreign manifest does not count)."""
        out = []
        for step, _ in self._step_dirs():
            try:
                self.manifest(step)
            except CheckpointError:
                continue
            out.append(step)
        return out

    def latest(self) -> int | None:
        """The newest complete step, or None."""
        for step, _ in self._step_dirs():
            try:
                self.manifest(step)
            except CheckpointError:
                continue
            return step
        return None

    def manifest(self, step: int) -> dict[str, Any]:
        """The validated manifest of ``step``; ``CheckpointError`` when absent, torn or not ours."""
        step = _check_step(step)
        return _load_manifest(self.step_dir(step) / MANIFEST, step)

    def bytes_of(self, step: int) -> int:
        """Bytes of the ``.npy`` files of complete checkpoint ``step`` (manifest excluded)."""
        return sum(int(p["bytes"]) for p in self.manifest(step)["parts"].values())

    # ---- reading -----------------------------------------------------------------------------

    def read_part(self, step: int, part: str, verify: bool = True,
                  mmap: bool = False) -> dict[str, np.ndarray]:
        """The arrays of ``part`` in complete checkpoint ``step``.

        Sizes are always checked against the manifest; ``verify`` also checks each file's checksum
        (read once, in chunks). ``mmap=True`` returns read-only memory-mapped arrays. The read is
        one operation of the storage model (its latency), paced at its read bandwidth, and cold
        (the files' pages dropped from the page cache first) when the model says so.
        """
        man = self.manifest(step)
        d = self.step_dir(step)
        try:
            entry = man["parts"][part]
        except KeyError:
            have = ", ".join(sorted(man["parts"])) or "none"
            raise CheckpointError(f"{d / MANIFEST}: no part {part!r} (parts: {have})") from None
        t0 = time.perf_counter()
        try:
            return self._read_part(d, entry, verify, mmap)
        finally:
            self.read_s += time.perf_counter() - t0

    def _read_part(self, d: Path, entry: dict[str, Any], verify: bool, mmap: bool) -> dict[str, np.ndarray]:
        self._latency()
        pacer = _Pacer(self.model.read_mb_s * 1e6)
        out = {}
        for name, fe in entry["files"].items():
            path = d / fe["file"]
            problem = _size_problem(path, fe["bytes"], "manifest")
            if problem:
                raise CheckpointError(f"{path}: {problem}")
            try:
                if self.model.cold_reads:
                    _drop_file_cache(path)
                if mmap:
                    if verify:
                        _verify_file(path, fe["checksum"], pacer)
                    else:  # the pages are read later, on access: charge the file's bytes now
                        pacer.sent_bytes(int(fe["bytes"]))
                    arr = np.load(path, mmap_mode="r", allow_pickle=False)
                else:
                    arr = _read_npy(path, fe["checksum"] if verify else None, pacer)
            except OSError as exc:
                raise CheckpointError(f"{path}: cannot read ({_why(exc)})") from None
            except ValueError as exc:
                raise CheckpointError(f"{path}: not a valid .npy file ({exc})") from None
            if list(arr.shape) != fe["shape"] or _descr(arr.dtype) != fe["dtype"]:
                raise CheckpointError(f"{path}: holds {arr.dtype} {list(arr.shape)}, "
                                      f"manifest says {fe['dtype']} {fe['shape']}")
            out[name] = arr
        return out

    # ---- pruning -----------------------------------------------------------------------------

    def prune(self, keep: int = 2, also_keep: Iterable[int] = ()) -> list[int]:
        """Delete complete checkpoints older than the newest ``keep`` and step directories without
        a valid manifest older than the newest complete one (newer ones may be in progress).
        The newest complete checkpoint is never deleted, nor are the steps in ``also_keep``
        (e.g. the baseline and diffs a kept differential checkpoint is restored from).
        Returns the deleted steps."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"prune: keep must be an integer >= 1, not {keep!r}")
        complete = set(self.complete_steps())
        if not complete:
            return []
        newest = max(complete)
        kept = set(sorted(complete, reverse=True)[:keep]) | {int(s) for s in also_keep}
        deleted = []
        for step, d in self._step_dirs():
            if step in kept or (step not in complete and step >= newest):
                continue
            man = d / MANIFEST
            try:
                if man.exists():  # incomplete first: a crash mid-delete leaves no "complete" husk
                    man.unlink()
                    _fsync_dir(d)
                shutil.rmtree(d)
            except OSError as exc:
                raise CheckpointError(f"{d}: cannot delete ({_why(exc)})") from None
            deleted.append(step)
        if deleted:
            _fsync_dir(self.root)
        return sorted(deleted)


def _load_manifest(path: Path, step: int | None = None) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (the checkpoint was never committed)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read ({_why(exc)})") from None
    try:
        man = json.loads(text)
    except json.JSONDecodeError:
        raise CheckpointError(f"{path}: not valid JSON (torn or corrupted manifest)") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an mpiec checkpoint manifest")
    if man.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {man.get('version')!r}, "
                              f"this mpiec reads version {VERSION}")
    if not isinstance(man.get("step"), int) or (step is not None and man["step"] != step):
        raise CheckpointError(f"{path}: manifest is for step {man.get('step')!r}, "
                              f"its directory for step {step}")
    parts = man.get("parts")
    try:
        if not isinstance(parts, dict) or not isinstance(man.get("meta", {}), dict):
            raise ValueError("no parts")
        for entry in parts.values():
            for name, fe in entry["files"].items():
                _check_file_entry(name, fe)
            if not isinstance(entry.get("bytes"), int):
                raise ValueError("bad part size")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: malformed manifest ({exc})") from None
    return man


def _crc_check(path: Path, crc: int, expected: str) -> None:
    got = f"crc32:{crc:08x}"
    if got != expected:
        raise CheckpointError(f"{path}: corrupted (checksum {got}, manifest says {expected})")


def _drop_file_cache(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (cold reads); a file that will not open is left
    to the read, which says why."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        drop_cache(fd)
    finally:
        os.close(fd)


def _verify_file(path: Path, expected: str, pacer: _Pacer | None = None) -> None:
    crc = 0
    size = pacer.chunk() if pacer is not None else CHUNK
    buf = bytearray(size)
    mv = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(mv):
            crc = zlib.crc32(mv[:n], crc)
            if pacer is not None:
                pacer.sent_bytes(n)
    _crc_check(path, crc, expected)


def _read_npy(path: Path, expected: str | None, pacer: _Pacer | None = None) -> np.ndarray:
    """Read a .npy file in one pass, checksumming as it is read (``expected=None``: no check),
    paced by ``pacer`` (the storage model's read bandwidth)."""
    fmt = np.lib.format
    with open(path, "rb", buffering=0) as raw:
        try:
            version = fmt.read_magic(raw)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(raw)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(raw)
            else:
                raise ValueError(f".npy version {version}")
        except ValueError:
            if expected is not None:  # a damaged header is damage; say so the way the checksum would
                _verify_file(path, expected)
            raise
        offset = raw.tell()
        if dtype.hasobject:
            raise ValueError("object arrays are not read")
        raw.seek(0)
        crc = zlib.crc32(raw.read(offset))
        if pacer is not None:
            pacer.sent_bytes(offset)
        base = np.empty(tuple(reversed(shape)) if fortran else shape, dtype=dtype)
        data = _bytes_view(base)
        size = pacer.chunk() if pacer is not None else CHUNK
        for i in range(0, len(data), size):
            chunk = data[i:i + size]
            while chunk:
                n = raw.readinto(chunk)
                if not n:
                    raise CheckpointError(f"{path}: truncated (ends inside the array data)")
                if expected is not None:
                    crc = zlib.crc32(chunk[:n], crc)
                if pacer is not None:
                    pacer.sent_bytes(n)
                chunk = chunk[n:]
    if expected is not None:
        _crc_check(path, crc, expected)
    return base.T if fortran else base


# ---- background writer -----------------------------------------------------------------------

_STOP = object()


class BackgroundWriter:
    """Writes parts in a daemon thread while training goes on.

    The training thread snapshots (copies) its arrays and calls ``submit``; at later step
    boundaries ``poll()`` hands back the finished ``PartInfo`` s (which the caller sends to
    the committing rank: the thread makes no MPI calls). Writes run one at a time, in order.
    A failed write does not stop the writer; its error is re-raised as ``CheckpointError`` by
    ``poll``/``wait`` in the caller's thread, in submission order (parts finished before it are
    returned first, the error at the next call).

    Every queued snapshot stays in memory until written: check ``busy`` before taking the next
    one. ``cpu_s`` is the thread's CPU time over its writes (``time.thread_time``). ``nice > 0``
    lowers the thread's CPU priority (Linux) so that, when ranks outnumber cores, the writer gives
    way to training instead of competing with it; writes then take longer.
    """

    def __init__(self, store: CheckpointStore, nice: int = 0):
        self.store = store
        self.nice = int(nice)
        self._jobs: queue.Queue = queue.Queue()
        self._done: list[PartInfo | BaseException] = []
        self._cond = threading.Condition()
        self._pending = 0
        self._cpu_s = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mpiec-checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(self, step: int, part: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Queue a write of ``arrays`` (already a snapshot: they must not change until written)."""
        if self._closed:
            raise RuntimeError("BackgroundWriter is closed")
        _check_step(step)
        _check_part(part)
        for name in arrays:
            _check_name(name)
        with self._cond:
            self._pending += 1
        self._jobs.put((int(step), part, dict(arrays)))

    def _run(self) -> None:
        if self.nice > 0:  # Linux: a thread id names just this thread; best effort elsewhere
            try:
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self.nice)
            except (AttributeError, OSError):
                pass
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            step, part, arrays = job
            c0 = time.thread_time()  # this thread's CPU: what the write takes from a shared core
            try:
                result: PartInfo | BaseException = self.store.write_part(step, part, arrays)
            except Exception as exc:  # handed to the caller's thread
                result = exc
            del arrays, job
            cpu = time.thread_time() - c0
            with self._cond:
                self._cpu_s += cpu
                self._done.append(result)
                self._pending -= 1
                self._cond.notify_all()

    @property
    def cpu_s(self) -> float:
        """CPU seconds the writer thread spent in its writes so far (its own clock: the time it
        competed with training for a core, whatever the wall time of the writes)."""
        with self._cond:
            return self._cpu_s

    @property
    def busy(self) -> bool:
        """True while a submitted write is queued or running."""
        with self._cond:
            return self._pending > 0

    def poll(self) -> list[PartInfo]:
        """Parts finished since the last call, in order; raises the first failed write's error."""
        with self._cond:
            out: list[PartInfo] = []
            while self._done:
                head = self._done[0]
                if not isinstance(head, PartInfo):
                    break
                out.append(head)
                self._done.pop(0)
            if out or not self._done:
                return out
            exc = self._done.pop(0)
        assert not isinstance(exc, PartInfo)  # the loop above stopped at it: a failed write
        if isinstance(exc, CheckpointError):
            raise exc
        raise CheckpointError(f"background checkpoint write failed: {exc!r}") from exc

    def wait(self, timeout: float | None = None) -> list[PartInfo]:
        """Block until every submitted write has finished (or ``timeout`` s passed), then ``poll()``."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending == 0, timeout=timeout)
        return self.poll()

    def close(self) -> None:
        """Finish the queued writes and stop the thread. Unpolled results stay available to ``poll``."""
        if not self._closed:
            self._closed = True
            self._jobs.put(_STOP)
        self._thread.join()

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- resume ----------------------------------------------------------------------------------

def resolve_checkpoint(path: str | Path) -> tuple[Path, int]:
    """``(root, step)`` for ``mpiec run --resume PATH``: PATH is a store root (its newest complete
    checkpoint) or one step directory (that checkpoint). ``CheckpointError`` for anything else."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: no such checkpoint directory")
    if not p.is_dir():
        raise CheckpointError(f"{p} is a file, not a checkpoint directory")
    m = _STEP_RE.match(p.name)
    if m or (p / MANIFEST).exists():
        if not m or p.name != step_dir_name(int(m.group(1))):
            raise CheckpointError(f"{p} holds a {MANIFEST} but is not named step-NNNNNNNNN")
        if not (p / MANIFEST).is_file():
            raise CheckpointError(f"{p} holds no complete mpiec checkpoint (no {MANIFEST}: never committed)")
        step = int(m.group(1))
        _load_manifest(p / MANIFEST, step)
        return p.parent, step
    store = CheckpointStore(p)
    dirs = store._step_dirs()
    latest = store.latest()
    if latest is None:
        why = f"{len(dirs)} step directories, none committed" if dirs else "no step-NNNNNNNNN directories"
        raise CheckpointError(f"{p} holds no complete mpiec checkpoint ({why})")
    return p, latest


def check_unused(root: str | Path) -> None:
    """A new run's checkpoint directory must hold no committed checkpoint (CheckpointError if it does).

    A committed checkpoint is never rewritten: a run into such a directory would write none of its
    own at those steps, and a failure would restore the other run's state — a wrong model that looks
    recovered. ``--resume`` is the way to continue a run from its directory."""
    steps = CheckpointStore(root).complete_steps()
    if steps:
        shown = ", ".join(str(s) for s in sorted(steps)[:5]) + (", ..." if len(steps) > 5 else "")
        raise CheckpointError(f"checkpoint directory {root} already holds committed checkpoints (steps "
                              f"{shown}) of another run: continue that run with --resume {root}, or "
                              "give this run an empty strategy.dir (or another output.name)")


def find_checkpoint_root(path: str | Path) -> Path:
    """The store root for ``mpiec run --resume PATH`` (a root or a step directory);
    ``resolve_checkpoint`` also gives the step to resume from."""
    return resolve_checkpoint(path)[0]
