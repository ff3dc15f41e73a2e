"""``roles.shard_check``: a row changed at rest is found before its next update or by the scan; a
row written by the update path, or by a recovery, is never taken for a corruption."""

from __future__ import annotations

import numpy as np

from mpiec.roles.shard_check import ShardCheck, row_folds


def flip(table: np.ndarray, row: int, col: int, bit: int) -> None:
    table.view(np.uint32)[row, col] ^= np.uint32(1 << bit)


def shard() -> tuple[ShardCheck, np.ndarray]:
    table = np.random.default_rng(3).standard_normal((10, 5)).astype(np.float32)
    check = ShardCheck(every=4)
    check.rebase(table)
    return check, table


def test_any_one_flipped_bit_changes_the_row_fold():
    table = np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)
    before = row_folds(table)
    for bit in (0, 22, 23, 31):
        t = table.copy()
        flip(t, 1, 6, bit)
        after = row_folds(t)
        assert after[1] != before[1] and np.array_equal(np.delete(after, 1), np.delete(before, 1))


def test_a_flip_is_found_before_the_rows_next_update_and_then_folded_anew():
    check, table = shard()
    flip(table, 2, 1, 22)
    rows = np.array([1, 2, 7])
    assert check.before_update(table, rows).tolist() == [2]
    table[rows] += 1.0  # the update
    check.after_update(table, rows)
    assert check.before_update(table, rows).size == 0 and check.scan(table).size == 0


def test_the_scan_finds_a_row_no_step_updates_once():
    check, table = shard()
    flip(table, 9, 4, 31)
    assert [s for s in range(12) if check.due(s)] == [3, 7, 11]
    found = check.scan(table)
    assert found.tolist() == [9]
    check.found(found)
    assert check.scan(table).size == 0  # reported once: unknown until its next update


def test_after_a_recovery_no_row_is_checked_until_its_update():
    check, table = shard()
    check.forget(table.shape[0])
    table[4] = 0.5  # a strategy's own write (a restore, a background rebuild)
    assert check.scan(table).size == 0 and check.before_update(table, np.array([4])).size == 0
    check.after_update(table, np.array([4]))
    flip(table, 4, 0, 3)
    assert check.scan(table).tolist() == [4]


def test_off_does_nothing_and_a_replaced_shard_is_not_compared():
    off = ShardCheck(every=0)
    table = np.ones((4, 2), np.float32)
    off.rebase(table)
    assert not off.due(0) and off.before_update(table, np.array([1])).size == 0 and off.folds.size == 0
    check, _ = shard()
    bigger = np.ones((12, 5), np.float32)
    assert check.scan(bigger).size == 0  # another row count: every fold unknown
