"""The three CPR strategies (``cpr``, ``cpr-mfu``, ``cpr-ssu``): their keys, their interval rule and
the factory of their agents.

Each is its own ``Strategy`` class (no strategy subclasses another): they share ``CprFactory``,
which builds the agents of ``cpr.agents`` from the checkpoint components, and differ only in
their declarations and in the ``Partials`` policy a variant hands the factory (its row selection
and its ``<kind>_every`` key; plain ``cpr`` takes no partial checkpoints).

Invariants: the interval is resolved once per rank from the config alone (``pls_interval``:
``strategy.interval`` / ``interval_s`` when given, else CPR's PLS rule), so every rank and the
launcher agree on it; only trainer 0's agent decides when to checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from mpiec.checkpoint import CheckpointStore
from mpiec.strategies.base import Strategy
from mpiec.strategies.checkpointing import (
    TRAINER_PART,
    Interval,
    ManifestCommitter,
    PartWriter,
    Restorer,
    Schedule,
    checkpoint_root,
    claim_root,
    expected_mtbf_s,
    full_parts,
    interval_for_pls,
    open_store,
    root_directories,
    server_part,
)
from mpiec.strategies.checkpointing.kit import KIT_RULES, CheckpointParams
from mpiec.strategies.costs import CostModel
from mpiec.strategies.cpr.agents import CprCoordinator, CprServer, CprTrainer
from mpiec.strategies.cpr.ledger import LostUpdates, UpdateCounter
from mpiec.strategies.cpr.partials import (
    MfuRows,
    Partials,
    PartialSchedule,
    ServerPartials,
    SsuRows,
    partial_interval,
)
from mpiec.strategies.params import param

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.strategies.env import DenseState, RankEnv, ShardState


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


class CprFactory:
    """Builds the agents of one CPR strategy: the full checkpoints of ``params``, and the partial
    ones of ``partials`` (None: plain ``cpr``)."""

    def __init__(self, cfg: Config, params: CprParams, partials: Partials | None = None) -> None:
        self.cfg = cfg
        self.params = params
        self.partials = partials
        self.interval = pls_interval(cfg, params)
        #: the partials' interval: (steps, seconds); (0, None) for plain cpr
        self.partial_every = partial_interval(self.interval, partials.every) if partials else (0, None)

    def store(self, env: RankEnv) -> CheckpointStore:
        return open_store(env, self.params.bandwidth_mb_s, directory=self.params.dir)

    def coordinator(self, env: RankEnv) -> CprCoordinator:
        store = self.store(env)
        claim_root(store, resuming=bool(env.resume_from))
        committer = ManifestCommitter(env, store, lambda: full_parts(env.n_servers), self.params.keep)
        return CprCoordinator(env, store, committer, self.interval, self.params.target_pls, self.params.mode,
                              self.partials.kind if self.partials else "")

    def trainer(self, env: RankEnv, role: DenseState) -> CprTrainer:
        store = self.store(env)
        restorer = Restorer.for_trainer(env, store, role)
        if env.slot.index != 0:  # trainer 0 decides and writes the dense replica
            return CprTrainer(env, restorer, LostUpdates())
        schedule = Schedule.from_config(self.cfg, self.interval, self.params.first, env.now)
        writer = PartWriter(env, store, TRAINER_PART, role.state, background=self.params.mode == "async")
        partial = PartialSchedule(schedule, *self.partial_every) if self.partials else None
        return CprTrainer(env, restorer, LostUpdates(), schedule, writer, partial,
                          detail=f"{self.params.mode} full checkpoint")

    def server(self, env: RankEnv, role: ShardState) -> CprServer:
        store = self.store(env)
        writer = PartWriter(env, store, server_part(env.slot.index), role.state, rows=role.n_rows,
                            background=self.params.mode == "async")
        n = role.shard.table.shape[0]
        partials = (ServerPartials(env, store, self.partials.kind, self.partials.select(n))
                    if self.partials else None)
        return CprServer(env, role, writer, Restorer.for_server(env, store, role), UpdateCounter(n), partials)


SUMMARY_RULES: dict[str, str] = {
    **KIT_RULES,
    "lost_updates": "max", "pls": "first", "pls_predicted": "first", "pls_target": "first",
    "pls_failures": "first", "full_checkpoint_bytes": "first", "partial_checkpoints": "first",
    "partial_checkpoint_bytes": "first", "partial_rows_saved": "first",
}
COST = CostModel("partial", interval="pls", target_pls=CprParams().target_pls)


class _PartialRecoveryFamily(Strategy):
    """What ``cpr`` and its two variants share: the declarations and the agents, made by one
    ``CprFactory``; a variant gives its partial checkpoints (``partials``). Not registered."""

    recovers = True
    lossless = False  # the failed shard's updates since its checkpoint are lost
    cost = COST
    summary_rules: ClassVar[dict[str, str]] = SUMMARY_RULES
    params: CprParams

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.factory = CprFactory(cfg, self.params, self.partials())

    def partials(self) -> Partials | None:
        """The variant's partial checkpoints (None: full checkpoints only)."""
        return None

    def checkpoint_root(self, out_path: Path) -> Path | None:
        return checkpoint_root(self.params.dir, out_path)

    def directories(self, out_path: Path) -> list[tuple[str, Path]]:
        return root_directories(self.params.dir, out_path)

    def coordinator(self, env: RankEnv) -> CprCoordinator:
        return self.factory.coordinator(env)

    def trainer(self, env: RankEnv, role: DenseState) -> CprTrainer:
        return self.factory.trainer(env, role)

    def server(self, env: RankEnv, role: ShardState) -> CprServer:
        return self.factory.server(env, role)


class PartialRecovery(_PartialRecoveryFamily):
    """``cpr``: full checkpoints on the PLS rule, partial recovery of the failed shards."""

    name = "cpr"
    description = "checkpoints with partial recovery: only the failed shard reloads (CPR, MLSys'21)"
    Params = CprParams


class PartialRecoveryMFU(_PartialRecoveryFamily):
    """``cpr-mfu``: ``cpr`` plus partial checkpoints of the most frequently pulled rows."""

    name = "cpr-mfu"
    description = "cpr + the most frequently used rows (access counters) saved more often"
    Params = CprMfuParams
    params: CprMfuParams

    def partials(self) -> Partials:
        fraction = self.params.mfu_fraction
        return Partials("mfu", self.params.mfu_every, lambda n: MfuRows(n, fraction))


class PartialRecoverySSU(_PartialRecoveryFamily):
    """``cpr-ssu``: ``cpr`` plus partial checkpoints of the rows a sub-sample of the steps pulled."""

    name = "cpr-ssu"
    description = "cpr + the rows of a sub-sample of the mini-batches saved more often"
    Params = CprSsuParams
    params: CprSsuParams

    def partials(self) -> Partials:
        seed, rate = self.cfg.training.seed, self.params.ssu_rate
        return Partials("ssu", self.params.ssu_every, lambda n: SsuRows(n, seed, rate))


__all__ = ["COST", "SUMMARY_RULES", "CprFactory", "CprMfuParams", "CprParams", "CprSsuParams",
           "PartialRecovery", "PartialRecoveryMFU", "PartialRecoverySSU", "cpr_interval", "pls_interval"]
