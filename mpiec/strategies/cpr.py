"""``cpr``, ``cpr-mfu``, ``cpr-ssu``: checkpoints with partial recovery (Maeng et al., MLSys'21).

Full checkpoints are ``ckpt``'s (the same schedule on trainer 0's header word, the same
parts through ``mpiec.checkpoint``, the monitor commits the manifests). What differs is the
recovery: on a server failure the plan is ``Scope.REPLACED``: only the replacement loads its
shard's newest complete checkpoint (``cpr-mfu`` / ``cpr-ssu``: then the newer partial
checkpoints on top), every other rank keeps its state and training goes on from the agreed
committed step. The failed shard's updates since its checkpoint are lost: the run is **not**
lossless (its checksum differs from the failure-free one). A trainer-only failure loses
nothing (``COMMITTED``: the runtime's peer copy of the dense replica). When every trainer
died, ``cpr`` falls back to ``ckpt``'s full rollback.

Interval: ``strategy.interval`` (steps), or ``strategy.interval_s``, else from the target PLS
(``strategy.target_pls``): ``T_ckpt = 2 · N_shards · MTBF · PLS`` with the MTBF from
``failures.mtbf_s`` or the kill plan (``ckpt.expected_mtbf_s``), else one failure per run.

Variants (partial checkpoints of a row subset only, every ``mfu_every`` / ``ssu_every`` steps,
by default a quarter of the full interval — in seconds when that is in seconds —, decided by
trainer 0 like the full ones (header word ``WORD_PARTIAL``); each server writes and commits its
own partial into ``<ckpt dir>/partial/server-<i>``, so a partial is complete as soon as its
server wrote it):

* ``cpr-mfu``: per-row access counters on the servers' pull path (``on_pull``); the
  ``mfu_fraction`` most frequently pulled rows are saved;
* ``cpr-ssu``: the rows pulled in a sub-sample of the steps (``ssu_rate``; step ``s`` is in
  the sample when a hash of ``(seed, s)`` falls below the rate) during the current and the
  previous full-checkpoint interval are saved (the sample's picture of the hot rows).

Figures (``summary``): ``lost_updates`` = row updates of the failed shards that the restore
did not bring back. Each server sends in its step header word its running count of row
updates (cumulative, less what its partial checkpoints saved), so the survivors know it when
the server dies; the trainers note every server's count at each full checkpoint, and a lost
shard's loss is its count at the committed step less its count at the checkpoint the
replacement actually restored (agreed in ``on_recovered``) -- a checkpoint that was started
but never committed saved nothing. The last step before the failure, whose word never
arrived, is estimated from the step before. (A partial checkpoint written after a full one
that never committed credits only the updates since that full one's start: the count then
errs high.) ``pls`` = the paper's portion of lost samples: samples whose
embedding updates were lost / samples trained = Σ over failures of (steps since the
restored *full* checkpoint × shards lost / N_shards) / steps (partial checkpoints do not
shorten it: their gain shows in ``lost_updates``). ``pls_predicted`` =
``T_ckpt / (2 · N_shards · MTBF)``. The ``checkpoints`` dataset gets one row per
checkpoint: kind ``full``, ``mfu`` or ``ssu`` with the bytes of all its parts.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mpiec.checkpoint import CheckpointError, CheckpointStore
from mpiec.errors import ConfigError
from mpiec.kernels.tracking import counters_add, top_fraction
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing import expected_mtbf_s, interval_for_pls, measured_pls, predicted_pls
from mpiec.strategies.costs import CostModel
from mpiec.strategies.legacy_ckpt import DEFAULTS as CKPT_DEFAULTS
from mpiec.strategies.legacy_ckpt import WORD_CHECKPOINT, LegacyFullCheckpoint

CPR_DEFAULTS: dict[str, Any] = {**CKPT_DEFAULTS, "target_pls": 0.05}
WORD_PARTIAL = 2  # trainer 0's header word: a partial checkpoint after this step


def ssu_sampled(seed: int, step: int, rate: float) -> bool:
    """Is ``step`` in SSU's sub-sample? A deterministic hash of (seed, step) below ``rate``."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + int(step) * 0xBF58476D1CE4E5B9 + 1) & (2**64 - 1)
    x ^= x >> 31
    x = (x * 0x94D049BB133111EB) & (2**64 - 1)
    x ^= x >> 29
    return (x >> 11) / float(2**53) < rate


def cpr_interval(cfg: Any, target_pls: float) -> tuple[int | None, float | None]:
    """(interval in steps, interval in seconds) from the target PLS; exactly one is set."""
    mtbf_s, mtbf_steps = expected_mtbf_s(cfg)
    shards = cfg.layout.servers
    if mtbf_s is not None:
        return None, interval_for_pls(target_pls, shards, mtbf_s)
    mtbf = mtbf_steps if mtbf_steps is not None else float(cfg.training.steps)
    return max(1, int(round(interval_for_pls(target_pls, shards, mtbf)))), None


class PartialRecovery(LegacyFullCheckpoint):
    name = "cpr"
    description = "checkpoints with partial recovery: only the failed shard reloads (CPR, MLSys'21)"
    lossless = False  # the failed shard's updates since its checkpoint are lost
    cost = CostModel("partial", interval="pls", target_pls=float(CPR_DEFAULTS["target_pls"]))
    kind = ""  # the partial checkpoint's kind ("" = none, "mfu", "ssu")
    DEFAULTS: ClassVar[dict[str, Any]] = CPR_DEFAULTS
    summary_rules: ClassVar[dict[str, str]] = {
        **LegacyFullCheckpoint.summary_rules,
        "lost_updates": "max", "pls": "first", "pls_predicted": "first", "pls_target": "first",
        "pls_failures": "first", "full_checkpoint_bytes": "first", "partial_checkpoints": "first",
        "partial_checkpoint_bytes": "first", "partial_rows_saved": "first",
    }

    @classmethod
    def validate_params(cls, cfg: Any) -> None:
        super().validate_params(cfg)
        p = cfg.strategy.params
        for key in ("target_pls", "mfu_fraction", "ssu_rate"):
            if key not in cls.DEFAULTS:
                continue
            v = p.get(key, cls.DEFAULTS[key])
            number = not isinstance(v, bool) and isinstance(v, (int, float))
            if not number or not math.isfinite(v) or not 0 < v <= 1:
                raise ConfigError(f"strategy.{key} must be a number in (0, 1], got {v!r}")
        for key in ("mfu_every", "ssu_every"):
            if key not in cls.DEFAULTS:
                continue
            v = p.get(key, cls.DEFAULTS[key])
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"strategy.{key} must be an integer >= 1 (0: a quarter of the "
                                  f"full interval), got {v!r}")

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.target_pls = float(self.p["target_pls"])
        if self.interval_steps is None and self.interval_s is None:
            self.interval_steps, self.interval_s = cpr_interval(cfg, self.target_pls)
            self.interval_rule = "pls"
        # partials every ``every`` steps; default: four per full interval, in seconds when the
        # full interval is in seconds (trainer 0 decides, like the full checkpoints)
        given = int(self.p.get(f"{self.kind}_every", 0)) if self.kind else 0
        self.every = given or (max(1, self.interval_steps // 4) if self.kind and self.interval_steps else 0)
        self.every_s = self.interval_s / 4 if self.kind and not self.every and self.interval_s else None
        self.last_partial_t = 0.0
        # server: per-row updates since the row was last saved (since the last full checkpoint's
        # start), and the header word's two running counts (updates, updates partials saved)
        self.unsaved: np.ndarray | None = None
        self.updates = self.credited = 0
        self.restored_base = -1  # a replacement: the full checkpoint its restore used
        self._last_apply: tuple[int, np.ndarray] | None = None
        self.full_steps: list[int] = []  # server: steps of the full checkpoints it wrote
        self.partial_store: CheckpointStore | None = None
        # trainers: every server's unsaved-update total, by step (from the header words)
        self.words: dict[int, np.ndarray] = {}
        self.at_full: dict[int, np.ndarray] = {}  # full checkpoint step -> the words right after it
        self.lost_updates = 0
        self.rate: np.ndarray | None = None
        # monitor
        self.pending_loss: dict[Slot, int] = {}
        self.losses: list[tuple[int, int]] = []  # (steps since the restored full checkpoint, shards)
        self.partial_rows_by_step: dict[int, list] = {}

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if ctx.slot.role == SERVER:
            n = role.shard.table.shape[0]
            self.unsaved = np.zeros(n, dtype=np.int64)
            self.updates = self.credited = 0
            self._last_apply = None
            if self.kind:
                self.partial_store = self.partial_store_of(ctx.slot.index)
                self.partial_store.root.mkdir(parents=True, exist_ok=True)

    def partial_store_of(self, server: int) -> CheckpointStore:
        return CheckpointStore(Path(self.store.root) / "partial" / f"server-{server}",
                               storage=self.store.storage, ledger=self.store.ledger_path)

    # -- step hooks ------------------------------------------------------------------------
    def header_word(self, step: int) -> int:
        if self.ctx.slot.role == SERVER:
            return int(self.updates - self.credited)  # through step - 1
        word = super().header_word(step)
        if not word and self.ctx.slot == Slot(TRAINER, 0) and self.partial_due(step):
            return WORD_PARTIAL
        return word

    def partial_due(self, step: int) -> bool:
        """Trainer 0: a partial checkpoint after ``step`` (which is not a full-checkpoint step)?"""
        if not self.kind or step + 1 >= self.cfg.training.steps:
            return False
        if self.every:
            return (step + 1) % self.every == 0
        return self.ctx.now() - max(self.last_partial_t, self.last_ckpt_t) >= self.every_s

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        if self.unsaved is not None:
            self.unsaved[slots] += 1
            self.updates += int(slots.size)
            self._last_apply = (step, slots.copy())

    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        if words is not None and self.ctx.slot.role == TRAINER:
            w = np.array(words, dtype=np.int64)
            prev = self.words.get(step - 1)
            if prev is not None:  # rows a server updates per step, for the one step never reported
                grew = w[self.cfg.layout.trainers:] - prev[self.cfg.layout.trainers:]
                self.rate = np.where(grew > 0, grew, self.rate if self.rate is not None else 0)
            self.words[step] = w
            self.words.pop(step - 3, None)
            if prev is not None and int(prev[0]) == WORD_CHECKPOINT:  # counts through the checkpoint
                self.at_full[step - 1] = w
                for old in sorted(self.at_full)[:-8]:  # a restore goes back a few checkpoints at most
                    del self.at_full[old]
        super().after_step(step, words)
        if words is not None and int(words[0]) == WORD_PARTIAL and self.ctx.slot == Slot(TRAINER, 0):
            self.last_partial_t = self.ctx.now()
        if words is None or self.ctx.slot.role != SERVER:
            return
        if int(words[0]) == WORD_CHECKPOINT:  # a full checkpoint of this step was started
            self.unsaved[:] = 0
            self.full_steps = (self.full_steps + [step])[-2:]
        elif int(words[0]) == WORD_PARTIAL:
            self.save_partial(step)

    def partial_rows_now(self, step: int) -> np.ndarray:
        """Server: local slots of this step's partial checkpoint (variant's choice)."""
        return np.empty(0, dtype=np.int64)

    def save_partial(self, step: int) -> None:
        t0 = time.perf_counter()
        shard = self.role.shard
        rows = self.partial_rows_now(step)
        rows = rows[shard.global_rows[rows] >= 0]
        arrays = {"global_rows": shard.global_rows[rows], "table": shard.table[rows]}
        name = f"server-{self.ctx.slot.index}"
        try:
            info = self.partial_store.write_part(step, name, arrays)
            self.partial_store.commit(step, {name: info}, {"kind": self.kind, "rows": int(rows.size)})
            self.prune_partials()
        except CheckpointError as exc:
            self.ctx.event("checkpoint_fail", step, self.ctx.rank, detail=str(exc)[:250])
            return
        self.credited += int(self.unsaved[rows].sum())
        self.unsaved[rows] = 0
        stall = time.perf_counter() - t0  # written on the training thread: stall = total
        self.critical_s += stall
        self.ctx.tell_monitor(("partial", step, self.ctx.epoch, info.to_dict(), int(rows.size), stall))

    def prune_partials(self) -> None:
        """Partials older than the second-newest full checkpoint written are never needed."""
        if len(self.full_steps) < 2:
            return
        for s in self.partial_store.complete_steps():
            if s < self.full_steps[0]:
                shutil.rmtree(self.partial_store.step_dir(s), ignore_errors=True)

    # -- monitor ------------------------------------------------------------------------------
    def on_message(self, source: Slot, payload: Any) -> None:
        if payload[0] != "partial":
            return super().on_message(source, payload)
        _, step, _epoch, info, rows, stall = payload
        entry = self.partial_rows_by_step.setdefault(step, [0, 0.0, 0])  # bytes, slowest s, rows
        entry[0] += int(info["bytes"])
        entry[1] = max(entry[1], float(stall))
        entry[2] += rows

    def checkpoint_rows(self) -> list[tuple]:
        # a partial is written on the training thread: its stall is its total time
        parts = [(s, self.kind, b, sec, 32, r, sec) for s, (b, sec, r) in self.partial_rows_by_step.items()]
        return sorted(list(self.rows) + parts, key=lambda r: (r[0], r[1] != "full"))

    def plan(self, failure: Failure) -> RecoveryPlan:
        dead_servers = [s for s in failure.dead if s.role == SERVER]
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not dead_servers:
            return RecoveryPlan(Scope.COMMITTED, reason="no embedding state lost")
        if not originals:  # no dense replica survives: every rank goes back to a full checkpoint
            return super().plan(failure)
        self.drop_pending()
        fulls = [s for s in self.store.complete_steps() if s <= failure.committed]
        since = failure.committed - (fulls[0] if fulls else -1)
        self.pending_loss = {s: since for s in dead_servers}
        return RecoveryPlan(Scope.REPLACED, reason=f"partial recovery of {[str(s) for s in dead_servers]}: "
                            f"{since} steps of their updates lost")

    # -- recovery -------------------------------------------------------------------------------
    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        if plan.scope is Scope.ROLLBACK:
            return super().restore(plan, step, replaced)
        t0 = time.perf_counter()
        fulls = [s for s in self.store.complete_steps() if s <= step]
        base = -1
        for s in fulls + [-1]:  # the newest full checkpoint whose part verifies
            try:
                if s < 0:
                    self.role.reset()
                else:
                    self.load_shard(s)
                base = s
                break
            except (CheckpointError, ValueError) as exc:
                self.ctx.event("restore_failed", plan.step, self.ctx.rank, detail=str(exc)[:250])
        self.restored_base = base
        applied = []
        if self.kind:
            store = self.partial_store_of(self.ctx.slot.index)
            for s in sorted(p for p in store.complete_steps() if base < p <= step):
                try:
                    part = store.read_part(s, f"server-{self.ctx.slot.index}")
                except CheckpointError as exc:  # a bad partial: its rows stay at the older version
                    self.ctx.event("restore_failed", plan.step, self.ctx.rank, detail=str(exc)[:250])
                    continue
                self.role.load_rows(part["global_rows"], part["table"])
                applied.append(s)
        self.ctx.event("restore", plan.step, self.ctx.rank,
                       detail=f"partial recovery: full checkpoint {base}, {len(applied)} "
                              f"{self.kind or 'partial'} checkpoints on top, committed step {step}")
        self.restores += 1
        self.restore_s += time.perf_counter() - t0
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        super().on_recovered(plan)
        role = self.ctx.slot.role
        replaced = list(getattr(plan, "replaced", []))
        if role == SERVER and self.partial_store is not None:
            # partials of steps that will be re-executed (after an undo or a rollback) are stale
            for s in self.partial_store.complete_steps():
                if s > plan.restored:
                    shutil.rmtree(self.partial_store.step_dir(s), ignore_errors=True)
        restored = {}  # replaced server -> the full checkpoint its restore used (every data rank)
        if plan.scope is Scope.REPLACED and role in (SERVER, TRAINER):
            mine = (self.ctx.slot.index, self.restored_base) if role == SERVER and self.ctx.slot in replaced \
                else None
            from mpiec.comm import guard  # here: the launcher imports this module without MPI

            with guard("cpr restored checkpoints"):
                restored = dict(x for x in self.ctx.comms.data.allgather(mine) if x is not None)
        T = self.cfg.layout.trainers
        if role == SERVER:
            if self.ctx.slot in replaced or plan.scope is Scope.ROLLBACK:
                self.unsaved[:] = 0  # the shard now equals what is on disk
                self.updates = self.credited = 0
            elif self._last_apply is not None and self._last_apply[0] > plan.restored:
                _, slots = self._last_apply  # the undone step: counted again when re-executed
                self.unsaved[slots] -= 1
                self.updates -= int(slots.size)
            self._last_apply = None
        elif role == TRAINER and plan.scope is Scope.REPLACED and self.words:
            for j, base in sorted(restored.items()):
                self.lost_updates += self.lost_estimate(plan.committed, T + j, base)
        if role == TRAINER:
            self.words = {s: w for s, w in self.words.items() if s <= plan.restored}
            self.at_full = {s: w for s, w in self.at_full.items() if s <= plan.restored}
            # a restored server counts from 0 again: its counts at older checkpoints are now 0
            again = ([T + j for j in restored] if plan.scope is Scope.REPLACED
                     else list(range(T, T + self.cfg.layout.servers)) if plan.scope is Scope.ROLLBACK else [])
            for s, w in self.at_full.items():
                w = w.copy()
                w[again] = 0
                self.at_full[s] = w
        if self.ctx.rank == 0 and plan.scope is Scope.REPLACED:
            self.losses += [(since, 1) for since in self.pending_loss.values()]
            self.pending_loss = {}

    def lost_estimate(self, c: int, rank: int, base: int) -> int:
        """Trainer: updates of data rank ``rank`` through step ``c`` that its restore from the full
        checkpoint of step ``base`` (-1: the initial state) did not bring back (header words).

        The word of step ``c + 1`` gives the count through ``c`` exactly; a server killed at the
        start of a step never sent it: then the word of step ``c`` (through ``c - 1``) plus one
        step's updates at the last rate seen. Less the count through ``base``, noted when the
        word after that checkpoint arrived (none: ``base`` is ``c`` itself, nothing lost).
        """
        if c + 1 in self.words:
            total = int(self.words[c + 1][rank])
        elif c in self.words:
            rate = int(self.rate[rank - self.cfg.layout.trainers]) if self.rate is not None else 0
            total = int(self.words[c][rank]) + rate
        else:
            return 0
        if base < 0:
            return total
        if base not in self.at_full:
            return 0 if base >= c else total  # no note of it: at most the count since the start
        return max(total - int(self.at_full[base][rank]), 0)

    # -- results -------------------------------------------------------------------------------
    def predicted(self) -> float:
        mtbf_s, mtbf_steps = self.mtbf
        steps = self.cfg.training.steps
        t_step = self.ctx.now() / max(steps, 1) if self.ctx is not None else 0.0
        interval = float(self.interval_steps) if self.interval_steps else None
        if mtbf_s is not None:
            interval_s = self.interval_s or (interval * t_step if interval else 0.0)
            return predicted_pls(interval_s, self.cfg.layout.servers, mtbf_s) if interval_s > 0 else math.nan
        mtbf = mtbf_steps if mtbf_steps is not None else float(steps)
        if interval is None:
            interval = (self.interval_s or 0.0) / t_step if t_step > 0 else 0.0
        return predicted_pls(interval, self.cfg.layout.servers, mtbf) if interval > 0 else math.nan

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        role = self.ctx.slot.role if self.ctx is not None else ""
        if role == TRAINER:
            out["lost_updates"] = self.lost_updates
        if self.ctx is not None and self.ctx.rank == 0:
            fulls = [r[2] for r in self.rows]
            parts = [b for b, _s, _r in self.partial_rows_by_step.values()]
            out.update({
                "lost_updates": 0,
                "pls": measured_pls(self.losses, self.cfg.layout.servers, self.cfg.training.steps),
                "pls_predicted": self.predicted(), "pls_target": self.target_pls,
                "pls_failures": len(self.losses),
                "full_checkpoint_bytes": float(np.mean(fulls)) if fulls else 0.0,
                "partial_checkpoints": len(parts),
                "partial_checkpoint_bytes": float(np.mean(parts)) if parts else 0.0,
                # the monitor's count: a replaced server's own count died with it
                "partial_rows_saved": sum(r for _b, _s, r in self.partial_rows_by_step.values()),
            })
            out["checkpoints"] = len(self.rows) + len(parts)
            out["checkpoint_bytes"] = self.committed_bytes + int(sum(parts))
        return out


class PartialRecoveryMFU(PartialRecovery):
    name = "cpr-mfu"
    description = "cpr + the most frequently used rows (access counters) saved more often"
    kind = "mfu"
    DEFAULTS: ClassVar[dict[str, Any]] = {**CPR_DEFAULTS, "mfu_fraction": 0.1, "mfu_every": 0}

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.counts: np.ndarray | None = None

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if ctx.slot.role == SERVER:
            self.counts = np.zeros(role.shard.table.shape[0], dtype=np.int64)

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        if step >= 0 and self.counts is not None:
            counters_add(self.counts, slots)

    def partial_rows_now(self, step: int) -> np.ndarray:
        return top_fraction(self.counts, float(self.p["mfu_fraction"]))


class PartialRecoverySSU(PartialRecovery):
    name = "cpr-ssu"
    description = "cpr + the rows of a sub-sample of the mini-batches saved more often"
    kind = "ssu"
    DEFAULTS: ClassVar[dict[str, Any]] = {**CPR_DEFAULTS, "ssu_rate": 0.1, "ssu_every": 0}

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        # rows pulled by the sampled steps of the current and of the previous full interval
        self.tracked: np.ndarray | None = None
        self.tracked_prev: np.ndarray | None = None

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if ctx.slot.role == SERVER:
            self.tracked = np.zeros(role.shard.table.shape[0], dtype=np.bool_)
            self.tracked_prev = np.zeros_like(self.tracked)

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        if step >= 0 and self.tracked is not None and ssu_sampled(self.cfg.training.seed, step,
                                                                   float(self.p["ssu_rate"])):
            self.tracked[slots] = True

    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        super().after_step(step, words)
        if words is not None and self.tracked is not None and int(words[0]) == WORD_CHECKPOINT:
            self.tracked_prev, self.tracked = self.tracked, self.tracked_prev
            self.tracked[:] = False

    def partial_rows_now(self, step: int) -> np.ndarray:
        return np.flatnonzero(self.tracked | self.tracked_prev).astype(np.int64)
