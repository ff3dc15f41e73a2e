"""``ecrm``: erasure-coded embedding tables and optimizer state (ECRM / ECRec, Liu, Kosaian, Rashmi).

Owns the strategy's agents: on a server the *source* (after every apply it
stages the old XOR new bytes of the updated rows for the parity holders of
their stripes) and, under rotated placement, a *holder* (a ``ParityStore``);
on a dedicated parity rank a holder only; on a trainer the gradients it
pushed in the last steps (replayed when a lost shard is rebuilt); on the
monitor the plan and the tolerance check.

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
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mpiec.comm import PeerFailure
from mpiec.errors import ConfigError
from mpiec.layout import PARITY, SERVER, SPARE, TRAINER, holder_nodes, servers_rank, stripe_placement
from mpiec.strategies.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.costs import CostModel
from mpiec.strategies.ecrm.parity import ParityStore, payload_width
from mpiec.strategies.ecrm.pipeline import DeltaPipeline, build_outgoing
from mpiec.strategies.ecrm.rebuild import rebuild
from mpiec.strategies.ecrm.rebuilder import encode_jobs
from mpiec.strategies.ecrm.stripes import node_losses, parity_stripes, residue_holders, stripe_losses
from mpiec.strategies.ecrm.transfer import RebuildError, run_jobs
from mpiec.strategies.ecrm.window import CommitWindow
from mpiec.strategies.legacy import LegacyStrategy
from mpiec.strategies.legacy_ckpt import LegacyFullCheckpoint

DEFAULTS: dict[str, Any] = {"code": "xor", "k": "auto", "r": 1, "sum_dtype": "float32", "verify_every": 0,
                            "rebuild": "background", "rebuild_rows": "auto",
                            "rebuild_budget": 0.1, "fallback": "none",
                            "fallback_interval": 0, "exchange": "overlap", "allow_colocated": False,
                            "parity_every": 1}
KEEP_DELTAS, KEEP_GRADS = 4, 5


def colocation_problem(cfg: Any, k: int, r: int) -> str:
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


class ErasureCoded(LegacyStrategy):
    name = "ecrm"
    description = "erasure-coded embedding rows and optimizer state in server memory; lossless rebuild (ECRM)"
    lossless = True  # with the xor and rs codes (the sum code drifts in floating point)
    cost = CostModel("rebuild")
    needs_delta = True
    recovers = True
    summary_rules: ClassVar[dict[str, str]] = {
        "code": "first", "k": "first", "r": "first", "parity_placement": "first",
        "parity_bytes_per_step": "sum", "parity_bytes": "sum", "parity_rows_per_step": "sum",
        "parity_memory_bytes": "sum",
        "shard_memory_bytes": "sum", "parity_stage_s_per_step": "max", "parity_drain_s_per_step": "max",
        "parity_stage_cpu_s_per_step": "max", "parity_drain_cpu_s_per_step": "max",
        "retained_deltas_peak_bytes": "max", "retained_grads_peak_bytes": "max",
        "verify_checks": "max", "verify_mismatches": "sum", "rebuilds": "max", "rebuild_s": "max",
        "rebuild_rows": "sum", "rebuild_bytes": "sum", "reencoded_rows": "sum", "replayed_steps": "max",
        "rebuild_sync_s": "max", "rebuild_decode_s": "max", "rebuild_replay_s": "max",
        "rebuild_encode_s": "max", "lossless_code": "first", "rebuild_total_s": "max",
        "rebuild_rounds": "max", "degraded_rows": "sum", "rebuild_mode": "first",
        "parity_exchange": "first", "sum_drift_max_abs": "max",
        "parity_every": "first", "parity_commits": "max", "parity_window_peak_bytes": "max",
        "sum_drift_max_rel": "max", "sum_drift_checks": "sum", **LegacyFullCheckpoint.summary_rules,
    }

    # -- configuration ------------------------------------------------------------------
    @classmethod
    def param_keys(cls) -> set[str]:
        return set(DEFAULTS)

    @classmethod
    def resolved(cls, cfg: Any) -> dict[str, Any]:
        p = {**DEFAULTS, **cfg.strategy.params}
        if p["k"] == "auto":
            servers = cfg.layout.servers
            p["k"] = servers if cfg.layout.parity_ranks else max(1, servers - int(p["r"]))
        return p

    @classmethod
    def validate_params(cls, cfg: Any) -> None:
        p = cfg.strategy.params
        for key in p:
            if key not in DEFAULTS:
                raise ConfigError(f"unknown config key 'strategy.{key}' for strategy 'ecrm' "
                                  f"(known: {', '.join(sorted(DEFAULTS))})")
        code = p.get("code", "xor")
        if code not in ("xor", "rs", "sum"):
            raise ConfigError(f"strategy.code must be xor, rs or sum, got {code!r}")
        r = p.get("r", 1)
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ConfigError(f"strategy.r must be an integer >= 1, got {r!r}")
        if code in ("xor", "sum") and r != 1:
            raise ConfigError(f"strategy.code = {code} has one parity row per stripe: strategy.r must be 1, "
                              f"got {r} (use code = rs for r = 2..4)")
        if r > 4:
            raise ConfigError(f"strategy.r must be <= 4, got {r}")
        k = p.get("k", "auto")
        if k != "auto" and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 255):
            raise ConfigError(f"strategy.k must be an integer in 1..255 or 'auto', got {k!r}")
        if p.get("sum_dtype", "float32") not in ("float32", "float64"):
            raise ConfigError(f"strategy.sum_dtype must be float32 or float64, got {p.get('sum_dtype')!r}")
        if p.get("rebuild", "background") not in ("background", "sync"):
            raise ConfigError(f"strategy.rebuild must be background or sync, got {p.get('rebuild')!r}")
        rr = p.get("rebuild_rows", "auto")
        if rr != "auto" and (isinstance(rr, bool) or not isinstance(rr, int) or rr < 1):
            raise ConfigError(f"strategy.rebuild_rows must be 'auto' or an integer >= 1 (rows per step), "
                              f"got {rr!r}")
        rb = p.get("rebuild_budget", 0.1)
        if isinstance(rb, bool) or not isinstance(rb, (int, float)) or not 0 < rb <= 10:
            raise ConfigError(f"strategy.rebuild_budget must be a fraction of the step time in (0, 10], "
                              f"got {rb!r}")
        if p.get("exchange", "overlap") not in ("overlap", "immediate"):
            raise ConfigError("strategy.exchange must be overlap or immediate, "
                              f"got {p.get('exchange')!r}")
        if p.get("fallback", "none") not in ("none", "ckpt"):
            raise ConfigError(f"strategy.fallback must be none or ckpt, got {p.get('fallback')!r}")
        fi = p.get("fallback_interval", 0)
        if isinstance(fi, bool) or not isinstance(fi, int) or fi < 0:
            raise ConfigError(f"strategy.fallback_interval must be a number of steps >= 1, got {fi!r}")
        if p.get("fallback", "none") == "ckpt" and fi < 1:
            raise ConfigError("strategy.fallback = ckpt needs strategy.fallback_interval = N (steps between "
                              "the fallback checkpoints)")
        n = p.get("parity_every", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError("strategy.parity_every must be an integer >= 1 (steps between parity "
                              f"commits), got {n!r}")
        v = p.get("verify_every", 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"strategy.verify_every must be an integer >= 0, got {v!r}")
        k, r = cls.stripe_shape(cfg)
        lay = cfg.layout
        width = k if lay.parity_ranks else k + r
        if width > lay.servers:
            where = "data rows" if lay.parity_ranks else "members (k + r)"
            raise ConfigError(f"strategy.k = {k}, r = {r}: a stripe has {width} {where} on distinct servers, "
                              f"the layout has layout.servers = {lay.servers}; lower k or add servers")
        colocated = p.get("allow_colocated", False)
        if not isinstance(colocated, bool):
            raise ConfigError(f"strategy.allow_colocated must be true or false, got {colocated!r}")
        if not colocated:
            problem = colocation_problem(cfg, k, r)
            if problem:
                raise ConfigError(problem)
        if lay.parity_ranks and cfg.failures.kill and cfg.failures.mode == "emulated":
            raise ConfigError("dedicated parity ranks (layout.parity_ranks) need ULFM failure detection: "
                              "failures.mode = emulated cannot stop a parity rank waiting for deltas")

    @classmethod
    def stripe_shape(cls, cfg: Any) -> tuple[int, int]:
        p = cls.resolved(cfg)
        return int(p["k"]), int(p["r"])

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.p = self.resolved(cfg)
        from mpiec.kernels.codes import make_code

        self.code = make_code(self.p["code"], int(self.p["k"]), int(self.p["r"]),
                              dtype=np.dtype(self.p["sum_dtype"]))
        self.verify_every = int(self.p["verify_every"])
        self.every = int(self.p["parity_every"])
        self.keep_grads = KEEP_GRADS + self.every - 1
        self.window: CommitWindow | None = None
        self.commits = 0
        self.store: ParityStore | None = None
        self.pipeline: DeltaPipeline | None = None
        self.pushed: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.replaced_self = False
        self.rebuilder: Any = None  # the rebuild in progress (servers and parity ranks), None when complete
        self.paced = self.p["rebuild_rows"] == "auto"
        self.chunk = 1 << 15 if self.paced else int(self.p["rebuild_rows"])  # also the re-encode part size
        self.sec_per_row = 2e-6  # paced rebuild: measured cost of a decoded row (first guess)
        self.last_overlap = 0.0
        self.last_round = 0.0
        self.rebuild_t0 = 0.0
        self.immediate = self.p["exchange"] == "immediate"
        # fallback = "ckpt": rare full checkpoints, a rollback when a stripe lost more than r members
        self.fallback: LegacyFullCheckpoint | None = None
        if self.p["fallback"] == "ckpt":
            params = {"interval": int(self.p["fallback_interval"])}
            self.fallback = LegacyFullCheckpoint(dataclasses.replace(
                cfg, strategy=dataclasses.replace(cfg.strategy, name="ckpt", params=params)))
        self.steps_run = 0
        self.peak_grads = 0
        self.stats: dict[str, float] = {k: 0.0 for k in (
            "verify_checks", "verify_mismatches", "rebuilds", "rebuild_rows", "rebuild_bytes",
            "reencoded_rows", "replayed_steps", "rebuild_s", "rebuild_sync_s", "rebuild_decode_s",
            "rebuild_replay_s", "sum_drift_max_abs", "sum_drift_max_rel", "rebuild_total_s", "rebuild_rounds",
            "degraded_rows", "sum_drift_checks",
            "rebuild_encode_s")}

    # -- binding: the agent of this rank's role -----------------------------------------------
    def checkpoint_root(self, out_path: Path) -> Path | None:
        return self.fallback.checkpoint_root(out_path) if self.fallback is not None else None

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if self.fallback is not None:
            self.fallback.bind(ctx, role)
        self.pl = ctx.placement
        dim, state = self.cfg.model.dim, 1 if self.cfg.training.optimizer == "adagrad" else 0
        self.row_bytes = (dim + state) * 4
        self.width = payload_width(self.code, self.row_bytes)
        self.store, self.pipeline = None, None
        if ctx.slot.role == SPARE:
            self.warm_up()
        if ctx.slot.role not in (SERVER, PARITY):
            return
        rank = servers_rank(ctx.slot, self.cfg.layout.servers)
        stripes, members = parity_stripes(self.pl, rank)
        if stripes.size:
            self.store = ParityStore(self.code, stripes, members, self.row_bytes, self.cfg.layout.servers,
                                     keep=KEEP_DELTAS + self.every - 1)
            if not ctx.awaiting_restore:
                self.encode_initial()
        self.pipeline = DeltaPipeline(lambda: self.ctx.comms.servers, self.pl, self.store, self.width,
                                      keep=KEEP_DELTAS + self.every - 1)
        self.window = CommitWindow(role.state()["table"].shape[0]) if ctx.slot.role == SERVER else None

    def warm_up(self) -> None:
        """A spare loads the code's kernels now (numba cache): a promoted spare then decodes
        at once instead of spending its first rebuild round on loading them."""
        k, w = self.code.k, self.row_bytes
        data = [np.full((4, w), j + 1, dtype=np.uint8) for j in range(k)]
        parity = self.code.encode(data)
        rows = np.arange(2, dtype=np.int64)
        self.code.update(parity[0], 0, rows, self.code.delta(data[0][:2], data[0][:2]), parity_index=0)
        self.code.decode([None, *data[1:]], parity, [0])
        self.code.decode([None, *data[1:]], parity, [0], rows=rows)

    def encode_initial(self) -> None:
        """Holder: parity of the initial rows, computed locally (they are a pure function of the seed)."""
        from mpiec.roles.server import initial_rows

        store, pl, k = self.store, self.pl, self.pl.k
        for residue in range(min(pl.servers, pl.n_stripes)):
            sel = np.flatnonzero((store.stripes >= 0) & (store.stripes % pl.servers == residue))
            if not sel.size:
                continue
            i = int(store.members[sel[0]])
            st = store.stripes[sel]
            data = [initial_rows(self.ctx, st * k + j).view(np.uint8) for j in range(k)]
            parity = self.code.encode(data)[i]
            store.load_bytes(sel, np.ascontiguousarray(parity).view(np.uint8).reshape(sel.size, self.width))
        store.reset_versions(-1)

    # -- helpers the rebuild uses --------------------------------------------------------------
    def table_bytes(self) -> np.ndarray:
        table = self.role.state()["table"]
        return table.view(np.uint8).reshape(table.shape[0], self.row_bytes)

    def provide_data(self, idx: np.ndarray) -> np.ndarray:
        return self.table_bytes()[idx]

    def provide_parity(self, idx: np.ndarray) -> np.ndarray:
        return self.store.as_bytes(idx)

    def parity_rows(self, rows: np.ndarray) -> np.ndarray:
        """Fetched parity bytes in the form the code decodes (``sum``: its float dtype)."""
        dtype = np.dtype(self.p["sum_dtype"]) if self.code.name == "sum" else np.dtype(np.uint8)
        return rows.view(dtype).reshape(rows.shape[0], -1)

    # -- step hooks ----------------------------------------------------------------------------
    def commit_now(self, step: int) -> bool:
        """``step`` commits its parity deltas: every ``parity_every``-th step, and at every step that
        drains (the last, a verification, a rebuild in progress). Every member of ``servers``
        decides alike (the rebuild's end is agreed collectively, before the step's apply)."""
        last = step + 1 == self.cfg.training.steps
        return (self.every == 1 or (step + 1) % self.every == 0 or last or self.rebuilder is not None
                or self._verify_due(step))

    def _drain_now(self, step: int) -> bool:
        """Apply the deltas of ``step`` at its end (not during the next step): after the last step,
        before a verification, and while a rebuild needs parity and data at the same step."""
        last = step + 1 == self.cfg.training.steps
        return self.commit_now(step) and (last or self.immediate or self.rebuilder is not None
                                          or self._verify_due(step))

    def _verify_due(self, step: int) -> bool:
        return self.verify_every > 0 and (step + 1) % self.verify_every == 0 and self.rebuilder is None

    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        self.pushed[step] = (slots, counts, grads)  # fresh arrays every step: kept, not copied
        for s in [s for s in self.pushed if s <= step - self.keep_grads]:
            del self.pushed[s]
        self.peak_grads = max(self.peak_grads, sum(a.nbytes + b.nbytes + c.nbytes
                                                   for a, b, c in self.pushed.values()))

    def on_pull(self, step: int, slots: np.ndarray | None = None) -> None:
        """Servers (and parity ranks, mirroring every pull with ``slots = None``): while rows are
        lost, decode the requested ones before they are served (degraded read). Collective."""
        if self.rebuilder is not None:
            self.rebuilder.degraded(slots)

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        global_rows = self.role.state()["global_rows"]
        rows = global_rows[slots]
        if not replayed:
            self.pipeline.poll()  # deltas of earlier steps that arrived meanwhile
        win = self.window
        if self.every > 1 and not replayed:
            commit = self.commit_now(step)
            if not commit or win.base != step - 1:  # batched: into the window, sent at the commit
                win.add(slots, old)
                if commit:
                    ws, wold = win.rows()
                    self.pipeline.stage(step, global_rows[ws], self.window_delta(ws, wold), base=win.base,
                                        old=(ws, wold))
                else:
                    self.pipeline.note_retained(win.nbytes)
                if commit:
                    self.commit(step)
                return
        if self.code.name == "sum":
            new = self.role.state()["table"][slots]
            payload = np.ascontiguousarray(self.code.delta(old, new)).view(np.uint8).reshape(slots.size, -1)
        else:
            payload = delta
        self.pipeline.stage(step, rows, payload)
        if replayed:
            win.reset(step)
        else:
            self.commit(step)

    def commit(self, step: int) -> None:
        """Source: the deltas of ``step`` are staged; post them, open the next window."""
        self.window.reset(step)
        self.commits += 1
        self.pipeline.post(step)

    def window_delta(self, slots: np.ndarray, old: np.ndarray) -> np.ndarray:
        """The change of local rows ``slots`` since ``old`` (their rows at the window's base), as
        parity deltas: uint8 ``[n, width]`` (GF: old XOR new; ``sum``: new - old)."""
        if not slots.size:
            return np.empty((0, self.width), np.uint8)
        new = self.role.state()["table"][slots]
        if self.code.name == "sum":
            return np.ascontiguousarray(self.code.delta(old, new)).view(np.uint8).reshape(slots.size, -1)
        return np.bitwise_xor(old.view(np.uint8), new.view(np.uint8)).reshape(slots.size, self.row_bytes)

    def tail(self, base: int, slots: np.ndarray | None, old: np.ndarray | None) -> Any:
        """Recovery, on a source: the deltas from version ``base`` to the rows now (``slots``/``old``
        None: the open window's, if it starts at ``base``; None when it does not)."""
        if slots is None:
            if self.window is None or self.window.base != base:
                return None
            slots, old = self.window.rows()
        rows = self.role.state()["global_rows"][slots]
        return build_outgoing(self.pl, rows, self.window_delta(slots, old), self.ctx.comms.servers.Get_size())

    def overlap(self, step: int) -> None:
        """Servers and parity ranks: post the previous step's deltas; one rebuild round if one runs."""
        self.pipeline.poll(upto=step - 2)
        self.pipeline.advance(upto=step - 1)
        now = time.perf_counter()
        step_s, self.last_overlap = now - self.last_overlap, now
        if self.rebuilder is None:
            return
        rows = self.chunk
        if self.paced:  # rows worth ``rebuild_budget`` of the step time without the round
            budget = float(self.p["rebuild_budget"]) * max(step_s - self.last_round, 1e-4)
            rows = int(min(max(budget / self.sec_per_row, 256), 1 << 20))
        before = self.rebuilder.rows
        more = self.rebuilder.step(rows)
        self.last_round = time.perf_counter() - now
        if self.rebuilder.rows > before:
            self.sec_per_row = 0.5 * self.sec_per_row + 0.5 * self.last_round / (self.rebuilder.rows - before)
        if not more:
            self.rebuild_done(step)

    def header_word(self, step: int) -> int:
        return self.fallback.header_word(step) if self.fallback is not None else 0

    def background(self, step: int) -> None:
        if self.fallback is not None:
            self.fallback.background(step)

    def on_message(self, source: Any, payload: Any) -> None:
        if self.fallback is not None:
            self.fallback.on_message(source, payload)

    def checkpoint_rows(self) -> list[tuple]:
        return self.fallback.checkpoint_rows() if self.fallback is not None else []

    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        if self.fallback is not None and words is not None:
            self.fallback.after_step(step, words)
        role = self.ctx.slot.role
        if role not in (SERVER, PARITY):
            return
        self.steps_run += 1
        if role == PARITY:
            self.pipeline.poll()
            if self.commit_now(step):
                self.commits += 1
                self.pipeline.post(step)
        if self._drain_now(step):
            try:
                self.pipeline.drain()
            except PeerFailure:
                if role == SERVER:
                    # This step's deltas may have reached only some holders: a server does not count
                    # it done, so the survivors agree on the step before and undo this one
                    # (``recovery.reconcile``); counted done, a lost member's parity would lag the
                    # agreed step and the rebuild replay it, needing every trainer's gradients
                    # (a trainer dying in the same recovery took its own: the run was lost).
                    self.ctx.completed = step - 1
                raise
        if step + 1 == self.cfg.training.steps and self.rebuilder is not None:
            self.rebuilder.finish()  # the final state must be complete
            self.rebuild_done(step)
        if self._verify_due(step):
            self.corrupt_for_test(step)
            self.verify(step)

    def rebuild_done(self, step: int) -> None:
        rb = self.rebuilder
        self.rebuilder = None
        seconds = time.perf_counter() - self.rebuild_t0
        self.stats["rebuild_total_s"] = max(self.stats["rebuild_total_s"], seconds)
        self.stats["rebuild_rounds"] += rb.rounds
        for key, value in (("rebuild_rows", rb.rows), ("rebuild_bytes", rb.bytes),
                           ("reencoded_rows", rb.reencoded), ("degraded_rows", rb.degraded_rows)):
            self.stats[key] += value
        if rb.decoding or rb.encoding:
            self.ctx.event("rebuild_end", step, detail=(
                f"{rb.rows} rows decoded ({rb.degraded_rows} by degraded reads), {rb.reencoded} parity rows "
                f"re-encoded, {rb.bytes} bytes fetched, {rb.rounds} rounds, {seconds:.3f} s since the "
                f"rebuild started"))

    def corrupt_for_test(self, step: int) -> None:
        """Test hook: ``MPIEC_ECRM_CORRUPT_PARITY_AT_STEP=s`` flips one parity byte of the first
        holder after step ``s`` (how the tests prove that ``verify_every`` sees a bad byte)."""
        at = os.environ.get("MPIEC_ECRM_CORRUPT_PARITY_AT_STEP")
        first = self.cfg.layout.servers if self.cfg.layout.parity_ranks else 0
        if at and int(at) == step and self.store is not None and self.store.array.size \
                and self.ctx.comms.servers.Get_rank() == first:
            self.store.array.view(np.uint8).reshape(-1)[0] ^= 0x01

    def verify(self, step: int) -> None:
        """Collective over ``servers``: re-encode every stripe, compare with the parity held."""
        before = self.stats["verify_mismatches"]
        run_jobs(self, encode_jobs(self, "verify") if self.store is not None else [])
        self.stats["verify_checks"] += 1
        bad = self.stats["verify_mismatches"] - before
        if bad:
            self.ctx.event("parity_mismatch", step, detail=f"{int(bad)} parity rows differ from a re-encode")

    # -- monitor -------------------------------------------------------------------------------
    def plan(self, failure: Failure) -> RecoveryPlan:
        S = self.cfg.layout.servers
        lost = {servers_rank(s, S): s for s in failure.dead if s.role in (SERVER, PARITY)}
        r = self.code.r
        for residue, members in sorted(stripe_losses(self.ctx.placement, set(lost)).items()):
            if len(members) > r:
                holders = residue_holders(self.ctx.placement, residue)
                names = ", ".join(f"member {m} on {lost[holders[m]]}" for m in members)
                if self.fallback is not None:
                    plan = self.fallback.plan(failure)
                    plan.reason = (f"stripe {residue} lost {len(members)} members (r = {r}): rollback to the "
                                   f"fallback checkpoint")
                    return plan
                return RecoveryPlan.abort(
                    f"stripe {residue} (and every stripe s with s % {S} == {residue}) lost {len(members)} "
                    f"members ({names}); {self.code.name} with r = {r} rebuilds at most {r} per stripe")
        if (self.fallback is not None and not self.immediate and lost
                and any(s.role == TRAINER for s in failure.dead)):
            # the rebuild would replay the dead trainer's gradients of the steps the overlapped
            # parity exchange had not applied: gone with it (see rebuild.py), so roll back instead
            plan = self.fallback.plan(failure)
            plan.reason = "a trainer died with a server: rollback to the fallback checkpoint"
            return plan
        return RecoveryPlan(scope=Scope.COMMITTED)

    # -- recovery --------------------------------------------------------------------------------
    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        if plan.scope is Scope.ROLLBACK and self.ctx.slot.role != PARITY:  # the fallback's rollback
            return self.fallback.restore(plan, step, replaced)
        return True  # a replaced server's rows come from ``rebuild``, not from a saved copy

    def rebuild(self, plan: RecoveryPlan) -> bool:
        role = self.ctx.slot.role
        if role not in (SERVER, PARITY, TRAINER):
            return True
        t0 = time.perf_counter()
        if self.ctx.slot in plan.replaced and role != TRAINER:  # type: ignore[attr-defined]
            self.ctx.event("rebuild_start", plan.step, detail=f"{self.ctx.slot} from its stripes "
                                                              f"({self.p['rebuild']})")
        try:
            times = rebuild(self, plan)
        except RebuildError as exc:
            self.ctx.event("rebuild_failed", plan.step, detail=str(exc)[:250])
            self.rebuilder = None
            return False
        self.stats["rebuilds"] += 1
        end = time.perf_counter()
        self.rebuild_t0 = t0  # a new failure restarts any rebuild in progress
        self.stats["rebuild_s"] = max(self.stats["rebuild_s"], end - t0)
        for key, a, b in (("rebuild_sync_s", "start", "sync"), ("rebuild_decode_s", "sync", "decode"),
                          ("rebuild_replay_s", "decode", "replay"), ("rebuild_encode_s", "replay", "encode")):
            if a in times and b in times:
                self.stats[key] = max(self.stats[key], times[b] - times[a])
        if self.rebuilder is not None and self.rebuilder.phase is None:
            self.rebuild_done(plan.step)
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        """After a rollback (the fallback) every holder re-encodes its parity from the restored
        rows: collective over ``servers``, like every rank's on_recovered call order."""
        if self.fallback is not None:
            self.fallback.on_recovered(plan)
        if plan.scope is Scope.ROLLBACK and self.pipeline is not None:
            self.rebuilder = None
            self.pipeline.outgoing.clear()
            if self.store is not None:
                self.store.incoming.clear()
            jobs = encode_jobs(self, "encode") if self.store is not None else []
            run_jobs(self, jobs)
            self.stats["reencoded_rows"] += sum(job.rows for job in jobs)
            if self.store is not None:
                self.store.reset_versions(plan.restored)
        for s in [s for s in self.pushed if s > plan.restored]:
            del self.pushed[s]
        if self.pipeline is not None:
            self.pipeline.reset(plan.restored)
        if self.window is not None:
            self.window.reset(plan.restored)

    # -- results -----------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        out = self._summary()
        if self.fallback is not None:
            out.update(self.fallback.summary())
        return out

    def _summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.name, "k": int(self.p["k"]), "r": int(self.p["r"]),
                               "parity_placement": "dedicated" if self.cfg.layout.parity_ranks else "rotated",
                               "lossless_code": self.code.name != "sum", "rebuild_mode": self.p["rebuild"],
                               "parity_exchange": "immediate" if self.immediate else "overlap",
                               "parity_every": self.every}
        role = self.ctx.slot.role if self.ctx is not None else ""
        if role == TRAINER:
            out["retained_grads_peak_bytes"] = self.peak_grads
            out["replayed_steps"] = int(self.stats["replayed_steps"])
        if role not in (SERVER, PARITY):
            return out
        steps = max(self.steps_run, 1)
        pipe = self.pipeline
        out.update({
            "parity_bytes_per_step": pipe.bytes_sent / steps, "parity_bytes": pipe.bytes_sent,
            "parity_rows_per_step": pipe.rows_sent / steps,
            "parity_memory_bytes": self.store.nbytes if self.store is not None else 0,
            "shard_memory_bytes": int(self.role.state()["table"].nbytes) if role == SERVER else 0,
            "parity_stage_s_per_step": pipe.seconds_stage / steps,
            "parity_drain_s_per_step": pipe.seconds_drain / steps,
            "parity_stage_cpu_s_per_step": pipe.cpu_stage / steps,
            "parity_drain_cpu_s_per_step": pipe.cpu_drain / steps,
            "retained_deltas_peak_bytes": pipe.peak_retained + (self.store.peak_retained if self.store
                                                                else 0),
            "parity_commits": self.commits,
            "parity_window_peak_bytes": self.window.peak if self.window is not None else 0,
        })
        out.update({k: (int(v) if k in ("verify_checks", "verify_mismatches", "rebuilds", "rebuild_rows",
                                         "rebuild_bytes", "reencoded_rows", "replayed_steps",
                                         "rebuild_rounds", "degraded_rows", "sum_drift_checks") else v)
                    for k, v in self.stats.items()})
        return out
