#!/usr/bin/env python
"""What a second virtual shard costs a trainer (``layout.virtual_trainers``, ``roles.shards``).

Times the CPU of one laptop trainer step's compute (1024 samples: forward/backward and the
row-gradient scatter) as one shard, against two shards of 512 summed in the fixed tree, the two
interleaved, ``--rounds`` rounds of ``--steps`` steps each (numba and BLAS warmed up first); prints
each round's ratio and the median with its range. Run it on one core:
``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python scripts/virtual_shards_cost.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpiec.kernels.embedding import unique_inverse

from mpiec.data.factory import make_source
from mpiec.data.source import bag_bounds
from mpiec.launch.resolve import load_config
from mpiec.model.dlrm import forward_backward, init_params, pool_bags, pool_bags_backward
from mpiec.roles.shards import merge_arrays, tree_sum
from mpiec.roles.trainer import model_shape

BATCH = 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    cfg = load_config("laptop")
    shape = model_shape(cfg)
    params = init_params(shape, 1)
    batch = make_source(cfg).batch(0, BATCH)
    bounds = bag_bounds(cfg.data.bags)
    first = np.repeat(np.concatenate([[0], np.cumsum(cfg.data.cardinalities)])[:-1], cfg.data.bags)
    uniq, inv = unique_inverse((batch.ids + first).ravel())
    inv = inv.reshape(batch.ids.shape)
    rows = np.random.default_rng(0).normal(size=(uniq.size, cfg.model.dim)).astype(np.float32)
    emb = pool_bags(rows, inv, bounds)

    def merge(left: tuple, right: tuple) -> tuple:
        return merge_arrays(left[0], right[0]), merge_arrays(left[1], right[1])

    def step(shards: int) -> tuple:
        n = BATCH // shards
        leaves = {}
        for v in range(shards):
            s = slice(v * n, (v + 1) * n)
            loss, _, grad, grad_emb = forward_backward(shape, params, batch.dense[s], emb[s],
                                                       batch.labels[s], 2.0 * BATCH)
            dense = np.empty(grad.size + 1, np.float32)
            dense[:-1], dense[-1] = grad, loss
            leaves[(v, v + 1)] = (dense, pool_bags_backward(grad_emb, inv[s], bounds, uniq.size))
        return tree_sum(leaves, 0, shards, merge)

    for _ in range(20):
        step(1)
        step(2)
    ratios = []
    for r in range(a.rounds):
        cpu = {}
        for shards in ((1, 2) if r % 2 else (2, 1)):
            c0 = time.process_time()
            for _ in range(a.steps):
                step(shards)
            cpu[shards] = (time.process_time() - c0) / a.steps
        ratios.append(cpu[2] / cpu[1])
        print(f"round {r + 1:2d}: one shard {cpu[1] * 1e3:.2f} ms, two shards {cpu[2] * 1e3:.2f} ms, "
              f"ratio {ratios[-1]:.3f}")
    x = np.array(ratios)
    print(f"two shards / one shard: median {np.median(x):.3f} (min {x.min():.3f}, max {x.max():.3f}) "
          f"over {a.rounds} rounds")


if __name__ == "__main__":
    main()
