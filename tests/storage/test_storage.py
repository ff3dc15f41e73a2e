"""The storage model: reservation arithmetic, the shared ledger, profiles, config and the store."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess
import threading
import time
import types

import numpy as np
import pytest

from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config, storage_line
from mpiec.launch.resolve import storage_model as model_of
from mpiec.storage import checkpoint
from mpiec.storage import model as storage
from mpiec.storage.checkpoint import CheckpointStore
from mpiec.storage.model import (
    LEDGER,
    PROFILES,
    UNSET,
    Ledger,
    StorageModel,
    reserve_slot,
    resolve,
    summary_fields,
)

MB = 1e6


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


# ---- reservation arithmetic ---------------------------------------------------------------------

def test_a_free_channel_starts_now_a_busy_one_when_it_frees():
    assert reserve_slot(free_at=5.0, now=10.0, nbytes=80_000_000, rate=80 * MB) == (10.0, 11.0)
    assert reserve_slot(free_at=12.0, now=10.0, nbytes=40_000_000, rate=80 * MB) == (12.0, 12.5)
    # a "free at" a day ahead is a clock that jumped, not a queue
    assert reserve_slot(free_at=10.0 + 2e5, now=10.0, nbytes=0, rate=1.0) == (10.0, 10.0)


def test_writers_sharing_a_ledger_get_consecutive_slots_with_a_fake_clock(tmp_path):
    clock = FakeClock()
    a = Ledger(tmp_path / LEDGER, 80 * MB, clock=clock, sleep=clock.sleep)
    b = Ledger(tmp_path / LEDGER, 80 * MB, clock=clock, sleep=clock.sleep)  # another "process"
    assert a.reserve(40_000_000) == (1000.0, 1000.5)
    assert b.reserve(40_000_000) == (1000.5, 1001.0)  # queued behind a's slot
    assert a.reserve(8_000_000) == (1001.0, 1001.1)
    b.transfer(80_000_000)  # reserves [1001.1, 1002.1] and sleeps until its end
    assert clock.t == pytest.approx(1002.1) and clock.slept == [pytest.approx(2.1)]
    clock.t = 2000.0  # the channel idled: the next slot starts now
    assert a.reserve(0) == (2000.0, 2000.0)
    a.close()
    b.close()


def test_a_ledger_needs_a_positive_rate(tmp_path):
    with pytest.raises(ValueError):
        Ledger(tmp_path / LEDGER, 0)


def _reserve_many(path: str, n: int, q) -> None:
    led = Ledger(path, 100 * MB)
    q.put([led.reserve(1_000_000) for _ in range(n)])


def test_reservations_of_separate_processes_never_overlap(tmp_path):
    """The budget is a real shared one: slots of three processes (and the lock between them)."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_reserve_many, args=(str(tmp_path / LEDGER), 20, q)) for _ in range(3)]
    for p in procs:
        p.start()
    slots = sorted(s for _ in procs for s in q.get(timeout=30))
    for p in procs:
        p.join(timeout=30)
    assert len(slots) == 60
    for (s0, e0), (s1, _e1) in zip(slots, slots[1:], strict=False):
        assert e0 - s0 == pytest.approx(0.01) and s1 >= e0 - 1e-9


# ---- profiles and resolution ----------------------------------------------------------------------

def test_every_profile_names_its_source_and_local_is_the_real_disk():
    assert set(PROFILES) == {"local", "pfs-node", "object-store"}
    assert all(m.source and m.cold_reads for m in PROFILES.values())
    assert not PROFILES["local"].emulated
    assert PROFILES["pfs-node"].emulated and PROFILES["object-store"].latency_s > 0.01


def test_explicit_keys_override_the_profile_and_unset_ones_keep_it():
    m = resolve({"profile": "object-store", "write_mb_s": 50, "latency_ms": UNSET, "aggregate_mb_s": 0})
    base = PROFILES["object-store"]
    assert (m.write_mb_s, m.read_mb_s, m.latency_s, m.aggregate_mb_s) == (50.0, base.read_mb_s,
                                                                          base.latency_s, 0.0)
    assert resolve({"profile": "local", "latency_ms": 20}).latency_s == pytest.approx(0.02)
    assert not resolve({"profile": "pfs-node", "cold_reads": False}).cold_reads
    with pytest.raises(ValueError, match="storage.profile"):
        resolve({"profile": "tape"})


def test_the_older_bandwidth_knob_is_a_per_rank_write_cap_and_the_slower_cap_wins():
    assert resolve({"profile": "local"}, legacy_write_mb_s=8).write_mb_s == 8
    assert resolve({"profile": "object-store"}, legacy_write_mb_s=8).write_mb_s == 8
    assert resolve({"profile": "object-store", "write_mb_s": 5}, legacy_write_mb_s=8).write_mb_s == 5
    cfg = load_config("tiny", sets=["strategy.name='ckpt'", "strategy.bandwidth_mb_s=4"])
    assert model_of(cfg).write_mb_s == 4 and model_of(cfg).emulated


def test_a_model_refuses_bad_figures():
    for bad in (-1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError):
            StorageModel("x", write_mb_s=bad)


# ---- config ----------------------------------------------------------------------------------------

def test_config_storage_section_resolves_and_round_trips():
    cfg = load_config("tiny", sets=["storage.profile='object-store'", "storage.write_mb_s=50",
                                    "storage.read_mb_s=100", "storage.aggregate_mb_s=80"])
    m = model_of(cfg)
    assert (m.name, m.write_mb_s, m.read_mb_s, m.aggregate_mb_s) == ("object-store", 50, 100, 80)
    assert json.loads(cfg.to_json())["storage"]["write_mb_s"] == 50
    assert type(cfg).from_json(cfg.to_json()).storage == cfg.storage
    line = storage_line(cfg)
    assert line.startswith("storage: object-store (emulated: write 50 MB/s per rank, read 100 MB/s")
    assert "aggregate write 80 MB/s" in line and "cold reads" in line
    assert storage_line(load_config("tiny")) == "storage: local (the real disk, cold reads)"


@pytest.mark.parametrize("setting,message", [
    ("storage.profile='tape'", "storage.profile must be 'local', 'pfs-node' or 'object-store', got 'tape'"),
    ("storage.write_mb_s=-2", "storage.write_mb_s must be -1 (the profile's) or in [0, 1e+07], got -2"),
    ("storage.aggregate_mb_s=1e12", "storage.aggregate_mb_s must be -1 (the profile's) or in [0, 1e+07]"),
    ("storage.latency_ms=1e6", "storage.latency_ms must be -1 (the profile's) or in [0, 60000], got 1e+06"),
    ("storage.read_mb_s=inf", "storage.read_mb_s must be a finite number"),
    ("storage.cold_reads=2", "storage.cold_reads must be true or false"),
    ("storage.speed=1", "unknown config key 'storage.speed'"),
])
def test_config_refuses_bad_storage_settings_in_one_line(setting, message):
    with pytest.raises(ConfigError) as err:
        load_config("tiny", sets=[setting])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


# ---- the store under a model -----------------------------------------------------------------------

def _arr(nbytes: int) -> np.ndarray:
    return np.ones(nbytes // 4, dtype=np.float32)


# The pacing is checked by what the store asks of its pacers, its ledger and its sleeps (arithmetic
# that a busy machine cannot change), plus the one timing that holds by construction: a paced
# transfer never ends before its bytes over its rate (sleeps only get longer on a loaded machine).
# No upper bound on a wall time: on 2 shared cores one can be any multiple of the figure.

@pytest.fixture
def pacers(monkeypatch):
    """Every ``_Pacer`` the store creates, in order (each knows its ``rate`` and the bytes ``sent``)."""
    made: list = []

    class Recording(checkpoint._Pacer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(checkpoint, "_Pacer", Recording)
    return made


@pytest.fixture
def slots(monkeypatch):
    """Every ledger reservation: (ledger path, start, end, bytes)."""
    taken: list = []
    real = Ledger.reserve

    def reserve(self, nbytes):
        start, end = real(self, nbytes)
        taken.append((self.path, start, end, nbytes))
        return start, end

    monkeypatch.setattr(Ledger, "reserve", reserve)
    return taken


@pytest.fixture
def sleeps(monkeypatch):
    """The durations the checkpoint module asked ``time.sleep`` for (it still sleeps them)."""
    asked: list[float] = []
    real = time.sleep
    fake = types.SimpleNamespace(**{k: getattr(time, k) for k in ("perf_counter", "monotonic", "time")},
                                 sleep=lambda s: (asked.append(s), real(s)))
    monkeypatch.setattr(checkpoint, "time", fake)
    return asked


def _serial(slots_taken) -> float:
    """The reservations do not overlap; their total length (s)."""
    spans = sorted((s, e) for _, s, e, _ in slots_taken)
    for (_s0, e0), (s1, _e1) in zip(spans, spans[1:], strict=False):
        assert s1 >= e0 - 1e-9, spans
    return sum(e - s for s, e in spans)


def test_a_write_takes_its_bytes_over_the_per_rank_write_bandwidth(tmp_path, pacers):
    store = CheckpointStore(tmp_path, storage=StorageModel("t", write_mb_s=20, cold_reads=False))
    info = store.write_part(1, "server-0", {"table": _arr(2_000_000)})
    (pacer,) = pacers
    assert pacer.rate == 20e6 and pacer.sent == info.bytes  # every byte through the cap, once
    assert info.seconds >= 0.99 * info.bytes / 20e6  # never faster than the cap
    assert store.emulated_bandwidth and "storage='t'" in repr(store)


def test_parts_written_at_once_share_the_aggregate_budget(tmp_path, pacers, slots):
    """Three writers of 1 MB at 40 MB/s each, 20 MB/s aggregate: together they take 3 MB / 20 MB/s."""
    model = StorageModel("t", write_mb_s=40, aggregate_mb_s=20, cold_reads=False)
    stores = [CheckpointStore(tmp_path, storage=model) for _ in range(3)]  # one per "rank"
    infos: list = []
    threads = [threading.Thread(target=lambda s=s, i=i: infos.append(
        s.write_part(1, f"server-{i}", {"table": _arr(1_000_000)}))) for i, s in enumerate(stores)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.perf_counter() - t0
    nbytes = sum(i.bytes for i in infos)
    # one channel: every byte reserved once, at the aggregate rate, the slots one after the other
    assert {path for path, *_ in slots} == {tmp_path / LEDGER}
    assert sum(n for *_, n in slots) == nbytes
    assert all(e - s == pytest.approx(n / 20e6, abs=1e-6) for _, s, e, n in slots)  # wall-clock doubles
    assert _serial(slots) == pytest.approx(nbytes / 20e6, abs=1e-5)
    assert [p.rate for p in pacers] == [40e6] * 3  # and each writer's own cap still applies
    assert total >= 0.99 * nbytes / 20e6  # each writer sleeps to its last slot's end
    assert (tmp_path / LEDGER).is_file()
    assert not [p for p in tmp_path.iterdir() if p.name == LEDGER and p.is_dir()]
    assert CheckpointStore(tmp_path).complete_steps() == []  # the ledger is not a step


def test_a_store_under_another_root_shares_the_jobs_ledger(tmp_path, slots):
    main = CheckpointStore(tmp_path / "ck", storage=StorageModel("t", aggregate_mb_s=10, cold_reads=False))
    partial = CheckpointStore(tmp_path / "ck" / "partial" / "server-0", storage=main.storage,
                              ledger=main.ledger_path)
    infos: list = []
    threads = [threading.Thread(target=lambda s=s: infos.append(s.write_part(1, "server-0",
                                                                             {"table": _arr(500_000)})))
               for s in (main, partial)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.perf_counter() - t0
    nbytes = sum(i.bytes for i in infos)
    assert {path for path, *_ in slots} == {main.ledger_path}  # one queue for both roots
    assert _serial(slots) == pytest.approx(nbytes / 10e6, abs=1e-5)
    assert total >= 0.99 * nbytes / 10e6
    assert not (tmp_path / "ck" / "partial" / "server-0" / LEDGER).exists()


def test_latency_is_paid_once_per_part_write_and_read(tmp_path, sleeps):
    store = CheckpointStore(tmp_path, storage=StorageModel("t", latency_s=0.1, cold_reads=False))
    info = store.write_part(1, "trainer", {"a": _arr(400), "b": _arr(400)})
    store.commit(1, [info])
    assert sleeps == [0.1]  # one part, two files: one latency
    assert info.seconds >= 0.1
    store.read_part(1, "trainer")
    assert sleeps == [0.1, 0.1]


def test_a_cold_read_takes_its_bytes_over_the_read_bandwidth_and_drops_the_pages(tmp_path, monkeypatch,
                                                                                pacers):
    dropped: list[int] = []
    real = checkpoint.drop_cache
    monkeypatch.setattr(checkpoint, "drop_cache", lambda fd: (dropped.append(fd), real(fd)))
    store = CheckpointStore(tmp_path, storage=StorageModel("t", read_mb_s=20, cold_reads=True))
    info = store.write_part(1, "server-0", {"table": _arr(1_000_000), "global_rows": np.arange(10)})
    store.commit(1, [info])
    assert len(dropped) == 2  # each file's pages, after its fsync
    t0 = time.perf_counter()
    out = store.read_part(1, "server-0")
    took = time.perf_counter() - t0
    assert pacers[-1].rate == 20e6 and pacers[-1].sent == info.bytes  # every byte at the read rate, once
    assert took >= 0.99 * info.bytes / 20e6
    assert len(dropped) == 4 and out["table"].sum() == 250_000  # and again before the read
    t0 = time.perf_counter()
    store.read_part(1, "server-0", mmap=True, verify=False)  # a lazy read is charged its bytes too
    took = time.perf_counter() - t0
    assert len(pacers) == 3 and pacers[-1].rate == 20e6 and pacers[-1].sent == info.bytes
    assert took >= 0.99 * info.bytes / 20e6


def test_a_store_given_no_model_is_the_plain_disk(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.storage is checkpoint.PLAIN and not store.emulated_bandwidth
    assert not store.model.cold_reads and store._ledger is None
    assert CheckpointStore(tmp_path, bandwidth_mb_s=40).model.write_mb_s == 40


def test_cold_reads_really_leave_the_page_cache(tmp_path):
    """posix_fadvise(DONTNEED) after the fsync: the file's pages are not resident (``fincore``,
    util-linux, tells where it is installed)."""
    if not shutil.which("fincore"):
        pytest.skip("no fincore")
    store = CheckpointStore(tmp_path, storage=StorageModel("t", cold_reads=True))
    store.write_part(1, "server-0", {"table": _arr(4 << 20)})
    path = next((tmp_path / "step-000000001").glob("*.npy"))
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"fincore: {out.stderr.strip()}")
    assert int(out.stdout.split()[0]) < path.stat().st_size // 10


# ---- results --------------------------------------------------------------------------------------

def test_the_result_file_states_the_storage_and_whether_it_is_emulated(tmp_path):
    from mpiec.results import ResultWriter, read_result

    cfg = load_config("tiny", sets=["strategy.name='ckpt'", "storage.write_mb_s=50", "storage.read_mb_s=100",
                                    "storage.aggregate_mb_s=80"])
    attrs = {"config": cfg.to_dict(), "strategy": "ckpt", "seed": 1, "failure_mode": "ulfm", "ulfm": True}
    with ResultWriter(tmp_path / "r.h5", attrs) as w:
        pass
    s = read_result(w.path).summary
    assert s["storage_profile"] == "local" and s["storage_emulated"] is True
    assert (s["storage_write_mb_s"], s["storage_read_mb_s"], s["storage_aggregate_mb_s"]) == (50, 100, 80)
    assert s["storage_latency_ms"] == 0 and s["storage_cold_reads"] is True
    plain = load_config("tiny").to_dict()
    assert summary_fields(plain)["storage_emulated"] is False
    del plain["storage"]  # a config from before the storage model
    with ResultWriter(tmp_path / "old.h5", {**attrs, "config": plain}) as w:
        pass
    s = read_result(w.path).summary
    assert s["storage_profile"] == "" and s["storage_emulated"] is False


def test_storage_module_exports_what_it_documents():
    assert set(storage.__all__) <= set(dir(storage))


def test_two_ledgers_of_one_file_in_one_process_never_overlap(tmp_path):
    """Two ``Ledger`` objects of one file, reserving from two threads: ``fcntl`` locks are per
    process, so only the per-file thread lock keeps them apart. The clock sleeps inside the
    critical section, so without that lock both threads read the same free time (they did)."""
    path = tmp_path / ".storage-ledger"

    def clock() -> float:
        time.sleep(0.02)
        return time.time()

    ledgers = [Ledger(path, 1e6, clock=clock) for _ in range(2)]
    taken: list = []
    threads = [threading.Thread(target=lambda lg=lg: taken.extend(lg.reserve(10_000) for _ in range(3)))
               for lg in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 6
    assert _serial([(path, s, e, 10_000) for s, e in taken]) == pytest.approx(6 * 0.01, abs=1e-6)
