"""``cnr``: Check-N-Run (Eisenman et al., NSDI'22): differential, quantized, decoupled checkpoints.

The checkpoint kit (``strategies.checkpointing.kit``) and two parts of its own: trainer 0's
agent holds the ``Schedule`` and writes the dense replica in full, the coordinator commits
through the kit's ``ManifestCommitter`` (with the chains' ``ChainBook`` part beside it) and plans
with the kit's ``RollbackPlanner``: a full rollback on a server failure (``Scope.ROLLBACK``: every
trainer and server restores, the steps since re-execute), a trainer-only failure uses the
runtime's peer copy. What differs is what a server writes (``ChainPart``, ``checkpointing.chain``):

* **tracking** — two modified-row bitsets per server (``kernels.tracking``), set on every
  apply: rows changed since the last checkpoint and since the last baseline;
* **differential checkpoints** (``strategy.diff``): a *baseline* holds every row of the
  shard; a *diff* holds the rows changed since the baseline (``one-shot``) or since the
  previous checkpoint (``consecutive``: a restore applies baseline, diff, diff, ... in
  order). ``intermittent`` writes one-shot diffs and takes a new baseline when
  ``1 + S_1 + … + S_i ≤ (i + 1) · S_i`` (``S_j``: the size of the j-th diff since the
  baseline relative to a full checkpoint, here the fraction of all embedding rows changed
  since the baseline, summed over the servers' ``changed_rows`` header fields, so every
  server decides the same);
* **quantization** (``strategy.quantization`` = ``none | symmetric | asymmetric | adaptive |
  kmeans``, ``strategy.bits`` = 2, 3, 4, 8 or ``auto``: from the expected number of restores,
  ≤ 1 → 2, ≤ 3 → 3, ≤ 20 → 4, else 8) of the rows' weights (``kernels.quantize``). The
  optimizer state (the row-wise Adagrad accumulator column) is saved **fp32, unquantized**,
  as are the global row ids and the trainers' dense replica (full, in every checkpoint);
* **decoupled**: the training thread copies the changed rows (the *stall*), the background
  writer quantizes, packs, checksums and writes them (the *write time*; ``QuantizingStore``).

The step header word (``CheckNRun.header_fields``): trainer 0's ``schedule.checkpoint``
decision; each server's slowest part write time in ms (the kit's ``writer.part_ms``: trainer 0's
Young rule) and its rows changed since its baseline (``cnr.changed_rows``, ``ChainPart``'s).

Every server part's manifest entry names its chain (``meta.cnr.parts[part]``: kind, the
checkpoint it is relative to, the baseline), so a restore follows the links back to a
baseline; a corrupted or missing member fails the restore with one message naming it and
the runtime falls back to the next older checkpoint. Pruning keeps the newest ``keep``
checkpoints and every member of their chains.

Invariants: with ``quantization = "none"`` a restore is bit-exact (the failure-free
``param_checksum``); every row of a shard is in each baseline, and each row changed since the
baseline is in the chain's diffs (a snapshot discarded by a recovery, or a failed write, makes
the server's next checkpoint a baseline); a server tells the coordinator a part's chain link
before the part itself, so the link is there when the part completes the checkpoint.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from mpiec.kernels import quantize, tracking
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore, PartInfo
from mpiec.strategies.api import compose
from mpiec.strategies.api.base import RecoveryPlan, Scope, Strategy
from mpiec.strategies.api.compose import Part
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.params import param
from mpiec.strategies.checkpointing import (
    TRAINER_PART,
    PartWriter,
    Restorer,
    expected_mtbf_s,
    server_part,
)
from mpiec.strategies.checkpointing.chain import (
    CHAIN_META,
    ChainTracker,
    chain_members,
    chain_of,
    chains,
    intermittent_rebaseline,
    load_chains,
)
from mpiec.strategies.checkpointing.kit import (
    KIT_RULES,
    MILLIS,
    CheckpointKit,
    CheckpointParams,
    RestorerPart,
    WriterPart,
)

if TYPE_CHECKING:
    from mpiec.strategies.api.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState
    from mpiec.strategies.checkpointing import ManifestCommitter

OPTIMIZER_STATE = "fp32 unquantized"  # how the optimizer state is saved (docs, result summary)



@dataclass(frozen=True)
class CnrParams(CheckpointParams):
    """The checkpoint kit's keys (``mode`` defaults to async: the decoupled write) and Check-N-Run's own."""

    mode: Literal["sync", "async"] = param("async", "sync: write on the training thread; async: copy the "
                                           "rows, then quantize and write in a background thread")
    diff: Literal["one-shot", "consecutive", "intermittent"] = param(
        "one-shot", "a diff holds the rows changed since the baseline (one-shot), since the previous "
        "checkpoint (consecutive), or one-shot with a new baseline by the paper's rule (intermittent)")
    quantization: Literal["none", "symmetric", "asymmetric", "adaptive", "kmeans"] = param(
        "none", "row-wise quantization of the saved weights (the optimizer state stays fp32)")
    bits: Literal[2, 3, 4, 8, "auto"] = param(
        "auto", "bits per quantized weight, or auto: from the expected restores (<=1: 2, <=3: 3, <=20: 4, "
        "else 8)")


# -- the rules (pure functions: unit-tested) --------------------------------------------------------
def bits_for_restores(restores: float) -> int:
    """Check-N-Run's bit width from the expected number of restores: ≤1 → 2, ≤3 → 3, ≤20 → 4, else 8."""
    for limit, bits in ((1, 2), (3, 3), (20, 4)):
        if restores <= limit:
            return bits
    return 8


def expected_restores(cfg: Any) -> float:
    """Restores a run expects: the kill plan's trainer and server kills; else
    ``failures.timeout_s / failures.mtbf_s``; else one when an MTBF is given, 0 otherwise."""
    from mpiec.failures.faults import parse_kill_plans

    kills = [k for k in parse_kill_plans(cfg.failures.kill, cfg) if k.role in (SERVER, TRAINER)]
    if kills:
        return float(len(kills))
    mtbf_s, _ = expected_mtbf_s(cfg)
    if mtbf_s:
        return cfg.failures.timeout_s / mtbf_s if cfg.failures.timeout_s > 0 else 1.0
    return 0.0


def cnr_bits(cfg: Any, quantization: str, bits: int | str = "auto") -> int:
    """Bits per saved weight: 32 without quantization, else ``bits`` or the auto rule."""
    if quantization == "none":
        return 32
    return bits_for_restores(expected_restores(cfg)) if bits == "auto" else int(bits)


def encode_rows(rows: np.ndarray, dim: int, method: str,
                bits: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(arrays to write, per-row L2 error of the weights) for float32 rows ``[n, dim + state]``:
    ``none`` keeps the rows as ``table``; a quantizer writes ``packed`` codes with their fp16
    ``scale`` / ``bias`` / ``codebook`` and the optimizer ``state`` columns in fp32."""
    if method == "none":
        return {"table": rows}, np.zeros(rows.shape[0])
    # one pass over the rows in place: no copy of the weights, no dequantized temporary
    q, errors = quantize.quantize_rows(rows, dim, method, bits)
    out = {"packed": q.packed}
    for name in ("scale", "bias", "codebook"):
        if getattr(q, name) is not None:
            out[name] = getattr(q, name)
    if rows.shape[1] > dim:
        out["state"] = np.ascontiguousarray(rows[:, dim:])
    return out, errors


def decode_rows(arrays: dict[str, np.ndarray], dim: int, method: str, bits: int) -> np.ndarray:
    """The float32 rows ``[n, dim + state]`` a part restores (``encode_rows`` inverted)."""
    if "table" in arrays:
        return np.asarray(arrays["table"])
    q = quantize.QuantizedRows(method, bits, dim, np.asarray(arrays["packed"]), arrays.get("scale"),
                      arrays.get("bias"), arrays.get("codebook"))
    w = quantize.dequantize(q)
    if "state" in arrays:
        return np.hstack([w, np.asarray(arrays["state"], dtype=np.float32)])
    return w


def decode_part(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> np.ndarray:
    """A part's rows, decoded as its checkpoint's ``meta.cnr`` says it was written."""
    return decode_rows(arrays, int(meta["dim"]), str(meta["quantization"]), int(meta["bits"]))


def snapshot_rows(table: np.ndarray, global_rows: np.ndarray, slots: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays a server's part holds, copied from the shard (the training thread's stall): the
    rows of ``slots`` (ascending) and their global ids; a baseline's rows are copied as one
    block (memory-copy speed), a diff's row by row (``kernels.tracking.take_rows``)."""
    return {"global_rows": global_rows[slots], "table": tracking.take_rows(table, slots)}


class QuantizingStore:
    """What a server's chain writer writes through: quantizes and packs the snapshot (in the
    writer thread when the write is in the background), then the store writes it. ``seconds``
    of the part include the quantization; its time and the rows' errors are kept for the
    training thread (``take``)."""

    def __init__(self, store: CheckpointStore, dim: int, method: str, bits: int) -> None:
        self.store, self.dim, self.method, self.bits = store, dim, method, bits
        self._lock = threading.Lock()
        self._results: dict[int, tuple[np.ndarray, float]] = {}

    def write_part(self, step: int, part: str, arrays: Mapping[str, np.ndarray]) -> PartInfo:
        t0 = time.perf_counter()
        encoded, errors = encode_rows(arrays["table"], self.dim, self.method, self.bits)
        quant_s = time.perf_counter() - t0
        rows = arrays["global_rows"]
        if rows.size and rows.max() < 2**31:  # ids as int32 when they fit: 4 bytes a row less
            rows = rows.astype(np.int32)
        info = self.store.write_part(step, part, {"global_rows": rows, **encoded})
        info.seconds += quant_s
        with self._lock:
            self._results[step] = (errors, quant_s)
        return info

    def take(self, step: int) -> tuple[np.ndarray | None, float]:
        with self._lock:
            return self._results.pop(step, (None, 0.0))

    def drop_except(self, steps: set[int]) -> None:
        with self._lock:
            for s in [s for s in self._results if s not in steps]:
                del self._results[s]


# -- the strategy --------------------------------------------------------------------------------
class CheckNRun(Strategy):
    name = "cnr"
    description = "Check-N-Run: modified-row differential, quantized, decoupled checkpoints (NSDI'22)"
    Params = CnrParams
    recovers = True
    shrinks = True
    lossless = True  # with quantization the restored rows are approximate: the contract runs it unquantized
    cost = CostModel("rollback", interval="young", diffs=True)
    summary_rules: ClassVar[dict[str, str]] = {
        **KIT_RULES,
        "cnr_diff": "first", "cnr_quantization": "first", "cnr_bits": "first",
        "cnr_optimizer_state": "first", "cnr_expected_restores": "first",
        "baseline_checkpoints": "first", "diff_checkpoints": "first", "rows_saved": "first",
        "full_checkpoint_bytes": "first", "write_reduction": "first", "capacity_bytes": "first",
        "capacity_reduction": "first", "checkpoint_quantize_s": "max",
        "quant_row_error_max": "first", "quant_row_error_mean": "first",
        "restore_row_error_max": "max", "restore_row_error_mean": "max", "restore_error_servers": "sum",
    }
    params: CnrParams
    kit: CheckpointKit

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.bits = cnr_bits(cfg, self.params.quantization, self.params.bits)

        # the writers' time in ms: the header also carries every server's changed rows
        self.kit = CheckpointKit(cfg, self.params, part_time=MILLIS)

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        return {**self.kit.header_fields(), ChainPart.namespace: ChainPart.fields}

    # -- the agents: the kit's parts, the chains' --------------------------------------------------
    def coordinator(self, env: RankEnv) -> Coordinator:
        store = self.kit.coordinator_store(env)
        book = ChainBook(env, store, self.params, self.bits)
        committer = self.kit.committer(env, store, meta=book.meta, classify=book.classify,
                                       needs=lambda kept: chain_members(store, kept))
        book.committer = committer
        return compose.coordinator(self, env, *self.kit.coordinator_parts(env, store, committer), book)

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        return compose.trainer(self, env, *self.kit.trainer_parts(env, role))

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        store = self.kit.store(env)
        qstore = QuantizingStore(store, role.shard.dim, self.params.quantization, self.bits)
        ledger = ChainLedger(env, role, qstore)
        writer = self.kit.server_writer(env, role, qstore, on_written=ledger.written)
        tracker = ChainTracker(role.shard.table.shape[0], self.params.diff)
        chain = ChainPart(env, role, store, tracker, writer, ledger, int(sum(self.cfg.data.cardinalities)))
        return compose.server(self, env, WriterPart(writer, MILLIS, reports=True, snapshot=chain.save), chain,
                              RestorerPart(Restorer(env, store, chain.load, chain.reset)))


class ChainLedger:
    """A server's record of its chain parts in flight and written: each part's link (sent to the
    coordinator with it), the quantization time, and the per-slot error of the rows each
    checkpoint restores (to report a restore's error)."""

    KEPT_ERRORS = 8  # newest checkpoints whose error estimate is kept

    def __init__(self, env: RankEnv, role: ShardState, qstore: QuantizingStore) -> None:
        self.env = env
        self.role = role
        self.qstore = qstore
        self.sent: dict[int, dict[str, Any]] = {}  # step -> what the coordinator gets with the part
        self.errors: dict[int, np.ndarray | None] = {}  # step -> per-slot error of the restored rows
        self.quantize_s = 0.0
        self.restore_errors: list[tuple[float, float]] = []  # (max, mean) row error of each restore

    def taken(self, step: int, part: str, link: dict[str, Any], slots: np.ndarray) -> None:
        """Checkpoint ``step`` took the rows of ``slots`` with ``link``."""
        shard = self.role.shard
        self.sent[step] = {"part": part, "kind": link["kind"], "prev": link["prev"],
                           "baseline": link["baseline"], "rows": int(slots.size), "size": link["size"],
                           "sizes": link["sizes"], "slots": slots,
                           "full_bytes": int((shard.global_rows >= 0).sum()) * (shard.table.shape[1] * 4 + 8)}

    def written(self, step: int, epoch: int) -> int:
        """The part of ``step`` is written: tell the coordinator its link; its rows."""
        sent = self.sent.pop(step, None)
        errors, quant_s = self.qstore.take(step)
        self.quantize_s += quant_s
        if sent is None:
            return self.role.n_rows()
        slots = sent.pop("slots")
        prev = self.errors.get(sent["prev"]) if sent["kind"] == "diff" else np.zeros(
            self.role.shard.table.shape[0])
        state = None
        if prev is not None and errors is not None:
            state = prev.copy()
            state[slots] = errors
        self.errors[step] = state
        for s in sorted(self.errors)[:-self.KEPT_ERRORS]:
            del self.errors[s]
        err = errors if errors is not None and errors.size else np.zeros(1)
        sent.update({"quantize_s": quant_s, "err_max": float(err.max()),
                     "err_sum": float(err.sum()) if errors is not None else 0.0})
        self.env.tell_monitor(("cnr", step, epoch, sent))
        return int(sent["rows"])

    def unwritten(self, pending: set[int]) -> bool:
        """Forget the parts neither written nor ``pending`` (their write failed); True if any."""
        failed = [s for s in self.sent if s not in pending]
        for s in failed:
            del self.sent[s]
        return bool(failed)

    def restored(self, step: int) -> None:
        """The shard holds checkpoint ``step`` (−1: the initial rows): its error estimate."""
        if step < 0:
            self.restore_errors.append((0.0, 0.0))
            return
        errors = self.errors.get(step)
        real = self.role.shard.global_rows >= 0
        if errors is not None and real.any():
            self.restore_errors.append((float(errors[real].max()), float(errors[real].mean())))

    def recovered(self, restored: int) -> None:
        """Parts of the old epoch are never reported; estimates of re-executed steps are gone."""
        self.sent.clear()
        self.qstore.drop_except(set())
        self.errors = {s: e for s, e in self.errors.items() if s <= restored}

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"checkpoint_quantize_s": self.quantize_s}
        errs = self.restore_errors
        if errs:
            out["restore_row_error_max"] = max(e[0] for e in errs)
            out["restore_row_error_mean"] = max(e[1] for e in errs)
            out["restore_error_servers"] = 1
        return out


class ChainPart(Part):
    """A server's chains: tracks its changed rows (``cnr.changed_rows`` in its header word), takes
    its chain part when the kit's ``WriterPart`` says so (``save``), and loads its chain on a
    restore (``load`` / ``reset``, the ``Restorer``'s)."""

    namespace = "cnr"
    fields = (("changed_rows", 38),)

    def __init__(self, env: RankEnv, role: ShardState, store: CheckpointStore, tracker: ChainTracker,
                 writer: PartWriter, ledger: ChainLedger, total_rows: int) -> None:
        self.env = env
        self.role = role
        self.store = store
        self.tracker = tracker
        self.writer = writer
        self.ledger = ledger
        self.total_rows = total_rows

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        self.tracker.track(slots)

    def header_word(self, step: int) -> dict[str, int]:
        return {"changed_rows": self.tracker.changed_since_base()}

    def save(self, step: int, words: np.ndarray) -> None:
        """This server's part of checkpoint ``step``: a baseline or a diff (``words``: the step's
        header words, every server's rows changed since its baseline)."""
        t0 = time.perf_counter()
        shard = self.role.shard
        counts = self.header.column(words[self.env.n_trainers:], "changed_rows")
        size = float(counts.sum()) / max(self.total_rows, 1)
        slots, link = self.tracker.take(step, size, shard.global_rows)
        snapshot = snapshot_rows(shard.table, shard.global_rows, slots)
        self.ledger.taken(step, self.writer.part, link, slots)
        if not self.writer.save_snapshot(step, snapshot, t0):
            self.tracker.break_chain()  # a failed write breaks the chain: the next one is a baseline

    def background(self, step: int) -> None:
        # after the WriterPart's poll (the part order): the writes it found failed
        if self.ledger.unwritten(self.writer.pending()):
            self.tracker.break_chain()  # a failed write breaks the chain: the next one is a baseline

    # -- recovery ------------------------------------------------------------------------------
    def reset(self) -> None:
        """The initial rows: no chain yet."""
        self.role.reset()
        self.tracker.restart()
        self.ledger.restored(-1)

    def load(self, step: int) -> None:
        """This server's rows as of checkpoint ``step``: each chain's baseline, then its diffs."""
        try:
            self.load_chain(step)
        except CheckpointError as exc:  # one line on the rank's stderr too, naming the member
            print(f"mpiec: cnr server {self.env.slot.index}: {exc}", file=sys.stderr, flush=True)
            raise

    def load_chain(self, step: int) -> None:
        mine = server_part(self.env.slot.index)
        man = self.store.manifest(step)
        same = man.get("meta", {}).get("servers") == self.env.n_servers
        parts = [mine] if same else sorted(p for p in man["parts"] if p.startswith("server-"))
        changed = load_chains(self.store, step, parts, self.role, decode_part)
        # tracking as right after writing checkpoint ``step`` (another placement: a new chain)
        self.tracker.resumed(step, man["meta"][CHAIN_META]["parts"].get(mine) if same else None, changed)
        self.ledger.restored(step)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        if plan.scope is not Scope.ROLLBACK:
            # the survivors keep their rows, but a checkpoint in flight may never be committed
            # (its writes belong to the old epoch): start a new chain with the next checkpoint
            self.tracker.break_chain()
        self.ledger.recovered(plan.restored)

    def summary(self) -> dict[str, Any]:
        return self.ledger.figures()  # after the WriterPart's (its finish reports the last parts)


class ChainBook(Part):
    """The coordinator's record of the chains: each part's link until its checkpoint commits (the
    manifest's ``meta.cnr``), and the figures of the committed checkpoints (``committer``: the
    kit's, whose rows they are)."""

    committer: ManifestCommitter

    def __init__(self, env: RankEnv, store: CheckpointStore, params: CnrParams, bits: int) -> None:
        self.env = env
        self.store = store
        self.params = params
        self.bits = bits
        self.extra: dict[int, dict[str, dict[str, Any]]] = {}  # step -> part -> its link and figures
        self.full_bytes: list[int] = []
        self.capacity = 0
        self.quant_errors: list[tuple[float, float, int]] = []  # (max, sum, rows) per server part

    def on_message(self, source: Slot, payload: Any) -> None:
        """A server's chain link (other messages are the committer's)."""
        if not (isinstance(payload, tuple) and payload and payload[0] == "cnr"):
            return
        _, step, epoch, extra = payload
        if epoch == self.env.epoch:
            self.extra.setdefault(step, {})[extra["part"]] = extra

    def on_grow(self, plan: RecoveryPlan) -> bool:
        """Refuses to grow the servers back (the trainers still grow): each server's chain holds the
        diffs of its own rows since the last baseline, and rows moved to a new owner would leave
        every chain describing rows its server no longer holds. Asked after the kit's planner,
        whose dropped checkpoint in flight ``on_recovered`` would drop anyway."""
        return False

    def on_recovered(self, plan: RecoveryPlan) -> None:
        """A recovery: the links of checkpoints not committed yet are of an ended epoch."""
        self.extra.clear()

    def meta(self, step: int) -> dict[str, Any]:
        """The manifest's ``meta.cnr`` of checkpoint ``step``."""
        parts = {part: {k: e[k] for k in ("kind", "prev", "baseline", "rows", "sizes")}
                 for part, e in self.extra.get(step, {}).items()}
        p = self.params
        return {CHAIN_META: {"diff": p.diff, "quantization": p.quantization, "bits": self.bits,
                             "dim": self.env.cfg.model.dim, "optimizer_state": OPTIMIZER_STATE,
                             "parts": parts}}

    def classify(self, step: int, parts: dict[str, PartInfo]) -> tuple[str, int]:
        """Checkpoint ``step`` is committed: its kind and bits, and its figures."""
        extra = self.extra.pop(step, {})
        for s in [s for s in self.extra if s < step]:
            del self.extra[s]
        kinds = {e["kind"] for e in extra.values()}
        kind = "baseline" if "baseline" in kinds else "diff"
        trainer = parts[TRAINER_PART].bytes if TRAINER_PART in parts else 0
        self.full_bytes.append(sum(e["full_bytes"] for e in extra.values()) + trainer)
        try:  # bytes that must be kept to restore this checkpoint: every member of its chains
            members = {m for chain in chains(self.store, step).values() for m, _ in chain}
            capacity = trainer + sum(p["bytes"] for m in members
                                     for name, p in self.store.manifest(m)["parts"].items()
                                     if name.startswith("server-"))
            self.capacity = max(self.capacity, capacity)
        except CheckpointError:
            pass
        for e in extra.values():
            self.quant_errors.append((e["err_max"], e["err_sum"], e["rows"]))
        return kind, self.bits

    def summary(self) -> dict[str, Any]:
        return self.figures(list(self.committer.rows))

    def figures(self, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
        """The summary's Check-N-Run figures, ``rows`` the committed checkpoints' dataset rows."""
        written = sum(r[2] for r in rows)
        full = float(np.mean(self.full_bytes)) if self.full_bytes else 0.0
        qrows = sum(r for _m, _s, r in self.quant_errors)
        p = self.params
        return {
            "cnr_diff": p.diff, "cnr_quantization": p.quantization, "cnr_bits": self.bits,
            "cnr_optimizer_state": OPTIMIZER_STATE,
            "cnr_expected_restores": expected_restores(self.env.cfg),
            "baseline_checkpoints": sum(1 for r in rows if r[1] == "baseline"),
            "diff_checkpoints": sum(1 for r in rows if r[1] == "diff"),
            "rows_saved": sum(r[5] for r in rows),
            "full_checkpoint_bytes": full,
            "write_reduction": full * len(rows) / written if written else math.nan,
            "capacity_bytes": self.capacity,
            "capacity_reduction": full / self.capacity if self.capacity else math.nan,
            "quant_row_error_max": max((m for m, _s, _r in self.quant_errors), default=0.0),
            "quant_row_error_mean": sum(s for _m, s, _r in self.quant_errors) / qrows if qrows else 0.0,
        }


__all__ = ["ChainBook", "ChainLedger", "ChainPart", "CheckNRun", "CnrParams",
           "QuantizingStore", "bits_for_restores", "chain_of", "cnr_bits", "decode_part",
           "decode_rows", "encode_rows", "expected_restores", "intermittent_rebaseline", "snapshot_rows"]
