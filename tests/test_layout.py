"""Row placement: a bijection between global rows and (server, slot), slots in global order."""

import numpy as np
import pytest

from mpiec.layout import RowPlacement, initial_slots, table_offsets


@pytest.mark.parametrize("total, servers, k, r", [(100, 2, 1, 0), (1001, 3, 1, 0), (1000, 5, 4, 1),
                                                  (997, 6, 3, 2), (50, 4, 2, 2), (333, 7, 1, 1)])
def test_placement_is_a_bijection_in_global_order(total, servers, k, r):
    pl = RowPlacement(total, servers, k, r)
    rows = np.arange(total)
    owner, slot = pl.owner(rows), pl.local_slot(rows)
    for s in range(servers):
        mine = rows[owner == s]
        assert np.array_equal(pl.rows_of(s), mine)
        assert np.array_equal(slot[owner == s], np.arange(mine.size))
        assert pl.n_local(s) >= mine.size
    assert sum(pl.n_local(s) for s in range(servers)) == pl.n_stripes * k


def test_stripe_members_on_distinct_servers():
    pl = RowPlacement(1200, 6, 4, 2)
    stripes = np.arange(pl.n_stripes)
    for s in stripes[:50]:
        data = set(pl.owner(np.arange(s * 4, s * 4 + 4)).tolist())
        parity = {int(pl.parity_holder(np.array([s]), i)[0]) for i in range(2)}
        assert len(data) == 4 and len(parity) == 2 and not data & parity
    # parity slots are a bijection per holder too
    for i in range(2):
        h, sl = pl.parity_holder(stripes, i), pl.parity_slot(stripes, i)
        for p in range(6):
            assert np.unique(sl[h == p]).size == np.count_nonzero(h == p)


def test_too_few_servers_for_a_stripe():
    with pytest.raises(ValueError, match="needs at least 5 servers"):
        RowPlacement(100, 4, 4, 1)


def test_slots_and_offsets():
    slots = initial_slots(2, 3, 0, 1)
    assert [str(s) for s in slots] == ["monitor:0", "trainer:0", "trainer:1", "server:0", "server:1",
                                       "server:2", "spare:0"]
    assert table_offsets([3, 4]).tolist() == [0, 3, 7]
