"""Server role: owns a shard of embedding rows and their optimizer state.

Owns the server's step: answer the trainers' row pulls, receive their row
gradients, sum them per row in a fixed order, apply the row-wise optimizer
and hand the updated rows to the strategy.

Invariants:

* the shard is ``table[n_local, dim + state]`` float32 (weights, then the
  row-wise Adagrad accumulator when used), initialised as a pure function of
  (seed, table, row), so any rank can rebuild any row's initial value;
* gradients of a row are summed in (trainer index, position in the trainer's
  message) order — never in arrival order — so updates are bit-reproducible;
* the strategy's ``after_apply`` sees every update of every step, with the
  old XOR new bytes when it asked for them (``needs_delta``).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from mpiec.comm import wait, waitall
from mpiec.data.rng import init_embedding_rows
from mpiec.faults import KillSwitch
from mpiec.kernels.embedding import (
    adagrad_apply,
    adagrad_apply_delta,
    gather_rows,
    scatter_add_rows,
    sgd_apply,
    sgd_apply_delta,
    unique_inverse,
)
from mpiec.roles.context import RankContext, server_rows
from mpiec.roles.exchange import STATUS_OK, exchange_headers, ialltoallv
from mpiec.roles.trainer import eval_due, eval_rounds
from mpiec.strategies.base import ServerShard

_EMPTY_I64 = np.empty(0, dtype=np.int64)
_EMPTY_F32 = np.empty(0, dtype=np.float32)


def init_shard(ctx: RankContext, server: int) -> ServerShard:
    """The initial shard of ``server``: rows from the hashing RNG, zero optimizer state."""
    cfg = ctx.cfg
    dim = cfg.model.dim
    state = 1 if cfg.training.optimizer == "adagrad" else 0
    rows = server_rows(ctx, server)
    table = np.zeros((rows.size, dim + state), dtype=np.float32)
    real = rows >= 0
    tables = np.searchsorted(ctx.offsets, rows[real], side="right") - 1
    local = np.flatnonzero(real)
    for t in np.unique(tables):
        sel = tables == t
        ids = rows[real][sel] - ctx.offsets[t]
        card = cfg.data.cardinalities[t]
        table[local[sel], :dim] = init_embedding_rows(cfg.training.seed, int(t), card, ids, dim)
    return ServerShard(index=server, table=table, global_rows=rows, dim=dim)


class Server:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.dim = cfg.model.dim
        self.shard = init_shard(ctx, ctx.slot.index)
        ctx.strategy.attach_server(self.shard)
        self.switch: KillSwitch | None = None  # armed when training starts
        self.last_apply_us = 0
        self.lr = np.float32(cfg.training.lr)
        self.eps = np.float32(cfg.training.eps)
        self.adagrad = cfg.training.optimizer == "adagrad"
        self.needs_delta = type(ctx.strategy).needs_delta
        self.needs_old = type(ctx.strategy).needs_old

    def serve(self, status: int, where: str, with_grads: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """One pull (and push) round: returns (slots requested, their gradients or None)."""
        data = self.ctx.comms.data
        headers = exchange_headers(data, np.zeros(data.Get_size(), dtype=np.int64), status,
                                   self.last_apply_us, where)
        counts = headers[:, 0].copy()
        zeros = np.zeros_like(counts)
        slots = np.empty(int(counts.sum()), dtype=np.int64)

        wait(ialltoallv(data, _EMPTY_I64, zeros, slots, counts), where)
        rows = np.empty((slots.size, self.dim), dtype=np.float32)
        gather_rows(self.shard.table, slots, self.dim, rows)
        reqs = [ialltoallv(data, rows, counts, _EMPTY_F32, zeros, width=self.dim)]
        grads = None
        if with_grads:
            grads = np.empty((slots.size, self.dim), dtype=np.float32)
            reqs.append(ialltoallv(data, _EMPTY_F32, zeros, grads, counts, width=self.dim))
        waitall(reqs, where)
        return slots, grads

    def apply(self, step: int, slots: np.ndarray, grads: np.ndarray) -> None:
        t0 = time.perf_counter()
        uniq, inv = unique_inverse(slots)
        acc = np.zeros((uniq.size, self.dim), dtype=np.float32)
        scatter_add_rows(grads, inv, acc)
        table = self.shard.table
        old = table[uniq] if self.needs_old else None  # fancy indexing copies
        delta = None
        if self.needs_delta:
            delta = np.empty((uniq.size, table.shape[1] * 4), dtype=np.uint8)
            if self.adagrad:
                adagrad_apply_delta(table, uniq, acc, self.lr, self.eps, delta)
            else:
                sgd_apply_delta(table, uniq, acc, self.lr, delta)
        elif self.adagrad:
            adagrad_apply(table, uniq, acc, self.lr, self.eps)
        else:
            sgd_apply(table, uniq, acc, self.lr)
        self.ctx.strategy.after_apply(step, uniq, old, delta)
        self.last_apply_us = int((time.perf_counter() - t0) * 1e6)

    def run(self) -> None:
        ctx, cfg = self.ctx, self.ctx.cfg
        self.switch = self.switch or ctx.kill_switch()
        for step in range(ctx.completed + 1, cfg.training.steps):
            ctx.current_step = step
            status = self.ctx.kill_status(self.switch, step)
            slots, grads = self.serve(status, f"step {step}", with_grads=True)
            self.apply(step, slots, grads)
            ctx.completed = step
            ctx.strategy.after_step(step)
            if eval_due(cfg, step):
                for _ in range(eval_rounds(cfg)):
                    self.serve(STATUS_OK, f"eval after step {step}", with_grads=False)
        self.switch.cancel()

    def final_report(self) -> dict[str, Any]:
        digest = hashlib.sha256(memoryview(np.ascontiguousarray(self.shard.table)).cast("B"))
        return {"shard_digest": digest.hexdigest(), "server": self.shard.index,
                "rows": int(self.shard.table.shape[0])}
