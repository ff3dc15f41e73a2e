"""The strategy plug-in interface: every fault-tolerance strategy is one subclass.

A strategy is instantiated once per rank and bound to the rank's role (an
*agent*: on a trainer it acts for the trainer, on a server for the server, on
the monitor it is the run's coordinator). Roles call the hooks below and never
branch on a strategy's name. Invariants every strategy keeps:

* hooks are deterministic functions of (config, step, data they are given):
  they may add work and traffic but never change what training computes in a
  failure-free run (the parameter checksum of every strategy equals ``none``'s;
  the contract test checks it);
* ``plan`` runs on the monitor only, after every survivor agreed on the
  ``Failure``; the runtime broadcasts the plan, so every rank acts on one plan;
* state moves through the role's ``state()`` / ``load_state()``, never by
  reaching into another object's fields;
* figures for the result file come from ``summary()``; every key has a merge
  rule in ``summary_rules`` (how the monitor combines the ranks' values).

Call order on a data rank (trainer or server), every step ``s``::

    before_step(s) → [header exchange: header_word(s) sent] → pull (servers: on_pull,
    rows sent, then overlap) → push (trainers: after_push) → apply (servers: after_apply)
    → after_step(s, words) → background(s)

Recovery (``mpiec.roles.recovery``): the monitor calls ``plan(failure)``; every
rank then reconciles, replacements are built and ``bind`` is called on them,
``restore(plan, role)`` runs on every trainer and server, ``rebuild(plan)`` on every
rank (scopes other than ROLLBACK; collective), the outcome is agreed, then
``on_recovered(plan)`` on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

    from mpiec.config import Config
    from mpiec.layout import Slot


class Decision(Enum):
    ABORT = "abort"  # the run is lost: everyone stops, the result says lost = True
    CONTINUE = "continue"  # the strategy recovered: training goes on


class Scope(Enum):
    """Which ranks restore state after a failure."""

    ROLLBACK = "rollback"  # every trainer and server restores a checkpoint; steps since re-execute
    REPLACED = "replaced"  # survivors stay at the committed step; only replaced slots restore
    COMMITTED = "committed"  # survivors stay at the committed step; replaced slots rebuilt at it


@dataclass
class Failure:
    """What the survivors agreed on after a failure (identical on every survivor)."""

    step: int  # the step the failure interrupted (first step not committed)
    committed: int  # last step every surviving trainer and server completed
    dead: list[Slot] = field(default_factory=list)  # slots whose rank died (all failures of this recovery)
    emulated: bool = False
    survivors: list[Slot] = field(default_factory=list)  # slots of the ranks alive, in world order

    def dead_roles(self) -> set[str]:
        return {s.role for s in self.dead}

    def alive(self, role: str) -> list[int]:
        return sorted(s.index for s in self.survivors if s.role == role)


@dataclass
class RecoveryPlan:
    """The strategy's answer to a failure; the runtime fills the bookkeeping fields."""

    scope: Scope | None  # None: abort, the run is lost
    candidates: list[int] = field(default_factory=list)  # ROLLBACK: newest first (-1: initial state)
    reason: str = ""
    # -- filled by the runtime -------------------------------------------------
    step: int = 0  # the interrupted step (for events)
    committed: int = -1  # survivors' agreed committed step
    assignments: dict[Slot, Slot] = field(default_factory=dict)  # spare slot -> dead slot it takes
    spawn: list[Slot] = field(default_factory=list)  # dead slots taken by spawned processes (spawn mode)
    consumed: list[int] = field(default_factory=list)  # seq of the planned kills that fired
    epoch: int = 0  # recoveries so far, this one included
    restored: int = -1  # the step whose state every rank holds after restore (ROLLBACK: chosen candidate)

    @classmethod
    def abort(cls, reason: str) -> RecoveryPlan:
        return cls(scope=None, reason=reason)

    @property
    def aborts(self) -> bool:
        return self.scope is None


@dataclass
class ServerShard:
    """A server's state, as strategies see it (arrays are the live ones)."""

    index: int
    table: np.ndarray  # float32 [n_local, dim + state]: weights then optimizer state
    global_rows: np.ndarray  # int64 global row id of each local slot (padding: -1)
    dim: int


MERGE_RULES = ("sum", "max", "min", "first")


class Strategy:
    """Base class: the ``none`` behaviour (no protection) for every hook."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs_delta: ClassVar[bool] = False  # servers compute old XOR new row bytes on apply (fused)
    needs_old: ClassVar[bool] = False  # servers keep a copy of the rows before apply
    recovers: ClassVar[bool] = False  # plan() can return something else than abort
    #: merge rule of every key ``summary()`` may return: sum | max | min | first
    summary_rules: ClassVar[dict[str, str]] = {}

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.params = dict(cfg.strategy.params)
        self.ctx: Any = None  # the rank's RankContext, set by bind()
        self.role: Any = None

    # -- configuration ------------------------------------------------------
    @classmethod
    def validate_params(cls, cfg: Config) -> None:
        """Raise ``ConfigError`` for unknown or invalid ``strategy.params``. Launcher only."""
        from mpiec.errors import ConfigError

        if cfg.strategy.params:
            key = sorted(cfg.strategy.params)[0]
            raise ConfigError(f"unknown config key 'strategy.{key}' for strategy '{cls.name}'")

    @classmethod
    def param_keys(cls) -> set[str]:
        """Keys of ``strategy.params`` this strategy knows (``mpiec bench --set strategy.KEY``)."""
        return set()

    @classmethod
    def stripe_shape(cls, cfg: Config) -> tuple[int, int]:
        """(k, r) of the row placement: data rows and parity rows per stripe."""
        return 1, 0

    def checkpoint_root(self, out_path: Path) -> Path | None:
        """The directory this strategy writes checkpoints into for a run whose result file is
        ``out_path`` (None: it writes none). Launcher (before any rank starts) and ranks; no MPI."""
        return None

    # -- binding --------------------------------------------------------------
    def bind(self, ctx: Any, role: Any) -> None:
        """Every rank, once its role is built (at start-up, and on a spare promoted to a slot).

        ``ctx`` is the rank's view (communicators, event log, clock, placement, slot);
        ``role`` the role object (trainers and servers have ``state()``/``load_state()``).
        Local, not collective.
        """
        self.ctx, self.role = ctx, role

    # -- step hooks (trainers and servers) -------------------------------------
    def before_step(self, step: int) -> None:
        """Before ``step`` starts on this trainer/server. Local."""

    def header_word(self, step: int) -> int:
        """A non-negative int this rank puts in ``step``'s header; every data rank
        receives every rank's word (``after_step(words=...)``): how a decision taken
        on one rank (e.g. a time-based checkpoint on trainer 0) reaches all, in step."""
        return 0

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        """Server: local ``slots`` were requested by the trainers at ``step`` (−1 = evaluation)."""

    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        """Trainer: the row gradients it pushed at ``step`` (local slots grouped by server in
        ``data`` rank order, ``counts`` per data rank), e.g. to keep them for replay."""

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        """Server: rows ``slots`` (sorted, unique) were updated at ``step``.

        The new rows are ``shard.table[slots]``; ``old`` is a copy of the rows
        before the update (``needs_old``), ``delta`` their old XOR new bytes as
        uint8 ``[len(slots), row_bytes]`` (``needs_delta``); ``None`` otherwise.
        ``replayed`` is true when the update re-applies logged gradients.

        Call order: on every server, right after its table took ``step`` and before ``step``
        completes there. A peer failure raised here (a hook that communicates, like ecrm's)
        leaves ``step`` applied but not completed; reconciliation undoes it from the server's
        undo record (``recovery.reconcile``), so the hook needs no cleanup of the rows.
        """

    def overlap(self, step: int) -> None:
        """Server, every training step: the rows of ``step`` are sent and its gradients are
        awaited while the trainers compute, so work done here is off the critical path.
        Every server calls it at the same point of the step (collectives on ``servers`` match)."""

    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        """``step`` is complete on this trainer/server; ``words`` are every data rank's
        ``header_word`` of this step (indexed by data rank). Local (may send to the monitor)."""

    def background(self, step: int) -> None:
        """Between steps, after ``after_step``: poll background work (writers, …). Local."""

    # -- monitor (the coordinator) ----------------------------------------------
    def on_message(self, source: Slot, payload: Any) -> None:
        """Monitor: a message an agent sent with ``ctx.tell_monitor`` (in order per source)."""

    def plan(self, failure: Failure) -> RecoveryPlan:
        """Monitor only: what the survivors do about ``failure``. Default: the run is lost."""
        return RecoveryPlan.abort(f"strategy {self.name} does not recover from failures")

    def on_no_spare(self, failure: Failure, slot: Slot, plan: RecoveryPlan) -> RecoveryPlan:
        """Monitor: ``plan`` needs a spare for ``slot`` and none is left. Default: abort."""
        return RecoveryPlan.abort(f"no spare left for {slot.role} {slot.index}")

    # -- recovery (every rank) ---------------------------------------------------
    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        """Trainers and servers: load the state of ``step`` (ROLLBACK: every rank; other
        scopes: replaced servers only). Return False if the state is unusable (e.g. a
        corrupted checkpoint part): the runtime agrees on the outcome over every rank
        and tries the plan's next candidate. Local."""
        return False

    def rebuild(self, plan: RecoveryPlan) -> bool:
        """Every rank, scopes REPLACED and COMMITTED, after the replacements are built and the
        dense replica is copied, before the restore is agreed: rebuild lost state from the
        survivors. Collective: every rank calls it (ranks with nothing to do return at once;
        others may communicate on ``servers`` / ``data``). False: the state cannot be rebuilt
        and the run is lost (say why in an event). A peer's death raises ``PeerFailure``
        and restarts the recovery, so what it changes must survive a second attempt."""
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        """Every rank, after the restore, before training resumes at ``plan.restored + 1``.
        Drop per-step bookkeeping of steps that will be re-executed. Local."""

    # -- results -------------------------------------------------------------------
    def checkpoint_rows(self) -> list[tuple]:
        """Monitor, at the end: ``(step, kind, bytes, seconds, bits, rows, stall_s)`` of every
        checkpoint committed (``ResultWriter.add_checkpoint``'s arguments), for the result's
        ``checkpoints`` dataset."""
        return []

    def summary(self) -> dict[str, Any]:
        """Strategy figures for the result file's ``summary`` group (keys in ``summary_rules``)."""
        return {}


def merge_summaries(rules: dict[str, str], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine the ranks' ``summary()`` dicts by each key's rule (sum / max / min / first)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            rule = rules.get(key)
            if rule is None:
                raise KeyError(f"strategy summary key '{key}' has no merge rule")
            if key not in out or rule == "first":
                out.setdefault(key, value)
            elif rule == "sum":
                out[key] += value
            elif rule == "max":
                out[key] = max(out[key], value)
            elif rule == "min":
                out[key] = min(out[key], value)
    return out
