"""``ecrm``: erasure-coded embedding tables and optimizer state (ECRM / ECRec, Liu, Kosaian, Rashmi).

Owns the strategy's declarations (``EcrmParams``; the cross-key rules in ``check``: the code's
parity count, the stripe width against the servers, one node failure within the tolerance) and
its factory of agents (``agents``): on a server the *source* (after every apply it stages the
old XOR new bytes of the updated rows for the parity holders of their stripes) and, under
rotated placement, a *holder* (a ``ParityStore``); on a dedicated parity rank a holder only; on
a trainer the gradients it pushed in the last steps (replayed when a lost shard is rebuilt); on
the monitor the plan and the tolerance check. The factory decides each rank's pieces once: a
server gets a ``member.Member`` with a ``Source``, a parity rank one without, a holder its
``ParityStore`` (encoded from the seed at start-up, left to the rebuild on a replacement).
``strategy.fallback = "ckpt"`` composes ckpt: ``FullCheckpoint`` built with the fallback's
config (rare full checkpoints, a rollback when a stripe lost more than ``r`` members), whose
coordinator, trainer and server agents ecrm's hold; its header fields are ecrm's ``HEADER``.

Invariants:

* a row is coded as its raw bytes ``[weights | optimizer state]`` (GF codes:
  exact; ``sum``: ECRM's float parity, which drifts and is reported, never
  called lossless);
* parity consistency (``parity.ParityStore``), checked online every
  ``verify_every`` steps; the training a failure-free ``ecrm`` run computes is
  ``none``'s (the parity work only reads the rows);
* a recovery from at most ``r`` lost members per stripe ends with the rows of
  the failure-free run (``rebuild``); more than ``r`` end the run with a line
  naming the stripe and its dead members.

Costs stay bounded: sources keep the outgoing deltas of the last 4 steps,
holders the incoming ones of the last 4, trainers their pushed gradients of
the last 5 (a holder applies a step at most two steps after it, so recovery
needs at most 3 of them; the peaks are in the summary).

Batched parity commits (``strategy.parity_every = N``, default 1: every step
commits, the protocol above unchanged). Steps ``s`` with ``(s + 1) % N == 0``
*commit*: a source sends the delta of every row it updated since the previous
commit (``window.CommitWindow``: the rows' bytes at that commit, XORed with
their bytes now), once per row however many steps updated it; the other steps
send nothing. Holders' versions advance in commits (``ParityStore.chain``).
Every member forces a commit, whatever N, at the last step, before an online
verification, and at every step while a rebuild runs -- so a rebuild decodes
with data and parity at the same step, as with N = 1 (``rebuilder``). The
recovery (``rebuild``) is the same sequence: holders undo commits past the
target (landing on the commit before), survivors send each holder the chain of
kept commits from its version to the committed step ``C``, the last piece
built from the open window (or, when reconciliation undid a step that had just
committed, from that commit's kept old rows); a lost source's parity is at its
last commit ``V_d`` every holder has, and the trainers replay ``V_d + 1 .. C``.
A holder has every commit up to two steps before ``C``, so ``V_d >= C - N - 1``:
trainers keep ``N + 4`` steps of gradients, sources the outgoing commits and
holders the incoming ones of the last ``N + 3`` steps (a replacement's replayed
steps go one per step), plus each source's open window (its peak,
``parity_window_peak_bytes``, is counted in ``retained_deltas_peak_bytes`` too).
Parity is exact at every commit (``verify_every`` checks at commits only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from mpiec.errors import ConfigError
from mpiec.layout import holder_nodes, initial_slots, stripe_placement
from mpiec.strategies.api import compose
from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.cover import CorruptionCover
from mpiec.strategies.api.env import RankEnv
from mpiec.strategies.api.params import param, typed_params
from mpiec.strategies.checkpointing.kit import KIT_RULES, CheckpointKit, CommitterPart, RollbackPlanner
from mpiec.strategies.ecrm.agents import EcrmCoordinator, EcrmParity, EcrmServer, EcrmSpare, EcrmTrainer
from mpiec.strategies.ecrm.member import Member, Source, encode_initial, warm_up
from mpiec.strategies.ecrm.parity import ParityStore, payload_width
from mpiec.strategies.ecrm.stripes import node_losses, parity_stripes, residue_holders

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.strategies.api.env import DenseState, ShardState

KEEP_DELTAS, KEEP_GRADS = 4, 5
# the step header word: ecrm has no field of its own; with the ckpt fallback, the kit's fields
# (trainer 0's ``schedule.checkpoint`` decision, the servers' ``writer.part_us``), its parts'


@dataclass(frozen=True)
class EcrmParams:
    code: Literal["xor", "rs", "sum"] = param(
        "xor", "xor: one parity row per stripe; rs: Reed-Solomon, r = 1..4; sum: ECRM's float parity "
        "(drifts)")
    k: int | Literal["auto"] = param(
        "auto", "data rows per stripe (auto: layout.servers with parity ranks, else servers - r)",
        ge=1, le=255)
    r: int = param(1, "parity rows per stripe (xor and sum: 1)", ge=1, le=4)
    sum_dtype: Literal["float32", "float64"] = param("float32", "sum code: the parity's float type")
    verify_every: int = param(0, "re-encode every stripe and compare it with the parity every N steps "
                              "(0: never); a GF code then locates (rs, r >= 2) and repairs what differs",
                              ge=0)
    scrub_stripes: int = param(0, "a rolling scrub: every step the parity rows of the next N stripes are "
                               "re-encoded and checked, in turn (a full pass every ceil(stripes / N) "
                               "steps), located and repaired as verify_every's; 0: off", ge=0, le=1 << 30)
    rebuild: Literal["background", "data", "sync"] = param(
        "background", "background: rebuild the rest of a lost shard in rounds while training goes on; "
        "data: its data rows inside the recovery, its parity rows in rounds after (no degraded reads); "
        "sync: all of it inside the recovery")
    rebuild_rows: int | Literal["auto"] = param(
        "auto", "rows decoded per background round, one round a step (auto: rounds of 32768 rows, "
                "spaced by rebuild_budget, at most 4 steps apart)", ge=1)
    rebuild_budget: float = param(0.1, "auto rebuild_rows: CPU of a round, every member's summed, per step "
                                  "until the next one, as a share of the step time", gt=0, le=10)
    fallback: Literal["none", "ckpt"] = param(
        "none", "ckpt: rare full checkpoints, a rollback when a stripe lost more than r members")
    fallback_interval: int = param(0, "fallback = ckpt: steps between the fallback checkpoints", ge=0)
    exchange: Literal["overlap", "immediate"] = param(
        "overlap", "overlap: a step's parity deltas travel while the trainers compute the next; "
        "immediate: applied at the end of their step")
    allow_colocated: bool = param(False, "run a layout where one node failure takes more than r members "
                                         "of a stripe")
    parity_every: int = param(1, "steps between parity commits (deltas batched per row in between)", ge=1)


def stripe_k(params: EcrmParams, cfg: Config) -> int:
    """``strategy.k``, ``auto`` resolved: every server with dedicated parity ranks, else servers − r."""
    if params.k != "auto":
        return int(params.k)
    servers = cfg.layout.servers
    return servers if cfg.layout.parity_ranks else max(1, servers - int(params.r))


def colocation_problem(cfg: Config, k: int, r: int) -> str:
    """The line refusing a layout where one node failure takes more than ``r`` members of a stripe
    (the placement spreads stripes over ``layout.ranks_per_node``'s nodes as well as it can); ""
    when every single node failure is within the code's tolerance."""
    lay = cfg.layout
    if not lay.ranks_per_node:
        return ""  # every rank is its own node: a node failure is a rank failure
    pl = stripe_placement(lay, int(sum(cfg.data.cardinalities)), k, r)
    nodes = holder_nodes(lay)
    S = lay.servers
    for residue, (node, members) in sorted(node_losses(pl, nodes).items()):
        if len(members) <= r:
            continue
        holders = residue_holders(pl, residue)
        names = ", ".join(f"member {m} on {'server' if holders[m] < S else 'parity'} "
                          f"{holders[m] if holders[m] < S else holders[m] - S}" for m in members)
        return (f"stripe {residue} (and every stripe s with s % {S} == {residue}) would lose {len(members)} "
                f"members to one failure of node {node} ({names}), more than r = {r}: "
                f"layout.ranks_per_node = {lay.ranks_per_node} puts more than r of a stripe's {k + r} "
                "members on one node; lower layout.ranks_per_node, add servers, lower strategy.k or raise "
                "strategy.r, or set strategy.allow_colocated = true to run it anyway")
    return ""


def promoted(env: RankEnv) -> bool:
    """Does this rank hold a slot it did not start with (a spare promoted, or a process spawned,
    by a recovery)? Its state then comes from the recovery, not from the seed."""
    lay = env.cfg.layout
    start = initial_slots(lay.trainers, lay.servers, lay.parity_ranks, lay.spares)
    return env.first_rank >= len(start) or start[env.first_rank] != env.slot


class ErasureCoded(Strategy):
    """Erasure-coded rows; the factory gives each role its pieces (see the module docstring)."""

    name = "ecrm"
    description = "erasure-coded embedding rows and optimizer state in server memory; lossless rebuild (ECRM)"
    Params = EcrmParams
    lossless = True  # with the xor and rs codes (the sum code drifts in floating point)
    cost = CostModel("rebuild")
    needs_delta = True
    recovers = True
    shrinks = True
    summary_rules: ClassVar[dict[str, str]] = {
        "code": "first", "k": "first", "r": "first", "parity_placement": "first",
        "parity_bytes_per_step": "sum", "parity_bytes": "sum", "parity_rows_per_step": "sum",
        "parity_memory_bytes": "sum",
        "shard_memory_bytes": "sum", "parity_stage_s_per_step": "max", "parity_drain_s_per_step": "max",
        "parity_stage_cpu_s_per_step": "max", "parity_drain_cpu_s_per_step": "max",
        "retained_deltas_peak_bytes": "max", "retained_grads_peak_bytes": "max",
        "verify_checks": "max", "verify_mismatches": "sum", "scrub_repaired": "sum", "scrub_unlocated": "max",
        "scrub_rows_checked": "sum", "scrub_pass_steps": "first",
        "rebuilds": "max", "rebuild_s": "max",
        "rebuild_rows": "sum", "rebuild_bytes": "sum", "reencoded_rows": "sum", "replayed_steps": "max",
        "rebuild_sync_s": "max", "rebuild_decode_s": "max", "rebuild_replay_s": "max",
        "rebuild_encode_s": "max", "lossless_code": "first", "rebuild_total_s": "max",
        "rebuild_rounds": "max", "degraded_rows": "sum", "rebuild_mode": "first",
        "rebuild_steps": "max", "rebuild_cpu_s": "max", "rebuild_decode_cpu_s": "max",
        "rebuild_reencode_cpu_s": "max", "rebuild_fetch_cpu_s": "max", "rebuild_install_cpu_s": "max",
        "rebuild_gb_s_cpu": "max", "rebuild_provide_cpu_s": "max", "rebuild_round_wall_s": "max",
        "rebuild_degraded_cpu_s": "max", "rebuild_shard_steps": "max",
        "parity_exchange": "first", "sum_drift_max_abs": "max",
        "parity_every": "first", "parity_commits": "max", "parity_window_peak_bytes": "max",
        "sum_drift_max_rel": "max", "sum_drift_checks": "sum", **KIT_RULES,
    }
    params: EcrmParams

    # -- configuration ------------------------------------------------------------------------------
    @classmethod
    def check(cls, params: EcrmParams, cfg: Config) -> None:
        p = params
        if p.code in ("xor", "sum") and p.r != 1:
            raise ConfigError(f"strategy.code = {p.code} has one parity row per stripe: strategy.r must "
                              f"be 1, got {p.r} (use code = rs for r = 2..4)")
        if p.fallback == "ckpt" and p.fallback_interval < 1:
            raise ConfigError("strategy.fallback = ckpt needs strategy.fallback_interval = N (steps between "
                              "the fallback checkpoints)")
        k, r = stripe_k(p, cfg), p.r
        lay = cfg.layout
        width = k if lay.parity_ranks else k + r
        if width > lay.servers:
            where = "data rows" if lay.parity_ranks else "members (k + r)"
            raise ConfigError(f"strategy.k = {k}, r = {r}: a stripe has {width} {where} on distinct servers, "
                              f"the layout has layout.servers = {lay.servers}; lower k or add servers")
        if not p.allow_colocated:
            problem = colocation_problem(cfg, k, r)
            if problem:
                raise ConfigError(problem)
        if lay.parity_ranks and cfg.failures.kill and cfg.failures.mode == "emulated":
            raise ConfigError("dedicated parity ranks (layout.parity_ranks) need ULFM failure detection: "
                              "failures.mode = emulated cannot stop a parity rank waiting for deltas")

    @classmethod
    def shrink_refusal(cls, cfg: Config) -> str:
        """Shrinks by a handover (or the fallback's rollback), not with dedicated parity ranks."""
        if cfg.layout.parity_ranks:
            return ("ecrm with dedicated parity ranks (layout.parity_ranks) cannot shrink: they keep the "
                    "placement they were built for; give the run spares")
        return ""

    @classmethod
    def stripe_shape(cls, cfg: Config) -> tuple[int, int]:
        p = typed_params(cfg, cls)
        return stripe_k(p, cfg), int(p.r)

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        from mpiec.kernels.codes import make_code

        p = self.params
        self.k, self.r = stripe_k(p, cfg), int(p.r)
        self.code = make_code(p.code, self.k, self.r, dtype=np.dtype(p.sum_dtype))
        dim, state = cfg.model.dim, 1 if cfg.training.optimizer == "adagrad" else 0
        self.row_bytes = (dim + state) * 4
        self.width = payload_width(self.code, self.row_bytes)
        self.every = int(p.parity_every)
        self.keep_grads = KEEP_GRADS + self.every - 1
        self.keep_deltas = KEEP_DELTAS + self.every - 1
        #: the fallback: the checkpoint kit as ``ckpt`` with a checkpoint every ``fallback_interval``
        #: steps; its manifests record that ckpt config (a ``--resume`` goes on as ckpt)
        self.fallback: CheckpointKit | None = None
        if p.fallback == "ckpt":
            self.fallback = CheckpointKit.fallback(cfg, {"interval": int(p.fallback_interval)}, records=True)

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        return self.fallback.header_fields() if self.fallback is not None else {}

    def checkpoint_root(self, out_path: Path) -> Path | None:
        return self.fallback.root(out_path) if self.fallback is not None else None

    def corruption_cover(self) -> CorruptionCover:
        """``verify_every`` / ``scrub_stripes``: a flipped row is detected by the next check of its
        stripe (no check runs while a rebuild is in progress); a GF code with r >= 2 locates and
        repairs it (``scrub``), with one parity row ``fallback = "ckpt"`` rolls back to a fallback
        checkpoint from before the last check it passed (``Member.unlocated``). With
        ``parity_every > 1`` a flip on a row updated since the last commit is encoded with it: no
        claim then."""
        base = super().corruption_cover()
        p = self.params
        waits = [int(p.verify_every) - 1] if p.verify_every else []
        if p.scrub_stripes:
            stripes = stripe_placement(self.cfg.layout, int(sum(self.cfg.data.cardinalities)), self.k,
                                       self.r).n_stripes
            waits.append(-(-stripes // int(p.scrub_stripes)) - 1)
        if not waits or self.every > 1:
            why = "parity_every > 1 may encode a flip with its row" if waits else \
                "verify_every = scrub_stripes = 0"
            return dataclasses.replace(base, how=f"parity kept, never compared ({why})")
        located = self.code.name != "sum" and self.r >= 2
        rolled = not located and self.code.name != "sum" and p.fallback == "ckpt"
        check = f"verify_every = {p.verify_every}" if p.verify_every else f"scrub_stripes = {p.scrub_stripes}"
        how = (f"parity re-encoded and compared ({check}); " +
               ("the syndromes locate the row (rs, r >= 2)" if located else
                "one parity row: not located, the run rolls back to a fallback checkpoint from before it"
                if rolled else "one parity row: not located"))
        repaired = located or rolled
        return dataclasses.replace(base, rows_within=min(waits), rows_repaired=repaired,
                                   how=how + ("; " + base.how if base.parts_refused else ""))

    def figures(self) -> dict[str, Any]:
        """The summary keys every rank reports alike (merged by ``first``)."""
        p = self.params
        return {"code": self.code.name, "k": self.k, "r": self.r,
                "parity_placement": "dedicated" if self.cfg.layout.parity_ranks else "rotated",
                "lossless_code": self.code.name != "sum", "rebuild_mode": p.rebuild,
                "parity_exchange": "immediate" if p.exchange == "immediate" else "overlap",
                "parity_every": self.every}

    # -- the agents ---------------------------------------------------------------------------------
    def coordinator(self, env: RankEnv) -> Coordinator:
        """Nothing to ``--resume`` from (``resume_steps`` is empty): a fallback checkpoint records
        ckpt's config, and resumes as ckpt."""
        immediate = self.params.exchange == "immediate"
        if self.fallback is None:
            return compose.coordinator(self, env, EcrmCoordinator(env, self.r, self.code.name, immediate,
                                                                  self.figures()))
        committing, planner = self.fallback.coordinator_parts(env)
        assert isinstance(committing, CommitterPart) and isinstance(planner, RollbackPlanner)
        ecrm = EcrmCoordinator(env, self.r, self.code.name, immediate, self.figures(), planner)
        # ecrm plans (always answers, asking the planner for a rollback), the kit commits; the
        # planner's own hook left: on_grow (the checkpoint in flight dropped, after ecrm's yes)
        return compose.coordinator(self, env, ecrm, committing, planner)

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        kit = self.fallback.trainer_parts(env, role, rollback_only=True) if self.fallback is not None else []
        return compose.trainer(self, env, *kit, EcrmTrainer(env, self.keep_grads, self.figures()))

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        source = Source(role, self.code, self.row_bytes)
        member = self.member(env, env.slot.index, source)
        kit = self.fallback.server_parts(env, role, rollback_only=True) if self.fallback is not None else []
        return compose.server(self, env, *kit, EcrmServer(env, member, role, self.figures()))

    def parity(self, env: RankEnv) -> EcrmParity:
        member = self.member(env, env.n_servers + env.slot.index, None)
        return EcrmParity(env, member, self.figures())

    def spare(self, env: RankEnv) -> EcrmSpare:
        warm_up(self.code, self.row_bytes)
        return EcrmSpare(env, self.figures())

    def member(self, env: RankEnv, rank: int, source: Source | None) -> Member:
        """The member of ``servers`` rank ``rank``: a holder of the parity slots placed there (its
        parity encoded from the seed, unless a recovery rebuilds it), with ``source`` on a server."""
        warm_up(self.code, self.row_bytes)
        store = None
        stripes, members = parity_stripes(env.placement, rank)
        if stripes.size:
            store = ParityStore(self.code, stripes, members, self.row_bytes, env.n_servers,
                                keep=self.keep_deltas)
            if not promoted(env):
                encode_initial(store, env.placement, self.code, self.cfg, self.width)
        return Member(env, self.params, self.code, self.row_bytes, self.width, store, source,
                      self.keep_deltas)


__all__ = ["EcrmParams", "ErasureCoded", "colocation_problem", "promoted", "stripe_k"]
