"""``log``: checkpoints + upstream update logs: lossless partial recovery (after MoEvement, SWIFT).

Full checkpoints are ``ckpt``'s (the schedule on trainer 0's header word, ``strategy.interval``
/ ``interval_s`` / ``auto`` = Young, the same store and manifests). On top, every trainer keeps
a log (``store.LogStore``) of the row gradients it pushed since the last committed checkpoint:
each step's push as ``after_push`` gives it, in memory up to ``strategy.log_memory_mb``,
spilled to local files beyond (format in ``spill``).

Recovery (the monitor's ``plan``):

=======================================  ==========  ===============================================
failure                                  scope       what happens
=======================================  ==========  ===============================================
servers, every trainer's log intact      REPLACED    only the replacement restores its shard from the
                                                     newest committed checkpoint ``b <= C`` (the plan's
                                                     ``candidates[0]``); the trainers replay the steps
                                                     ``b+1 .. C`` of their logs to it (``replay``),
                                                     which applies them through ``Server.replay`` in
                                                     step and trainer order; everyone else keeps its
                                                     state. Lossless: the failure-free rows at ``C``
trainers only                            COMMITTED   the runtime's peer copy of the dense replica
a server, and a trainer died at or       ROLLBACK    the dead trainer's log is gone, so the steps since
after ``b`` (now or earlier)                         ``b`` cannot be replayed: ``ckpt``'s full rollback
                                                     (lossless, like ``ckpt``); event ``log_fallback``
every trainer                            ROLLBACK    ``ckpt``'s (no dense replica survives)
=======================================  ==========  ===============================================

Invariants:

* a trainer drops the records of steps ``<= c`` only once checkpoint ``c`` is committed (its
  manifest exists) *and* the trainer has completed step ``c + 1``. Completing ``c + 1`` needs
  every trainer's dense all-reduce and every server's rows of ``c + 1``, so every rank has
  completed ``c``: the committed step ``C`` of any later failure is ``>= c`` and the plan's
  checkpoint ``b`` (the newest committed one ``<= C``) is ``>= c``. Every surviving trainer's
  log therefore covers ``b + 1 .. C``;
* a replacement trainer logs from the step it resumes at: the monitor remembers the newest
  such step (``covered_from``); a server failure whose checkpoint ``b`` is older rolls back;
* everything a replay changes is on the replacement (survivors only read their logs), so a
  failure during it restarts the recovery from the same checkpoint.

A restore that finds the plan's checkpoint corrupted tries older ones; a log does not reach
back that far (nor past a corrupted spill record), so the replay check then fails on every
rank (event ``rebuild_failed`` naming the record) and the run is lost: the runtime cannot turn
a partial recovery into a rollback once it started.

Figures (``summary``): ``log_memory_peak_bytes`` (max over trainers of the bytes held in
memory), ``log_spilled_bytes`` / ``log_spilled_records`` (written to spill files, all
trainers), ``log_spill_s`` (max over trainers, on the training thread), ``log_read_bytes``
(spilled bytes read back), ``log_replay_s`` (max over replacements: receiving and applying
the logged steps), ``log_replayed_steps``, ``log_replayed_rows``, ``log_replays``,
``log_fallbacks`` (server failures that rolled back instead), ``log_memory_limit_bytes``.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mpiec.checkpoint import CheckpointError
from mpiec.errors import ConfigError
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.legacy_ckpt import DEFAULTS as CKPT_DEFAULTS
from mpiec.strategies.legacy_ckpt import WORD_CHECKPOINT, LegacyFullCheckpoint
from mpiec.strategies.log.spill import HEADER
from mpiec.strategies.log.store import LogStore
from mpiec.strategies.replay import RebuildError, collective, replay_steps

LOG_DEFAULTS: dict[str, Any] = {**CKPT_DEFAULTS, "log_memory_mb": 256.0, "log_dir": ""}


class UpdateLog(LegacyFullCheckpoint):
    name = "log"
    description = ("checkpoints + trainers' logs of their pushed row gradients: only the failed shard "
                   "restores and replays them (lossless partial recovery)")
    lossless = True
    cost_reason = ("not modelled: the simulator has no term for replaying logged gradients and its "
                   "calibration reads no log run (a rollback model would overstate its loss)")
    DEFAULTS: ClassVar[dict[str, Any]] = LOG_DEFAULTS
    summary_rules: ClassVar[dict[str, str]] = {
        **LegacyFullCheckpoint.summary_rules,
        "log_memory_peak_bytes": "max", "log_spilled_bytes": "sum", "log_spilled_records": "sum",
        "log_spill_s": "max", "log_read_bytes": "sum", "log_replay_s": "max", "log_replayed_steps": "max",
        "log_replayed_rows": "sum", "log_replays": "sum", "log_fallbacks": "first",
        "log_memory_limit_bytes": "first",
    }

    @classmethod
    def validate_params(cls, cfg: Any) -> None:
        super().validate_params(cfg)
        p = cfg.strategy.params
        v = p.get("log_memory_mb", LOG_DEFAULTS["log_memory_mb"])
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"strategy.log_memory_mb must be a number >= 0 (0: spill every record), "
                              f"got {v!r}")
        if not isinstance(p.get("log_dir", ""), str):
            raise ConfigError(f"strategy.log_dir must be a directory name, got {p.get('log_dir')!r}")

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.limit_bytes = int(float(self.p["log_memory_mb"]) * 2**20)
        self.log: LogStore | None = None  # trainers
        self.awaiting: list[int] = []  # trainers: checkpoints taken, not known committed yet
        self.base = -1  # a replaced server: the checkpoint its shard was restored from
        self.replay_s = 0.0
        self.replayed_steps = self.replayed_rows = self.replays = 0
        # monitor: replacement trainers log from the step after this one (-1: every log is whole)
        self.covered_from = -1
        self.fallbacks = 0

    def log_root(self) -> Path:
        """Where the trainers' spill directories go: ``strategy.log_dir/<result name>.log``, else
        ``<checkpoint dir>/log``."""
        if self.p["log_dir"]:
            return Path(self.p["log_dir"]) / f"{self.ctx.out_path.stem}.log"
        return Path(self.store.root) / "log"

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if ctx.slot.role == TRAINER and self.log is None:
            # one directory per process: a replacement never appends to a dead trainer's files
            spill = self.log_root() / f"trainer-{ctx.slot.index}-rank{ctx.first_rank}-pid{os.getpid()}"
            self.log = LogStore(self.limit_bytes, spill)

    # -- trainers: the log ------------------------------------------------------------------
    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        """Trainer, every step, once its push is posted: log it (a step the failure interrupts
        is dropped again by ``on_recovered``)."""
        self.log.append(step, slots, counts, grads)

    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        """``ckpt``'s checkpoint; a trainer notes the checkpoints taken (trainer 0's word) and
        trims its log up to the newest one it may drop."""
        super().after_step(step, words)
        if self.log is None or words is None:
            return
        if int(words[0]) == WORD_CHECKPOINT:
            self.awaiting.append(step)
        self.trim_committed(step)

    def trim_committed(self, completed: int) -> None:
        """Trainer: drop the log up to the newest checkpoint ``c`` that is committed, with
        ``c + 1 <= completed`` (why both: the module's first invariant)."""
        newest = None
        for c in self.awaiting:
            if c + 1 > completed:
                break
            try:
                self.store.manifest(c)
            except CheckpointError:
                continue  # not committed (yet, or never: a failure ended its epoch)
            newest = c
        if newest is not None:
            self.log.trim(newest)
            self.awaiting = [c for c in self.awaiting if c > newest]

    # -- monitor: the plan -------------------------------------------------------------------
    def plan(self, failure: Failure) -> RecoveryPlan:
        dead_servers = [s for s in failure.dead if s.role == SERVER]
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        if not dead_servers or not originals:
            return super().plan(failure)  # ckpt: peer copy, or a rollback when no dense replica is left
        committed = [s for s in self.store.complete_steps() if s <= failure.committed]
        base = committed[0] if committed else -1
        dead_trainers = [str(s) for s in failure.dead if s.role == TRAINER]
        why = ""
        if dead_trainers:
            why = f"{', '.join(dead_trainers)} died with its update log"
        elif base < self.covered_from:
            why = (f"a trainer replaced after step {self.covered_from} has no log of the steps since "
                   f"checkpoint {base}")
        if why:
            plan = super().plan(failure)
            plan.reason = f"full rollback: {why}"
            self.fallbacks += 1
            self.ctx.event("log_fallback", failure.step, self.ctx.rank, detail=plan.reason[:250])
            return plan
        self.drop_pending()
        return RecoveryPlan(Scope.REPLACED, candidates=[base],
                            reason=f"{[str(s) for s in dead_servers]} restore checkpoint {base} and replay "
                                   f"steps {base + 1}..{failure.committed} from the trainers' logs")

    # -- recovery -----------------------------------------------------------------------------
    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        if plan.scope is Scope.ROLLBACK:
            ok = super().restore(plan, step, replaced)
            if ok:
                what = "the initial state" if step < 0 else f"checkpoint {step}"
                self.ctx.event("restore", plan.step, self.ctx.rank,
                               detail=f"rollback of {self.ctx.slot} to {what}")
            return ok
        t0 = time.perf_counter()
        wanted = plan.candidates[0] if plan.candidates else -1
        older = [s for s in self.store.complete_steps() if s < wanted]
        for s in [wanted, *older, -1] if wanted >= 0 else [-1]:
            try:
                if s < 0:
                    self.role.reset()
                else:
                    self.load_shard(s)
            except (CheckpointError, ValueError) as exc:
                self.ctx.event("restore_failed", plan.step, self.ctx.rank, detail=str(exc)[:250])
                continue
            self.base = s
            break
        self.restores += 1
        self.restore_s += time.perf_counter() - t0
        what = "the initial shard" if self.base < 0 else f"checkpoint {self.base}"
        todo = (f"replays steps {self.base + 1}..{plan.committed} from the trainers' logs"
                if self.base < plan.committed else "nothing to replay")
        self.ctx.event("restore", plan.step, self.ctx.rank,
                       detail=f"replacement {self.ctx.slot} restored {what}; {todo}")
        return True

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Trainers and servers, scope REPLACED: replay the logged steps to the replacements
        (collective over ``data``); every other case has nothing to rebuild."""
        role = self.ctx.slot.role
        if plan.scope is not Scope.REPLACED or role not in (SERVER, TRAINER):
            return True
        t0 = time.perf_counter()
        replaced = role == SERVER and self.ctx.slot in plan.replaced  # type: ignore[attr-defined]
        with collective("log replay plan"):
            mine = (self.ctx.slot.index, self.base) if replaced else None
            versions = dict(v for v in self.ctx.comms.data.allgather(mine) if v is not None)
        if role == TRAINER:
            self.corrupt_for_test(min(versions.values(), default=plan.committed) + 1, plan.committed)
        steps = rows = 0
        try:
            for t, slots, grads in replay_steps(self.ctx, self.log, versions, plan.committed,
                                                verify=self.log.verify if self.log is not None else None):
                self.role.replay(t, slots, grads)
                steps += 1
                rows += int(slots.size)
        except RebuildError as exc:
            self.ctx.event("rebuild_failed", plan.step, self.ctx.rank, detail=str(exc)[:250])
            return False
        if replaced:
            seconds = time.perf_counter() - t0
            self.replay_s = max(self.replay_s, seconds)
            self.replayed_steps = max(self.replayed_steps, steps)
            self.replayed_rows += rows
            self.replays += 1
            span = f" ({self.base + 1}..{plan.committed})" if steps else ""
            self.ctx.event("replay", plan.step, self.ctx.rank,
                           detail=f"{self.ctx.slot}: {steps} logged steps{span}, {rows} gradient rows "
                                  f"applied in {seconds:.3f} s")
        return True

    def corrupt_for_test(self, first: int, last: int) -> None:
        """Test hook: ``MPIEC_LOG_CORRUPT_SPILL=1`` flips one payload byte of trainer 0's oldest
        spilled record of the steps a replay needs (how the tests prove that a corrupted record
        is named, never replayed)."""
        if not os.environ.get("MPIEC_LOG_CORRUPT_SPILL") or self.ctx.slot.index != 0:
            return
        steps = [t for t in sorted(self.log.spilled) if first <= t <= last]
        if steps:
            seg, offset = self.log.spilled[steps[0]]
            with open(seg.path, "r+b") as f:
                f.seek(offset + HEADER.size)
                byte = f.read(1)
                f.seek(offset + HEADER.size)
                f.write(bytes([byte[0] ^ 0x01]))

    def on_recovered(self, plan: RecoveryPlan) -> None:
        super().on_recovered(plan)
        if self.log is not None:
            self.log.drop_after(plan.restored)  # those steps are executed (and logged) again
            self.awaiting = [c for c in self.awaiting if c <= plan.restored]
            if plan.scope is Scope.ROLLBACK and plan.restored >= 0:
                self.log.trim(plan.restored)  # every rank is at that committed checkpoint
                self.awaiting = []
        if self.ctx.rank == 0:
            replaced = getattr(plan, "replaced", [])
            if plan.scope is Scope.ROLLBACK:
                self.covered_from = plan.restored  # every trainer logs the re-executed steps
            elif any(s.role == TRAINER for s in replaced):
                self.covered_from = max(self.covered_from, plan.restored)

    # -- results ---------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.log is not None:
            out.update({"log_memory_peak_bytes": self.log.peak_memory_bytes,
                        "log_spilled_bytes": self.log.spilled_bytes,
                        "log_spilled_records": self.log.spilled_records,
                        "log_spill_s": self.log.spill_s, "log_read_bytes": self.log.read_bytes})
            self.log.close()
        if self.ctx is not None and self.ctx.slot.role == SERVER:
            out.update({"log_replay_s": self.replay_s, "log_replayed_steps": self.replayed_steps,
                        "log_replayed_rows": self.replayed_rows, "log_replays": self.replays})
        if self.ctx is not None and self.ctx.rank == 0:
            out.update({"log_fallbacks": self.fallbacks, "log_memory_limit_bytes": self.limit_bytes})
            # spill directories of trainers that died (the others removed theirs)
            shutil.rmtree(self.log_root(), ignore_errors=True)
        return out
