"""source.py: Batch validation and ArraySource's deterministic wrap-around and eval split."""

import math

import numpy as np
import pytest

from mpiec.data.source import ArraySource, Batch


def _batch(n):
    return Batch(
        np.arange(n * 2, dtype=np.float32).reshape(n, 2),
        np.arange(n * 3, dtype=np.int64).reshape(n, 3),
        (np.arange(n) % 2).astype(np.float32),
    )


def test_batch_rejects_mismatched_rows():
    with pytest.raises(ValueError):
        Batch(np.zeros((3, 2), np.float32), np.zeros((2, 1), np.int64), np.zeros(3, np.float32))


def test_array_source_wraps_training_part_and_holds_out_tail():
    s = ArraySource(_batch(10), eval_fraction=0.2)
    assert (s.n_train, s.n_eval) == (8, 2)
    b = s.batch(6, 5)  # samples 6, 7, 0, 1, 2
    np.testing.assert_array_equal(b.ids[:, 0], np.array([6, 7, 0, 1, 2]) * 3)
    np.testing.assert_array_equal(s.batch(14, 2).ids, s.batch(6, 2).ids)
    e = s.eval_batch(100)
    np.testing.assert_array_equal(e.ids[:, 0], [24, 27])
    assert len(s.eval_batch(1)) == 1
    assert math.isnan(s.teacher_auc(10))


def test_array_source_bad_fraction():
    with pytest.raises(ValueError):
        ArraySource(_batch(10), eval_fraction=0.0)
    with pytest.raises(ValueError):
        ArraySource(_batch(1), eval_fraction=0.5)


def test_multi_hot_batch_keeps_its_bags():
    from mpiec.data.source import bag_bounds, column_tables

    n = 4
    b = Batch(np.zeros((n, 2), np.float32), np.arange(n * 6, dtype=np.int64).reshape(n, 6),
              np.zeros(n, np.float32), (1, 3, 2))
    assert b.n_tables == 3 and list(b.bounds) == [0, 1, 4, 6]
    assert list(column_tables((1, 3, 2))) == [0, 1, 1, 1, 2, 2] and list(bag_bounds([2])) == [0, 2]
    assert b.take(np.array([2, 0])).bags == (1, 3, 2) and Batch.concat([b, b]).bags == (1, 3, 2)
    assert _batch(2).bags is None and _batch(2).n_tables == 3 and list(_batch(2).bounds) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="6 id columns, bags"):
        Batch(b.dense, b.ids, b.labels, (1, 1))
