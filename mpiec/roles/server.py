"""Server role: owns a shard of embedding rows and their optimizer state.

Owns the server's step: answer the trainers' row pulls, receive their row
gradients, sum them per row in a fixed order, apply the row-wise optimizer
and hand the updated rows to the strategy.

Invariants:

* the shard is ``table[n_local, dim + state]`` float32 (weights, then the
  row-wise Adagrad accumulator when used), initialised as a pure function of
  (seed, table, row), so any rank can rebuild any row's initial value;
* gradients of a row are summed over the trainers' blocks of virtual shards in
  the fixed tree of ``roles.shards`` — never in arrival order — so updates are
  bit-reproducible and the same on any number of trainers;
* the strategy's ``after_apply`` sees every update of every step, with the
  old XOR new bytes when it asked for them (``needs_delta``).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
from mpi4py import MPI

from mpiec.comm import alltoallv_buffers, guard, ialltoallv, wait, waitall
from mpiec.data.rng import init_embedding_rows
from mpiec.failures.corruption import SHARD_MISMATCH
from mpiec.failures.stall import StallHook
from mpiec.kernels.embedding import (
    adagrad_apply,
    adagrad_apply_delta,
    gather_rows,
    sgd_apply,
    sgd_apply_delta,
)
from mpiec.roles import message_sums
from mpiec.roles.context import RankContext, server_rows
from mpiec.roles.driver import eval_due, eval_rounds, run_steps
from mpiec.roles.exchange import STATUS_OK, exchange_headers
from mpiec.roles.shard_check import SHOW_ROWS, ShardCheck
from mpiec.roles.shards import sum_pushes
from mpiec.strategies.api.base import ServerShard
from mpiec.strategies.api.plan import RecoveryPlan

_EMPTY_I64 = np.empty(0, dtype=np.int64)
_EMPTY_F32 = np.empty(0, dtype=np.float32)


def load_rows_by_id(shard: ServerShard, rows: np.ndarray, table: np.ndarray) -> int:
    """Copy the rows of ``table`` (global ids ``rows``) that ``shard`` holds into it; how many."""
    mine = shard.global_rows
    order = np.argsort(rows, kind="stable")
    pos = np.searchsorted(rows, mine, sorter=order)
    pos = np.minimum(pos, max(rows.size - 1, 0))
    hit = (mine >= 0) & (rows.size > 0)
    if rows.size:
        hit &= rows[order[pos]] == mine
    shard.table[hit] = table[order[pos[hit]]]
    return int(hit.sum())


def initial_rows(ctx: RankContext, rows: np.ndarray, values: bool = True) -> np.ndarray:
    """Initial rows ``[weights | zero optimizer state]`` of global ids ``rows`` (ids past the
    last table, the stripe padding, are zero rows): a pure function of the seed."""
    cfg = ctx.cfg
    dim = cfg.model.dim
    rows = np.asarray(rows, dtype=np.int64)
    table = np.zeros((rows.size, cfg.row_floats), dtype=np.float32)
    real = (rows >= 0) & (rows < ctx.offsets[-1])
    tables = np.searchsorted(ctx.offsets, rows[real], side="right") - 1
    local = np.flatnonzero(real)
    for t in np.unique(tables) if values else []:
        sel = tables == t
        ids = rows[real][sel] - ctx.offsets[t]
        card = cfg.data.cardinalities[t]
        table[local[sel], :dim] = init_embedding_rows(cfg.training.seed, int(t), card, ids, dim)
    return table


def init_shard(ctx: RankContext, server: int, values: bool = True) -> ServerShard:
    """The initial shard of ``server`` (``values=False``: zeros, for a replacement whose
    rows the recovery restores)."""
    rows = server_rows(ctx, server)
    return ServerShard(index=server, table=initial_rows(ctx, rows, values), global_rows=rows,
                       dim=ctx.cfg.model.dim)


def move_rows(ctx: RankContext, old: list[ServerShard], new: Server | None) -> tuple[int, int]:
    """Collective over ``servers`` (servers, then dedicated parity ranks, which pass [], None): a
    re-placement without restore (a growth; a shrink's handover). Every row of the shards ``old``
    (this server's shard under the previous placement; a dropped server's rows it rebuilt) goes
    to its owner under ``ctx.placement`` and is loaded into ``new`` (this server's role built for
    it), with its optimizer state; a spawned server sends nothing. Raises if ``new`` did not
    receive every one of its rows. Returns (rows, bytes) this rank sent to other servers."""
    comm = ctx.comms.servers
    assert comm is not None  # a server or parity rank
    size = comm.Get_size()
    width = ctx.cfg.row_floats
    ids, rows = np.empty(0, np.int64), np.empty((0, width), np.float32)
    scounts = np.zeros(size, dtype=np.int64)
    if old:
        every_id = np.concatenate([o.global_rows for o in old]) if len(old) > 1 else old[0].global_rows
        table = np.concatenate([o.table for o in old]) if len(old) > 1 else old[0].table
        real = np.flatnonzero(every_id >= 0)
        owner = ctx.placement.owner(every_id[real])
        pick = real[np.argsort(owner, kind="stable")]  # one gather of the rows, by new owner
        ids, rows = every_id[pick], table[pick]
        scounts[: ctx.n_servers] = np.bincount(owner, minlength=ctx.n_servers)
    rcounts = np.empty(size, dtype=np.int64)
    with guard("row re-placement", nonblocking_collective=True):
        comm.Alltoall([scounts, 1, MPI.INT64_T], [rcounts, 1, MPI.INT64_T])
        n = int(rcounts.sum())
        rids, rrows = np.empty(n, np.int64), np.empty((n, width), np.float32)
        comm.Alltoallv(*alltoallv_buffers(ids, scounts, rids, rcounts))
        comm.Alltoallv(*alltoallv_buffers(rows, scounts, rrows, rcounts, width))
    if new is not None:
        loaded = new.load_rows(rids, rrows)
        if loaded != new.n_rows():
            raise RuntimeError(f"{ctx.slot}: the re-placement brought {loaded} of its {new.n_rows()} rows")
    me = comm.Get_rank()
    moved = int(scounts.sum() - scounts[me])
    return moved, moved * (8 + 4 * width)


class Server:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.dim = cfg.model.dim
        # A promoted replacement gets its rows from the recovery's restore: generating the
        # initial rows first would only add to the replacement time (about 1 s on laptop).
        self.shard = init_shard(ctx, ctx.slot.index, values=not ctx.awaiting_restore)
        self.last_apply_us = 0
        self.apply_cpu_s = 0.0  # CPU of the gradient sums and optimizer updates of executed steps
        self.lr = np.float32(cfg.training.lr)
        self.eps = np.float32(cfg.training.eps)
        self.adagrad = cfg.training.optimizer == "adagrad"
        self.virtual = cfg.virtual_trainers  # the shards whose tree the pushes are summed in
        self.needs_delta = type(ctx.strategy).needs_delta
        # The rows before each apply are the one-step undo record of reconciliation.
        self.needs_old = type(ctx.strategy).needs_old or type(ctx.strategy).recovers
        self._undo: tuple[int, np.ndarray, np.ndarray] | None = None  # (step, slots, rows before)
        self.eval_pending = False  # redo the evaluation after the restored step (set on recovery)
        self.stall = StallHook(ctx)  # test hook (MPIEC_STALL): sleep at a known step
        self.check = ShardCheck(cfg.failures.shard_check_every)  # rows changed at rest (opt-in)
        if ctx.awaiting_restore:
            self.check.forget(self.shard.table.shape[0])
        else:
            self.check.rebase(self.shard.table)

    # -- state ----------------------------------------------------------------
    def reset(self) -> None:
        """The initial shard: a pure function of the seed."""
        self.shard.table[...] = init_shard(self.ctx, self.shard.index).table
        self._undo = None
        self.check.rebase(self.shard.table)

    def state(self) -> dict[str, np.ndarray]:
        """The shard (live arrays): rows ``[weights | optimizer state]`` and their global ids."""
        return {"table": self.shard.table, "global_rows": self.shard.global_rows}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Load rows by global id: the state may come from another placement (``--resume``)."""
        table, rows = state["table"], state["global_rows"]
        if table.shape[1] != self.shard.table.shape[1]:
            raise ValueError(f"shard rows of width {table.shape[1]}, this model needs "
                             f"{self.shard.table.shape[1]}")
        if np.array_equal(rows, self.shard.global_rows):
            self.shard.table[...] = table
        else:
            load_rows_by_id(self.shard, rows, table)
        self._undo = None
        self.check.rebase(self.shard.table)  # in a recovery, after_recovery forgets it again

    def load_rows(self, rows: np.ndarray, table: np.ndarray) -> int:
        """Load the rows of ``table`` (global ids ``rows``) this shard holds; returns how many."""
        self._undo = None
        loaded = load_rows_by_id(self.shard, np.asarray(rows), np.asarray(table))
        self.check.rebase(self.shard.table)  # in a recovery, after_recovery forgets it again
        return loaded

    def n_rows(self) -> int:
        """Real rows of the shard (stripe padding excluded)."""
        return int((self.shard.global_rows >= 0).sum())

    def undo_last(self, committed: int) -> None:
        """Reconciliation: put back the rows step ``committed + 1`` updated."""
        if self._undo is None or self._undo[0] != committed + 1:
            raise RuntimeError(f"server {self.shard.index}: no undo record for step {committed + 1}")
        _, slots, old = self._undo
        self.shard.table[slots] = old
        self._undo = None

    def after_recovery(self, plan: RecoveryPlan) -> None:
        self._undo = None
        self.check.forget(self.shard.table.shape[0])  # a strategy may go on writing rows its own way
        self.eval_pending = plan.restored >= 0 and eval_due(self.ctx.cfg, plan.restored)

    def serve(self, step: int, status: int, where: str, with_grads: bool,
              word: int = 0) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """One pull (and push) round: (slots requested, their gradients or None, headers); the
        headers' column 0 is the number of slots from each data rank."""
        data = self.ctx.comms.data_comm()
        headers = exchange_headers(data, np.zeros(data.Get_size(), dtype=np.int64), status,
                                   self.last_apply_us, where, word)
        counts = headers[:, 0].copy()
        zeros = np.zeros_like(counts)
        slots = np.empty(int(counts.sum()), dtype=np.int64)

        wait(ialltoallv(data, _EMPTY_I64, zeros, slots, counts), where)
        self.ctx.server_agent().on_pull(step, slots)
        rows = np.empty((slots.size, self.dim), dtype=np.float32)
        gather_rows(self.shard.table, slots, self.dim, rows)
        reqs = [ialltoallv(data, rows, counts, _EMPTY_F32, zeros, width=self.dim)]
        grads = None
        sums = self.ctx.cfg.failures.message_checksums and with_grads
        if with_grads:
            grads = np.empty((slots.size, self.dim), dtype=np.float32)
            reqs.append(ialltoallv(data, _EMPTY_F32, zeros, grads, counts, width=self.dim))
            if sums:  # the trainers' folds of what they sent (``roles.message_sums``)
                nothing, sent = np.zeros(counts.size, dtype=np.int64), np.zeros(counts.size, dtype=np.int64)
                reqs.append(message_sums.post(data, nothing, sent))
            wait(reqs[0], where)  # the rows are out: the trainers compute, the strategy may work
            self.ctx.server_agent().overlap(step)
        waitall(reqs, where)
        if sums:
            assert grads is not None
            bad = message_sums.mismatches(grads, counts, sent, self.ctx.n_trainers)
            if bad:
                message_sums.refuse(self.ctx, step, bad, counts)
        return slots, grads, headers

    def replay(self, step: int, slots: np.ndarray, grads: np.ndarray, counts: np.ndarray) -> None:
        """Re-apply the gradients of an earlier ``step`` (slots and gradients in trainer order,
        ``counts[i]`` from trainer ``i``, as the step's push delivered them): the rows reach that
        step's state exactly."""
        self.apply(step, slots, grads, counts, replayed=True)

    def replay_into(self, table: np.ndarray, slots: np.ndarray, grads: np.ndarray,
                    counts: np.ndarray) -> None:
        """``replay`` onto another shard's ``table`` (a dropped server's rows this server rebuilt
        in a shrink's handover): the same sum and optimizer, no strategy hook, no undo record."""
        uniq, acc = sum_pushes(slots, grads, np.asarray(counts, dtype=np.int64), self.virtual)
        self.optimize(table, uniq, acc)

    def optimize(self, table: np.ndarray, uniq: np.ndarray, acc: np.ndarray) -> None:
        """The row-wise optimizer on ``table``'s rows ``uniq`` with their summed gradients ``acc``."""
        if self.adagrad:
            adagrad_apply(table, uniq, acc, self.lr, self.eps)
        else:
            sgd_apply(table, uniq, acc, self.lr)

    def apply(self, step: int, slots: np.ndarray, grads: np.ndarray, counts: np.ndarray,
              replayed: bool = False) -> None:
        """Sum the step's pushes per row (``counts[i]`` rows from trainer ``i``, in trainer order;
        ``roles.shards``) and apply the optimizer; then the strategy's ``after_apply``."""
        t0, c0 = time.perf_counter(), time.thread_time()
        uniq, acc = sum_pushes(slots, grads, np.asarray(counts, dtype=np.int64), self.virtual)
        table = self.shard.table
        if not replayed:  # a row changed at rest since its last update is found before this one
            self.report(step, self.check.before_update(table, uniq), "before its update")
        # the rows before the update, copied by the optimizer while it has them in cache
        old = np.empty((uniq.size, table.shape[1]), np.float32) if self.needs_old else None
        delta = np.empty((uniq.size, table.shape[1] * 4), dtype=np.uint8) if self.needs_delta else None
        if old is None and delta is None:
            self.optimize(table, uniq, acc)
        elif self.adagrad:
            adagrad_apply_delta(table, uniq, acc, self.lr, self.eps, delta, old)
        else:
            sgd_apply_delta(table, uniq, acc, self.lr, delta, old)
        if old is not None:
            self._undo = (step, uniq, old)
        self.check.after_update(table, uniq)
        if not replayed:
            self.ctx.progress.applied = step  # the table holds it now, completed or not (recovery.reconcile)
            self.apply_cpu_s += time.thread_time() - c0  # the optimizer's own, before after_apply
        self.ctx.server_agent().after_apply(step, uniq, old, delta, replayed=replayed)
        self.last_apply_us = int((time.perf_counter() - t0) * 1e6)

    # -- the step (``roles.driver``) ------------------------------------------------
    def resume(self) -> None:
        if self.eval_pending:  # the evaluation a failure may have interrupted, redone
            self.eval_pending = False
            self.evaluate(self.ctx.progress.completed)

    def exchange(self, step: int, status: int, word: int) -> np.ndarray:
        slots, grads, headers = self.serve(step, status, f"step {step}", with_grads=True, word=word)
        assert grads is not None
        self.apply(step, slots, grads, headers[: self.ctx.n_trainers, 0])
        return headers[:, 3]

    def finish_step(self, step: int, t_start: float, t_hooks: float) -> None:
        pass  # trainer 0 keeps the step's record; the servers' apply time rides in the headers

    def evaluate(self, step: int) -> None:
        for _ in range(eval_rounds(self.ctx.cfg, self.ctx.n_trainers)):
            self.serve(-1, STATUS_OK, f"eval after step {step}", with_grads=False)

    def after_step(self, step: int) -> None:
        if self.check.due(step):
            self.report(step, self.check.scan(self.shard.table), "in the shard check")

    def report(self, step: int, slots: np.ndarray, where: str) -> None:
        """``slots``: rows of this shard changed at rest (``roles.shard_check``): one event and one
        line naming their global rows; each is not reported again before its next update."""
        if not slots.size:
            return
        self.check.found(slots)
        rows = self.shard.global_rows[slots]
        shown = ", ".join(map(str, rows[:SHOW_ROWS])) + (", ..." if rows.size > SHOW_ROWS else "")
        detail = (f"global row {rows[0]}: {rows.size} row(s) of {self.ctx.slot} changed at rest, found "
                  f"{where} (global rows {shown}); not repaired")
        self.ctx.event(SHARD_MISMATCH, step, detail=detail)
        print(f"[mpiec] step {step}: {detail}", flush=True)

    def run(self) -> None:
        run_steps(self.ctx, self, self.ctx.server_agent())

    def final_report(self) -> dict[str, Any]:
        rows = self.shard.global_rows
        real = rows >= 0
        table = np.ascontiguousarray(self.shard.table[real])
        return {"shard_digest": hashlib.sha256(table.tobytes()).hexdigest(), "server": self.shard.index,
                "rows": int(real.sum()), "global_rows": rows[real], "table": table,
                "apply_cpu_s": self.apply_cpu_s}
