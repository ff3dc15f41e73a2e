"""The HDF5 result file: one file per run, written only by the monitor rank.

This module owns the on-disk schema (documented in ``docs/results-schema.md``):
the record dtypes the runtime fills (``TIMELINE_DTYPE`` …), the writer and the
validating reader. It contains no MPI.

Invariants:

* **Atomic.** The writer builds the whole file in memory, writes it to a temporary
  file next to the target (``.<name>.<pid>.tmp``), fsyncs it and ``os.replace``-s it
  over the target. An interrupted run never leaves a half-written target and never
  damages an existing file. An existing target is refused unless ``overwrite=True``.
  A write that fails (a full disk: ``ENOSPC``) removes the temporary file and raises
  ``ResultWriteError`` (a ``ResultFileError`` and an ``OSError``, with ``errno``),
  one line naming the file and the error.
* **No run lost over one attribute.** An attribute h5py cannot store as given (an
  integer beyond 64 bits, an object) is stored as text, or dropped when even that
  fails, and named in the summary attribute ``attr_warnings``; a schema summary
  value HDF5 cannot hold in its type is clamped (an integer beyond 64 bits) or, if
  not of that type at all, replaced by its default (listed in ``defaulted``), with a
  warning. ``warnings`` holds the same as one-line messages for the console.
* **Always complete.** Every file the writer produces, including the snapshots
  of ``flush_partial()``, has every dataset and every summary attribute of the
  schema; ``summary.complete`` is ``False`` for a snapshot and ``True`` after
  ``close()``. Summary values the caller did not supply are derived from the
  buffers or set to a neutral default (nan, 0, ``""``) and their names listed in
  ``summary.defaulted`` — never silently.
* **Strings are clean.** NUL characters are removed from string attributes
  (HDF5 variable-length strings cannot hold them; MPI version strings end in one).
* **Self-describing.** Root attributes that are not scalars (dicts, lists,
  ``None``) are stored as JSON strings and their names listed in the root
  attribute ``json_attrs``; ``config`` is always JSON. ``read_result`` decodes
  them back. Each dataset carries a ``units`` attribute (JSON, column → unit).
* **The final model, on request.** ``output.final_model`` adds the group ``final_model``
  (``dense``: the flat dense parameters; ``embeddings``: the embedding weights, a row per global
  row id, without the optimizer state) to a completed run's file; ``read_final_model`` reads it
  (``read_result`` does not: it can be the largest part of the file).
* **Validated reading.** ``read_result`` raises ``ResultFileError`` with a
  one-line message naming the file and the problem for anything that is not a
  supported mpiec result file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import numbers
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from mpiec import __version__ as MPIEC_VERSION
from mpiec.errors import ResultFileError

__all__ = [
    "SCHEMA_VERSION",
    "SUPPORTED_SCHEMA_VERSIONS",
    "TIMELINE_DTYPE",
    "EVENTS_DTYPE",
    "EVAL_DTYPE",
    "CHECKPOINTS_DTYPE",
    "RANKS_DTYPE",
    "DATASET_DTYPES",
    "EVENT_KINDS",
    "REQUIRED_ROOT_ATTRS",
    "SUMMARY_FIELDS",
    "SUMMARY_FIELDS_V5",
    "ResultExistsError",
    "ResultWriteError",
    "ResultWriter",
    "Overheads",
    "RunResult",
    "read_result",
    "read_final_model",
    "FinalModel",
    "decode",
    "overheads",
    "recoveries",
    "strategy_params",
    "unfired_kills",
]

SCHEMA_VERSION = 6
#: the optional group of the trained model (``output.final_model``)
FINAL_MODEL = "final_model"
SUPPORTED_SCHEMA_VERSIONS = frozenset({1, 2, 3, 4, 5, 6})
#: Columns and summary attributes added in version 2; a version-1 file reads with defaults.
_ADDED_IN_2 = {"timeline": ("epoch", "reexec"), "ranks": ("digest",),
               "summary": ("recoveries", "reexecuted_steps", "time_lost_s")}
#: Columns added in version 3; an older file reads them as "unknown" (``_UNKNOWN``), not as 0.
_ADDED_IN_3 = {"checkpoints": ("rows", "stall_s"), "ranks": ("node",)}
#: Columns added in version 4 (read as unknown from older files, like version 3's).
_ADDED_IN_4 = {"ranks": ("cpu_s",)}
#: Columns added in version 6: the layout each step ran on (elastic recovery changes it).
_ADDED_IN_6 = {"timeline": ("trainers", "servers")}
#: Summary attributes added in version 5: every writer since writes them (derived from the events
#: unless given); older files lack them, so they are not in ``SUMMARY_FIELDS`` (required on read).
SUMMARY_FIELDS_V5: dict[str, type] = {"checkpoints_failed": int, "unprotected": bool}
#: The disturbance keys of v5 (``mpiec.roles.disturbance``: what else the host did during the run);
#: a writer given none writes these unknown values.
DISTURBANCE_DEFAULTS: dict[str, Any] = {"host_cores": 0, "host_load_1m": math.nan,
                                        "other_cpu_share": math.nan, "run_cpu_share": math.nan,
                                        "step_time_spread": math.nan}
SUMMARY_FIELDS_V5.update({"host_cores": int, "host_load_1m": float, "other_cpu_share": float,
                          "run_cpu_share": float, "step_time_spread": float})
#: The storage keys of v5 (``mpiec.storage.model.summary_fields``: the checkpoint storage model the run's
#: config resolves to, ``storage_emulated`` when its figures slow the real disk down); derived
#: from the ``config`` root attribute unless given, these values when it names no storage.
STORAGE_DEFAULTS: dict[str, Any] = {"storage_profile": "", "storage_emulated": False,
                                    "storage_write_mb_s": math.nan, "storage_read_mb_s": math.nan,
                                    "storage_latency_ms": math.nan, "storage_aggregate_mb_s": math.nan,
                                    "storage_cold_reads": False}
SUMMARY_FIELDS_V5.update({"storage_profile": str, "storage_emulated": bool, "storage_write_mb_s": float,
                          "storage_read_mb_s": float, "storage_latency_ms": float,
                          "storage_aggregate_mb_s": float, "storage_cold_reads": bool})
#: The repair keys of v5 (``mpiec.results.accounting``, ``docs/measurement.md``): the seconds from
#: each kill to the end of its repair (summed), the throughput while a repair runs after the resume
#: over the pre-failure rate (mean over recoveries; nan: none ran past the resume), the time lost
#: to injected stalls (the ``MPIEC_STALL`` test hook). A writer given none writes these values.
REPAIR_DEFAULTS: dict[str, Any] = {"unprotected_s": 0.0, "repair_throughput_ratio": math.nan,
                                   "stall_time_lost_s": 0.0}
SUMMARY_FIELDS_V5.update({"unprotected_s": float, "repair_throughput_ratio": float,
                          "stall_time_lost_s": float})
_UNKNOWN: dict[str, dict[str, float]] = {
    "checkpoints": {"rows": -1, "stall_s": math.nan}, "ranks": {"node": -1, "cpu_s": math.nan},
    "timeline": {"trainers": -1, "servers": -1}}

TIMELINE_DTYPE = np.dtype(
    [
        ("step", np.int64),
        ("t_end", np.float64),  # s since run start, end of the step
        ("dt", np.float64),  # s, wall time of the step
        ("samples", np.int64),  # global samples in the step
        ("loss", np.float32),  # global mean training loss of the step
        ("t_data", np.float64),
        ("t_compute", np.float64),
        ("t_comm", np.float64),  # posting/progressing communication
        ("t_wait", np.float64),  # blocked waiting for peers
        ("t_server", np.float64),  # max server apply time
        ("t_strategy", np.float64),  # strategy hooks
        ("epoch", np.int32),  # recoveries before this execution of the step
        ("reexec", np.bool_),  # the step was executed before (re-executed after a rollback)
        ("trainers", np.int16),  # trainers that ran the step (elastic recovery changes it; -1: unknown)
        ("servers", np.int16),  # servers that held the rows
    ]
)

EVENTS_DTYPE = np.dtype(
    [
        ("step", np.int64),
        ("time", np.float64),  # s since run start
        ("kind", "S16"),
        ("rank", np.int32),  # world rank concerned, -1 if none
        ("role", "S8"),
        ("role_index", np.int32),
        ("detail", "S256"),  # short JSON or text
    ]
)

EVAL_DTYPE = np.dtype(
    [
        ("step", np.int64),
        ("samples_seen", np.int64),
        ("auc", np.float64),
        ("logloss", np.float64),
        ("accuracy", np.float64),
    ]
)

CHECKPOINTS_DTYPE = np.dtype(
    [
        ("step", np.int64),
        ("kind", "S16"),
        ("bytes", np.int64),
        ("seconds", np.float64),  # total: snapshot or write on the training thread + background write
        ("bits", np.int32),
        ("rows", np.int64),  # embedding rows saved (v3; -1: unknown)
        ("stall_s", np.float64),  # on the critical path: the slowest training thread (v3; nan: unknown)
    ]
)

RANKS_DTYPE = np.dtype(
    [
        ("rank", np.int32),
        ("role", "S8"),
        ("role_index", np.int32),
        ("host", "S64"),
        ("node", np.int32),  # the node it fails with (layout.rank_nodes; -1: none, e.g. the monitor; v3)
        ("pid", np.int64),
        ("peak_rss_mb", np.float64),
        ("digest", "S64"),  # servers: SHA-256 (hex) of the shard's rows in local order
        ("cpu_s", np.float64),  # CPU seconds (all threads, user + system) from the start of training (v4)
    ]
)

def columns(dtype: np.dtype) -> tuple[str, ...]:
    """The column (field) names of a structured dtype; () for a plain one."""
    return dtype.names or ()


DATASET_DTYPES: dict[str, np.dtype] = {
    "timeline": TIMELINE_DTYPE,
    "events": EVENTS_DTYPE,
    "eval": EVAL_DTYPE,
    "checkpoints": CHECKPOINTS_DTYPE,
    "ranks": RANKS_DTYPE,
}

_UNITS: dict[str, dict[str, str]] = {
    "timeline": {
        "step": "", "t_end": "s", "dt": "s", "samples": "samples", "loss": "nats",
        "t_data": "s", "t_compute": "s", "t_comm": "s", "t_wait": "s", "t_server": "s",
        "t_strategy": "s", "epoch": "", "reexec": "",
    },
    "events": {
        "step": "", "time": "s", "kind": "", "rank": "", "role": "", "role_index": "",
        "detail": "",
    },
    "eval": {"step": "", "samples_seen": "samples", "auc": "", "logloss": "nats",
             "accuracy": ""},
    "checkpoints": {"step": "", "kind": "", "bytes": "B", "seconds": "s", "bits": "bit", "rows": "rows",
                    "stall_s": "s"},
    "ranks": {"rank": "", "role": "", "role_index": "", "host": "", "node": "", "pid": "",
              "peak_rss_mb": "MiB", "digest": "", "cpu_s": "s"},
}

#: Event kinds the runtime uses; other short ASCII kinds are accepted too.
EVENT_KINDS = (
    "kill", "emulated_kill", "detect", "revoke", "shrink", "agree", "replace",
    "rebuild_start", "rebuild_end", "rebuild_failed", "parity_mismatch", "checkpoint_start", "checkpoint_end",
    "restore",
    "restore_start", "restore_end", "restore_failed", "undo", "resume", "checkpoint_fail", "abort",
    "corrupted", "scrub_repair", "scrub_unlocated", "replica_mismatch", "replica_repair", "shard_mismatch",
)

#: Root attributes every file has (the writer fills the first group itself).
REQUIRED_ROOT_ATTRS = (
    "schema_version", "mpiec_version", "created", "config", "strategy", "seed",
    "failure_mode", "ulfm",
)
_CALLER_ROOT_ATTRS = ("config", "strategy", "seed", "failure_mode", "ulfm")

#: Summary attributes: name → python type they are stored as.
SUMMARY_FIELDS: dict[str, type] = {
    "throughput_sps": float,
    "final_auc": float,
    "final_logloss": float,
    "final_accuracy": float,
    "teacher_auc": float,
    "param_checksum": str,
    "steps_completed": int,
    "samples_completed": int,
    "lost": bool,
    "recovery_latency_s": float,
    "stall_s": float,
    "lost_samples": int,
    "parity_bytes": int,
    "checkpoint_bytes": int,
    "emulated": bool,
    "recoveries": int,
    "reexecuted_steps": int,
    "time_lost_s": float,
}
# Written by the writer itself (not caller-supplied), also required on read.
_WRITER_SUMMARY_FIELDS = ("complete", "defaulted")


class ResultExistsError(ResultFileError, FileExistsError):
    """The target result file exists and ``overwrite`` was not given."""


class ResultWriteError(ResultFileError, OSError):
    """The result file could not be written (``errno`` says why: ``ENOSPC`` for a full disk)."""

    def __init__(self, path: Path, exc: BaseException) -> None:
        text = " ".join((getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).split())
        code = errno.errorcode.get(getattr(exc, "errno", None) or 0)
        super().__init__(f"result file {path}: cannot write ({text}{f' [{code}]' if code else ''})")
        self.errno = getattr(exc, "errno", None)  # str() stays the one line above


#: 64-bit integer range: HDF5 has no wider integer type, h5py refuses a python int beyond it.
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1


def _as_text(value: Any) -> str:
    """A storable text form of any value: exact digits for an int, JSON for containers, else ``str``."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    try:
        if isinstance(value, int):
            text = _int_text(value)
        elif value is None or isinstance(value, dict | list | tuple | float):
            text = json.dumps(value, sort_keys=True, default=str)
        else:
            text = str(value)
    except Exception:  # a value whose own conversion fails: its type still says something
        text = f"<{type(value).__name__}>"
    # HDF5 strings are UTF-8 without NUL: lone surrogates and NULs would fail again
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "")


def _int_text(value: int) -> str:
    """The digits of an int; past Python's limit on converting one (4300 digits), its size."""
    try:
        return str(value)
    except ValueError:
        return f"<a {value.bit_length()}-bit integer>"


def _write_some(fd: int, buf: memoryview) -> int:
    """One raw write of a result file (tests replace it to emulate a full disk)."""
    return os.write(fd, buf)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _to_field(typ: type, value: Any) -> tuple[Any, str]:
    """``value`` as a summary field of type ``typ`` that HDF5 can store, and what was changed
    (""); ``None`` when it is not of that type at all (the caller writes the default)."""
    if typ is int:
        try:
            v = int(value)
        except (TypeError, ValueError, OverflowError):
            return None, f"{_short(repr(value), 60)} is not an integer"
        if not _INT_MIN <= v < 2**63:
            clamped = min(max(v, _INT_MIN), 2**63 - 1)
            return clamped, f"{_short(_int_text(v), 60)} does not fit a 64-bit integer: stored as {clamped}"
        return v, ""
    if typ is float:
        try:
            return float(value), ""
        except OverflowError:  # an int beyond any float
            stored = math.inf if value > 0 else -math.inf
            return stored, f"{_short(_int_text(value), 60)} is beyond a float: stored as {stored}"
        except (TypeError, ValueError):
            return None, f"{_short(repr(value), 60)} is not a number"
    try:
        return typ(value), ""
    except Exception:  # any type's constructor: a caller's odd value must not lose the run
        return None, f"{_short(repr(value), 60)} is not a {typ.__name__}"


def _checkpoint_failures(events: np.ndarray) -> list[tuple[int, str]]:
    """(step, first error) of each checkpoint step that has a ``checkpoint_fail`` event, by step."""
    out: dict[int, str] = {}
    for ev in events[events["kind"] == b"checkpoint_fail"] if len(events) else ():
        who = decode(ev["role"]) + (f" {int(ev['role_index'])}" if int(ev["role_index"]) >= 0 else "")
        out.setdefault(int(ev["step"]), f"{who or 'rank ' + str(int(ev['rank']))}: {decode(ev['detail'])}")
    return sorted(out.items())


def decode(value: Any) -> Any:
    """Bytes (fixed-length dataset fields) → str; anything else unchanged."""
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", errors="replace")
    return value


def _encode_fixed(value: str | bytes, size: int, what: str, truncate: bool) -> bytes:
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
    if len(raw) > size:
        if not truncate:
            raise ValueError(f"{what} {raw!r} is longer than {size} bytes")
        raw = raw[: size - 3] + b"..."
    return raw


def _clean_str(value: Any) -> Any:
    """HDF5 variable-length strings cannot hold NUL (MPI version strings end in one)."""
    return value.replace("\x00", "") if isinstance(value, str) else value


def _py(value: Any) -> Any:
    """numpy scalars / h5py strings → plain python values."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return value


def _storage_fields(config: str) -> dict[str, Any]:
    """The storage summary keys of a run's config (JSON text); ``STORAGE_DEFAULTS`` when it names no
    storage or cannot be resolved (a config from before the storage model: the real disk)."""
    from mpiec.storage.model import summary_fields

    try:
        tree = json.loads(config)
        if not isinstance(tree, dict) or not isinstance(tree.get("storage"), dict):
            return dict(STORAGE_DEFAULTS)
        return summary_fields(tree)
    except (ValueError, TypeError, AttributeError):
        return dict(STORAGE_DEFAULTS)


class ResultWriter:
    """Buffers one run's records in memory and writes the HDF5 file atomically.

    ``attrs`` are the root attributes; ``config``, ``strategy``, ``seed``,
    ``failure_mode`` ("ulfm" | "emulated") and ``ulfm`` (bool) are required,
    ``schema_version``, ``mpiec_version``, ``created``, the numpy/h5py/python
    versions are filled in unless given. ``autoflush_s`` makes ``add_steps``
    call ``flush_partial()`` at most that often, so a run killed outright
    still leaves a readable (incomplete) file.

    After a write, ``warnings`` holds one line per thing the caller should be told
    (checkpoints that failed, attributes that could not be stored as given).
    """

    def __init__(
        self,
        path: str | Path,
        attrs: dict[str, Any],
        *,
        overwrite: bool = False,
        autoflush_s: float | None = None,
    ) -> None:
        self.path = Path(path)
        missing = [k for k in _CALLER_ROOT_ATTRS if k not in attrs]
        if missing:
            raise ValueError(f"ResultWriter: missing root attribute(s): {', '.join(missing)}")
        if attrs["failure_mode"] not in ("ulfm", "emulated"):
            raise ValueError(
                f"ResultWriter: failure_mode must be 'ulfm' or 'emulated', "
                f"not {attrs['failure_mode']!r}"
            )
        if self.path.exists() and not overwrite:
            raise ResultExistsError(
                f"result file {self.path} already exists (remove it or choose another --out)"
            )
        if not self.path.parent.is_dir():
            raise ResultFileError(f"result file {self.path}: directory does not exist")
        self._given_attrs = dict(attrs)
        self._attrs = self._root_attrs(self._given_attrs)
        self._given_attrs.setdefault("created", self._attrs["created"])
        self._steps: list[np.ndarray] = []
        self._events: list[tuple] = []
        self._eval: list[tuple] = []
        self._checkpoints: list[tuple] = []
        self._ranks = np.zeros(0, RANKS_DTYPE)
        self._final_model: dict[str, np.ndarray] = {}
        self._closed = False
        self._overwrite = overwrite
        self._written = False  # the target is ours once we wrote it
        self._autoflush_s = autoflush_s
        self._last_flush = time.monotonic()
        self.warnings: list[str] = []
        self._attr_warnings: dict[str, str] = {}

    # -- root attributes -------------------------------------------------
    @staticmethod
    def _root_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "mpiec_version": MPIEC_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "numpy_version": np.__version__,
            "h5py_version": h5py.__version__,
            "python_version": platform.python_version(),
        }
        with contextlib.suppress(Exception):
            import numba  # noqa: F401  (version only)

            out["numba_version"] = numba.__version__
        out.update(attrs)
        out["schema_version"] = SCHEMA_VERSION  # never caller-chosen
        json_attrs = ["config"]
        if not isinstance(out["config"], str):
            out["config"] = json.dumps(out["config"], sort_keys=True, default=str)
        with contextlib.suppress(Exception):  # the bag sizes, also as a root attribute ([] = one-hot)
            out.setdefault("multi_hot", list(json.loads(out["config"])["data"].get("multi_hot", [])))
        for key, value in list(out.items()):
            if key == "config":
                continue
            if isinstance(value, np.generic):
                value = value.item()
            # an int beyond 64 bits too: h5py cannot store it, its JSON reads back exactly
            big = type(value) is int and not _INT_MIN <= value <= _UINT_MAX
            if value is None or big or isinstance(value, dict | list | tuple):
                text = _as_text(value)
                out[key] = text if not text.startswith("<") else json.dumps(text)  # JSON, whatever it holds
                json_attrs.append(key)
            elif isinstance(value, Path):
                out[key] = str(value)
            elif isinstance(value, str):
                out[key] = _clean_str(value)
            else:
                out[key] = value  # anything else: stored as text by _put_attr if h5py refuses it
        out["json_attrs"] = json.dumps(sorted(json_attrs))
        return out

    # -- record buffers --------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"ResultWriter for {self.path} is closed")

    def add_steps(self, records: np.ndarray) -> None:
        """Append timeline records (a TIMELINE_DTYPE array or a single record)."""
        self._check_open()
        arr = np.atleast_1d(np.asarray(records))
        if arr.dtype != TIMELINE_DTYPE:
            if arr.dtype.names is None or set(arr.dtype.names) != set(columns(TIMELINE_DTYPE)):
                raise ValueError(f"add_steps: records must have TIMELINE_DTYPE, got {arr.dtype}")
            arr = arr.astype(TIMELINE_DTYPE)
        self._steps.append(arr.copy())
        if (
            self._autoflush_s is not None
            and time.monotonic() - self._last_flush >= self._autoflush_s
        ):
            self.flush_partial()

    def add_event(
        self,
        step: int,
        time: float,
        kind: str,
        rank: int = -1,
        role: str = "",
        role_index: int = -1,
        detail: str | dict | None = "",
    ) -> None:
        """Append one event. ``detail`` may be a dict (stored as JSON); it is
        truncated (ending in ``...``) beyond 256 bytes. ``kind`` ≤ 16 bytes."""
        self._check_open()
        if isinstance(detail, dict):
            detail = json.dumps(detail, sort_keys=True, default=str, separators=(",", ":"))
        self._events.append((
            int(step), float(time), _encode_fixed(kind, 16, "event kind", truncate=False),
            int(rank), _encode_fixed(role, 8, "role", truncate=False), int(role_index),
            _encode_fixed(detail or "", 256, "detail", truncate=True),
        ))

    def add_eval(
        self, step: int, samples_seen: int, auc: float, logloss: float, accuracy: float
    ) -> None:
        """Append one evaluation on the held-out set."""
        self._check_open()
        self._eval.append(
            (int(step), int(samples_seen), float(auc), float(logloss), float(accuracy))
        )

    def add_checkpoint(
        self, step: int, kind: str, bytes: int, seconds: float, bits: int = 32,  # noqa: A002
        rows: int = -1, stall_s: float = math.nan,
    ) -> None:
        """Append one checkpoint (``bytes`` written, ``seconds`` taken in total, ``bits``
        per value: 32 unquantized, embedding ``rows`` saved, ``stall_s`` on the critical
        path; -1 / nan: unknown)."""
        self._check_open()
        self._checkpoints.append((
            int(step), _encode_fixed(kind, 16, "checkpoint kind", truncate=False),
            int(bytes), float(seconds), int(bits), int(rows), float(stall_s),
        ))

    def set_attr(self, key: str, value: Any) -> None:
        """Set (or replace) one root attribute before the file is closed."""
        self._check_open()
        self._given_attrs[key] = value
        self._attrs = self._root_attrs(self._given_attrs)

    def set_ranks(self, records: np.ndarray) -> None:
        """Set the per-rank table (RANKS_DTYPE array; replaces a previous one)."""
        self._check_open()
        arr = np.atleast_1d(np.asarray(records))
        if arr.dtype != RANKS_DTYPE:
            if arr.dtype.names is None or set(arr.dtype.names) != set(columns(RANKS_DTYPE)):
                raise ValueError(f"set_ranks: records must have RANKS_DTYPE, got {arr.dtype}")
            arr = arr.astype(RANKS_DTYPE)
        self._ranks = arr.copy()

    def set_final_model(self, dense: np.ndarray, embeddings: np.ndarray) -> None:
        """The trained model, written as group ``final_model`` (``output.final_model``): ``dense``
        the flat dense parameters, ``embeddings`` the embedding weights, a row per global row id."""
        self._check_open()
        emb = np.asarray(embeddings)
        if emb.ndim != 2 or emb.dtype != np.float32:
            raise ValueError(f"set_final_model: embeddings must be 2-D float32, got {emb.dtype} {emb.shape}")
        self._final_model = {"dense": np.asarray(dense, dtype=np.float32).ravel().copy(),
                             "embeddings": emb.copy()}

    # -- arrays ------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        timeline = (
            np.concatenate(self._steps) if self._steps else np.zeros(0, TIMELINE_DTYPE)
        )
        return {
            "timeline": timeline,
            "events": np.array(self._events, dtype=EVENTS_DTYPE),
            "eval": np.array(self._eval, dtype=EVAL_DTYPE),
            "checkpoints": np.array(self._checkpoints, dtype=CHECKPOINTS_DTYPE),
            "ranks": self._ranks,
        }

    def _summary(
        self, given: dict[str, Any] | None, arrays: dict[str, np.ndarray], complete: bool
    ) -> dict[str, Any]:
        given = dict(given or {})
        tl, ev, evl, ck = (arrays[k] for k in ("timeline", "events", "eval", "checkpoints"))
        failed = _checkpoint_failures(ev)
        kinds = {decode(k) for k in ev["kind"]}
        last_eval = evl[-1] if len(evl) else None
        duration = float(tl["t_end"][-1]) if len(tl) else 0.0
        samples = int(tl["samples"].sum()) if len(tl) else 0
        derived: dict[str, Any] = {
            "throughput_sps": samples / duration if duration > 0 else math.nan,
            "final_auc": float(last_eval["auc"]) if last_eval is not None else math.nan,
            "final_logloss": float(last_eval["logloss"]) if last_eval is not None else math.nan,
            "final_accuracy": (
                float(last_eval["accuracy"]) if last_eval is not None else math.nan
            ),
            "teacher_auc": math.nan,
            "param_checksum": "",
            "steps_completed": len(tl),
            "samples_completed": samples,
            "lost": "abort" in kinds,
            "recovery_latency_s": math.nan,
            "stall_s": 0.0,
            "lost_samples": 0,
            "parity_bytes": 0,
            "checkpoint_bytes": int(ck["bytes"].sum()) if len(ck) else 0,
            "emulated": "emulated_kill" in kinds
            or (self._attrs["failure_mode"] == "emulated" and "kill" in kinds),
            "recoveries": 0,
            "reexecuted_steps": int(tl["reexec"].sum()) if len(tl) else 0,
            "time_lost_s": 0.0,
            # a checkpoint step with a failed part or commit; every one failed: nothing protected the run
            "checkpoints_failed": len(failed),
            "unprotected": bool(failed) and len(ck) == 0,
            **DISTURBANCE_DEFAULTS,
            **REPAIR_DEFAULTS,
            **_storage_fields(self._attrs["config"]),
        }
        out: dict[str, Any] = {}
        defaulted = []
        for name, typ in {**SUMMARY_FIELDS, **SUMMARY_FIELDS_V5}.items():
            value = None
            if name in given and given[name] is not None:
                value, problem = _to_field(typ, _py(given.pop(name)))
                if problem:
                    self._attr_warnings[f"summary/{name}"] = problem + (
                        "" if value is not None else ": the default was written")
            given.pop(name, None)
            if value is None:
                value = derived[name]
                defaulted.append(name)
            out[name] = _clean_str(value)
        for name, value in given.items():  # extra, caller-defined attributes
            value = _py(value)
            if value is None or isinstance(value, dict | list | tuple):
                value = _as_text(value)
            out[name] = _clean_str(value)
        out["complete"] = complete
        out["defaulted"] = json.dumps(defaulted)
        self._checkpoint_warning(failed, ck, bool(out["unprotected"]))
        return out

    def _checkpoint_warning(self, failed: list[tuple[int, str]], ck: np.ndarray, unprotected: bool) -> None:
        """The console line for failed checkpoints (the run's protection was not what it looked)."""
        if not failed:
            return
        steps = ", ".join(str(s) for s, _ in failed[:5]) + (", ..." if len(failed) > 5 else "")
        first = f"first error (step {failed[0][0]}, {_short(failed[0][1], 200)})"
        if unprotected:
            self.warnings.append(f"every checkpoint failed ({len(failed)}: steps {steps}): the run was "
                                 f"unprotected, no checkpoint was ever committed; {first}")
        else:
            newest = f", the newest after step {int(ck['step'].max())}" if len(ck) else ""
            self.warnings.append(f"{len(failed)} checkpoint(s) failed (steps {steps}); {len(ck)} committed"
                                 f"{newest}; {first}")

    # -- writing -------------------------------------------------------------
    def _put_attr(self, attrs: h5py.AttributeManager, key: str, value: Any, where: str) -> None:
        """Store one attribute; what h5py cannot store as given is stored as text, or dropped,
        and named in ``attr_warnings``: one odd value must never cost the run its result file."""
        try:
            attrs[key] = value
            return
        except Exception as exc:  # h5py raises TypeError, ValueError, OverflowError, ... by value
            reason = _short(f"{type(exc).__name__}: {exc}", 120)
        try:
            attrs[key] = _as_text(value)
            self._attr_warnings[f"{where}/{key}"] = f"stored as text ({reason})"
        except Exception:  # even text refused: drop it, but say so
            self._attr_warnings[f"{where}/{key}"] = f"dropped ({reason})"

    def _image(self, summ: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
        """The whole HDF5 file, built in memory: HDF5 never writes to the disk itself, so a full
        disk is one ``OSError`` from our own write, not errors raised inside HDF5 (some from object
        destructors, printed as tracebacks) that leave no clean way out."""
        with h5py.File(f"mpiec-result-{id(self)}.h5", "w", driver="core", backing_store=False) as f:
            for key, value in self._attrs.items():
                self._put_attr(f.attrs, key, value, "root")
            for name, arr in arrays.items():
                ds = f.create_dataset(
                    name, data=arr, maxshape=(None,), chunks=(max(1, min(len(arr), 65536)),)
                )
                ds.attrs["units"] = json.dumps(_UNITS[name])
            if self._final_model:
                model = f.create_group(FINAL_MODEL)
                for name, arr in self._final_model.items():
                    model.create_dataset(name, data=arr)
            grp = f.create_group("summary")
            for key, value in summ.items():
                self._put_attr(grp.attrs, key, value, "summary")
            if self._attr_warnings:
                grp.attrs["attr_warnings"] = _as_text(self._attr_warnings)
            f.flush()
            return f.id.get_file_image()

    def _write(self, summary: dict[str, Any] | None, complete: bool) -> None:
        self._attr_warnings = {}
        self.warnings = []
        arrays = self._arrays()
        summ = self._summary(summary, arrays, complete)
        image = self._image(summ, arrays)
        self.warnings += [f"result attribute {k}: {v}" for k, v in self._attr_warnings.items()]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                view = memoryview(image)
                while view:
                    n = _write_some(fd, view[: 8 << 20])
                    if not n:  # no progress and no error: looping would spin for ever
                        raise OSError(errno.EIO, "the file system accepted no bytes")
                    view = view[n:]
                os.fsync(fd)  # the rename below must never publish a file whose data is not on disk
            finally:
                os.close(fd)
            self._publish(tmp)
        except ResultFileError:
            raise
        except OSError as exc:
            raise ResultWriteError(self.path, exc) from None
        finally:
            with contextlib.suppress(OSError):  # gone once published; a failure here must not mask the first
                tmp.unlink()
        self._last_flush = time.monotonic()

    def _publish(self, tmp: Path) -> None:
        """Move the finished temporary file to the target, atomically.

        The first time, without ``overwrite``, a hard link makes "create only if
        absent" atomic: a file that appeared at the target since ``__init__`` is
        kept, our data is saved beside it (``<stem>.<pid>.h5``, which becomes the
        writer's target from then on) and ``ResultExistsError`` names both.
        """
        if self._written or self._overwrite:
            os.replace(tmp, self.path)
        else:
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                keep = self.path.with_name(f"{self.path.stem}.{os.getpid()}{self.path.suffix}")
                os.replace(tmp, keep)
                target, self.path, self._written = self.path, keep, True  # later writes go there
                raise ResultExistsError(
                    f"result file {target} appeared while the run was going; "
                    f"this run's results were saved as {keep}"
                ) from None
            except OSError:  # no hard links on this file system
                if self.path.exists():
                    raise ResultExistsError(f"result file {self.path} already exists") from None
                os.replace(tmp, self.path)
            else:
                tmp.unlink()
        self._written = True

    def flush_partial(self, summary: dict[str, Any] | None = None) -> Path:
        """Write a complete snapshot of what is buffered (``summary.complete =
        False``) over the target, atomically. The writer stays open."""
        self._check_open()
        self._write(summary, complete=False)
        return self.path

    def close(self, summary: dict[str, Any] | None = None) -> Path:
        """Write the final file (``summary.complete = True``) and close.

        Idempotent: a second call is a no-op. Safe to call from a ``finally``
        with a partial summary (e.g. ``{"lost": True}``): missing values are
        derived or defaulted and listed in ``summary.defaulted``.
        """
        if self._closed:
            return self.path
        self._write(summary, complete=True)
        self._closed = True
        return self.path

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._closed:
            self.close({"lost": True} if exc_type is not None else None)


@dataclass
class RunResult:
    """One run's result file, as read and validated by ``read_result``.

    ``attrs['config']`` is the parsed config dict; byte-string fields of the
    structured arrays stay bytes (use ``decode``). What the summary holds as JSON is
    read through this module's typed accessors (``recoveries``, ``unfired_kills``,
    ``strategy_params``, ``overheads``), never decoded by a study.
    """

    path: Path
    attrs: dict[str, Any]
    timeline: np.ndarray
    events: np.ndarray
    eval: np.ndarray
    checkpoints: np.ndarray
    ranks: np.ndarray
    summary: dict[str, Any] = field(default_factory=dict)
    final_model: FinalModel | None = None  # the trained model, when the run wrote it (output.final_model)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def strategy(self) -> str:
        return str(self.attrs["strategy"])

    @property
    def seed(self) -> Any:
        return self.attrs.get("seed")

    @property
    def created(self) -> str:
        return str(self.attrs.get("created", ""))

    @property
    def config(self) -> dict[str, Any]:
        return self.attrs["config"]

    @property
    def complete(self) -> bool:
        return bool(self.summary.get("complete", False))

    def event_list(self) -> list[dict[str, Any]]:
        """Events as dicts with str fields."""
        return [
            {name: _py(decode(rec[name])) for name in columns(EVENTS_DTYPE)}
            for rec in self.events
        ]


@dataclass(frozen=True)
class Overheads:
    """A run's costs as its summary states them, seconds (docs/results-schema.md): ``time_lost_s``
    (every recovery's time lost, injected stalls' included), ``stall_time_lost_s`` (the injected
    stalls' share; 0 where the file has none), ``checkpoint_critical_s`` (checkpoint stall on the
    critical path) and ``unproductive_s``; nan where the file does not record a figure."""

    time_lost_s: float
    stall_time_lost_s: float
    checkpoint_critical_s: float
    unproductive_s: float

    @property
    def recovery_time_lost_s(self) -> float:
        """The time lost to recoveries: ``time_lost_s`` less the injected stalls' share."""
        return self.time_lost_s - self.stall_time_lost_s


def _finite(x: Any) -> float:
    """``x`` as a float when it is a real, finite number (bools not), else nan."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return math.nan
    v = float(x)
    return v if math.isfinite(v) else math.nan


def _json_list(raw: Any) -> list[Any] | None:
    """A summary attribute that holds a JSON list (or the list itself), decoded; None when it is
    neither."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    return list(raw) if isinstance(raw, list) else None


# -- typed accessors: the one place a study reads what a result's summary and config hold as JSON -----
# Functions of a ``RunResult`` (or any object with its ``summary`` / ``config``: the studies' tests pass
# stand-ins), so no study decodes a result's JSON itself.
def recoveries(r: Any) -> list[dict[str, Any]]:
    """``summary.recovery_breakdown`` decoded: one dict per recovery (``epoch``, ``kill``, the phases
    ``detection_s`` … ``restore_s``, ``recovery_s``, ``time_lost_s`` …; the keys are in
    docs/results-schema.md); [] when absent or unreadable."""
    return [x for x in _json_list(r.summary.get("recovery_breakdown")) or [] if isinstance(x, dict)]


def unfired_kills(r: Any) -> list[Any] | None:
    """``summary.kills_unfired`` decoded (``{"kill": …, "why": …}`` per planned kill that never fired);
    [] in older files and where it is not a list; None when it is not readable JSON."""
    try:
        doc = json.loads(str(r.summary.get("kills_unfired") or "[]"))
    except ValueError:
        return None
    return doc if isinstance(doc, list) else []


def strategy_params(r: Any) -> dict[str, Any]:
    """The run's ``strategy.params`` as its config holds them (the keys it was given; the strategy's
    defaults are not filled in: ``mpiec.launch.resolve.typed_params`` does that on a ``Config``); {} when the
    config has none. A config is free-form JSON in a result file: nothing here assumes its shape."""
    strategy = r.config.get("strategy") if isinstance(r.config, dict) else None
    params = strategy.get("params") if isinstance(strategy, dict) else None
    return dict(params) if isinstance(params, dict) else {}


def overheads(r: Any) -> Overheads:
    """What the summary says the run's failures and checkpoints cost (``Overheads``)."""
    s = r.summary
    stall = _finite(s.get("stall_time_lost_s"))
    return Overheads(time_lost_s=float(s.get("time_lost_s", math.nan)),
                     stall_time_lost_s=stall if math.isfinite(stall) else 0.0,
                     checkpoint_critical_s=_finite(s.get("checkpoint_critical_s")),
                     unproductive_s=_finite(s.get("unproductive_s")))


@dataclass(frozen=True)
class FinalModel:
    """A run's trained model as its result file holds it (``output.final_model``)."""

    dense: np.ndarray  # float32, the flat dense parameters
    embeddings: np.ndarray  # float32 (global rows, dim): the embedding weights


def read_final_model(path: str | Path) -> FinalModel | None:
    """The ``final_model`` group of a result file (``RunResult.final_model`` holds the same); None
    when the run did not write one (a run without ``output.final_model``, or one that did not
    complete). ``ResultFileError`` names a group that is there but malformed."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            return _final_model_of(path, f)
    except ResultFileError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise ResultFileError(f"result file {path}: unreadable ({' '.join(str(exc).split())})") from None


def _final_model_of(path: Path, f: h5py.File) -> FinalModel | None:
    if FINAL_MODEL not in f:
        return None
    grp = f[FINAL_MODEL]
    if not isinstance(grp, h5py.Group) or any(
            k not in grp or not isinstance(grp[k], h5py.Dataset) for k in ("dense", "embeddings")):
        raise ResultFileError(f"result file {path}: group {FINAL_MODEL} lacks dense or embeddings")
    dense, emb = np.asarray(grp["dense"][()]), np.asarray(grp["embeddings"][()])
    if emb.ndim != 2 or emb.dtype != np.float32 or dense.ndim != 1 or dense.dtype != np.float32:
        raise ResultFileError(f"result file {path}: {FINAL_MODEL} holds {dense.dtype} {dense.shape} and "
                              f"{emb.dtype} {emb.shape}, not float32 vectors and rows")
    return FinalModel(dense, emb)


def read_result(path: str | Path) -> RunResult:
    """Read and validate one result file; ``ResultFileError`` if it is not a
    complete mpiec result file of a supported schema version."""
    path = Path(path)
    if not path.exists():
        raise ResultFileError(f"result file {path}: does not exist")
    if not path.is_file():
        raise ResultFileError(f"result file {path}: is not a file")
    try:
        is_hdf5 = h5py.is_hdf5(path)
    except OSError as exc:
        raise ResultFileError(f"result file {path}: cannot be read ({exc})") from None
    if not is_hdf5:
        raise ResultFileError(f"result file {path}: not an HDF5 file")
    try:
        with h5py.File(path, "r") as f:
            return _read_open(path, f)
    except ResultFileError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as exc:
        msg = " ".join(str(exc).split())
        raise ResultFileError(f"result file {path}: unreadable ({msg})") from None


def _read_open(path: Path, f: h5py.File) -> RunResult:
    def fail(problem: str) -> ResultFileError:
        return ResultFileError(f"result file {path}: {problem}")

    if "schema_version" not in f.attrs:
        raise fail("no schema_version attribute (not an mpiec result file)")
    version = _py(f.attrs["schema_version"])
    if not isinstance(version, int) or version not in SUPPORTED_SCHEMA_VERSIONS:
        newest = max(SUPPORTED_SCHEMA_VERSIONS)
        hint = "; upgrade mpiec" if isinstance(version, int) and version > newest else ""
        raise fail(f"unsupported schema_version {version!r} (this mpiec reads "
                   f"{', '.join(map(str, sorted(SUPPORTED_SCHEMA_VERSIONS)))}){hint}")
    missing = [k for k in REQUIRED_ROOT_ATTRS if k not in f.attrs]
    if missing:
        raise fail(f"missing root attribute(s) {', '.join(missing)}")
    attrs = {k: _py(v) for k, v in f.attrs.items()}
    try:
        json_attrs = json.loads(attrs.pop("json_attrs", '["config"]'))
        for key in json_attrs:
            if key in attrs:
                attrs[key] = json.loads(attrs[key])
    except (json.JSONDecodeError, TypeError) as exc:
        raise fail(f"root attribute is not valid JSON ({exc})") from None
    if not isinstance(attrs["config"], dict):
        raise fail("root attribute config is not a JSON object")
    _check_types(path, attrs, _ROOT_TYPES, "root attribute")

    missing = [k for k in DATASET_DTYPES if k not in f or not isinstance(f[k], h5py.Dataset)]
    if missing:
        raise fail(f"missing dataset(s) {', '.join(missing)}")
    arrays: dict[str, np.ndarray] = {}
    for name, dtype in DATASET_DTYPES.items():
        ds = f[name]
        names = ds.dtype.names or ()
        optional = ((_ADDED_IN_2.get(name, ()) if version < 2 else ())
                    + (_ADDED_IN_3.get(name, ()) if version < 3 else ())
                    + (_ADDED_IN_4.get(name, ()) if version < 4 else ())
                    + (_ADDED_IN_6.get(name, ()) if version < 6 else ()))
        expected = columns(dtype)
        cols = [c for c in expected if c not in names and c not in optional]
        if cols:
            raise fail(f"dataset {name} lacks column(s) {', '.join(cols)}")
        if ds.ndim != 1:
            raise fail(f"dataset {name} is not one-dimensional")
        for c in expected:
            # A text column where a number belongs would pass here and end in a traceback in
            # whatever analysis first does arithmetic on it.
            if c in names and (dtype[c].kind in _NUMERIC_KINDS) != (ds.dtype[c].kind in _NUMERIC_KINDS):
                want = "numbers" if dtype[c].kind in _NUMERIC_KINDS else "text"
                raise fail(f"dataset {name} column {c} holds {ds.dtype[c]}, not {want}")
        raw = ds[()]
        if any(c not in names for c in expected):
            full = np.zeros(raw.shape, dtype=dtype)
            for c, unknown in _UNKNOWN.get(name, {}).items():
                full[c] = unknown
            for c in names:
                if c in expected:
                    full[c] = raw[c]
            raw = full
        arrays[name] = raw

    if "summary" not in f or not isinstance(f["summary"], h5py.Group):
        raise fail("missing summary group (run did not finish writing)")
    summary = {k: _py(v) for k, v in f["summary"].attrs.items()}
    if version == 1:
        for key in _ADDED_IN_2["summary"]:
            summary.setdefault(key, SUMMARY_FIELDS[key]())
    missing = [k for k in (*SUMMARY_FIELDS, *_WRITER_SUMMARY_FIELDS) if k not in summary]
    if missing:
        raise fail(f"missing summary attribute(s) {', '.join(missing)}")
    _check_types(path, summary, {**SUMMARY_FIELDS, "complete": bool}, "summary attribute")
    try:
        summary["defaulted"] = json.loads(summary["defaulted"])
    except (json.JSONDecodeError, TypeError):
        raise fail("summary attribute defaulted is not valid JSON") from None
    if not isinstance(summary["defaulted"], list):
        raise fail("summary attribute defaulted is not a JSON list")

    return RunResult(path=path, attrs=attrs, summary=summary, final_model=_final_model_of(path, f), **arrays)


_NUMERIC_KINDS = frozenset("biuf")
#: Root attributes the readers use, with their types (the others are informative text).
_ROOT_TYPES: dict[str, type] = {"mpiec_version": str, "created": str, "strategy": str, "seed": int,
                                "failure_mode": str, "ulfm": bool, "variant": str}


def _check_types(path: Path, values: dict[str, Any], types: dict[str, type], what: str) -> None:
    """Hold each present attribute of ``types`` to its type, in place.

    Uses the config's field validator, so a mistyped value is one line naming the file and the
    attribute instead of a traceback wherever the report first uses it. Ints pass as floats (the
    config's rule), and 0/1 as bools, which other HDF5 tools often store as small integers; any
    other value is refused rather than cast (``bool("no")`` is True: a run would read as lost).
    """
    from mpiec.config.schema import coerce  # kept local: only the reader needs the config's rules
    from mpiec.errors import ConfigError

    for key, typ in types.items():
        if key not in values:
            continue
        value = values[key]
        if typ is bool and type(value) is int and value in (0, 1):
            value = bool(value)
        try:
            values[key] = coerce(value, typ, f"{what} {key}", finite=False)
        except ConfigError as exc:
            raise ResultFileError(f"result file {path}: {_short_line(str(exc))}") from None


def _short_line(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters: a value is shown as the file holds it."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
