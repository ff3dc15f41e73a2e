"""Trainer role: a data-parallel replica of the dense MLP.

Owns the trainer's step: read the batch for (step, trainer), pull the unique
embedding rows from their owners, run DLRM forward/backward, push row
gradients to the owners and all-reduce the dense gradient among trainers, then
apply the dense optimizer. Trainer 0 also keeps the run's timeline and eval
records and streams them to the monitor.

Invariants:

* the samples of a step are ``[step·G, +G)`` of the source (``G`` the global
  batch), cut into virtual shards (``layout.shard_samples``); trainer ``i``
  holds the block ``layout.trainer_blocks(T, V)[i]``: a pure function of the
  seed and the layout, so a replacement recomputes them;
* gradients are of the *global* mean loss (scale = global batch), computed per
  shard and summed in the fixed tree of ``roles.shards``: the trainer sums its
  block, the trainers' blocks are gathered and summed alike by every trainer
  (dense) and by each server (rows), so every replica applies bit-identical
  updates, whatever the number of trainers.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from mpiec.comm import guard, ialltoallv, waitall
from mpiec.data.factory import check_eval_size, make_source
from mpiec.data.source import Batch, bag_bounds
from mpiec.failures.stall import StallHook
from mpiec.kernels.embedding import group_by_owner, unique_inverse
from mpiec.layout import RowPlacement, shard_samples, trainer_blocks
from mpiec.model.dlrm import DLRMShape, init_params, pool_bags, predict
from mpiec.model.metrics import accuracy, auc, logloss
from mpiec.results import EVAL_DTYPE, TIMELINE_DTYPE
from mpiec.roles import message_sums
from mpiec.roles.context import TAG_DONE, TAG_EVAL, TAG_FAILURE, TAG_STEPS, RankContext
from mpiec.roles.driver import eval_due, eval_rounds, run_steps
from mpiec.roles.exchange import (
    STATUS_DIVERGED,
    STATUS_OK,
    Diverged,
    EmulatedFailure,
    exchange_headers,
)
from mpiec.roles.replicas import ReplicaCheck, broadcast_replica
from mpiec.roles.shards import block_gradients, merge_arrays, tree_sum
from mpiec.strategies.api.plan import RecoveryPlan

if TYPE_CHECKING:
    from mpiec.config import Config

_EMPTY_I64 = np.empty(0, dtype=np.int64)
_EMPTY_F32 = np.empty(0, dtype=np.float32)


def model_shape(cfg: Config) -> DLRMShape:
    return DLRMShape(n_dense=13, n_tables=len(cfg.data.cardinalities), dim=cfg.model.dim,
                     bottom=tuple(cfg.model.bottom), top=tuple(cfg.model.top))


def route_rows(ids: np.ndarray, col_offsets: np.ndarray, placement: RowPlacement, n_data: int,
               base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The routing of a batch's ids (``Trainer.route``): ``(local slots grouped by owner, send
    counts per data rank, inverse)``; server ``s`` is data rank ``base + s``, column ``c`` of
    ``ids`` is offset by ``col_offsets[c]`` (its table's first global row)."""
    uniq, inv = unique_inverse((ids + col_offsets).ravel())
    slots, per_server, inv = group_by_owner(placement.local_slot(uniq), placement.owner(uniq), inv,
                                            placement.servers)
    counts = np.zeros(n_data, dtype=np.int64)
    counts[base:base + placement.servers] = per_server
    return slots, counts, inv


class Trainer:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.index = ctx.slot.index
        self.n_trainers = ctx.n_trainers
        self.G = cfg.global_batch
        self.V = cfg.virtual_trainers
        self.blocks = trainer_blocks(self.n_trainers, self.V)
        self.block = self.blocks[self.index]  # the virtual shards [lo, hi) this trainer holds
        self.first = shard_samples(self.G, self.V, self.block[0])[0]  # its first sample in a step
        self.n_local = shard_samples(self.G, self.V, self.block[1] - 1)[1] - self.first
        self.dim = cfg.model.dim
        self.shape = model_shape(cfg)
        self.reset()
        self.P = self.params.size
        self.check = ReplicaCheck(cfg.failures.dense_check_every)  # the replicas' cross-check (opt-in)
        # failures.message_checksums: the folds of the step's gradient message and their receive
        # buffer, alive until the push completes (``roles.message_sums``)
        self._folds: tuple[np.ndarray, np.ndarray] | None = None
        # grads + loss sum (+ the check's digest slots, when it is on)
        self.dense_buf = np.zeros(self.P + 1 + self.check.slots, dtype=np.float32)
        self.dense_all = np.zeros((self.n_trainers, self.dense_buf.size), dtype=np.float32)  # every block's
        self.source = make_source(cfg)
        ev = self.source.eval_batch(cfg.data.eval_samples)
        check_eval_size(cfg, len(ev.labels))
        part = np.array_split(np.arange(cfg.data.eval_samples), self.n_trainers)[self.index]
        self.eval_dense, self.eval_ids = ev.dense[part], ev.ids[part]
        self.eval_labels_all = ev.labels if self.index == 0 else None
        self.timeline: list[np.ndarray] = []
        self.evals: list[tuple] = []
        self.sent_upto = 0
        self._next: tuple[int, Batch] | None = None
        self._undo: tuple[int, np.ndarray, np.ndarray] | None = None  # (step, params, state) before it
        # The dense state before each update is the one-step undo record of reconciliation,
        # needed only by a strategy that recovers.
        self.keep_undo = type(ctx.strategy).recovers
        self._times = (0.0, 0.0, 0.0, 0.0, 0.0)  # the last exchange's (data, compute, comm, wait, hooks) s
        self._server_apply_s = 0.0
        self.diverged_at: int | None = None  # first step whose global loss was not finite
        self.eval_pending = False  # redo the evaluation after the restored step (set on recovery)
        self.word_rank = 0  # data rank whose header word decides (trainer 0)
        self.stall = StallHook(ctx)  # test hook (MPIEC_STALL): sleep at a known step
        # Every step's record reaches the monitor at once when a failure can be recovered: if every
        # trainer dies, records they kept unsent are gone (a timeline with a hole, re-executed
        # steps not counted). Spares also learn the step from these reports. One small eager send.
        self.flush_every = (1 if self.keep_undo or ctx.faults.by_step("spare")
                            else cfg.training.log_every)

    # -- state ----------------------------------------------------------------
    def reset(self) -> None:
        """The initial dense replica: a pure function of the seed."""
        self.params = init_params(self.shape, self.ctx.cfg.training.seed)
        self.dense_state = np.zeros_like(self.params)  # Adagrad accumulator

    def state(self) -> dict[str, np.ndarray]:
        """The dense replica (live arrays): parameters and optimizer state."""
        return {"params": self.params, "dense_state": self.dense_state}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if state["params"].shape != self.params.shape:
            raise ValueError(f"dense replica of {state['params'].size} parameters, "
                             f"this model has {self.params.size}")
        self.params = np.array(state["params"], dtype=np.float32)
        self.dense_state = np.array(state["dense_state"], dtype=np.float32)
        self._undo = None

    def adopt(self, old: Trainer) -> None:
        """Elastic recovery (``recovery.carry_out``, this rank only, after the undo): take over
        the live state of this rank's trainer object built for the previous layout — the dense
        replica, the timeline and the evaluations so far. Records the old trainer 0 did not send
        are not sent again by a new trainer 0 (it flushed every step; this one's copies would
        repeat them)."""
        self.params, self.dense_state = old.params, old.dense_state
        self.timeline, self.evals, self.diverged_at = old.timeline, old.evals, old.diverged_at
        self.sent_upto = old.sent_upto if old.index == 0 else len(old.timeline)

    def undo_last(self, committed: int) -> None:
        """Reconciliation: undo the dense update of step ``committed + 1``."""
        if self._undo is None or self._undo[0] != committed + 1:
            raise RuntimeError(f"trainer {self.index}: no undo record for step {committed + 1}")
        _, self.params, self.dense_state = self._undo
        self._undo = None
        if self.timeline and self.timeline[-1]["step"][0] > committed:
            self.timeline.pop()
        self.evals = [e for e in self.evals if e[0] <= committed]

    def after_recovery(self, plan: RecoveryPlan) -> None:
        """Drop what a rollback re-executes (evaluations after the restored step)."""
        self.evals = [e for e in self.evals if e[0] <= plan.restored]
        self._undo = None
        # An evaluation the failure may have interrupted is redone (by every trainer and server).
        self.eval_pending = plan.restored >= 0 and eval_due(self.ctx.cfg, plan.restored)

    # -- helpers ------------------------------------------------------------
    def batch(self, step: int) -> Batch:
        if self._next is not None and self._next[0] == step:
            return self._next[1]
        return self.read(step)

    def read(self, step: int) -> Batch:
        """This trainer's samples of ``step`` from the source (its block of the global batch)."""
        return self.source.batch(step * self.G + self.first, self.n_local)

    def shard_gradients(self, batch: Batch, emb: np.ndarray, inv: np.ndarray,
                        n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """This trainer's block of the step's gradient: (dense gradients + loss sum ``[P + 1]``,
        row gradients ``[n_rows, dim]`` in the pushed order), summed over its virtual shards in
        the fixed tree (``roles.shards``)."""
        return block_gradients(self.shape, self.params, batch.dense, emb, batch.labels,
                               inv.reshape(batch.ids.shape), bag_bounds(self.ctx.cfg.data.bags), n_rows,
                               self.G, self.V, self.block)

    def cross_check(self, step: int) -> tuple[list[int], int | None]:
        """A due check (``failures.dense_check_every``): compare the gathered digests, clear their
        slots; (the trainers whose replica disagrees, a majority trainer to copy from) — see
        ``roles.replicas``."""
        if not self.check.due(step):
            return [], None
        odd, source = self.check.verdict(self.dense_all[:, self.P + 1:])
        self.dense_all[:, self.P + 1:] = 0
        self.dense_buf[self.P + 1:] = 0
        if odd and self.index == (source if source is not None else 0):  # one event, from one trainer
            who = (f"trainer(s) {odd} disagree with the majority" if source is not None
                   else f"the {self.n_trainers} trainers disagree: no majority to tell which is right")
            self.ctx.event("replica_mismatch", step, detail=f"dense replicas differ: {who}")
        return odd, source

    def reduce_dense(self) -> None:
        """Every trainer: the step's dense gradient and loss sum into ``dense_buf``, from the
        gathered blocks (``dense_all``) summed in the fixed tree."""
        if self.n_trainers > 1:
            nodes = {blk: self.dense_all[i] for i, blk in enumerate(self.blocks)}
            self.dense_buf[:] = tree_sum(nodes, 0, self.V, merge_arrays)

    def route(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unique rows of a batch, grouped by owner: (local slots, send counts, inverse).

        ``ids`` is ``[n, n_ids]``: one column per table, or each table's bag of
        ``data.multi_hot`` columns; a column's global row is its id + its table's offset."""
        ctx = self.ctx
        return route_rows(ids, np.repeat(ctx.offsets[:-1], ctx.cfg.data.bags), ctx.placement,
                          ctx.comms.data_comm().Get_size(), self.n_trainers)

    def pull(self, ids: np.ndarray, routed: tuple[np.ndarray, np.ndarray, np.ndarray], status: int,
             where: str, word: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Pull the rows of a routed batch: returns (emb [B,T,dim] sum-pooled bags, server headers)."""
        data = self.ctx.comms.data_comm()
        slots, counts, inv = routed
        zeros = np.zeros_like(counts)
        headers = exchange_headers(data, counts, status, 0, where, word)
        rows = np.empty((slots.size, self.dim), dtype=np.float32)
        r1 = ialltoallv(data, slots, counts, _EMPTY_I64, zeros)
        r2 = ialltoallv(data, _EMPTY_F32, zeros, rows, counts, width=self.dim)
        waitall([r1, r2], where)
        emb = pool_bags(rows, inv.reshape(ids.shape), bag_bounds(self.ctx.cfg.data.bags))
        return emb, headers

    # -- the step -------------------------------------------------------------
    def exchange(self, step: int, status: int, word: int) -> np.ndarray:
        """The step: pull, forward/backward, push and all-reduce, dense update (``SteppingRole``)."""
        ctx, cfg, agent = self.ctx, self.ctx.cfg, self.ctx.trainer_agent()
        if self.diverged_at is not None and status == STATUS_OK:
            status = STATUS_DIVERGED  # every trainer saw the same global loss: all stop here
        t_start = time.perf_counter()
        batch = self.batch(step)
        routed = self.route(batch.ids)
        _, counts, inv = routed
        t_data = time.perf_counter() - t_start

        t0 = time.perf_counter()
        emb, headers = self.pull(batch.ids, routed, status, f"step {step} pull", word)
        t_pull = time.perf_counter() - t0

        t0 = time.perf_counter()
        dense, grad_rows = self.shard_gradients(batch, emb, inv, int(counts.sum()))
        self.dense_buf[: self.P + 1] = dense
        if self.check.due(step):
            self.dense_buf[self.P + 1:] = self.check.digest(self.params, self.dense_state)
        t_compute = time.perf_counter() - t0

        t0 = time.perf_counter()
        zeros = np.zeros_like(counts)
        sent = grad_rows  # as it arrives: a planned flip of the message (failures.corruption) changes a copy
        if ctx.flips.due(step):
            sent = ctx.flips.in_message(step, grad_rows, counts, self.n_trainers)
        r_sparse = ialltoallv(ctx.comms.data_comm(), sent, counts, _EMPTY_F32, zeros, width=self.dim)
        reqs = [r_sparse]
        if cfg.failures.message_checksums:  # the folds of what this trainer sent (``roles.message_sums``)
            self._folds = (message_sums.folds(grad_rows, counts), np.zeros(counts.size, dtype=np.int64))
            reqs.append(message_sums.post(ctx.comms.data_comm(), *self._folds))
        r_dense = ctx.comms.trainers_comm().Iallgather([self.dense_buf, MPI.FLOAT],
                                                       [self.dense_all, MPI.FLOAT])
        t_comm = time.perf_counter() - t0
        t0 = time.perf_counter()
        agent.after_push(step, routed[0], counts, grad_rows)
        t_strategy = time.perf_counter() - t0

        t0 = time.perf_counter()  # overlap: generate the next batch while gradients travel
        if step + 1 < cfg.training.steps:
            self._next = (step + 1, self.read(step + 1))
        t_data += time.perf_counter() - t0

        t0 = time.perf_counter()
        waitall([*reqs, r_dense], f"step {step} push")
        t_wait = time.perf_counter() - t0 + t_pull

        t0 = time.perf_counter()
        odd, source = self.cross_check(step)
        self.reduce_dense()
        if self.keep_undo:
            self._undo = (step, self.params.copy(), self.dense_state.copy())
        self.apply_dense()
        if odd and source is not None:  # make the replicas one again (every trainer decided alike)
            broadcast_replica(ctx.comms.trainers_comm(), self, source, f"step {step} replica repair")
            if self.index in odd:
                ctx.event("replica_repair", step, detail=f"trainer {self.index}: dense replica replaced "
                                                         f"by trainer {source}'s (the majority of "
                                                         f"{self.n_trainers})")
        t_compute += time.perf_counter() - t0
        self._times = (t_data, t_compute, t_comm, t_wait, t_strategy)
        self._server_apply_s = float(headers[self.n_trainers:, 2].max()) * 1e-6  # servers' last apply
        return headers[:, 3]

    def finish_step(self, step: int, t_start: float, t_hooks: float) -> None:
        """The step's timeline record (every trainer keeps it, so any survivor can report the run)."""
        cfg = self.ctx.cfg
        t_data, t_compute, t_comm, t_wait, t_strategy = self._times
        rec = np.zeros(1, dtype=TIMELINE_DTYPE)
        rec["step"], rec["t_end"], rec["dt"] = step, self.ctx.now(), time.perf_counter() - t_start
        rec["samples"] = cfg.global_batch
        rec["loss"] = self.dense_buf[self.P] / cfg.global_batch
        if not np.isfinite(rec["loss"][0]) and self.diverged_at is None:
            self.diverged_at = step
        rec["t_data"], rec["t_compute"], rec["t_comm"], rec["t_wait"] = t_data, t_compute, t_comm, t_wait
        rec["t_server"] = self._server_apply_s
        rec["t_strategy"] = t_strategy + t_hooks
        rec["epoch"] = self.ctx.epoch
        rec["trainers"], rec["servers"] = self.n_trainers, self.ctx.n_servers
        self.timeline.append(rec)

    def apply_dense(self) -> None:
        t = self.ctx.cfg.training
        g = self.dense_buf[: self.P]
        if t.dense_optimizer == "adagrad":
            self.dense_state += g * g
            self.params -= np.float32(t.dense_lr) * g / (np.sqrt(self.dense_state) + np.float32(t.eps))
        else:
            self.params -= np.float32(t.dense_lr) * g

    def evaluate(self, step: int) -> None:
        cfg = self.ctx.cfg
        eb = cfg.training.eval_batch
        probs = []
        for r in range(eval_rounds(cfg, self.n_trainers)):
            ids = self.eval_ids[r * eb:(r + 1) * eb]
            emb, _ = self.pull(ids, self.route(ids), STATUS_OK, f"eval after step {step}")
            if ids.shape[0]:
                probs.append(predict(self.shape, self.params, self.eval_dense[r * eb:(r + 1) * eb], emb))
        mine = np.concatenate(probs) if probs else np.empty(0, dtype=np.float32)
        with guard(f"eval gather after step {step}"):
            parts = self.ctx.comms.trainers_comm().gather(mine, root=0)
        if self.index == 0:
            assert parts is not None and self.eval_labels_all is not None  # trainer 0: the root, the labels
            p = np.concatenate(parts)
            y = self.eval_labels_all
            rec = (step, (step + 1) * cfg.global_batch, auc(y, p), logloss(y, p), accuracy(y, p))
            self.evals.append(rec)
            with guard("eval report"):
                self.ctx.comms.world.send(rec, dest=self.ctx.monitor_rank, tag=TAG_EVAL)

    def flush_progress(self, force: bool = False) -> None:
        if self.index != 0:
            return
        every = self.ctx.cfg.training.log_every
        if force or len(self.timeline) - self.sent_upto >= min(every, self.flush_every):
            if len(self.timeline) > self.sent_upto:
                chunk = np.concatenate(self.timeline[self.sent_upto:])
                with guard("progress report"):
                    self.ctx.comms.world.send(chunk, dest=self.ctx.monitor_rank, tag=TAG_STEPS)
            self.sent_upto = len(self.timeline)

    # -- role interface ---------------------------------------------------------
    def resume(self) -> None:
        self.sent_upto = min(self.sent_upto, len(self.timeline))
        if self.eval_pending:
            self.evaluate(self.ctx.progress.completed)
            self.eval_pending = False

    def after_step(self, step: int) -> None:
        self.flush_progress()

    def run(self) -> None:
        cfg = self.ctx.cfg
        try:
            run_steps(self.ctx, self, self.ctx.trainer_agent())
        except Diverged:
            pass  # the loss became non-finite: training stops on every rank at this step
        except EmulatedFailure as exc:
            if self.index == 0:
                with guard("failure report"):
                    self.ctx.comms.world.send((exc.data_ranks, self.ctx.progress.current_step),
                                              dest=self.ctx.monitor_rank, tag=TAG_FAILURE)
            raise
        self.flush_progress(force=True)
        if self.index == 0:
            with guard("done report"):
                self.ctx.comms.world.send(cfg.training.steps, dest=self.ctx.monitor_rank, tag=TAG_DONE)

    def final_report(self) -> dict[str, Any]:
        digest = hashlib.sha256()
        digest.update(self.params.tobytes())
        digest.update(self.dense_state.tobytes())
        return {"dense_digest": digest.hexdigest(), "index": self.index, "diverged_at": self.diverged_at,
                "dense": (self.params, self.dense_state) if self.index == 0 else None,
                "timeline": np.concatenate(self.timeline) if self.timeline else np.zeros(0, TIMELINE_DTYPE),
                "eval": np.array(self.evals, dtype=EVAL_DTYPE) if self.evals else None}


__all__ = ["Trainer", "model_shape"]
