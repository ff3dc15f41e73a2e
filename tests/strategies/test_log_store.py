"""``log``'s update log without MPI: memory bound, spill files, trim, checksummed records."""

from __future__ import annotations

import numpy as np
import pytest

from mpiec.strategies.log.spill import HEADER, SpillCorrupt, encode_record, read_record
from mpiec.strategies.log.store import LogStore, record_bytes

DIM, RANKS = 4, 5


def push(step: int, rows: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A push of ``step``: distinct contents per step, so a wrong record is noticed."""
    rng = np.random.default_rng(step)
    slots = rng.integers(0, 1000, rows).astype(np.int64)
    counts = np.array([0, 0, rows // 2, rows - rows // 2, 0], dtype=np.int64)
    grads = rng.standard_normal((rows, DIM)).astype(np.float32)
    return slots, counts, grads


def same(a, b) -> bool:
    return all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b, strict=True))


def test_records_stay_in_memory_under_the_bound(tmp_path):
    log = LogStore(10 * record_bytes(push(0)), tmp_path / "spill")
    for s in range(5):
        log.append(s, *push(s))
    assert log.steps() == [0, 1, 2, 3, 4] and log.spilled_records == 0
    assert not (tmp_path / "spill").exists()  # nothing spilled: no directory either
    assert same(log[3], push(3))


def test_the_oldest_records_spill_and_read_back_exactly(tmp_path):
    one = record_bytes(push(0))
    log = LogStore(3 * one, tmp_path / "spill")
    for s in range(10):
        log.append(s, *push(s))
        assert log.memory_bytes <= 3 * one
    assert sorted(log.memory) == [7, 8, 9]  # memory holds the newest steps
    assert log.spilled_records == 7 and log.peak_memory_bytes == 3 * one
    assert log.spilled_bytes == sum(len(encode_record(s, *push(s))) for s in range(7))
    for s in range(10):
        assert s in log and same(log[s], push(s))
    assert log.read_bytes == 7 * one
    assert 10 not in log
    with pytest.raises(KeyError):
        log[10]


def test_a_zero_bound_spills_every_record(tmp_path):
    log = LogStore(0, tmp_path / "spill")
    for s in range(3):
        log.append(s, *push(s))
    assert log.memory_bytes == 0 and log.peak_memory_bytes == 0 and log.spilled_records == 3
    assert same(log[1], push(1))


def test_trim_drops_the_covered_steps_and_deletes_their_files(tmp_path):
    spill = tmp_path / "spill"
    log = LogStore(0, spill)
    for s in range(5):  # steps 0-4 in the first file
        log.append(s, *push(s))
    log.trim(4)  # checkpoint after step 4 committed
    assert len(log) == 0 and list(spill.iterdir()) == []
    for s in range(5, 12):
        log.append(s, *push(s))
    log.trim(7)  # the file holding 5..11 keeps 8..11: it stays
    assert log.steps() == [8, 9, 10, 11]
    (first,) = spill.iterdir()
    log.append(12, *push(12))  # what spills after a trim goes to a new file
    assert len(list(spill.iterdir())) == 2
    log.trim(11)  # the first file has no live record left: deleted
    assert [p.name for p in spill.iterdir()] != [first.name] and len(list(spill.iterdir())) == 1
    assert log.steps() == [12] and same(log[12], push(12))
    assert log.disk_bytes() == len(encode_record(12, *push(12)))
    log.close()
    assert not spill.exists()


def test_drop_after_forgets_the_steps_to_re_execute_and_a_re_append_replaces(tmp_path):
    log = LogStore(2 * record_bytes(push(0)), tmp_path / "spill")
    for s in range(6):
        log.append(s, *push(s))
    log.drop_after(3)
    assert log.steps() == [0, 1, 2, 3]
    other = push(100)
    log.append(3, *other)  # step 3 executed again (after an undo) with these gradients
    assert same(log[3], other) and log.steps() == [0, 1, 2, 3]
    log.append(4, *push(4))
    assert all(same(log[s], push(s)) for s in (0, 1, 2, 4))


def test_verify_names_a_missing_step(tmp_path):
    log = LogStore(0, tmp_path / "spill")
    log.append(5, *push(5))
    assert log.verify([5]) == ""
    assert "no record of step 6" in log.verify([5, 6])


@pytest.mark.parametrize("where", ["header", "payload", "crc"])
def test_a_corrupted_spill_record_is_detected_and_named(where, tmp_path):
    log = LogStore(0, tmp_path / "spill")
    for s in range(3):
        log.append(s, *push(s))
    seg, offset = log.spilled[1]
    at = {"header": offset + 8, "payload": offset + HEADER.size + 30, "crc": offset + HEADER.size - 2}[where]
    raw = bytearray(seg.path.read_bytes())
    raw[at] ^= 0x40
    seg.path.write_bytes(bytes(raw))
    problem = log.verify([0, 1, 2])
    assert str(seg.path) in problem and f"record at byte {offset} (step 1)" in problem
    with pytest.raises(SpillCorrupt, match="step 1"):
        log[1]
    assert same(log[0], push(0)) and same(log[2], push(2))  # the neighbours are intact


def test_a_truncated_spill_file_is_detected(tmp_path):
    log = LogStore(0, tmp_path / "spill")
    log.append(0, *push(0))
    seg, _ = log.spilled[0]
    raw = seg.path.read_bytes()
    seg.path.write_bytes(raw[:-7])
    with pytest.raises(SpillCorrupt, match="truncated payload"):
        log[0]


def test_record_format_round_trip_and_layout(tmp_path):
    slots, counts, grads = push(42, rows=3)
    data = encode_record(42, slots, counts, grads)
    assert data[:4] == b"MLOG" and len(data) == HEADER.size + 8 * RANKS + 8 * 3 + 4 * 3 * DIM
    f = tmp_path / "one.spill"
    f.write_bytes(b"x" * 11 + data)
    assert same(read_record(f, 11, 42), (slots, counts, grads))
    with pytest.raises(SpillCorrupt, match="holds step 42"):
        read_record(f, 11, 41)  # the index pointed at another step's record
    with pytest.raises(SpillCorrupt, match="not a log record"):
        read_record(f, 0, 42)
