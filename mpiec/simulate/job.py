"""The training job the simulator runs: its shape, sizes and speed, from an mpiec config.

Owns how a config (a preset and ``--set`` overrides, as ``mpiec run`` takes them) becomes the
numbers the model needs, and how a job of ``N`` nodes is laid out:

* sizes: embedding rows (``data.cardinalities``), bytes per row (``model.dim`` float32 weights
  plus one float32 row-wise Adagrad accumulator when ``training.optimizer = "adagrad"``), the
  dense replica's bytes (``mpiec.model.dlrm.n_params``, doubled with a dense Adagrad state),
  ids looked up per step (global batch × Σ ``data.multi_hot``);
* layout at scale (``Job.at_scale``): every node runs ``trainers_per_node`` trainers and
  ``servers_per_node`` servers (default one of each: the co-located TorchRec-style layout), so a
  node failure loses that many trainers and servers; the global batch stays the config's unless
  given, and the step time is an input (neither is extrapolated from the calibration job);
* ``Job.from_config`` keeps the config's own layout (trainers and servers are separate ranks, one
  rank per node): the layout of a measured run, for predicting it.

Invariants: every size is derived from the config, never typed in; ``shard_rows`` rounds up
(the largest shard is the one a restore waits for); a job at scale has at most ``MAX_NODES`` nodes
of at most ``MAX_RANKS_PER_NODE`` trainers and as many servers, and an ecrm stripe of
``k`` in 1..255 data rows (GF(2^8)) and ``r`` in 1..4 parity rows (the suite's ecrm limits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from mpiec.errors import ConfigError, MpiecError

__all__ = ["MAX_NODES", "MAX_RANKS_PER_NODE", "Job"]

#: Nodes a simulated job may have: a few times the largest machines built (~10^4-10^5 nodes), and
#: what one trial's node lifetimes take in memory (~0.7 GB at the bound).
MAX_NODES = 5_000_000
#: Trainers (and servers) per node: far above the GPUs or sockets of a node; a node failure costs
#: time in the square of the ranks it takes down (ecrm's stripe check).
MAX_RANKS_PER_NODE = 128


@dataclass(frozen=True)
class Job:
    preset: str
    nodes: int
    trainers: int
    servers: int
    trainers_per_node: int  # 0 with servers_per_node 0: one rank per node (a measured run's layout)
    servers_per_node: int
    rows: int
    row_bytes: int  # weights + row-wise optimizer state
    dense_bytes: int  # dense parameters + their optimizer state
    global_batch: int
    ids_per_sample: int
    step_s: float  # failure-free step time without protection (the `none` strategy's)
    steps: int
    k: int = 1  # ecrm: data rows per stripe
    r: int = 1  # ecrm: parity rows per stripe
    dim: int = 0  # embedding dimension (fp32 weights on the wire: 4 x dim bytes per row)
    batch_per_trainer: int = 0  # the config's training.batch_size (weak scaling keeps it)
    dedicated: bool = False  # servers and trainers on nodes of their own (node i < servers: server i)
    dense_params: int = 0  # parameters of the dense MLPs (the trainer's work per sample scales with them)
    cards: tuple[int, ...] = ()  # rows of each table (access.py: distinct rows touched)
    bags: tuple[int, ...] = ()  # ids per sample of each table
    zipf: float = 0.0  # the power law of the ids (data.zipf_exponent; 0: uniform)

    @classmethod
    def from_config(cls, cfg: Any, step_s: float, k: int | None = None, r: int | None = None) -> Job:
        """The config's own job (one rank per node); ``k`` / ``r`` default to the stripe shape the
        config's strategy declares (``Strategy.stripe_shape``) when it has parity rows, else to
        ecrm's defaults (r = 1, k = servers − r)."""
        from mpiec.model.dlrm import DLRMShape, n_params

        if not step_s > 0 or not math.isfinite(step_s):
            raise MpiecError(f"step time must be a number of seconds > 0, got {step_s!r}")
        d, m, t, lay = cfg.data, cfg.model, cfg.training, cfg.layout
        shape = DLRMShape(_n_dense(), len(d.cardinalities), m.dim, tuple(m.bottom), tuple(m.top))
        dense = n_params(shape) * 4 * (2 if t.dense_optimizer == "adagrad" else 1)
        from mpiec.strategies import get_strategy_class

        try:  # the stripe shape the config's strategy declares (Strategy.stripe_shape)
            k_cfg, r_cfg = get_strategy_class(cfg.strategy.name).stripe_shape(cfg)
        except ConfigError:  # a strategy this install does not know
            k_cfg, r_cfg = 1, 0
        if r_cfg < 1:  # no parity rows: ecrm's defaults, xor, rotated, r = 1, k = servers - r
            r_cfg = 1
            k_cfg = max(1, lay.servers - r_cfg)
        k = int(k if k is not None else k_cfg)
        r = int(r if r is not None else r_cfg)
        return cls(
            preset=cfg.preset, nodes=lay.trainers + lay.servers, trainers=lay.trainers,
            servers=lay.servers, trainers_per_node=0, servers_per_node=0,
            rows=int(sum(d.cardinalities)), row_bytes=4 * (m.dim + (1 if t.optimizer == "adagrad" else 0)),
            dense_bytes=int(dense), global_batch=int(cfg.global_batch), ids_per_sample=int(sum(d.bags)),
            step_s=float(step_s), steps=int(t.steps), k=max(1, k), r=max(1, r), dim=int(m.dim),
            batch_per_trainer=int(t.batch_size), dense_params=int(n_params(shape)),
            cards=tuple(int(c) for c in d.cardinalities), bags=tuple(int(b) for b in d.bags),
            zipf=float(d.zipf_exponent))

    def at_scale(self, nodes: int, trainers_per_node: int = 1, servers_per_node: int = 1,
                 step_s: float | None = None, steps: int | None = None, k: int | None = None,
                 r: int | None = None, global_batch: int | None = None, scaling: str = "strong") -> Job:
        """The same model on ``nodes`` nodes, each with that many trainers and servers. ``scaling``:
        ``strong`` keeps the global batch (the config's unless given), ``weak`` the batch per trainer
        (``batch_per_trainer`` x trainers)."""
        if nodes < 1 or trainers_per_node < 0 or servers_per_node < 0 or \
                trainers_per_node + servers_per_node < 1:
            raise MpiecError(f"a job needs nodes >= 1 and at least one rank per node, got {nodes} nodes, "
                             f"{trainers_per_node} trainers and {servers_per_node} servers per node")
        if nodes > MAX_NODES:
            raise MpiecError(f"a job has at most {MAX_NODES:,} nodes, got {nodes:,}")
        if max(trainers_per_node, servers_per_node) > MAX_RANKS_PER_NODE:
            raise MpiecError(f"a node holds at most {MAX_RANKS_PER_NODE} trainers and {MAX_RANKS_PER_NODE} "
                             f"servers, got {trainers_per_node} and {servers_per_node}")
        k = k if k is not None else self.k
        r = r if r is not None else self.r
        if not (1 <= k <= 255 and 1 <= r <= 4):
            raise MpiecError(f"an ecrm stripe has k = 1..255 data rows and r = 1..4 parity rows, "
                             f"got k = {k}, r = {r}")
        servers = nodes * servers_per_node
        if servers and k + r > servers:
            k = max(1, servers - r)
        trainers = nodes * trainers_per_node
        return replace(self, nodes=nodes, trainers=trainers, servers=servers,
                       trainers_per_node=trainers_per_node, servers_per_node=servers_per_node,
                       step_s=self.step_s if step_s is None else step_s,
                       steps=self.steps if steps is None else steps, k=k, r=r, dedicated=False,
                       global_batch=self._batch(trainers, global_batch, scaling))

    def with_ranks(self, servers: int, trainers: int, k: int | None = None, r: int | None = None,
                   global_batch: int | None = None, scaling: str = "strong") -> Job:
        """The model on ``servers`` server nodes and ``trainers`` trainer nodes (one rank each: the
        papers' parameter-server clusters); node ``i < servers`` holds server ``i``."""
        if servers < 1 or trainers < 1 or servers + trainers > MAX_NODES:
            raise MpiecError(f"a dedicated layout needs 1..{MAX_NODES:,} nodes with at least one server "
                             f"and one trainer, got {servers:,} servers and {trainers:,} trainers")
        k = k if k is not None else self.k
        r = r if r is not None else self.r
        if k + r > servers:
            k = max(1, servers - r)
        return replace(self, nodes=servers + trainers, trainers=trainers, servers=servers,
                       trainers_per_node=1, servers_per_node=1, k=k, r=r, dedicated=True,
                       global_batch=self._batch(trainers, global_batch, scaling))

    def _batch(self, trainers: int, given: int | None, scaling: str) -> int:
        if scaling not in ("strong", "weak"):
            raise MpiecError(f"scaling must be strong or weak, got {scaling!r}")
        if given is not None:
            return given
        if scaling == "weak":
            per = self.batch_per_trainer or max(1, self.global_batch // max(1, self.trainers))
            return per * max(1, trainers)
        return self.global_batch

    # -- derived sizes --------------------------------------------------------------------
    @property
    def lookups_per_step(self) -> int:
        return self.global_batch * self.ids_per_sample

    @property
    def trainer_work_per_sample(self) -> int:
        """A trainer's work per sample, in multiply-adds (a proxy): its MLPs' parameters plus the
        embedding bags' floats; the step model scales the calibrated CPU per sample by it."""
        return self.dense_params + self.ids_per_sample * self.dim

    @property
    def shard_rows(self) -> int:
        return -(-self.rows // max(1, self.servers))

    @property
    def shard_bytes(self) -> int:
        """One server's rows with their optimizer state."""
        return self.shard_rows * self.row_bytes

    @property
    def part_bytes(self) -> int:
        """One server's part of a full checkpoint: its rows, their state and their int64 ids."""
        return self.shard_rows * (self.row_bytes + 8)

    @property
    def table_bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def ranks(self) -> int:
        """Ranks of the job (monitor and spares aside): for the scaling of ULFM's agreement."""
        return self.trainers + self.servers

    def lost_on_node(self) -> tuple[int, int]:
        """(servers, trainers) a node failure takes down (co-located layout: every node alike)."""
        if self.trainers_per_node == 0 and self.servers_per_node == 0:
            raise MpiecError("a measured run's job has no node layout: give failures as server/trainer kills")
        return self.servers_per_node, self.trainers_per_node

    def lost_with(self, node: int) -> tuple[tuple[int, ...], int]:
        """(server indices, trainers) the failure of ``node`` takes down. Co-located: a node's
        servers sit ``nodes`` apart, so one node never holds two members of a stripe; dedicated:
        node ``i < servers`` is server ``i``, the others are trainers."""
        if self.dedicated:
            return ((node,), 0) if node < self.servers else ((), 1)
        spn, tpn = self.lost_on_node()
        return tuple(node + j * self.nodes for j in range(spn)), tpn

    def describe(self) -> str:
        gib = self.table_bytes / 2**30
        return (f"{self.preset}: {self.nodes:,} nodes, {self.trainers:,} trainers, {self.servers:,} servers, "
                f"{self.rows:,} rows x {self.row_bytes} B ({gib:.3g} GiB of embeddings), "
                f"global batch {self.global_batch:,}, step {self.step_s:.4g} s, {self.steps:,} steps")


def _n_dense() -> int:
    from mpiec.config import N_DENSE

    return int(N_DENSE)
