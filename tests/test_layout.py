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


def test_rank_nodes_group_ranks_after_the_monitor():
    from mpiec.layout import node_count, rank_nodes

    assert rank_nodes(8, 3) == [-1, 0, 0, 0, 1, 1, 1, 2]  # the monitor belongs to no node
    assert node_count(8, 3) == 3 and node_count(8, 0) == 7
    assert rank_nodes(4) == [-1, 0, 1, 2]  # no nodes: every rank its own
    assert rank_nodes(4, 0, ["a", "a", "a", "a"]) == [-1, 0, 1, 2]  # one host: the same
    # several hosts: a node is a host, numbered in order of first appearance (the monitor's first)
    assert rank_nodes(5, 0, ["h2", "h1", "h2", "h3", "h1"]) == [0, 1, 0, 2, 1]
    assert rank_nodes(5, 2, ["h2", "h1", "h2", "h3", "h1"]) == [-1, 0, 0, 1, 1]  # the config's nodes win


def test_spread_order_keeps_the_identity_when_it_is_as_good():
    from mpiec.layout import spread_order, window_collisions

    assert spread_order([-1, -1, -1, -1], 3) == [0, 1, 2, 3]  # no shared node
    assert spread_order([0, 1, 2, 0, 1, 2], 3) == [0, 1, 2, 3, 4, 5]  # already spread
    order = spread_order([0, 0, 1, 1, 2, 2], 3)
    assert window_collisions(order, [0, 0, 1, 1, 2, 2], 3) == 1
    assert window_collisions(list(range(6)), [0, 0, 1, 1, 2, 2], 3) == 2
    # impossible to spread (a node of 2 in a stripe of all 3 servers): as good as it gets, 2
    assert window_collisions(spread_order([0, 0, 1], 3), [0, 0, 1], 3) == 2


@pytest.mark.parametrize("virtual", [1, 2, 4, 8, 16])
def test_trainer_blocks_are_aligned_tree_nodes_covering_every_shard(virtual):
    from mpiec.layout import trainer_blocks

    for trainers in range(1, virtual + 1):
        blocks = trainer_blocks(trainers, virtual)
        assert len(blocks) == trainers
        assert [b[0] for b in blocks] == [0] + [b[1] for b in blocks[:-1]] and blocks[-1][1] == virtual
        sizes = [hi - lo for lo, hi in blocks]
        assert all(s & (s - 1) == 0 and lo % s == 0 for s, (lo, _) in zip(sizes, blocks, strict=True))
        assert max(sizes) <= 2 * min(sizes)


def test_trainer_blocks_refuse_what_no_tree_holds():
    from mpiec.layout import trainer_blocks

    with pytest.raises(ValueError, match="power of two"):
        trainer_blocks(2, 6)
    with pytest.raises(ValueError, match="power of two"):
        trainer_blocks(5, 4)


def test_shard_samples_cut_the_global_batch_without_gaps():
    from mpiec.layout import auto_virtual_trainers, shard_samples

    cuts = [shard_samples(100, 8, v) for v in range(8)]
    assert cuts[0][0] == 0 and cuts[-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:], strict=False))
    assert [auto_virtual_trainers(t, 128) for t in (1, 2, 3, 4, 5, 8)] == [4, 4, 4, 4, 8, 8]
    assert auto_virtual_trainers(1, 3) == 2


def _by_modulo(pl: RowPlacement, server: int) -> tuple[np.ndarray, np.ndarray]:
    """The data slots' (stripe, member) by the definition: a pass of modulos over every stripe."""
    stripes = np.arange(pl.n_stripes, dtype=np.int64)
    member = (pl.position[server] - stripes) % pl.servers
    mine = member < pl.k
    return stripes[mine], member[mine]


@pytest.mark.parametrize("total", [1, 2, 5, 7, 64, 1001, 4099])
@pytest.mark.parametrize("servers,k,r", [(1, 1, 0), (2, 1, 1), (3, 2, 1), (5, 4, 1), (6, 4, 2), (7, 3, 2),
                                         (4, 4, 0), (9, 1, 4)])
def test_closed_form_data_slots_equal_the_modulo_definition(total, servers, k, r):
    rng = np.random.default_rng(total * 31 + servers)
    for order in (None, list(rng.permutation(servers))):
        pl = RowPlacement(total, servers, k, r, order=order)
        for server in range(servers):
            want_s, want_m = _by_modulo(pl, server)
            got_s, got_m = pl.data_stripes(server)
            assert np.array_equal(got_s, want_s) and np.array_equal(got_m, want_m)
            assert pl.n_local(server) == want_s.size
            rows = want_s * k + want_m
            assert np.array_equal(pl.rows_of(server), rows[rows < total])
            assert np.array_equal(pl.local_slot(pl.rows_of(server)), np.arange(pl.rows_of(server).size))
