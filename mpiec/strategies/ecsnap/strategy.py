"""``ecsnap``: erasure-coded in-memory snapshots, full rollback (after Gemini, ECCheck, REFT).

Owns the plug-in: its parameters (``EcsnapParams``, the rules across keys in
``check``) and the factory of its agents (``agents``): a ``SnapshotServer`` per
server (its shard snapshots, the parity blocks it holds for other stripes, the
nonblocking parity exchange in flight), a ``SnapshotTrainer`` per trainer (its
copies of the dense replica; trainer 0's with the ``schedule.SnapshotSchedule``),
the ``SnapshotCoordinator`` on the monitor (the known snapshot steps, the
tolerance check ``geometry.Geometry.beyond``, the plan); and, with
``strategy.disk_every = N``, the ``ckpt`` agent of each role (``FullCheckpoint``
with the fallback's config), held by ecsnap's agent of that role, writing a full
checkpoint to disk every N steps: the fallback beyond the code's tolerance.

One snapshot of step ``B``:

1. trainer 0 decides it in step ``B``'s header (its ``snapshot`` field: a fixed
   ``interval`` or Young's ``auto``; never while the previous one is still
   building), so every rank takes it after the same step;
2. after step ``B`` every server copies its shard (rows and optimizer state) into
   a snapshot buffer and every trainer its dense replica (the *stall*: the
   training thread's copy); the servers then post the parity exchange
   (``ParityExchange``: each shard copy to the ``r`` holders of its stripe), which
   progresses between steps and while the trainers compute (``overlap``), each
   arrived copy folded into the parity (``parity ^= g_ij · block``);
3. a server whose parity blocks are encoded and sends completed says so in its
   header word (``done``: the last snapshot step it completed); when every server's word
   of a step says ``B``, every rank *commits* ``B`` at the end of that same step:
   it becomes the snapshot to restore, and the previous one's buffers are reused
   by the next snapshot.

Invariants:

* at most two snapshots per rank: the committed one and the one building (kept
  until the new one is committed, so a failure during the parity exchange rolls
  back to the previous one); a snapshot is *usable* when every surviving server
  holds its copy and complete parity -- the same condition as the commit, checked
  again by an agreement among the servers at restore (``exchange.restore_shards``);
* a server failure rolls every trainer and server back to the newest usable
  snapshot: survivors load their copy, the replaced server's shard is decoded
  from ``k_t`` blocks of its stripe (GF(2^8), exact), replaced parity holders get
  their blocks re-encoded, and the steps since are re-executed -- training is
  deterministic, so the run ends with the failure-free ``param_checksum``;
* the dense replica is protected by replication: every trainer holds the same
  replica and so the same snapshot copy; a replaced trainer receives the copy of
  the lowest trainer holding it (a trainer-only failure needs no rollback: the
  servers hold the committed rows and the runtime copies the live replica);
* more than the code tolerates (a stripe that lost data blocks and more than
  ``r`` members in all, or every trainer) rolls back to the newest disk
  checkpoint when ``disk_every`` is set, and otherwise ends the run with one
  line naming the stripe;
* a recovery drops the snapshot building and any committed after the step the
  survivors keep, so every rank holds the same snapshots afterwards;
* ``mpiec run --resume`` restores the newest disk checkpoint (memory holds no
  snapshot yet): the coordinator's ``resume_steps`` are the disk fallback's.

Memory (per server, ``B_s`` its shard bytes, ``L_t`` the largest shard of stripe
``t``): two snapshot buffers ``2 · B_s`` and two sets of the parity blocks it holds
``2 · Σ L_t``; per trainer ``2 ·`` the dense replica. Traffic per snapshot: every
server sends its shard ``r`` times (``r · Σ_s B_s`` in all). A recovery moves
``k_t · L_t`` per decoded shard and ``k_t`` shards per re-encoded parity block.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from mpiec.errors import ConfigError
from mpiec.strategies.api import compose
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.params import param
from mpiec.strategies.checkpointing import Restorer, expected_mtbf_s
from mpiec.strategies.checkpointing.kit import KIT_RULES, CheckpointKit
from mpiec.strategies.ecsnap.agents import (
    FIELDS,
    Coding,
    DiskCheckpoints,
    SnapshotCoordinator,
    SnapshotServer,
    SnapshotTrainer,
)
from mpiec.strategies.ecsnap.geometry import Geometry
from mpiec.strategies.ecsnap.schedule import SnapshotSchedule

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState


@dataclass(frozen=True)
class EcsnapParams:
    interval: int | Literal["auto"] = param(
        "auto", "steps between snapshots, or auto: Young's sqrt(2 · t_snap · MTBF), t_snap the slowest "
        "server's stall measured at the first snapshot", ge=1)
    first: int = param(10, "auto: the first snapshot (which measures t_snap) after this many steps, at "
                       "most a tenth of the run", ge=1)
    code: Literal["rs", "xor"] = param("rs", "the erasure code across the servers' snapshots (xor: r = 1)")
    k: int | Literal["auto"] = param("auto", "data shards per stripe, or auto: layout.servers - r",
                                     ge=1, le=255)
    r: int = param(1, "parity blocks per stripe: the servers of one stripe a snapshot survives losing",
                   ge=1, le=4)
    disk_every: int = param(0, "a full checkpoint to disk every this many steps, the fallback beyond the "
                            "code's tolerance (0: no disk checkpoint)", ge=0)
    dir: str = param("", "the disk checkpoints' directory (empty: <result name>.ckpt beside the result file)")


def resolved_k(params: EcsnapParams, servers: int) -> int:
    """``strategy.k``, ``auto`` resolved: every server but the ``r`` parity members of a stripe."""
    return max(1, servers - params.r) if params.k == "auto" else int(params.k)


class ErasureCodedSnapshots(Strategy):
    """Erasure-coded in-memory snapshots; the factory of its agents (see the module docstring)."""

    name = "ecsnap"
    description = ("erasure-coded in-memory snapshots: RS parity across servers, no disk; full rollback "
                   "(Gemini, ECCheck, REFT)")
    Params = EcsnapParams
    recovers = True
    lossless = True
    # the simulator: a full rollback from peers' memory, snapshot and restore calibrated from ecsnap runs
    cost = CostModel("rollback", interval="young", medium="memory")
    summary_rules: ClassVar[dict[str, str]] = {
        "code": "first", "k": "first", "r": "first", "snapshot_interval_rule": "first",
        "snapshot_interval_steps": "first", "snapshots": "first", "snapshot_memory_bytes": "sum",
        "parity_memory_bytes": "sum", "snapshot_traffic_bytes": "sum", "snapshot_stall_s": "max",
        "snapshot_overlap_s": "max", "snapshot_total_s": "max", "snapshot_restores": "max",
        "snapshot_restore_s": "max", "decoded_blocks": "sum", "decoded_rows": "sum", "decoded_bytes": "sum",
        "reencoded_blocks": "sum", "snapshot_recovery_bytes": "sum", "disk_fallbacks": "max",
        "disk_every": "first", **KIT_RULES,
    }
    params: EcsnapParams

    @classmethod
    def check(cls, params: EcsnapParams, cfg: Config) -> None:
        if params.code == "xor" and params.r != 1:
            raise ConfigError(f"strategy.code = xor has one parity block per stripe: strategy.r must be 1, "
                              f"got {params.r} (use code = rs for r = 2..4)")
        lay = cfg.layout
        if lay.parity_ranks:
            raise ConfigError("strategy 'ecsnap' keeps parity on the servers: layout.parity_ranks must be 0, "
                              f"got {lay.parity_ranks}")
        k, r = resolved_k(params, lay.servers), params.r
        if k + r > lay.servers:
            raise ConfigError(f"strategy.k = {k}, r = {r}: a stripe's k + r = {k + r} members are distinct "
                              f"servers, the layout has layout.servers = {lay.servers}; lower k or r, or add "
                              "servers")

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        from mpiec.kernels.codes import make_code

        p = self.params
        self.k, self.r = resolved_k(p, cfg.layout.servers), p.r
        self.code = make_code(p.code, self.k, self.r)
        self.geo = Geometry(cfg.layout.servers, self.k, self.r)
        self.interval = p.interval if p.interval != "auto" else None
        #: the disk fallback: the checkpoint kit as ``ckpt`` with a checkpoint every ``disk_every``
        #: steps into ``dir``; its writers put no time in the header (the interval is in steps)
        self.fallback: CheckpointKit | None = None
        if p.disk_every:
            self.fallback = CheckpointKit.fallback(cfg, {"interval": p.disk_every, "dir": p.dir},
                                                   records=False, part_time=None)

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        return {"ecsnap": FIELDS, **(self.fallback.header_fields() if self.fallback is not None else {})}

    @classmethod
    def shrink_refusal(cls, cfg: Config) -> str:
        """Never shrinks its servers: the snapshots and their parity are coded for the placement they
        were taken on, and a rollback restores them onto that placement only."""
        return ("strategy ecsnap cannot restore rows onto fewer servers (layout.replacement = shrink): "
                "its snapshots are coded for the placement they were taken on; give the run spares")

    def checkpoint_root(self, out_path: Path) -> Path | None:
        return self.fallback.root(out_path) if self.fallback is not None else None

    def directories(self, out_path: Path) -> list[tuple[str, Path]]:
        return self.fallback.directories(out_path) if self.fallback is not None else []

    def coding(self, env: RankEnv) -> Coding:
        """The code, the stripes and the shards' sizes (from the rank's row placement)."""
        cfg = self.cfg
        row_bytes = (cfg.model.dim + (1 if cfg.training.optimizer == "adagrad" else 0)) * 4
        sizes = [env.placement.n_local(s) * row_bytes for s in range(cfg.layout.servers)]
        return Coding(self.code, self.geo, sizes, row_bytes)

    # -- the agents: ecsnap's parts, then the disk fallback's (the checkpoint kit's) ---------------
    def coordinator(self, env: RankEnv) -> Coordinator:
        declared: dict[str, Any] = {"code": self.code.name, "k": self.k, "r": self.r,
                                    "disk_every": self.params.disk_every,
                                    "snapshot_interval_rule": "given" if self.interval else "young"}
        if self.fallback is None:
            return compose.coordinator(self, env, SnapshotCoordinator(env, self.geo, self.code.name,
                                                                      self.interval, None, declared))
        store = self.fallback.coordinator_store(env)
        committer = self.fallback.committer(env, store)
        committing, _ = self.fallback.coordinator_parts(env, store, committer)  # ecsnap plans itself
        snapshots = SnapshotCoordinator(env, self.geo, self.code.name, self.interval,
                                        DiskCheckpoints(store, committer), declared)
        return compose.coordinator(self, env, snapshots, committing)

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        disk: list[Any] = []
        restorer = None
        if self.fallback is not None:
            store = self.fallback.store(env)
            disk = self.fallback.trainer_parts(env, role, store, restorer=False)
            restorer = Restorer.for_trainer(env, store, role)  # a ``disk`` candidate: ecsnap's restore
        schedule = None
        if env.slot.index == 0:  # trainer 0 decides
            cfg = self.cfg
            schedule = SnapshotSchedule(self.interval, first=self.params.first,
                                        total_steps=cfg.training.steps, mtbf=expected_mtbf_s(cfg))
        snapshots = SnapshotTrainer(env, role, self.coding(env), restorer, schedule)
        return compose.trainer(self, env, snapshots, *disk)

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        disk: list[Any] = []
        restorer = None
        if self.fallback is not None:
            store = self.fallback.store(env)
            disk = self.fallback.server_parts(env, role, store, restorer=False)
            restorer = Restorer.for_server(env, store, role)
        return compose.server(self, env, SnapshotServer(env, role, self.coding(env), restorer), *disk)


__all__ = ["EcsnapParams", "ErasureCodedSnapshots"]
