"""The checkpoint store: complete-or-absent checkpoints, verified reads, prune, the background writer."""

import errno
import json
import math
import os
import time
import zlib

import numpy as np
import pytest

from mpiec.errors import CheckpointError, MpiecError
from mpiec.storage import checkpoint
from mpiec.storage.checkpoint import (
    MANIFEST,
    BackgroundWriter,
    CheckpointStore,
    PartInfo,
    check_unused,
    find_checkpoint_root,
    resolve_checkpoint,
)


def _parts(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "server-0": {"table": rng.random((7, 4), dtype=np.float32),
                     "global_rows": np.arange(7, dtype=np.int64) * 3},
        "server-1": {"table": np.empty((0, 5), dtype=np.float32),
                     "global_rows": np.empty(0, dtype=np.int64)},
        "trainer": {"params": rng.standard_normal(10), "step": np.array(25, dtype=np.int64),
                    "mask": np.array([True, False, True])},
    }


def _save(store, step, parts=None, meta=None):
    parts = parts or _parts(step)
    infos = [store.write_part(step, name, arrays) for name, arrays in parts.items()]
    store.commit(step, infos, meta or {"strategy": "ckpt"})
    return parts


def _assert_same(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert np.array_equal(got[k], want[k]), k


@pytest.mark.parametrize("mmap", [False, True])
def test_round_trip_of_several_parts_and_dtypes(tmp_path, mmap):
    store = CheckpointStore(tmp_path)
    parts = _save(store, 25, meta={"strategy": "ckpt", "servers": 2})
    for name, arrays in parts.items():
        _assert_same(store.read_part(25, name, mmap=mmap), arrays)
    man = store.manifest(25)
    assert man["format"] == "mpiec-checkpoint" and man["version"] == 1 and man["step"] == 25
    assert man["meta"] == {"strategy": "ckpt", "servers": 2}
    entry = man["parts"]["server-0"]["files"]["table"]
    assert entry == {"file": "server-0.table.npy", "bytes": entry["bytes"], "dtype": "<f4",
                     "shape": [7, 4], "checksum": entry["checksum"]}
    # readable without mpiec: plain .npy files, checksum = crc32 of the whole file
    path = tmp_path / "step-000000025" / "server-0.table.npy"
    assert np.array_equal(np.load(path), parts["server-0"]["table"])
    assert entry["checksum"] == f"crc32:{zlib.crc32(path.read_bytes()):08x}"
    assert store.bytes_of(25) == sum(os.path.getsize(p) for p in path.parent.glob("*.npy"))


def test_commit_makes_a_step_complete_and_a_part_alone_does_not(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.complete_steps() == [] and store.latest() is None
    _save(store, 10)
    store.write_part(20, "trainer", {"params": np.ones(3)})  # never committed
    _save(store, 15)
    assert store.complete_steps() == [15, 10] and store.latest() == 15
    with pytest.raises(CheckpointError, match="never committed"):
        store.manifest(20)
    with pytest.raises(CheckpointError, match="already a committed checkpoint"):
        store.write_part(15, "trainer", {"params": np.ones(3)})
    assert not list(tmp_path.rglob(".*tmp*"))  # no temporary files left behind


def test_commit_checks_the_listed_files(tmp_path):
    store = CheckpointStore(tmp_path)
    info = store.write_part(3, "trainer", {"params": np.ones(4)})
    (tmp_path / "step-000000003" / "trainer.params.npy").unlink()
    with pytest.raises(CheckpointError, match=r"trainer\.params\.npy: missing"):
        store.commit(3, [info], {})
    assert store.complete_steps() == []


def test_a_flipped_byte_is_caught_and_the_file_named(tmp_path):
    store = CheckpointStore(tmp_path)
    parts = _save(store, 5)
    path = tmp_path / "step-000000005" / "server-0.table.npy"
    raw = bytearray(path.read_bytes())
    raw[-9] ^= 0x10  # inside the data region
    path.write_bytes(bytes(raw))
    for mmap in (False, True):
        with pytest.raises(CheckpointError, match=r"server-0\.table\.npy: corrupted \(checksum"):
            store.read_part(5, "server-0", mmap=mmap)
    got = store.read_part(5, "server-0", verify=False)  # size still right: unverified read goes through
    assert not np.array_equal(got["table"], parts["server-0"]["table"])
    _assert_same(store.read_part(5, "trainer"), parts["trainer"])  # other parts are fine


def test_a_damaged_header_is_reported_as_corruption(tmp_path):
    store = CheckpointStore(tmp_path)
    _save(store, 5)
    path = tmp_path / "step-000000005" / "trainer.params.npy"
    raw = bytearray(path.read_bytes())
    raw[0:6] = b"XXXXXX"
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"trainer\.params\.npy: corrupted"):
        store.read_part(5, "trainer")
    with pytest.raises(CheckpointError, match=r"trainer\.params\.npy: not a valid \.npy file"):
        store.read_part(5, "trainer", verify=False)


def test_truncated_and_missing_files(tmp_path):
    store = CheckpointStore(tmp_path)
    _save(store, 5)
    table = tmp_path / "step-000000005" / "server-0.table.npy"
    with open(table, "r+b") as f:
        f.truncate(table.stat().st_size - 4)
    with pytest.raises(CheckpointError, match=r"server-0\.table\.npy: truncated \(\d+ bytes, manifest says"):
        store.read_part(5, "server-0", verify=False)
    (tmp_path / "step-000000005" / "trainer.params.npy").unlink()
    with pytest.raises(CheckpointError, match=r"trainer\.params\.npy: missing"):
        store.read_part(5, "trainer")
    with pytest.raises(CheckpointError, match=r"no part 'parity-0' \(parts: server-0, server-1, trainer\)"):
        store.read_part(5, "parity-0")
    assert issubclass(CheckpointError, MpiecError)


def test_a_torn_or_foreign_manifest_is_not_complete(tmp_path):
    store = CheckpointStore(tmp_path)
    _save(store, 1)
    _save(store, 2)
    man = tmp_path / "step-000000002" / MANIFEST
    man.write_text(man.read_text()[:40])
    assert store.complete_steps() == [1] and store.latest() == 1
    with pytest.raises(CheckpointError, match=r"MANIFEST\.json: not valid JSON \(torn"):
        store.manifest(2)
    man.write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(CheckpointError, match="not an mpiec checkpoint manifest"):
        store.manifest(2)
    good = json.loads((tmp_path / "step-000000001" / MANIFEST).read_text())
    man.write_text(json.dumps(good))  # a manifest copied into the wrong step directory
    with pytest.raises(CheckpointError, match="manifest is for step 1, its directory for step 2"):
        store.manifest(2)


def test_a_new_run_refuses_a_directory_with_committed_checkpoints(tmp_path):
    store = CheckpointStore(tmp_path / "ck")
    check_unused(tmp_path / "ck")  # missing: fine
    store.write_part(4, "trainer", {"params": np.ones(3)})  # a torn checkpoint (no manifest): fine
    check_unused(tmp_path / "ck")
    _save(store, 9)
    with pytest.raises(CheckpointError, match=r"already holds committed checkpoints \(steps 9\) of another "
                                              r"run: continue that run with --resume"):
        check_unused(tmp_path / "ck")
    assert store.complete_steps() == [9]  # untouched


def test_prune_keeps_the_newest_two(tmp_path):
    store = CheckpointStore(tmp_path)
    for step in (10, 20, 30, 40):
        _save(store, step, {"trainer": {"params": np.full(2, step)}})
    store.write_part(5, "trainer", {"params": np.ones(2)})   # abandoned, older than the newest
    store.write_part(35, "trainer", {"params": np.ones(2)})  # abandoned, older than the newest
    store.write_part(50, "trainer", {"params": np.ones(2)})  # in progress: newer than the newest
    assert store.prune(keep=2) == [5, 10, 20, 35]
    assert store.complete_steps() == [40, 30]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step-0000000{s}" for s in (30, 40, 50)]
    assert store.prune(keep=1) == [30] and store.complete_steps() == [40]
    assert store.prune(keep=1) == []
    with pytest.raises(ValueError):
        store.prune(keep=0)


def test_prune_without_a_complete_checkpoint_deletes_nothing(tmp_path):
    store = CheckpointStore(tmp_path)
    store.write_part(5, "trainer", {"params": np.ones(2)})
    assert store.prune() == [] and (tmp_path / "step-000000005").is_dir()


def test_background_writer_writes_in_order(tmp_path):
    store = CheckpointStore(tmp_path)
    parts = _parts()
    with BackgroundWriter(store) as writer:
        for name, arrays in parts.items():
            writer.submit(8, name, {k: v.copy() for k, v in arrays.items()})
        infos = writer.wait(timeout=10)
        assert not writer.busy and writer.poll() == []
    assert [i.part for i in infos] == list(parts)
    assert all(isinstance(i, PartInfo) and i.bytes > 0 and i.seconds >= 0 for i in infos)
    store.commit(8, {i.part: i for i in infos}, {})
    for name, arrays in parts.items():
        _assert_same(store.read_part(8, name), arrays)


@pytest.mark.skipif(not hasattr(os, "getpriority") or os.uname().sysname != "Linux", reason="Linux only")
def test_background_writer_can_be_niced(tmp_path):
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with BackgroundWriter(CheckpointStore(tmp_path), nice=3) as writer:
        writer.submit(1, "trainer", {"params": np.ones(3)})
        assert len(writer.wait(timeout=10)) == 1
        assert os.getpriority(os.PRIO_PROCESS, writer._thread.native_id) == min(19, before + 3)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before  # the training thread keeps its priority


def test_background_writer_error_surfaces_in_poll(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    writer = BackgroundWriter(CheckpointStore(tmp_path / "a-file" / "ckpt"))
    writer.submit(1, "trainer", {"params": np.ones(3)})
    deadline = time.monotonic() + 10
    while writer.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(CheckpointError, match=r"a-file/ckpt/step-000000001: cannot create"):
        writer.poll()
    assert writer.poll() == []
    writer.close()
    with pytest.raises(RuntimeError):
        writer.submit(2, "trainer", {"params": np.ones(3)})


def test_background_writer_returns_finished_parts_before_a_later_error(tmp_path):
    store = CheckpointStore(tmp_path)
    writer = BackgroundWriter(store)
    writer.submit(1, "trainer", {"params": np.ones(3)})
    store.write_part(2, "server-0", {"t": np.ones(1)})
    store.commit(2, [store.write_part(2, "trainer", {"params": np.ones(3)})], {})
    writer.submit(2, "trainer", {"params": np.ones(3)})  # step 2 is committed: refused
    assert [i.part for i in writer.wait(timeout=10)] == ["trainer"]
    with pytest.raises(CheckpointError, match="already a committed checkpoint"):
        writer.poll()
    writer.close()


def test_bandwidth_cap_slows_writes(tmp_path):
    store = CheckpointStore(tmp_path, bandwidth_mb_s=40)
    assert store.emulated_bandwidth and not CheckpointStore(tmp_path).emulated_bandwidth
    data = np.zeros(1 << 20, dtype=np.float32)  # 4 MiB = 4.19 MB: 0.105 s at 40 MB/s
    t0 = time.perf_counter()
    info = store.write_part(1, "trainer", {"params": data})
    took = time.perf_counter() - t0
    # a lower bound only (a paced write never beats its cap; on a busy machine it takes longer);
    # that the cap charges each byte once is tests/storage/test_storage.py's (the pacer's own count)
    assert took >= 0.95 * info.bytes / 40e6, took


def test_find_checkpoint_root(tmp_path):
    root = tmp_path / "ckpt"
    store = CheckpointStore(root)
    _save(store, 10)
    _save(store, 20)
    assert find_checkpoint_root(root) == root
    assert find_checkpoint_root(root / "step-000000010") == root
    assert resolve_checkpoint(root) == (root, 20)
    assert resolve_checkpoint(str(root / "step-000000010")) == (root, 10)

    store.write_part(30, "trainer", {"params": np.ones(2)})
    bad = {
        tmp_path / "nowhere": "no such checkpoint directory",
        root / "step-000000010" / MANIFEST: "is a file, not a checkpoint directory",
        root / "step-000000030": r"holds no complete mpiec checkpoint \(no MANIFEST\.json",
        tmp_path: r"holds no complete mpiec checkpoint \(no step-NNNNNNNNN directories\)",
    }
    torn = tmp_path / "torn" / "step-000000001"
    torn.mkdir(parents=True)
    (torn / MANIFEST).write_text('{"format": "mpiec-chec')
    bad[torn] = r"MANIFEST\.json: not valid JSON"
    bad[torn.parent] = r"holds no complete mpiec checkpoint \(1 step directories, none committed\)"
    foreign = tmp_path / "foreign" / "step-000000001"
    foreign.mkdir(parents=True)
    (foreign / MANIFEST).write_text('{"format": "other", "version": 1}')
    bad[foreign] = "not an mpiec checkpoint manifest"
    for path, message in bad.items():
        with pytest.raises(CheckpointError, match=message) as err:
            find_checkpoint_root(path)
        assert "\n" not in str(err.value)


def test_part_info_round_trips_through_json(tmp_path):
    info = CheckpointStore(tmp_path).write_part(3, "parity-0", {"p": np.arange(5, dtype=np.uint8)})
    again = PartInfo.from_dict(json.loads(json.dumps(info.to_dict())))
    assert again == info
    with pytest.raises(CheckpointError, match="malformed checkpoint part info"):
        PartInfo.from_dict({"part": "x"})


def test_bad_names_are_refused(tmp_path):
    store = CheckpointStore(tmp_path)
    for part, name in [("a.b", "x"), ("../up", "x"), ("ok", "a/b"), ("ok", ".hidden")]:
        with pytest.raises(ValueError):
            store.write_part(1, part, {name: np.ones(1)})
    with pytest.raises(ValueError):
        store.write_part(-1, "ok", {"x": np.ones(1)})
    assert not tmp_path.joinpath("step-000000001").exists()


# -- a full disk (issue: checkpoints to a full strategy.dir failed silently) ----------------------

class _Disk:
    """``_write_some`` of a disk with ``free`` bytes left: a raw write beyond them fails with ENOSPC
    (as a full file system does), after writing what still fits."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, f, buf):
        if self.free <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = f.write(buf[: self.free])
        self.free -= n
        return n


@pytest.fixture
def warned(monkeypatch):
    """The stderr warnings of failed checkpoint writes, one string per line (never rate-limited)."""
    lines: list[str] = []
    monkeypatch.setattr(checkpoint.warn_failure, "emit", lines.append)
    monkeypatch.setattr(checkpoint.warn_failure, "last", -math.inf)
    monkeypatch.setattr(checkpoint, "WARN_EVERY_S", 0.0)
    return lines


def test_a_full_disk_fails_the_part_names_enospc_warns_and_leaves_nothing(tmp_path, monkeypatch, warned):
    store = CheckpointStore(tmp_path)
    monkeypatch.setattr(checkpoint, "_write_some", _Disk(free=200))  # the header fits, the table not
    with pytest.raises(CheckpointError, match=r"step-000000007/server-0\.\w+\.npy: cannot write "
                                              r"\(No space left on device \[ENOSPC\]\)") as err:
        store.write_part(7, "server-0", {"global_rows": np.arange(8), "table": np.ones((64, 4))})
    assert "\n" not in str(err.value)
    # the failed part's files (the whole first array too) and the then-empty step directory are gone:
    # no debris that looks like a checkpoint, and the space is free for the next one
    assert list(tmp_path.iterdir()) == []
    assert len(warned) == 1
    assert warned[0].startswith("[mpiec] warning: checkpoint of step 7 failed, it will not be committed: ")
    assert "ENOSPC" in warned[0]
    assert store.complete_steps() == [] and store.latest() is None


def test_a_failed_part_keeps_the_other_parts_of_its_step(tmp_path, monkeypatch, warned):
    store = CheckpointStore(tmp_path)
    trainer = store.write_part(3, "trainer", {"params": np.ones(4)})
    monkeypatch.setattr(checkpoint, "_write_some", _Disk(free=0))
    with pytest.raises(CheckpointError, match="ENOSPC"):
        store.write_part(3, "server-0", {"table": np.ones(8)})
    d = tmp_path / "step-000000003"
    assert sorted(p.name for p in d.iterdir()) == ["trainer.params.npy"]  # another rank's part: not ours
    assert store.abandon(3) and not d.exists()  # the coordinator, once every part has answered
    assert not store.abandon(3)
    assert trainer.part == "trainer" and len(warned) == 1


def test_a_part_recreates_the_directory_another_failed_part_removed(tmp_path):
    d = tmp_path / "step-000000004"  # a failed part of the step removed it, empty, meanwhile
    entry = CheckpointStore._write_npy(d, "trainer.params.npy", np.ones(3), checkpoint._Pacer(0))
    assert (d / entry["file"]).stat().st_size == entry["bytes"]


def test_a_failed_commit_leaves_the_step_absent_and_frees_its_space(tmp_path, monkeypatch, warned):
    store = CheckpointStore(tmp_path)
    infos = [store.write_part(5, name, arrays) for name, arrays in _parts().items()]
    monkeypatch.setattr(checkpoint, "_write_some", _Disk(free=10))  # a torn manifest, then ENOSPC
    with pytest.raises(CheckpointError, match=r"MANIFEST\.json: cannot write \(No space left on device"):
        store.commit(5, infos, {})
    assert store.complete_steps() == [] and list(tmp_path.iterdir()) == []
    assert len(warned) == 1 and "step 5" in warned[0]
    monkeypatch.setattr(checkpoint, "_write_some", lambda f, buf: f.write(buf))
    _save(store, 6)  # the next checkpoint goes through
    assert store.complete_steps() == [6]


def test_abandon_refuses_a_committed_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path)
    _save(store, 2)
    with pytest.raises(CheckpointError, match="is a committed checkpoint"):
        store.abandon(2)
    assert store.complete_steps() == [2]


def test_a_write_that_makes_no_progress_fails_instead_of_spinning(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "_write_some", lambda f, buf: 0)
    with pytest.raises(CheckpointError, match="accepted no bytes"):
        CheckpointStore(tmp_path, warn=False).write_part(1, "trainer", {"params": np.ones(3)})


def test_failure_warnings_are_rate_limited_per_process(tmp_path, monkeypatch, warned):
    monkeypatch.setattr(checkpoint, "WARN_EVERY_S", 3600.0)
    monkeypatch.setattr(checkpoint, "_write_some", _Disk(free=0))
    store = CheckpointStore(tmp_path)
    for step in (1, 2, 3):
        with pytest.raises(CheckpointError):
            store.write_part(step, "trainer", {"params": np.ones(3)})
    assert len(warned) == 1 and "step 1" in warned[0]  # a long run on a full disk: not a line per write
    monkeypatch.setattr(checkpoint, "WARN_EVERY_S", 0.0)
    with pytest.raises(CheckpointError):
        store.write_part(4, "trainer", {"params": np.ones(3)})
    assert "step 4" in warned[1] and "2 more failed checkpoint writes in this process not shown" in warned[1]
    with pytest.raises(CheckpointError):
        CheckpointStore(tmp_path, warn=False).write_part(5, "trainer", {"params": np.ones(3)})
    assert len(warned) == 2


def test_background_writer_on_a_full_disk(tmp_path, monkeypatch, warned):
    store = CheckpointStore(tmp_path)
    monkeypatch.setattr(checkpoint, "_write_some", _Disk(free=0))
    with BackgroundWriter(store) as writer:
        writer.submit(8, "server-1", {"table": np.ones(16)})
        with pytest.raises(CheckpointError, match=r"server-1\.table\.npy: cannot write .*ENOSPC"):
            writer.wait(timeout=10)
    assert list(tmp_path.iterdir()) == [] and len(warned) == 1
