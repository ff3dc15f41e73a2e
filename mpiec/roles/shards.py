"""Virtual trainer shards: the fixed tree in which a step's gradients are summed.

A step's global batch is cut into ``V`` virtual shards (``layout.shard_samples``; ``V`` a power of
two, ``Config.virtual_trainers``), and a trainer holds an aligned block of them
(``layout.trainer_blocks``). The gradient of the step, dense and per embedding row, is the sum
over shards in one binary tree: a node's value is ``(0 + left) + right`` (float32, elementwise;
rows absent from a child count as absent, which equals adding +0). Whoever computes a node — the
trainer holding its whole block, or the servers and trainers combining blocks — gets the same
bits, so the result does not depend on how many trainers there are or which shards each holds.

Invariants:

* a node's value never holds ``-0.0`` (``0 + x`` is ``+0`` for ``x = ±0``), so combining a node
  received from elsewhere with ``0 +`` again changes nothing: the leaf-level rounding is the only
  one, and it is the same everywhere;
* a leaf's gradient is ``forward_backward`` and ``pool_bags_backward`` on that shard's samples
  alone, in sample order: the same inputs on any trainer;
* the root is applied once per step by the optimizer (trainers: the dense replica; servers:
  their rows), exactly as the one-trainer run would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np

from mpiec.kernels.embedding import scatter_add_rows, unique_inverse
from mpiec.layout import shard_samples, trainer_blocks
from mpiec.model.dlrm import DLRMShape, forward_backward, pool_bags_backward

X = TypeVar("X")
Rows = tuple[np.ndarray, np.ndarray]  # (row ids [n], values [n, dim]): rows of one node


def tree_sum(nodes: Mapping[tuple[int, int], X], lo: int, hi: int, merge: Callable[[X, X], X]) -> X:
    """The value of tree node ``[lo, hi)`` from the values of the nodes in ``nodes`` (disjoint
    aligned blocks covering it): a given node is taken as is, any other is ``merge(left, right)``
    of its halves."""
    if (lo, hi) in nodes:
        return nodes[(lo, hi)]
    if hi - lo < 2:
        raise ValueError(f"virtual shard {lo} has no value: the blocks do not cover [{lo}, {hi})")
    mid = (lo + hi) // 2
    return merge(tree_sum(nodes, lo, mid, merge), tree_sum(nodes, mid, hi, merge))


def block_gradients(shape: DLRMShape, params: np.ndarray, dense: np.ndarray, emb: np.ndarray,
                    labels: np.ndarray, index: np.ndarray, bounds: np.ndarray, n_rows: int,
                    global_batch: int, virtual: int, block: tuple[int, int]) -> Rows:
    """A trainer's block ``[lo, hi)`` of virtual shards of one step: (dense gradients + loss sum
    ``[P + 1]``, row gradients ``[n_rows, dim]`` indexed like the pulled rows), each leaf the
    gradient of one shard's samples, summed in the fixed tree. ``dense``, ``emb``, ``labels`` and
    ``index`` (pooled bags' rows) hold the block's samples, in order."""
    first = shard_samples(global_batch, virtual, block[0])[0]
    leaves: dict[tuple[int, int], Rows] = {}
    for v in range(*block):
        a, b = (i - first for i in shard_samples(global_batch, virtual, v))
        loss_sum, _, gparams, gemb = forward_backward(shape, params, dense[a:b], emb[a:b], labels[a:b],
                                                      float(global_batch))
        node = np.empty(gparams.size + 1, dtype=np.float32)
        node[:-1] = gparams
        node[-1] = loss_sum
        leaves[(v, v + 1)] = (node, pool_bags_backward(gemb, index[a:b], bounds, n_rows))

    def merge(left: Rows, right: Rows) -> Rows:
        return merge_arrays(left[0], right[0]), merge_arrays(left[1], right[1])

    return tree_sum(leaves, *block, merge)


def merge_arrays(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``(0 + left) + right``, elementwise: two nodes over the same index space (a dense
    gradient, or a trainer's rows indexed by its batch's unique rows, zero where absent)."""
    out = np.zeros_like(left)
    out += left
    out += right
    return out


def sum_rows(ids: np.ndarray, values: np.ndarray) -> Rows:
    """``0 +`` the values of each id, in the order given: (ids sorted ascending, sums)."""
    uniq, inv = unique_inverse(ids)
    out = np.zeros((uniq.size, values.shape[1]), dtype=np.float32)
    scatter_add_rows(values, inv, out)
    return uniq, out


def merge_rows(left: Rows, right: Rows) -> Rows:
    """``(0 + left) + right`` over the union of two nodes' rows (each node's ids unique): the
    ids sorted ascending, a row in one node only is ``0 +`` its value."""
    return sum_rows(np.concatenate([left[0], right[0]]), np.concatenate([left[1], right[1]]))


def sum_pushes(slots: np.ndarray, grads: np.ndarray, counts: np.ndarray, virtual: int) -> Rows:
    """A server: the step's gradient per row from the trainers' pushes (``counts[i]`` rows from
    trainer ``i``, which holds ``layout.trainer_blocks(len(counts), virtual)[i]``, each trainer's
    ids unique), as ``(sorted ids, sums)``. The root always passes through ``sum_rows`` once more
    (``0 +``, a no-op on a node; it sorts one trainer's rows)."""
    if len(counts) <= 2:  # one or two trainers (the tree's root, or its two halves): one pass
        return sum_rows(slots, grads)
    blocks = trainer_blocks(len(counts), virtual)
    ends = np.cumsum(counts)
    starts = ends - counts
    nodes = {blocks[i]: (slots[starts[i]:ends[i]], grads[starts[i]:ends[i]])
             for i in range(len(blocks))}
    empty = (np.empty(0, np.int64), np.empty((0, grads.shape[1]), np.float32))
    return merge_rows(empty, tree_sum(nodes, 0, virtual, merge_rows))


__all__ = ["Rows", "merge_arrays", "merge_rows", "sum_pushes", "sum_rows", "tree_sum"]
