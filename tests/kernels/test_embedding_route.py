"""The trainer's routing kernels: bitmap unique and the counting-sort grouping equal numpy's."""

import numpy as np
import pytest
from mpiec.kernels import embedding as E

from mpiec.layout import RowPlacement, table_offsets
from mpiec.roles.trainer import route_rows


@pytest.mark.parametrize("n,span", [(26624, 500_000), (3000, 3_000_000), (5, 2_000_000), (1, 1)])
def test_unique_inverse_bitmap_path(n, span):
    rng = np.random.default_rng(n)
    ids = rng.integers(-7, span, n)
    lo, span = int(ids.min()), int(ids.max() - ids.min() + 1)
    assert E._unique_bitmap(ids, lo, span)[0].size == np.unique(ids).size
    u, inv = E.unique_inverse(ids)
    u2, inv2 = np.unique(ids, return_inverse=True)
    np.testing.assert_array_equal(u, u2)
    np.testing.assert_array_equal(inv, inv2.reshape(-1))


def test_group_by_owner_is_a_stable_argsort():
    rng = np.random.default_rng(3)
    owner = rng.integers(0, 5, 1000)
    slots = rng.integers(0, 10**6, 1000)
    inverse = rng.integers(0, 1000, 4000)
    grouped, counts, inv = E.group_by_owner(slots, owner, inverse, 6)
    order = np.argsort(owner, kind="stable")
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    np.testing.assert_array_equal(grouped, slots[order])
    np.testing.assert_array_equal(counts, np.bincount(owner, minlength=6))
    np.testing.assert_array_equal(inv, pos[inverse])


@pytest.mark.parametrize("servers,k,r", [(2, 1, 0), (3, 2, 1), (4, 2, 2)])
def test_route_rows_equals_the_numpy_routing(servers, k, r):
    cards = [1460, 583, 100000, 50000, 305, 24, 12517, 3]
    offsets = table_offsets(cards)
    pl = RowPlacement(int(offsets[-1]), servers, k, r)
    rng = np.random.default_rng(servers)
    ids = np.stack([rng.integers(0, c, 300) for c in cards], axis=1)
    col = offsets[:-1]
    slots, counts, inv = route_rows(ids, col, pl, 2 + servers, 2)
    # the routing as the trainer wrote it before: np.unique, argsort by owner, bincount
    uniq, inv0 = np.unique((ids + col).ravel(), return_inverse=True)
    owner = pl.owner(uniq)
    order = np.argsort(owner, kind="stable")
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    np.testing.assert_array_equal(slots, pl.local_slot(uniq[order]))
    np.testing.assert_array_equal(counts[2:], np.bincount(owner, minlength=servers))
    assert not counts[:2].any()
    np.testing.assert_array_equal(inv, pos[inv0.reshape(-1)])
