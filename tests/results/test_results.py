"""Unit tests of the result-file writer and validating reader (no MPI)."""

from __future__ import annotations

import errno
import json
import math
import os

import h5py
import numpy as np
import pytest

from mpiec.errors import MpiecError, ResultFileError
from mpiec.results import (
    CHECKPOINTS_DTYPE,
    EVAL_DTYPE,
    EVENTS_DTYPE,
    RANKS_DTYPE,
    SCHEMA_VERSION,
    SUMMARY_FIELDS,
    SUMMARY_FIELDS_V5,
    TIMELINE_DTYPE,
    ResultExistsError,
    ResultWriteError,
    ResultWriter,
    decode,
    read_result,
)
from mpiec.results import file as results

ATTRS = {
    "config": {"model": {"dim": 16}, "strategy": {"name": "ecrm", "k": 2}},
    "strategy": "ecrm",
    "seed": 7,
    "failure_mode": "ulfm",
    "ulfm": True,
    "mpi_library": "Open MPI",
    "mpi_version": "Open MPI v5.0.8, package: Open MPI\x00",  # as MPI returns it
    "hosts": ["n1", "n2"],
    "detector": {"timeout_s": 1.0},
}


def steps(start: int, n: int, samples: int = 64) -> np.ndarray:
    rec = np.zeros(n, TIMELINE_DTYPE)
    rec["step"] = np.arange(start, start + n)
    rec["dt"] = 0.5
    rec["t_end"] = (rec["step"] + 1) * 0.5
    rec["samples"] = samples
    rec["loss"] = 0.69
    rec["t_compute"] = 0.3
    return rec


def test_dtype_fields_are_the_schema():
    assert TIMELINE_DTYPE.names == (
        "step", "t_end", "dt", "samples", "loss", "t_data", "t_compute", "t_comm",
        "t_wait", "t_server", "t_strategy", "epoch", "reexec", "trainers", "servers",
    )
    assert TIMELINE_DTYPE["loss"] == np.float32
    assert EVENTS_DTYPE["kind"].itemsize == 16 and EVENTS_DTYPE["detail"].itemsize == 256
    assert EVENTS_DTYPE["role"].itemsize == 8 and EVENTS_DTYPE["rank"] == np.int32
    assert EVAL_DTYPE.names == ("step", "samples_seen", "auc", "logloss", "accuracy")
    assert CHECKPOINTS_DTYPE.names == ("step", "kind", "bytes", "seconds", "bits", "rows", "stall_s")
    assert RANKS_DTYPE["host"].itemsize == 64
    assert SCHEMA_VERSION == 6
    assert RANKS_DTYPE.names[-1] == "cpu_s"


def test_roundtrip(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 10))
    w.add_steps(steps(10, 5)[0])  # a single record is accepted
    w.add_event(3, 1.25, "kill", rank=4, role="server", role_index=1, detail={"plan": "x"})
    w.add_event(4, 1.75, "detect")
    w.add_eval(10, 640, 0.75, 0.5, 0.8)
    w.add_checkpoint(5, "diff", 1234, 0.01, bits=4, rows=77, stall_s=0.002)
    w.add_checkpoint(9, "full", 4321, 0.02)  # rows and stall not known
    ranks = np.zeros(2, RANKS_DTYPE)
    ranks["rank"] = [0, 1]
    ranks["role"] = [b"monitor", b"trainer"]
    ranks["host"] = b"n1"
    w.set_ranks(ranks)
    assert not path.exists()  # nothing before close / flush
    w.close({"throughput_sps": 123.5, "param_checksum": "abc\x00", "lost": False,
             "parity_bytes": 99, "note": "extra"})

    r = read_result(path)
    assert r.attrs["config"] == ATTRS["config"]
    assert r.attrs["hosts"] == ["n1", "n2"] and r.attrs["detector"] == {"timeout_s": 1.0}
    assert r.attrs["schema_version"] == SCHEMA_VERSION and r.attrs["ulfm"] is True
    assert r.attrs["mpi_version"] == "Open MPI v5.0.8, package: Open MPI"
    assert r.strategy == "ecrm" and r.seed == 7
    assert len(r.timeline) == 11 and r.timeline["step"][-1] == 10
    assert r.timeline.dtype == TIMELINE_DTYPE
    ev = r.event_list()
    assert ev[0]["kind"] == "kill" and ev[0]["rank"] == 4 and ev[0]["role"] == "server"
    assert json.loads(ev[0]["detail"]) == {"plan": "x"}
    assert ev[1]["rank"] == -1 and ev[1]["role_index"] == -1
    assert r.eval["auc"][0] == 0.75
    assert decode(r.checkpoints["kind"][0]) == "diff" and r.checkpoints["bits"][0] == 4
    assert r.checkpoints["rows"][0] == 77 and r.checkpoints["stall_s"][0] == 0.002
    assert r.checkpoints["rows"][1] == -1 and math.isnan(r.checkpoints["stall_s"][1])
    assert decode(r.ranks["role"][1]) == "trainer"
    s = r.summary
    assert s["throughput_sps"] == 123.5 and s["param_checksum"] == "abc"
    assert s["parity_bytes"] == 99 and s["note"] == "extra"
    assert s["complete"] is True and s["lost"] is False
    # derived values for what the caller did not give, listed as defaulted
    assert s["steps_completed"] == 11 and s["samples_completed"] == 11 * 64
    assert s["final_auc"] == 0.75 and s["checkpoint_bytes"] == 1234 + 4321
    assert math.isnan(s["recovery_latency_s"])
    assert "final_auc" in s["defaulted"] and "throughput_sps" not in s["defaulted"]
    assert set(SUMMARY_FIELDS) <= set(s)
    # units are stored with each dataset
    with h5py.File(path) as f:
        assert json.loads(f["timeline"].attrs["units"])["dt"] == "s"


def test_refuses_overwrite_and_overwrite_flag(tmp_path):
    path = tmp_path / "run.h5"
    path.write_bytes(b"precious")
    with pytest.raises(ResultExistsError, match="already exists"):
        ResultWriter(path, ATTRS)
    assert isinstance(ResultExistsError("x"), ResultFileError | FileExistsError)
    w = ResultWriter(path, ATTRS, overwrite=True)
    w.close({})
    assert read_result(path).summary["complete"]


def _full_disk(free: int):
    """``results._write_some`` of a disk with ``free`` bytes left (ENOSPC beyond, as a full one)."""
    left = [free]

    def write(fd, buf):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = os.write(fd, buf[: left[0]])
        left[0] -= n
        return n

    return write


@pytest.mark.parametrize("free", [0, 4096])
def test_interrupted_write_leaves_existing_file_and_no_temp(tmp_path, monkeypatch, free):
    path = tmp_path / "run.h5"
    path.write_bytes(b"precious")
    w = ResultWriter(path, ATTRS, overwrite=True)
    w.add_steps(steps(0, 3))
    monkeypatch.setattr(results, "_write_some", _full_disk(free))
    with pytest.raises(ResultWriteError) as ei:
        w.close({})
    # one line naming the file and the error; a ResultFileError (the CLI's one-line family) and an OSError
    assert str(ei.value) == f"result file {path}: cannot write (No space left on device [ENOSPC])"
    assert ei.value.errno == errno.ENOSPC and isinstance(ei.value, OSError | MpiecError)
    assert path.read_bytes() == b"precious"
    assert os.listdir(tmp_path) == ["run.h5"]  # temp file cleaned up
    assert not w.closed
    monkeypatch.setattr(results, "_write_some", lambda fd, buf: os.write(fd, buf))
    w.close({})  # space again: a retry writes the run
    assert len(read_result(path).timeline) == 3


def test_a_new_target_on_a_full_disk_is_not_created(tmp_path, monkeypatch):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    monkeypatch.setattr(results, "_write_some", _full_disk(100))
    with pytest.raises(ResultWriteError, match=r"run\.h5: cannot write \(No space left on device \[ENOSPC"):
        w.flush_partial()
    assert os.listdir(tmp_path) == []


def test_a_written_file_is_fsynced_before_it_is_published(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(results.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    ResultWriter(tmp_path / "run.h5", ATTRS).close({})
    assert synced


def test_close_is_idempotent_and_locks_writer(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    w.close({"lost": True})
    mtime = path.stat().st_mtime_ns
    w.close({"lost": False})  # no-op
    assert path.stat().st_mtime_ns == mtime
    assert read_result(path).summary["lost"] is True
    with pytest.raises(RuntimeError, match="closed"):
        w.add_steps(steps(0, 1))


def test_flush_partial_leaves_readable_incomplete_file(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 4))
    w.flush_partial()
    r = read_result(path)
    assert r.summary["complete"] is False and len(r.timeline) == 4
    w.add_steps(steps(4, 4))
    w.flush_partial()  # re-flush over its own file is allowed
    assert len(read_result(path).timeline) == 8
    w.close({})
    assert read_result(path).summary["complete"] is True


def test_autoflush(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS, autoflush_s=0.0)
    w.add_steps(steps(0, 2))
    assert len(read_result(path).timeline) == 2


def test_context_manager_marks_lost_on_exception(tmp_path):
    path = tmp_path / "run.h5"
    with pytest.raises(ZeroDivisionError), ResultWriter(path, ATTRS) as w:
        w.add_steps(steps(0, 2))
        1 / 0  # noqa: B018
    assert read_result(path).summary["lost"] is True


def test_emulated_and_lost_derived_from_events(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, {**ATTRS, "failure_mode": "emulated", "ulfm": False})
    w.add_event(1, 0.1, "kill", rank=2)
    w.add_event(2, 0.2, "abort")
    w.close({})
    s = read_result(path).summary
    assert s["emulated"] is True and s["lost"] is True


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="strategy"):
        ResultWriter(tmp_path / "a.h5", {k: v for k, v in ATTRS.items() if k != "strategy"})
    with pytest.raises(ValueError, match="failure_mode"):
        ResultWriter(tmp_path / "a.h5", {**ATTRS, "failure_mode": "maybe"})
    with pytest.raises(ResultFileError, match="directory does not exist"):
        ResultWriter(tmp_path / "nope" / "a.h5", ATTRS)
    w = ResultWriter(tmp_path / "a.h5", ATTRS)
    with pytest.raises(ValueError, match="TIMELINE_DTYPE"):
        w.add_steps(np.zeros(3, EVAL_DTYPE))
    with pytest.raises(ValueError, match="longer than 16"):
        w.add_event(0, 0.0, "x" * 17)
    w.add_event(0, 0.0, "kill", detail="d" * 1000)  # long detail is truncated, not fatal
    w.close({})
    detail = decode(read_result(tmp_path / "a.h5").events["detail"][0])
    assert len(detail) == 256 and detail.endswith("...")


# -- reader validation -------------------------------------------------------

def good_file(tmp_path):
    path = tmp_path / "good.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 3))
    w.close({})
    return path


def test_missing_file(tmp_path):
    with pytest.raises(ResultFileError, match=r"nope\.h5: does not exist"):
        read_result(tmp_path / "nope.h5")


def test_not_hdf5(tmp_path):
    p = tmp_path / "x.h5"
    p.write_text("hello")
    with pytest.raises(ResultFileError, match=r"x\.h5: not an HDF5 file"):
        read_result(p)


def test_truncated_file(tmp_path):
    p = good_file(tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ResultFileError, match=r"good\.h5") as ei:
        read_result(p)
    assert "\n" not in str(ei.value)


def test_not_mpiec(tmp_path):
    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f["x"] = [1, 2]
    with pytest.raises(ResultFileError, match="no schema_version"):
        read_result(p)


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0])
def test_unsupported_version(tmp_path, version):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        f.attrs["schema_version"] = version
    with pytest.raises(ResultFileError, match=f"unsupported schema_version {version}"):
        read_result(p)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: f.__delitem__("eval"), "missing dataset.* eval"),
        (lambda f: f.__delitem__("summary"), "missing summary group"),
        (lambda f: f["summary"].attrs.__delitem__("final_auc"),
         "missing summary attribute.* final_auc"),
        (lambda f: f.attrs.__delitem__("strategy"), "missing root attribute.* strategy"),
        (lambda f: f.attrs.__setitem__("config", "{not json"), "not valid JSON"),
    ],
)
def test_incomplete_files(tmp_path, mutate, message):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        mutate(f)
    with pytest.raises(ResultFileError, match=message) as ei:
        read_result(p)
    assert str(p) in str(ei.value) and "\n" not in str(ei.value)
    assert isinstance(ei.value, MpiecError)


@pytest.mark.parametrize("version", [1, 2])
def test_older_files_read_new_columns_as_unknown(tmp_path, version):
    """A file written before a column existed reads with it filled as unknown (-1, nan), not 0;
    the columns it has keep their values."""
    old_ck = np.dtype([(n, CHECKPOINTS_DTYPE[n]) for n in ("step", "kind", "bytes", "seconds", "bits")])
    p = tmp_path / "old.h5"
    w = ResultWriter(p, ATTRS)
    w.add_steps(steps(0, 3))
    w.close({})
    with h5py.File(p, "a") as f:
        del f["checkpoints"]
        f["checkpoints"] = np.array([(4, b"full", 100, 0.5, 32), (9, b"diff", 30, 0.25, 4)], old_ck)
        f.attrs["schema_version"] = version
        if version == 1:
            tl = f["timeline"][()]
            del f["timeline"]
            f["timeline"] = tl[[n for n in TIMELINE_DTYPE.names if n not in ("epoch", "reexec")]]
    ck = read_result(p).checkpoints
    assert ck.dtype == CHECKPOINTS_DTYPE
    assert list(ck["step"]) == [4, 9] and list(ck["bytes"]) == [100, 30] and list(ck["bits"]) == [32, 4]
    assert list(ck["rows"]) == [-1, -1] and np.isnan(ck["stall_s"]).all()
    assert list(ck["seconds"]) == [0.5, 0.25]


@pytest.mark.parametrize("version", [2, 3])
def test_older_ranks_tables_read_the_cpu_seconds_as_unknown(tmp_path, version):
    p = tmp_path / "old.h5"
    w = ResultWriter(p, ATTRS)
    w.add_steps(steps(0, 3))
    w.close({})
    old = np.dtype([(n, RANKS_DTYPE[n]) for n in RANKS_DTYPE.names if n != "cpu_s"])
    with h5py.File(p, "a") as f:
        del f["ranks"]
        f["ranks"] = np.array([(1, b"server", 0, b"h", 1, 42, 100.0, b"ab")], old)
        f.attrs["schema_version"] = version
    ranks = read_result(p).ranks
    assert ranks["pid"][0] == 42 and ranks["peak_rss_mb"][0] == 100.0 and np.isnan(ranks["cpu_s"][0])


def test_older_timelines_read_the_layout_as_unknown(tmp_path):
    p = tmp_path / "old.h5"
    w = ResultWriter(p, ATTRS)
    w.add_steps(steps(0, 3))
    w.close({})
    with h5py.File(p, "a") as f:
        tl = f["timeline"][()]
        del f["timeline"]
        f["timeline"] = tl[[n for n in TIMELINE_DTYPE.names if n not in ("trainers", "servers")]]
        f.attrs["schema_version"] = 5
    tl = read_result(p).timeline
    assert list(tl["step"]) == [0, 1, 2] and (tl["trainers"] == -1).all() and (tl["servers"] == -1).all()
    with h5py.File(p, "a") as f:
        f.attrs["schema_version"] = 6
    with pytest.raises(ResultFileError, match="trainers"):
        read_result(p)


def test_current_file_must_have_the_new_columns(tmp_path):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        old_ck = np.dtype([(n, CHECKPOINTS_DTYPE[n]) for n in ("step", "kind", "bytes", "seconds", "bits")])
        del f["checkpoints"]
        f["checkpoints"] = np.zeros(1, old_ck)
    with pytest.raises(ResultFileError, match="dataset checkpoints lacks column.* rows, stall_s"):
        read_result(p)


def test_missing_column(tmp_path):
    p = good_file(tmp_path)
    with h5py.File(p, "a") as f:
        del f["eval"]
        f["eval"] = np.zeros(2, np.dtype([("step", np.int64), ("auc", np.float64)]))
    with pytest.raises(ResultFileError, match="dataset eval lacks column.* samples_seen"):
        read_result(p)


def test_target_appearing_meanwhile_is_not_clobbered(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 3))
    path.write_bytes(b"someone else's")
    with pytest.raises(ResultExistsError, match="saved as") as ei:
        w.close({})
    assert path.read_bytes() == b"someone else's"
    kept = tmp_path / f"run.{os.getpid()}.h5"
    assert str(kept) in str(ei.value)
    assert len(read_result(kept).timeline) == 3
    assert not list(tmp_path.glob(".*.tmp"))
    w.add_steps(steps(3, 1))
    w.close({})  # a retry (e.g. from a finally) writes to the kept file
    assert len(read_result(kept).timeline) == 4
    assert path.read_bytes() == b"someone else's"


# -- values h5py cannot store (issue: a huge value that passed validation threw the run away) ------

def test_an_attribute_h5py_cannot_store_never_costs_the_run(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 4))
    huge = int(1e300 * 2**20)  # strategy.log_memory_mb = 1e300 in bytes: beyond any HDF5 integer
    w.set_attr("huge_root", huge)
    w.set_attr("odd_root", object())
    w.close({
        "log_memory_limit_bytes": huge,  # a strategy's own attribute
        "checkpoint_interval_steps": -huge,
        "objects": np.array([object(), 1], dtype=object),
        "steps_completed": 10**30,  # schema fields keep their type: clamped, or the default
        "throughput_sps": 10**400,
        "final_auc": "not a number",
        "lost": False,
    })
    r = read_result(path)  # written, and valid
    s = r.summary
    assert len(r.timeline) == 4 and s["complete"] is True and s["lost"] is False
    assert s["log_memory_limit_bytes"] == str(huge) and s["checkpoint_interval_steps"] == str(-huge)
    assert isinstance(s["objects"], str)
    assert s["steps_completed"] == 2**63 - 1 and s["throughput_sps"] == math.inf
    assert math.isnan(s["final_auc"]) and "final_auc" in s["defaulted"]
    assert r.attrs["huge_root"] == huge  # a root attribute round-trips exactly, as JSON
    assert r.attrs["odd_root"].startswith("<object object")
    warned = json.loads(s["attr_warnings"])
    assert set(warned) == {"summary/log_memory_limit_bytes", "summary/checkpoint_interval_steps",
                           "summary/objects", "summary/steps_completed", "summary/throughput_sps",
                           "summary/final_auc", "root/odd_root"}
    assert warned["summary/log_memory_limit_bytes"].startswith("stored as text (TypeError")
    assert "does not fit a 64-bit integer" in warned["summary/steps_completed"]
    assert warned["summary/final_auc"].endswith("is not a number: the default was written")
    assert len(w.warnings) == len(warned)  # the console's lines
    assert all(line.startswith("result attribute ") and "\n" not in line for line in w.warnings)


def test_a_clean_run_has_no_attribute_warnings(tmp_path):
    path = tmp_path / "run.h5"
    w = ResultWriter(path, ATTRS)
    w.close({"big_but_fine": 2**64 - 1, "neg": -(2**63)})
    s = read_result(path).summary
    assert "attr_warnings" not in s and w.warnings == []
    assert s["big_but_fine"] == 2**64 - 1 and s["neg"] == -(2**63)


# -- failed checkpoints: a count, and a run that no checkpoint ever protected says so ---------------

def _with_failures(tmp_path, committed: list[int], failed: list[tuple[int, str]]):
    path = tmp_path / f"ck{len(committed)}.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 40))
    for step in committed:
        w.add_checkpoint(step, "full", 1000, 0.1)
    for step, part in failed:
        w.add_event(step, step * 0.1, "checkpoint_start", rank=1, role="trainer", role_index=0)
        w.add_event(step, step * 0.1 + 0.01, "checkpoint_fail", rank=3, role="server",
                    role_index=int(part[-1]), detail=f"ck/step-{step:09d}/{part}.table.npy: cannot write "
                                                     "(No space left on device [ENOSPC])")
    w.close({})
    return w, read_result(path).summary


def test_failed_checkpoints_are_counted_by_step(tmp_path):
    w, s = _with_failures(tmp_path, [9], [(19, "server-0"), (19, "server-1"), (29, "server-1")])
    assert s["checkpoints_failed"] == 2 and s["unprotected"] is False
    assert {"checkpoints_failed", "unprotected"} <= set(s["defaulted"])  # derived by the writer
    assert w.warnings == ["2 checkpoint(s) failed (steps 19, 29); 1 committed, the newest after step 9; "
                          "first error (step 19, server 0: ck/step-000000019/server-0.table.npy: "
                          "cannot write (No space left on device [ENOSPC]))"]


def test_a_run_whose_every_checkpoint_failed_was_unprotected(tmp_path):
    w, s = _with_failures(tmp_path, [], [(9, "server-0"), (19, "server-1"), (29, "server-1")])
    assert s["checkpoints_failed"] == 3 and s["unprotected"] is True
    assert len(w.warnings) == 1 and w.warnings[0].startswith(
        "every checkpoint failed (3: steps 9, 19, 29): the run was unprotected, "
        "no checkpoint was ever committed")


def test_no_checkpoint_failure_no_warning(tmp_path):
    w, s = _with_failures(tmp_path, [9, 19], [])
    assert s["checkpoints_failed"] == 0 and s["unprotected"] is False and w.warnings == []
    assert set(SUMMARY_FIELDS_V5) <= set(s)


def test_the_caller_can_give_the_checkpoint_counts(tmp_path):
    path = tmp_path / "run.h5"
    ResultWriter(path, ATTRS).close({"checkpoints_failed": 4, "unprotected": True})
    s = read_result(path).summary
    assert s["checkpoints_failed"] == 4 and s["unprotected"] is True
    assert "checkpoints_failed" not in s["defaulted"]


def test_the_final_model_round_trips_and_is_absent_unless_written(tmp_path):
    from mpiec.results import read_final_model

    emb = np.arange(12, dtype=np.float32).reshape(4, 3)
    w = ResultWriter(tmp_path / "model.h5", ATTRS)
    w.add_steps(steps(0, 2))
    w.set_final_model(np.array([[1.5, -2.0]], dtype=np.float32), emb)
    w.close({})
    r = read_result(tmp_path / "model.h5")
    assert r.final_model is not None
    assert np.array_equal(r.final_model.embeddings, emb) and r.final_model.dense.tolist() == [1.5, -2.0]
    assert np.array_equal(read_final_model(tmp_path / "model.h5").embeddings, emb)
    w = ResultWriter(tmp_path / "plain.h5", ATTRS)
    w.add_steps(steps(0, 2))
    w.close({})
    assert read_result(tmp_path / "plain.h5").final_model is None
    assert read_final_model(tmp_path / "plain.h5") is None
    with pytest.raises(ValueError, match="2-D float32"):
        ResultWriter(tmp_path / "bad.h5", ATTRS).set_final_model(np.zeros(2, np.float32), np.zeros(3))


def test_a_malformed_final_model_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "model.h5"
    w = ResultWriter(path, ATTRS)
    w.add_steps(steps(0, 2))
    w.set_final_model(np.zeros(2, np.float32), np.zeros((2, 2), np.float32))
    w.close({})
    with h5py.File(path, "a") as f:
        del f["final_model/embeddings"]
        f["final_model/embeddings"] = np.zeros(3, np.float64)
    with pytest.raises(ResultFileError, match=r"model\.h5: final_model holds .* not float32 vectors"):
        read_result(path)
