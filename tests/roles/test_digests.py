"""Per-step shard digests (``roles.digests``): exact row hashes, compared by global id."""

from types import SimpleNamespace

import numpy as np
import pytest

from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.roles import digests


def test_a_row_hash_sees_any_one_changed_bit_and_nothing_else():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 16)).astype(np.float32)
    base = digests.row_hashes(table)
    assert base.dtype == np.uint64 and base.shape == (50,)
    for row, col, bit in ((0, 0, 0), (17, 5, 31), (49, 15, 22)):
        changed = table.copy()
        changed.view(np.uint32)[row, col] ^= np.uint32(1 << bit)
        differ = np.flatnonzero(digests.row_hashes(changed) != base)
        assert differ.tolist() == [row]


def test_rows_are_compared_by_global_id_padding_left_out():
    ref_rows, rows = np.array([3, 7, 9, -1]), np.array([9, 3, 7, 11])
    ref = np.array([30, 70, 90, 0], np.uint64)
    mine = np.array([90, 31, 70, 110], np.uint64)  # row 3 differs; row 11 is not in the reference
    differ, compared = digests.differing_rows(rows, mine, ref_rows, ref)
    assert differ.tolist() == [3] and compared == 3


def test_the_setting_is_parsed_and_refused_when_malformed():
    assert digests.parse("") is None
    assert digests.parse("record:/tmp/x") == ("record", digests.Path("/tmp/x"))
    with pytest.raises(ValueError, match="record:DIR or compare:DIR"):
        digests.parse("keep:/tmp/x")


class _Ctx:
    def __init__(self, slot):
        self.slot, self.rank, self.first_rank, self.events = slot, 3, 3, []

    def event(self, kind, step, rank=-1, slot=None, detail="", at=None):
        self.events.append((kind, step, detail))


def test_a_compare_reports_the_first_differing_step_once(tmp_path, monkeypatch):
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    role = SimpleNamespace(state=lambda: {"table": table, "global_rows": np.arange(10, 16)})
    server = _Ctx(Slot(SERVER, 1))
    monkeypatch.setattr(digests, "_SETTING", ("record", tmp_path))
    for step in range(3):
        digests.check(server, role, step)
        table[step] += 1
    digests.check(_Ctx(Slot(TRAINER, 0)), role, 9)  # a trainer's state is not hashed
    assert sorted(p.name for p in (tmp_path / "server1").iterdir()) == ["rows.npy", "step0.npy",
                                                                        "step1.npy", "step2.npy"]
    table[...] = np.arange(24, dtype=np.float32).reshape(6, 4)
    monkeypatch.setattr(digests, "_SETTING", ("compare", tmp_path))
    monkeypatch.setattr(digests, "_reported", set())
    digests.check(server, role, 0)
    assert server.events == []  # step 0 matches
    table[0] += 1
    table[4] += 1  # row 14: not updated at step 1 in the recorded run
    digests.check(server, role, 1, resumed=True)
    digests.check(server, role, 2)  # a later difference is not reported again
    assert len(server.events) == 1
    kind, step, detail = server.events[0]
    assert (kind, step) == ("diverged", 1)
    assert detail.startswith("server 1 at step 1 (as training resumed after a recovery): 1 of 6 rows")
    assert detail.endswith("global rows 14")
