"""Virtual trainer shards: whoever sums which block, the step's gradient has the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from mpiec.kernels.embedding import unique_inverse

from mpiec.layout import trainer_blocks
from mpiec.model.dlrm import pool_bags_backward
from mpiec.roles.shards import merge_arrays, merge_rows, sum_pushes, tree_sum

V = 8
DIM = 4


def leaf_gradients(rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per shard: its samples' ids (3 single-id tables) and their pooled gradients, with
    hot rows shared by shards, zeros and negative zeros among the values."""
    ids, grads = [], []
    for _ in range(V):
        n = int(rng.integers(1, 6))
        ids.append(rng.zipf(1.3, size=(n, 3)).astype(np.int64) % 40)
        g = (rng.normal(size=(n, 3, DIM)) * 10.0 ** rng.integers(-6, 6)).astype(np.float32)
        g[rng.random(g.shape) < 0.1] = -0.0
        g[rng.random(g.shape) < 0.1] = 0.0
        grads.append(g)
    return ids, grads


def one_run(ids: list[np.ndarray], grads: list[np.ndarray], trainers: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows' step gradient as ``trainers`` trainers and one server compute it: each trainer
    pools its shards over its own unique rows and sums its block; the server sums the pushes."""
    bounds = np.arange(4, dtype=np.int64)
    pushes, counts = [], []
    for lo, hi in trainer_blocks(trainers, V):
        uniq, inv = unique_inverse(np.concatenate(ids[lo:hi]).ravel())
        inv = inv.reshape(-1, 3)
        leaves, at = {}, 0
        for v in range(lo, hi):
            n = ids[v].shape[0]
            leaves[(v, v + 1)] = pool_bags_backward(grads[v], inv[at:at + n], bounds, uniq.size)
            at += n
        pushes.append((uniq, tree_sum(leaves, lo, hi, merge_arrays)))
        counts.append(uniq.size)
    slots = np.concatenate([p[0] for p in pushes])
    rows = np.concatenate([p[1] for p in pushes])
    return sum_pushes(slots, rows, np.array(counts), V)


@pytest.mark.parametrize("seed", range(5))
def test_row_gradients_have_the_same_bits_on_any_trainer_count(seed):
    ids, grads = leaf_gradients(np.random.default_rng(seed))
    ref_ids, ref = one_run(ids, grads, 1)
    for trainers in range(2, V + 1):
        got_ids, got = one_run(ids, grads, trainers)
        assert np.array_equal(got_ids, ref_ids)
        assert got.tobytes() == ref.tobytes(), f"{trainers} trainers"


def test_the_tree_is_not_a_plain_sum():
    """Checks that could fail: a sequential sum of the same leaves rounds differently."""
    rng = np.random.default_rng(3)
    leaves = [(rng.normal(size=1000) * 10.0 ** rng.integers(-4, 4)).astype(np.float32)
              for _ in range(V)]
    tree = tree_sum({(v, v + 1): x for v, x in enumerate(leaves)}, 0, V, merge_arrays)
    seq = np.zeros(1000, np.float32)
    for x in leaves:
        seq += x
    assert tree.tobytes() != seq.tobytes()
    blocks = {b: tree_sum({(v, v + 1): leaves[v] for v in range(*b)}, *b, merge_arrays)
              for b in trainer_blocks(3, V)}
    assert tree_sum(blocks, 0, V, merge_arrays).tobytes() == tree.tobytes()


def test_a_node_never_holds_negative_zero():
    a = np.array([-0.0, -0.0, 1.0], np.float32)
    out = merge_arrays(a, a)
    assert not np.signbit(out[:2]).any()
    _, rows = merge_rows((np.array([1, 2]), np.array([[-0.0], [-0.0]], np.float32)),
                         (np.array([2]), np.array([[-0.0]], np.float32)))
    assert not np.signbit(rows).any()


def test_missing_shard_is_an_error():
    with pytest.raises(ValueError, match="virtual shard 2"):
        tree_sum({(0, 2): 1, (3, 4): 1}, 0, 4, lambda a, b: a + b)
