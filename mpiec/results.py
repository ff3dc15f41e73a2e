"""The HDF5 result file: one file per run, written only by the monitor rank.

This module owns the on-disk schema (documented in ``docs/results-schema.md``):
the record dtypes the runtime fills (``TIMELINE_DTYPE`` …), the writer and the
validating reader. It contains no MPI.

Invariants:

* **Atomic.** The writer builds the whole file in a temporary file next to the
  target (``.<name>.<pid>.tmp``) and ``os.replace``-s it over the target. An
  interrupted run never leaves a half-written target and never damages an
  existing file. An existing target is refused unless ``overwrite=True``.
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
* **Validated reading.** ``read_result`` raises ``ResultFileError`` with a
  one-line message naming the file and the problem for anything that is not a
  supported mpiec result file.
"""

from __future__ import annotations

import contextlib
import json
import math
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
    "ResultExistsError",
    "ResultWriter",
    "RunResult",
    "read_result",
    "decode",
]

SCHEMA_VERSION = 4
SUPPORTED_SCHEMA_VERSIONS = frozenset({1, 2, 3, 4})
#: Columns and summary attributes added in version 2; a version-1 file reads with defaults.
_ADDED_IN_2 = {"timeline": ("epoch", "reexec"), "ranks": ("digest",),
               "summary": ("recoveries", "reexecuted_steps", "time_lost_s")}
#: Columns added in version 3; an older file reads them as "unknown" (``_UNKNOWN``), not as 0.
_ADDED_IN_3 = {"checkpoints": ("rows", "stall_s"), "ranks": ("node",)}
#: Columns added in version 4 (read as unknown from older files, like version 3's).
_ADDED_IN_4 = {"ranks": ("cpu_s",)}
_UNKNOWN = {"checkpoints": {"rows": -1, "stall_s": math.nan}, "ranks": {"node": -1, "cpu_s": math.nan}}

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


class ResultWriter:
    """Buffers one run's records in memory and writes the HDF5 file atomically.

    ``attrs`` are the root attributes; ``config``, ``strategy``, ``seed``,
    ``failure_mode`` ("ulfm" | "emulated") and ``ulfm`` (bool) are required,
    ``schema_version``, ``mpiec_version``, ``created``, the numpy/h5py/python
    versions are filled in unless given. ``autoflush_s`` makes ``add_steps``
    call ``flush_partial()`` at most that often, so a run killed outright
    still leaves a readable (incomplete) file.
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
        self._closed = False
        self._overwrite = overwrite
        self._written = False  # the target is ours once we wrote it
        self._autoflush_s = autoflush_s
        self._last_flush = time.monotonic()

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
            if value is None or isinstance(value, dict | list | tuple):
                out[key] = json.dumps(value, sort_keys=True, default=str)
                json_attrs.append(key)
            elif isinstance(value, Path):
                out[key] = str(value)
            elif isinstance(value, str):
                out[key] = _clean_str(value)
            elif not isinstance(value, bool | int | float | str):
                raise ValueError(f"ResultWriter: root attribute {key!r} has type "
                                 f"{type(value).__name__}, expected a scalar or JSON value")
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
            if arr.dtype.names is None or set(arr.dtype.names) != set(TIMELINE_DTYPE.names):
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
            if arr.dtype.names is None or set(arr.dtype.names) != set(RANKS_DTYPE.names):
                raise ValueError(f"set_ranks: records must have RANKS_DTYPE, got {arr.dtype}")
            arr = arr.astype(RANKS_DTYPE)
        self._ranks = arr.copy()

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
        }
        out: dict[str, Any] = {}
        defaulted = []
        for name, typ in SUMMARY_FIELDS.items():
            if name in given and given[name] is not None:
                value = _py(given.pop(name))
            else:
                given.pop(name, None)
                value = derived[name]
                defaulted.append(name)
            out[name] = _clean_str(typ(value))
        for name, value in given.items():  # extra, caller-defined attributes
            value = _py(value)
            if value is None or isinstance(value, dict | list | tuple):
                value = json.dumps(value, sort_keys=True, default=str)
            out[name] = _clean_str(value)
        out["complete"] = complete
        out["defaulted"] = json.dumps(defaulted)
        return out

    # -- writing -------------------------------------------------------------
    def _write(self, summary: dict[str, Any] | None, complete: bool) -> None:
        arrays = self._arrays()
        summ = self._summary(summary, arrays, complete)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with h5py.File(tmp, "w") as f:
                for key, value in self._attrs.items():
                    f.attrs[key] = value
                for name, arr in arrays.items():
                    ds = f.create_dataset(
                        name, data=arr, maxshape=(None,), chunks=(max(1, min(len(arr), 65536)),)
                    )
                    ds.attrs["units"] = json.dumps(_UNITS[name])
                grp = f.create_group("summary")
                for key, value in summ.items():
                    grp.attrs[key] = value
            self._publish(tmp)
        finally:
            with contextlib.suppress(FileNotFoundError):
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
    structured arrays stay bytes (use ``decode``).
    """

    path: Path
    attrs: dict[str, Any]
    timeline: np.ndarray
    events: np.ndarray
    eval: np.ndarray
    checkpoints: np.ndarray
    ranks: np.ndarray
    summary: dict[str, Any] = field(default_factory=dict)

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
            {name: _py(decode(rec[name])) for name in EVENTS_DTYPE.names}
            for rec in self.events
        ]


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

    missing = [k for k in DATASET_DTYPES if k not in f or not isinstance(f[k], h5py.Dataset)]
    if missing:
        raise fail(f"missing dataset(s) {', '.join(missing)}")
    arrays: dict[str, np.ndarray] = {}
    for name, dtype in DATASET_DTYPES.items():
        ds = f[name]
        names = ds.dtype.names or ()
        optional = ((_ADDED_IN_2.get(name, ()) if version < 2 else ())
                    + (_ADDED_IN_3.get(name, ()) if version < 3 else ())
                    + (_ADDED_IN_4.get(name, ()) if version < 4 else ()))
        cols = [c for c in dtype.names if c not in names and c not in optional]
        if cols:
            raise fail(f"dataset {name} lacks column(s) {', '.join(cols)}")
        if ds.ndim != 1:
            raise fail(f"dataset {name} is not one-dimensional")
        raw = ds[()]
        if any(c not in names for c in dtype.names):
            full = np.zeros(raw.shape, dtype=dtype)
            for c, unknown in _UNKNOWN.get(name, {}).items():
                full[c] = unknown
            for c in names:
                if c in dtype.names:
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
    for key in ("lost", "emulated", "complete"):
        summary[key] = bool(summary[key])
    try:
        summary["defaulted"] = json.loads(summary["defaulted"])
    except (json.JSONDecodeError, TypeError):
        raise fail("summary attribute defaulted is not valid JSON") from None

    return RunResult(path=path, attrs=attrs, summary=summary, **arrays)
