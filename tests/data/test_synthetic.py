"""synthetic.py: purity per sample index, distribution shape, teacher difficulty."""

import numpy as np
import pytest

from mpiec.config import PRESETS
from mpiec.data.source import bag_bounds, column_tables
from mpiec.data.synthetic import EVAL_START, SyntheticCriteo, TeacherParams
from mpiec.launch.resolve import load_config
from mpiec.model.metrics import auc

CARDS = tuple(load_config("tiny").data.cardinalities)


@pytest.fixture(scope="module")
def src():
    return SyntheticCriteo(5, CARDS)


def test_shapes_dtypes_ranges(src):
    b = src.batch(100, 3000)
    assert b.dense.shape == (3000, 13) and b.dense.dtype == np.float32
    assert b.ids.shape == (3000, 26) and b.ids.dtype == np.int64
    assert b.labels.shape == (3000,) and b.labels.dtype == np.float32
    assert (b.ids >= 0).all() and (b.ids < np.array(CARDS)).all()
    assert set(np.unique(b.labels)) == {0.0, 1.0}
    assert 0.15 < b.labels.mean() < 0.4  # Criteo-like CTR
    assert b.dense.min() == 0.0 and 0.01 < (b.dense == 0).mean() < 0.3
    assert 1.0 < b.dense.mean() < 4.0 and b.dense.max() < 15.0


def test_sample_is_pure_function_of_index(src):
    big = src.batch(1000, 700)  # crosses the kernel's 256-sample blocks
    rows = [src.batch(1000 + i, 1) for i in (0, 1, 255, 256, 257, 511, 699)]
    for i, r in zip((0, 1, 255, 256, 257, 511, 699), rows, strict=True):
        np.testing.assert_array_equal(r.dense[0], big.dense[i])
        np.testing.assert_array_equal(r.ids[0], big.ids[i])
        assert r.labels[0] == big.labels[i]
    split = [src.batch(1000, 300), src.batch(1300, 400)]
    np.testing.assert_array_equal(np.concatenate([s.ids for s in split]), big.ids)
    np.testing.assert_array_equal(np.concatenate([s.dense for s in split]), big.dense)
    again = SyntheticCriteo(5, CARDS).batch(1000, 700)
    np.testing.assert_array_equal(again.ids, big.ids)
    np.testing.assert_array_equal(again.labels, big.labels)


def test_seed_and_eval_range_differ(src):
    a = src.batch(0, 500)
    assert not np.array_equal(a.ids, SyntheticCriteo(6, CARDS).batch(0, 500).ids)
    e = src.eval_batch(500)
    np.testing.assert_array_equal(e.ids, src.batch(EVAL_START, 500).ids)
    assert not np.array_equal(e.ids, a.ids)


def test_power_law_and_scatter():
    s = SyntheticCriteo(1, [100_000], zipf_exponent=1.05, n_dense=2)
    ids = s.batch(0, 200_000).ids[:, 0]
    counts = np.bincount(ids, minlength=100_000)
    top = np.sort(counts)[::-1]
    # continuous power law: P(rank 0) = (1 - 2^-0.05) / (1 - 100001^-0.05) ~ 0.078
    assert 0.07 < top[0] / ids.size < 0.086
    # frequency ratio of ranks 1 and 10 ~ ((2.5) / (11.5))^-1.05 (mid-bin), loosely
    assert 3.5 < top[1] / top[10] < 6.0
    hot = np.argsort(counts)[::-1][:10]
    assert hot.max() - hot.min() > 10_000  # hot ids are scattered, not 0..9
    steeper = SyntheticCriteo(1, [100_000], zipf_exponent=1.3, n_dense=2)
    c2 = np.bincount(steeper.batch(0, 200_000).ids[:, 0], minlength=100_000)
    assert c2.max() > 1.5 * counts.max()


def test_small_tables_and_no_dense():
    s = SyntheticCriteo(2, [1, 2, 3], n_dense=0, teacher=TeacherParams(n_pairs=1))
    b = s.batch(0, 2000)
    assert b.dense.shape == (2000, 0)
    assert (b.ids[:, 0] == 0).all() and set(np.unique(b.ids[:, 2])) == {0, 1, 2}


def test_teacher_probs_are_the_label_probabilities(src):
    b, p = src.teacher_probs(0, 40_000)
    # calibration: within probability deciles, the label rate matches the mean prob
    q = np.quantile(p, np.linspace(0, 1, 6))
    for lo, hi in zip(q[:-1], q[1:], strict=True):
        m = (p >= lo) & (p < hi)
        assert abs(b.labels[m].mean() - p[m].mean()) < 0.02
    assert abs(auc(b.labels, p) - auc(b.labels, p.astype(np.float32))) < 1e-3


def test_teacher_auc_in_criteo_range(src):
    a = src.teacher_auc(50_000)
    assert 0.77 < a < 0.83  # the target band is 0.78-0.82; 50k samples: +-0.005


def test_bad_arguments():
    with pytest.raises(ValueError):
        SyntheticCriteo(0, [])
    with pytest.raises(ValueError):
        SyntheticCriteo(0, [10, 0])
    with pytest.raises(ValueError):
        SyntheticCriteo(0, [10]).batch(-1, 5)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_teacher_in_range(name):
    d = load_config(name, memory=False).data
    s = SyntheticCriteo(11, d.cardinalities, zipf_exponent=d.zipf_exponent, multi_hot=d.multi_hot)
    b, p = s.teacher_probs(EVAL_START, 30_000)
    assert 0.77 < auc(b.labels, p) < 0.83  # target 0.78-0.82; 30k samples: +-0.006
    assert 0.2 < b.labels.mean() < 0.3
    assert (b.ids < np.array(s.cardinalities)[column_tables(s.bags)]).all()


MLPERF_BAGS = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]


@pytest.fixture(scope="module")
def multi():
    return SyntheticCriteo(5, CARDS, multi_hot=MLPERF_BAGS)


def test_multi_hot_bags_shapes_ranges_and_purity(multi, src):
    b = multi.batch(1000, 700)
    assert b.ids.shape == (700, 214) and b.ids.dtype == np.int64 and b.bags == tuple(MLPERF_BAGS)
    assert b.n_tables == 26 and np.array_equal(b.bounds, bag_bounds(MLPERF_BAGS))
    assert (b.ids >= 0).all() and (b.ids < np.array(CARDS)[column_tables(MLPERF_BAGS)]).all()
    # the first id of every bag is the one-hot id; dense features are the one-hot ones
    one = src.batch(1000, 700)
    np.testing.assert_array_equal(b.ids[:, b.bounds[:-1]], one.ids)
    np.testing.assert_array_equal(b.dense, one.dense)
    # a pure function of the sample index, across the kernel's blocks
    for i in (0, 255, 256, 699):
        r = multi.batch(1000 + i, 1)
        np.testing.assert_array_equal(r.ids[0], b.ids[i])
        assert r.labels[0] == b.labels[i]
    again = SyntheticCriteo(5, CARDS, multi_hot=MLPERF_BAGS).batch(1000, 700)
    np.testing.assert_array_equal(again.ids, b.ids)
    # the ids of a bag are distinct draws (not copies of the first), power-law like the first
    big = b.ids[:, b.bounds[20]:b.bounds[21]]  # table 20: 100 ids per sample
    assert (big != big[:, :1]).mean() > 0.5
    assert multi.batch(0, 10).take(np.array([1, 3])).bags == b.bags
    with pytest.raises(ValueError, match="one bag size >= 1 per table"):
        SyntheticCriteo(0, [10, 20], multi_hot=[1])
    with pytest.raises(ValueError, match="one bag size >= 1 per table"):
        SyntheticCriteo(0, [10, 20], multi_hot=[1, 0])


def test_one_hot_bags_are_the_one_hot_generator_bit_for_bit(src):
    ones = SyntheticCriteo(5, CARDS, multi_hot=[1] * 26)
    for a, b in [(ones.batch(3, 600), src.batch(3, 600)), (ones.eval_batch(300), src.eval_batch(300))]:
        assert a.bags is None and a.ids.tobytes() == b.ids.tobytes()
        assert a.dense.tobytes() == b.dense.tobytes() and a.labels.tobytes() == b.labels.tobytes()
    assert ones.teacher_auc(3000) == src.teacher_auc(3000)


def test_multi_hot_teacher_uses_the_whole_bag(multi):
    """The labels depend on every id of a bag: the teacher sees the pooled effects."""
    b, p = multi.teacher_probs(EVAL_START, 30_000)
    assert 0.77 < auc(b.labels, p) < 0.83 and 0.2 < b.labels.mean() < 0.3
    # the teacher's probability is not a function of the bags' first ids alone
    one = SyntheticCriteo(5, CARDS).teacher_probs(EVAL_START, 30_000)[1]
    assert np.corrcoef(p, one)[0, 1] < 0.95
