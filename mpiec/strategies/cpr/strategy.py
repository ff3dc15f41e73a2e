"""The three CPR strategies (``cpr``, ``cpr-mfu``, ``cpr-ssu``): their keys, their interval rule and
their agents, composed (``strategies.compose``) of the checkpoint kit's parts and cpr's own.

===========  =========================================================================================
role         parts (in this order)
===========  =========================================================================================
trainer      the kit's (trainer 0: ``SchedulePart``, a variant's ``FullOrPartial`` instead, deciding
             full or partial; ``WriterPart``; every trainer: ``RestorerPart``), ``TrainerLedger``
server       the kit's ``WriterPart`` (``writer.part_ms``) and ``RestorerPart`` (rollbacks only),
             ``ServerLedger`` (``ledger.updates``), a variant's ``PartialsPart``,
             ``ReplacementRestore`` (a replacement's partial recovery)
coordinator  the kit's ``CommitterPart`` (the partials' rows merged in), ``PartialRecoveryPlanner``,
             the kit's ``RollbackPlanner`` (when no trainer survives), ``PartialBook``
===========  =========================================================================================

Each is its own ``Strategy`` class (no strategy subclasses another): they share
``_PartialRecoveryFamily`` and differ only in their declarations and in the ``Partials`` policy a
variant gives (its row selection and its ``<kind>_every`` key; plain ``cpr`` takes no partials).

Invariants: the interval is resolved once per rank from the config alone (``pls_interval``:
``strategy.interval`` / ``interval_s`` when given, else CPR's PLS rule), so every rank and the
launcher agree on it; only trainer 0's agent decides when to checkpoint (full or partial, in one
word); the header word has the kit's namespaces (``schedule``, ``writer``) and ``ledger``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from mpiec.strategies.api import compose
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.params import param
from mpiec.strategies.checkpointing import Interval, Restorer, expected_mtbf_s, interval_for_pls
from mpiec.strategies.checkpointing.kit import (
    KIT_RULES,
    MILLIS,
    CheckpointKit,
    CheckpointParams,
    RestorerPart,
    SchedulePart,
    WriterPart,
)
from mpiec.strategies.cpr.ledger import LostUpdates, ServerLedger, TrainerLedger, UpdateCounter
from mpiec.strategies.cpr.partials import (
    FullOrPartial,
    MfuRows,
    PartialBook,
    Partials,
    PartialsPart,
    ServerPartials,
    SsuRows,
    partial_interval,
)
from mpiec.strategies.cpr.recovery import PartialRecoveryPlanner, ReplacementRestore

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState


@dataclass(frozen=True)
class CprParams(CheckpointParams):
    """The checkpoint kit's keys (``interval = "auto"`` means CPR's PLS rule here) and the PLS target."""

    interval: int | Literal["auto"] = param(
        "auto", "steps between full checkpoints, or auto: CPR's rule 2 · N_shards · MTBF · target_pls "
        "(in seconds when the MTBF is failures.mtbf_s)", ge=1)
    target_pls: float = param(0.05, "portion of lost samples aimed at: with interval = auto the full "
                              "interval is 2 · N_shards · MTBF · target_pls", gt=0, le=1)


@dataclass(frozen=True)
class CprMfuParams(CprParams):
    mfu_fraction: float = param(0.1, "fraction of a shard's rows (the most frequently pulled) each partial "
                                "checkpoint saves", gt=0, le=1)
    mfu_every: int = param(0, "steps between partial checkpoints (0: a quarter of the full interval)", ge=0)


@dataclass(frozen=True)
class CprSsuParams(CprParams):
    ssu_rate: float = param(0.1, "fraction of the steps whose pulled rows are tracked (a deterministic "
                            "sample)", gt=0, le=1)
    ssu_every: int = param(0, "steps between partial checkpoints (0: a quarter of the full interval)", ge=0)


def cpr_interval(cfg: Any, target_pls: float) -> tuple[int | None, float | None]:
    """(interval in steps, interval in seconds) from the target PLS; exactly one is set."""
    mtbf_s, mtbf_steps = expected_mtbf_s(cfg)
    shards = cfg.layout.servers
    if mtbf_s is not None:
        return None, interval_for_pls(target_pls, shards, mtbf_s)
    mtbf = mtbf_steps if mtbf_steps is not None else float(cfg.training.steps)
    return max(1, int(round(interval_for_pls(target_pls, shards, mtbf)))), None


def pls_interval(cfg: Any, params: CprParams) -> Interval:
    """``strategy.interval`` / ``interval_s`` when given, else the PLS rule (``cpr_interval``)."""
    given = Interval.given(params.interval, params.interval_s)
    if given.steps or given.seconds:
        return given
    steps, seconds = cpr_interval(cfg, params.target_pls)
    return Interval("pls", steps, seconds)


SUMMARY_RULES: dict[str, str] = {
    **KIT_RULES,
    "lost_updates": "max", "pls": "first", "pls_predicted": "first", "pls_target": "first",
    "pls_failures": "first", "full_checkpoint_bytes": "first", "partial_checkpoints": "first",
    "partial_checkpoint_bytes": "first", "partial_rows_saved": "first",
}
COST = CostModel("partial", interval="pls", target_pls=CprParams().target_pls)
#: the variants: cpr plus partial checkpoints, whose saved updates are measured against cpr's runs
PARTIALS_COST = CostModel("partial", interval="pls", target_pls=CprParams().target_pls, partials_over="cpr")


class _PartialRecoveryFamily(Strategy):
    """What ``cpr`` and its two variants share: the declarations and the agents; a variant gives
    its partial checkpoints (``partials``). Not registered."""

    recovers = True
    lossless = False  # the failed shard's updates since its checkpoint are lost
    cost = COST
    summary_rules: ClassVar[dict[str, str]] = SUMMARY_RULES
    params: CprParams
    kit: CheckpointKit

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        # the writers' time in ms: the header also carries every server's update count
        self.kit = CheckpointKit(cfg, self.params, part_time=MILLIS, interval=pls_interval(cfg, self.params))
        self.policy = self.partials()
        #: the partials' interval: (steps, seconds); (0, None) for plain cpr
        self.partial_every = (partial_interval(self.kit.interval, self.policy.every) if self.policy
                              else (0, None))

    def partials(self) -> Partials | None:
        """The variant's partial checkpoints (None: full checkpoints only)."""
        return None

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        decider = FullOrPartial if self.policy else SchedulePart
        return {**self.kit.header_fields(), decider.namespace: decider.fields,
                ServerLedger.namespace: ServerLedger.fields}

    def coordinator(self, env: RankEnv) -> Coordinator:
        store = self.kit.coordinator_store(env)
        committer = self.kit.committer(env, store)
        book = PartialBook(committer, self.policy.kind if self.policy else "")
        committing, rollback = self.kit.coordinator_parts(env, store, committer, beside=book.rows)
        planner = PartialRecoveryPlanner(env, store, committer, self.kit.interval, self.params.target_pls)
        return compose.coordinator(self, env, committing, planner, rollback, book)

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        decider = partial(FullOrPartial, every=self.partial_every) if self.policy else SchedulePart
        return compose.trainer(self, env, *self.kit.trainer_parts(env, role, decider=decider),
                               TrainerLedger(env, LostUpdates()))

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        store = self.kit.store(env)
        writer = self.kit.server_writer(env, role, store)
        restorer = Restorer.for_server(env, store, role)
        n = role.shard.table.shape[0]
        counter = UpdateCounter(n)
        partials = (ServerPartials(env, store, self.policy.kind, self.policy.select(n))
                    if self.policy else None)
        return compose.server(self, env, WriterPart(writer, MILLIS, reports=True),
                              RestorerPart(restorer, rollback_only=True), ServerLedger(env, counter),
                              PartialsPart(role, partials, counter, writer) if partials else None,
                              ReplacementRestore(env, role, store, restorer, partials))


class PartialRecovery(_PartialRecoveryFamily):
    """``cpr``: full checkpoints on the PLS rule, partial recovery of the failed shards."""

    name = "cpr"
    description = "checkpoints with partial recovery: only the failed shard reloads (CPR, MLSys'21)"
    Params = CprParams


class PartialRecoveryMFU(_PartialRecoveryFamily):
    """``cpr-mfu``: ``cpr`` plus partial checkpoints of the most frequently pulled rows."""

    name = "cpr-mfu"
    cost = PARTIALS_COST
    description = "cpr + the most frequently used rows (access counters) saved more often"
    Params = CprMfuParams
    params: CprMfuParams

    def partials(self) -> Partials:
        fraction = self.params.mfu_fraction
        return Partials("mfu", self.params.mfu_every, lambda n: MfuRows(n, fraction))


class PartialRecoverySSU(_PartialRecoveryFamily):
    """``cpr-ssu``: ``cpr`` plus partial checkpoints of the rows a sub-sample of the steps pulled."""

    name = "cpr-ssu"
    cost = PARTIALS_COST
    description = "cpr + the rows of a sub-sample of the mini-batches saved more often"
    Params = CprSsuParams
    params: CprSsuParams

    def partials(self) -> Partials:
        seed, rate = self.cfg.training.seed, self.params.ssu_rate
        return Partials("ssu", self.params.ssu_every, lambda n: SsuRows(n, seed, rate))


__all__ = ["COST", "SUMMARY_RULES", "CprMfuParams", "CprParams", "CprSsuParams",
           "PartialRecovery", "PartialRecoveryMFU", "PartialRecoverySSU", "cpr_interval", "pls_interval"]
