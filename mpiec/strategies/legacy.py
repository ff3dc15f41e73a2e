"""TRANSITIONAL: the one-object-for-every-role strategy interface, until every strategy is a
factory of per-role agents (``strategies.base.Strategy``). ``LegacyStrategy.agent`` binds the one
object to the rank's context and role and hands it out as the rank's agent (it has every hook).
Delete this module when no strategy subclasses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mpiec.strategies.base import Failure, RecoveryPlan, Strategy

if TYPE_CHECKING:

    from mpiec.config import Config
    from mpiec.layout import Slot


class LegacyStrategy(Strategy):
    """One object acting for every role of a rank (transitional; see the module docstring)."""


    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.params = dict(cfg.strategy.params)  # type: ignore[assignment]
        self.ctx: Any = None  # the rank's RankContext, set by bind()
        self.role: Any = None

    # -- configuration ------------------------------------------------------
    @classmethod
    def validate(cls, cfg: Config) -> None:
        cls.validate_params(cfg)

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

    # -- binding --------------------------------------------------------------
    def _as_agent(self, env: Any, role: Any) -> Any:
        """The rank's agent: this object, bound to the rank's full context (every role, every hook)."""
        self.bind(env._view, role)
        return self

    def coordinator(self, env: Any) -> Any:
        return self._as_agent(env, None)

    def trainer(self, env: Any, role: Any) -> Any:
        return self._as_agent(env, role)

    def server(self, env: Any, role: Any) -> Any:
        return self._as_agent(env, role)

    def parity(self, env: Any) -> Any:
        return self._as_agent(env, None)

    def spare(self, env: Any) -> Any:
        return self._as_agent(env, None)

    def resume_steps(self) -> list[int]:
        """Monitor, ``--resume``: the candidates of a full rollback."""
        from mpiec.layout import Slot
        from mpiec.strategies.plan import Scope

        plan = self.plan(Failure(step=0, committed=2**31 - 2, dead=[Slot("server", -1)]))
        return [s for s in plan.candidates if s >= 0] if plan.scope is Scope.ROLLBACK else []

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

    def on_pull(self, step: int, slots: np.ndarray | None = None) -> None:
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
