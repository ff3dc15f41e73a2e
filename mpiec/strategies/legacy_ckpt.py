"""TRANSITIONAL: the pre-agent ckpt, still the base of cnr, cpr, log and the fallback of ecrm/ecsnap
until they are migrated; delete with strategies/legacy.py.

``ckpt``: periodic full checkpoints, full recovery (the XDL / TorchRec baseline).

Owns the checkpoint schedule and the checkpoint's parts: after a checkpoint
step every server writes its shard (rows and optimizer state, with their
global ids) and trainer 0 the dense replica, through ``mpiec.checkpoint``;
each writer tells the monitor, which commits the manifest once every part of
the step is there (``CheckpointStore.commit``) and prunes old checkpoints.

Invariants:

* a checkpoint is taken after the same step on every rank: the decision is
  trainer 0's, carried in the step header (``header_word``), so time-based and
  ``auto`` intervals stay consistent;
* on a server failure (or when every trainer died, or with
  ``on_trainer_failure = "rollback"``) every trainer and server rolls back to
  the newest complete checkpoint whose parts verify, and the steps since are
  re-executed; training is deterministic, so the run ends with the failure-free
  ``param_checksum``. With no checkpoint yet, the rollback goes to the initial
  state (step −1);
* a trainer-only failure needs no rollback by default: the servers hold the
  embeddings at the committed step and the replacement copies the dense
  replica from a surviving trainer (the runtime's peer copy);
* parts of a checkpoint that may never complete (written in an epoch that a
  failure ended) are never committed.

Interval (``strategy.interval``): a number of steps, or ``"auto"`` = Young's
``sqrt(2 · t_save · MTBF)`` with ``t_save`` the slowest part's write time
measured at the first checkpoint (taken after ``first`` steps) and the MTBF
from ``failures.mtbf_s``, else from the kill plan, else one failure per run;
``strategy.interval_s`` sets a fixed interval in seconds instead. The summary says which
rule chose the interval (``checkpoint_interval_rule``: ``given``, ``given-seconds``,
``young``; ``cpr`` adds ``pls``) and what it came to in steps (``checkpoint_interval_steps``:
the rule's steps, or for a rule in seconds the median gap between the checkpoints taken).

Per checkpoint (the result's ``checkpoints`` dataset): kind, bytes and embedding rows of all
its parts, ``stall_s`` = the longest time a writer's training thread spent on it (the whole
write in ``sync`` mode, the snapshot copy in ``async`` mode), ``seconds`` = the slowest
part's total (its stall plus, in ``async`` mode, its background write).
"""

from __future__ import annotations

import math
import shutil
import time
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mpiec.checkpoint import BackgroundWriter, CheckpointError, CheckpointStore, PartInfo, check_unused
from mpiec.errors import ConfigError
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing import checkpoint_root, expected_mtbf_s, storage_of, young_interval
from mpiec.strategies.legacy import LegacyStrategy

DEFAULTS: dict[str, Any] = {"interval": "auto", "interval_s": 0.0, "first": 10, "mode": "sync", "dir": "",
                            "keep": 2, "bandwidth_mb_s": 0.0, "on_trainer_failure": "peer"}
WORD_CHECKPOINT = 1


class LegacyFullCheckpoint(LegacyStrategy):
    name = "ckpt"
    description = "periodic full checkpoints; on a failure every rank rolls back (XDL/TorchRec baseline)"
    recovers = True
    summary_rules: ClassVar[dict[str, str]] = {
        "checkpoints": "sum", "checkpoint_bytes": "sum", "checkpoint_interval": "first",
        "checkpoint_critical_s": "max", "checkpoint_write_s": "max", "checkpoint_max_part_s": "max",
        "restores": "max", "restore_s": "max", "restore_read_s": "max", "checkpoint_mode": "first",
        "emulated_bandwidth": "first", "checkpoint_dir": "first", "checkpoint_parts_sent": "sum",
        "checkpoint_interval_steps": "first", "checkpoint_interval_rule": "first",
        "checkpoint_interval_s": "first",
    }

    # -- configuration ------------------------------------------------------------
    DEFAULTS: ClassVar[dict[str, Any]] = DEFAULTS  # subclasses (cpr) extend it

    @classmethod
    def param_keys(cls) -> set[str]:
        return set(cls.DEFAULTS)

    @classmethod
    def validate_params(cls, cfg: Any) -> None:
        p = cfg.strategy.params
        for key in p:
            if key not in cls.DEFAULTS:
                raise ConfigError(f"unknown config key 'strategy.{key}' for strategy '{cls.name}' "
                                  f"(known: {', '.join(sorted(cls.DEFAULTS))})")
        interval = p.get("interval", DEFAULTS["interval"])
        bad = isinstance(interval, bool) or not isinstance(interval, int) or interval < 1
        if interval != "auto" and bad:
            raise ConfigError(f"strategy.interval must be a number of steps >= 1 or 'auto', got {interval!r}")
        for key in ("interval_s", "bandwidth_mb_s"):
            v = p.get(key, DEFAULTS[key])
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"strategy.{key} must be a number >= 0, got {v!r}")
        for key in ("first", "keep"):
            v = p.get(key, DEFAULTS[key])
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"strategy.{key} must be an integer >= 1, got {v!r}")
        if p.get("mode", "sync") not in ("sync", "async"):
            raise ConfigError(f"strategy.mode must be sync or async, got {p.get('mode')!r}")
        if p.get("on_trainer_failure", "peer") not in ("peer", "rollback"):
            raise ConfigError("strategy.on_trainer_failure must be peer or rollback, "
                              f"got {p.get('on_trainer_failure')!r}")
        if not isinstance(p.get("dir", ""), str):
            raise ConfigError(f"strategy.dir must be a directory name, got {p.get('dir')!r}")

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.p = {**type(self).DEFAULTS, **self.params}
        self.store: CheckpointStore | None = None
        self.writer: BackgroundWriter | None = None
        self.interval_steps = self.p["interval"] if self.p["interval"] != "auto" else None
        self.interval_s = float(self.p["interval_s"]) or None
        self.interval_rule = ("given" if self.interval_steps else "given-seconds" if self.interval_s
                              else "young")
        self.taken: list[int] = []  # trainer 0: steps after which a checkpoint was started
        self.last_ckpt_t = 0.0
        self.last_ckpt_step = -1
        self.t_save = 0.0  # trainer 0: slowest part's write time, from the servers' header words
        self.step_times: deque[float] = deque(maxlen=50)  # trainer 0: recent step times (auto interval)
        self.mtbf = expected_mtbf_s(cfg)  # (seconds, steps): parsed once, not on every step
        self.critical_s = self.write_s = self.max_part_s = self.restore_s = self.restore_read_s = 0.0
        self.restores = self.parts_sent = 0
        self.submitted: list[tuple[int, int]] = []  # (step, epoch) of background writes, in order
        self.stalls: dict[tuple[int, int], float] = {}  # (step, epoch) -> stall of a background write
        self._last_t: float | None = None
        # monitor (coordinator)
        self.pending: dict[int, dict[str, PartInfo]] = {}
        self.failed_parts: dict[int, set[str]] = {}  # monitor: parts whose write failed, by step
        self.part_figures: dict[int, dict[str, dict[str, Any]]] = {}  # step -> part -> rows, stall, total
        self.rows: list[tuple] = []  # the checkpoints dataset's rows (``add_checkpoint``'s arguments)
        self.committed_bytes = 0

    def checkpoint_root(self, out_path: Path) -> Path | None:
        return checkpoint_root(self.cfg, out_path)

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if self.store is None:
            root = Path(ctx.resume_from) if ctx.resume_from else checkpoint_root(self.cfg, ctx.out_path)
            self.store = CheckpointStore(root, float(self.p["bandwidth_mb_s"]), storage=storage_of(self.cfg))
            if ctx.rank == 0:  # the monitor, once at start-up
                if not ctx.resume_from:
                    check_unused(root)  # as the launcher did: this covers ranks started by srun/jobscripts
                root.mkdir(parents=True, exist_ok=True)
        if self.p["mode"] == "async" and self.part_name() and self.writer is None:
            self.writer = BackgroundWriter(self.store)

    # -- which part this rank writes --------------------------------------------------
    def part_name(self) -> str:
        slot = self.ctx.slot
        if slot.role == SERVER:
            return f"server-{slot.index}"
        if slot.role == TRAINER and slot.index == 0:
            return "trainer"
        return ""

    def expected_parts(self) -> set[str]:
        return {"trainer"} | {f"server-{i}" for i in range(self.cfg.layout.servers)}

    # -- schedule (trainer 0 decides, everyone follows) ------------------------------------
    def header_word(self, step: int) -> int:
        slot = self.ctx.slot
        if slot.role == SERVER:  # the servers tell trainer 0 how long their last part took
            return int(self.max_part_s * 1e6)
        if slot != Slot(TRAINER, 0):
            return 0
        return WORD_CHECKPOINT if self.due(step) else 0

    def due(self, step: int) -> bool:
        """Trainer 0: checkpoint after ``step``?"""
        if step + 1 >= self.cfg.training.steps:
            return False  # the run ends: nothing left to protect
        if self.interval_steps:
            return (step + 1) % self.interval_steps == 0
        now = self.ctx.now()
        if self.interval_s:
            return now - self.last_ckpt_t >= self.interval_s
        if self.last_ckpt_step < 0:  # auto: the first checkpoint measures t_save
            return step + 1 >= min(int(self.p["first"]), max(1, self.cfg.training.steps // 10))
        if self.t_save <= 0 and step - self.last_ckpt_step <= int(self.p["first"]):
            # The measurement travels in the servers' next header words (later for a background
            # write): without it Young's interval would be ~0 and the next step checkpoint again.
            return False
        return now - self.last_ckpt_t >= self.young_interval_s()

    def young_interval_s(self) -> float:
        mtbf_s, mtbf_steps = self.mtbf
        t_step = float(np.median(self.step_times)) if self.step_times else 0.01
        if mtbf_s is None:
            mtbf_s = (mtbf_steps if mtbf_steps is not None else self.cfg.training.steps) * t_step
        return young_interval(max(self.t_save, 1e-4), mtbf_s)

    # -- the checkpoint ---------------------------------------------------------------------
    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        ctx = self.ctx
        if words is None:
            return
        trainers = self.cfg.layout.trainers
        if ctx.slot == Slot(TRAINER, 0):
            now = ctx.now()
            if self._last_t is not None:
                self.step_times.append(now - self._last_t)
            self._last_t = now
            self.t_save = max(self.t_save, float(words[trainers:].max(initial=0)) * 1e-6)
        if int(words[0]) != WORD_CHECKPOINT:
            return
        if ctx.slot == Slot(TRAINER, 0):
            ctx.event("checkpoint_start", step, ctx.rank, detail=f"{self.p['mode']} full checkpoint")
            self.last_ckpt_t, self.last_ckpt_step = ctx.now(), step
            self.taken.append(step)
        name = self.part_name()
        if name:
            self.save(step, name)

    def save(self, step: int, name: str) -> None:
        t0 = time.perf_counter()
        state = self.role.state()
        if self.writer is not None:  # snapshot on the training thread, write in the background
            snap = {k: np.array(v, copy=True) for k, v in state.items()}
            self.writer.submit(step, name, snap)
            self.submitted.append((step, self.ctx.epoch))
            self.stalls[(step, self.ctx.epoch)] = time.perf_counter() - t0
        else:
            info = self.write_now(step, name, state)
            if info is not None:
                self.report(step, info, self.ctx.epoch, stall=time.perf_counter() - t0)
        self.critical_s += time.perf_counter() - t0

    def part_rows(self) -> int:
        """Embedding rows this rank's part holds (0 for the trainer's dense part)."""
        return self.role.n_rows() if self.ctx.slot.role == SERVER else 0

    def write_now(self, step: int, name: str, state: dict[str, np.ndarray],
                  store: Any = None) -> PartInfo | None:
        try:
            info = (store or self.store).write_part(step, name, state)
        except CheckpointError as exc:
            self.part_failed(step, self.ctx.epoch, name, exc)
            return None
        self.write_s += info.seconds
        self.max_part_s = max(self.max_part_s, info.seconds)
        return info

    def report(self, step: int, info: PartInfo, epoch: int, stall: float | None = None,
               rows: int | None = None) -> None:
        """Tell the monitor that part ``info`` of checkpoint ``step`` is written, with its
        embedding ``rows`` (default: the whole shard), the training thread's ``stall`` and the
        total (``stall=None``: a background write, whose stall was recorded at the snapshot)."""
        self.parts_sent += 1
        background = stall is None
        stall = self.stalls.pop((step, epoch), 0.0) if background else stall
        total = stall + info.seconds if background else stall
        rows = self.part_rows() if rows is None else rows
        self.ctx.tell_monitor(("part", step, epoch, info.to_dict(),
                               {"rows": rows, "stall_s": stall, "total_s": total}))

    def background(self, step: int) -> None:
        if self.writer is None:
            return
        t0 = time.perf_counter()
        try:
            done = self.writer.poll()
        except CheckpointError as exc:
            failed = self.submitted.pop(0)
            self.stalls.pop(failed, None)
            self.part_failed(*failed, self.part_name(), exc)
            done = []
        for info in done:
            written, epoch = self.submitted.pop(0)
            if epoch != self.ctx.epoch:
                self.stalls.pop((written, epoch), None)
            self.write_s += info.seconds
            self.max_part_s = max(self.max_part_s, info.seconds)
            if epoch == self.ctx.epoch:
                self.report(written, info, epoch)
        self.critical_s += time.perf_counter() - t0

    def part_failed(self, step: int, epoch: int, name: str, exc: Exception) -> None:
        """A writer: part ``name`` of checkpoint ``step`` could not be written (its own files are
        removed by the store). The event, and a word to the monitor, which abandons the step
        (the other parts' files) once every part has answered."""
        self.ctx.event("checkpoint_fail", step, self.ctx.rank, detail=str(exc)[:250])
        self.ctx.tell_monitor(("failed", step, epoch, {"part": name}, {}))

    # -- monitor: commit -----------------------------------------------------------------------
    def on_message(self, source: Slot, payload: Any) -> None:
        kind, step, epoch, info, figures = payload
        if kind not in ("part", "failed") or epoch != self.ctx.epoch:
            return  # a part of an epoch a failure ended: its checkpoint may never complete
        if kind == "failed":
            self.failed_parts.setdefault(step, set()).add(info["part"])
        else:
            self.pending.setdefault(step, {})[info["part"]] = PartInfo.from_dict(info)
            self.part_figures.setdefault(step, {})[info["part"]] = figures
        parts = self.pending.get(step, {})
        failed = self.failed_parts.get(step, set())
        if set(parts) | failed != self.expected_parts():
            return
        self.pending.pop(step, None)
        self.failed_parts.pop(step, None)
        if failed:  # every part answered, some failed: reclaim the written ones' space
            try:
                self.store.abandon(step)
            except CheckpointError as exc:
                self.ctx.event("checkpoint_fail", step, self.ctx.rank, detail=str(exc)[:250])
            self.part_figures.pop(step, None)
            return
        figs = self.part_figures.pop(step, {}).values()
        meta = {"config": self.cfg.to_dict(), "servers": self.cfg.layout.servers, "epoch": epoch,
                "result": str(self.ctx.out_path), **self.commit_meta(step)}
        try:
            self.store.commit(step, parts, meta)
        except CheckpointError as exc:
            self.ctx.event("checkpoint_fail", step, self.ctx.rank, detail=str(exc)[:250])
            return
        try:  # the commit stands: a failure to delete old checkpoints is only reported
            self.prune()
        except CheckpointError as exc:
            self.ctx.event("prune_fail", step, self.ctx.rank, detail=str(exc)[:250])
        nbytes = sum(p.bytes for p in parts.values())
        slowest = max(p.seconds for p in parts.values())
        self.committed_bytes += nbytes
        kind, bits = self.committed(step, parts)
        self.rows.append((step, kind, nbytes, max(f["total_s"] for f in figs), bits,
                          sum(f["rows"] for f in figs), max(f["stall_s"] for f in figs)))
        self.ctx.event("checkpoint_end", step, self.ctx.rank,
                       detail=f"{nbytes} bytes, slowest part {slowest:.3f} s")

    def commit_meta(self, step: int) -> dict[str, Any]:
        """Monitor: extra manifest ``meta`` of checkpoint ``step`` (subclasses: e.g. its chain)."""
        return {}

    def prune(self) -> None:
        """Monitor, after a commit: delete the checkpoints no restore needs any more."""
        self.store.prune(int(self.p["keep"]))

    def committed(self, step: int, parts: dict[str, PartInfo]) -> tuple[str, int]:
        """Monitor: ``step`` was committed with ``parts``; its (kind, bits) for the dataset row."""
        return "full", 32

    def checkpoint_rows(self) -> list[tuple]:
        return list(self.rows)

    # -- recovery ------------------------------------------------------------------------------
    def plan(self, failure: Failure) -> RecoveryPlan:
        lost_state = {s.role for s in failure.dead} - {"spare", TRAINER}
        originals = [i for i in failure.alive(TRAINER) if Slot(TRAINER, i) not in failure.dead]
        trainer_dead = TRAINER in failure.dead_roles()
        if not lost_state and originals and not (trainer_dead and self.p["on_trainer_failure"] == "rollback"):
            return RecoveryPlan(Scope.COMMITTED, reason="no embedding state lost")
        self.drop_pending()
        candidates = [s for s in self.store.complete_steps() if s <= max(failure.committed, -1)] + [-1]
        return RecoveryPlan(Scope.ROLLBACK, candidates=candidates, reason="full rollback")

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        t0, read0 = time.perf_counter(), self.store.read_s
        try:
            if step < 0:
                self.role.reset()
            elif self.ctx.slot.role == TRAINER:
                self.role.load_state(self.store.read_part(step, "trainer"))
            else:
                self.load_shard(step)
        except (CheckpointError, ValueError) as exc:
            self.ctx.event("restore_failed", plan.step, self.ctx.rank, detail=str(exc)[:250])
            return False
        self.restores += 1
        self.restore_s += time.perf_counter() - t0
        self.restore_read_s += self.store.read_s - read0  # the storage's share: reads, not the state load
        return True

    def load_shard(self, step: int) -> None:
        """This server's rows from the checkpoint, also when it was written with other servers."""
        man = self.store.manifest(step)
        mine = f"server-{self.ctx.slot.index}"
        if man.get("meta", {}).get("servers") == self.cfg.layout.servers:
            self.role.load_state(self.store.read_part(step, mine))
            return
        loaded = 0
        for part in sorted(p for p in man["parts"] if p.startswith("server-")):
            arrays = self.store.read_part(step, part, mmap=True)
            loaded += self.role.load_rows(arrays["global_rows"], arrays["table"])
        if loaded != self.role.n_rows():
            raise CheckpointError(f"checkpoint of step {step} holds {loaded} of this server's "
                                  f"{self.role.n_rows()} rows")

    def drop_pending(self) -> None:
        """Monitor: forget the parts of checkpoints not committed yet (a failure ended their epoch)."""
        self.pending.clear()
        self.failed_parts.clear()
        self.part_figures.clear()

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.drop_pending()
        if self.ctx.rank == 0 and plan.scope is Scope.ROLLBACK:
            # Checkpoints newer than the restored one are corrupt or unusable: the re-executed
            # steps write them again.
            for step in self.store.complete_steps():
                if step > plan.restored:
                    shutil.rmtree(self.store.step_dir(step), ignore_errors=True)
        if self.ctx.slot == Slot(TRAINER, 0):
            self.last_ckpt_t = self.ctx.now()

    # -- results -------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        if self.writer is not None:
            self.writer.close()
            self.background(-1)
        out: dict[str, Any] = {"checkpoint_critical_s": self.critical_s, "checkpoint_write_s": self.write_s,
                               "checkpoint_max_part_s": self.max_part_s, "restores": self.restores,
                               "restore_s": self.restore_s, "restore_read_s": self.restore_read_s,
                               "checkpoint_parts_sent": self.parts_sent}
        if self.ctx is not None and self.ctx.slot == Slot(TRAINER, 0):
            out.update(self.interval_figures())
        if self.ctx is not None and self.ctx.rank == 0:
            # The trainers wait for the slowest writer of each checkpoint: the sum of those stalls is
            # the critical path. A rank's own count (merged by "max") misses the checkpoints a
            # replaced rank wrote before it died; it still counts where it is larger (async polls).
            out["checkpoint_critical_s"] = float(sum(row[6] for row in self.rows))
            interval = (f"{self.interval_steps} steps" if self.interval_steps else
                        f"{self.interval_s:g} s" if self.interval_s else "auto (Young)")
            out.update({"checkpoints": len(self.rows), "checkpoint_bytes": self.committed_bytes,
                        "checkpoint_interval": interval, "checkpoint_mode": self.p["mode"],
                        "emulated_bandwidth": bool(self.store and self.store.emulated_bandwidth),
                        "checkpoint_dir": str(self.store.root) if self.store else ""})
        return out

    def interval_figures(self) -> dict[str, Any]:
        """Trainer 0: the interval used, in steps (resolved), its rule, and in seconds for a rule
        in seconds (nan otherwise). A rule in seconds gives the median gap between the
        checkpoints taken, else (fewer than two) the seconds over the median step time."""
        seconds = self.interval_s or (None if self.interval_steps else self.young_interval_s())
        steps = self.interval_steps or -1
        if not self.interval_steps:
            gaps = np.diff(sorted(set(self.taken)))
            if gaps.size:
                steps = int(round(float(np.median(gaps))))
            elif self.step_times:
                steps = max(1, int(round(seconds / float(np.median(self.step_times)))))
        return {"checkpoint_interval_steps": int(steps), "checkpoint_interval_rule": self.interval_rule,
                "checkpoint_interval_s": float(seconds) if seconds else math.nan}
