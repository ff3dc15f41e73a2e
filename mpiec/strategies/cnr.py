"""``cnr``: Check-N-Run (Eisenman et al., NSDI'22): differential, quantized, decoupled checkpoints.

A subclass of ``ckpt``: the same schedule (trainer 0's header word), the same store, the
same commit by the monitor, the same full rollback on a server failure (``Scope.ROLLBACK``:
every trainer and server restores, the steps since re-execute; a trainer-only failure uses
the runtime's peer copy). What differs is what a server writes:

* **tracking** — two modified-row bitsets per server (``kernels.tracking``), set on every
  apply: rows changed since the last checkpoint and since the last baseline;
* **differential checkpoints** (``strategy.diff``): a *baseline* holds every row of the
  shard; a *diff* holds the rows changed since the baseline (``one-shot``) or since the
  previous checkpoint (``consecutive``: a restore applies baseline, diff, diff, ... in
  order). ``intermittent`` writes one-shot diffs and takes a new baseline when
  ``1 + S_1 + … + S_i ≤ (i + 1) · S_i`` (``S_j``: the size of the j-th diff since the
  baseline relative to a full checkpoint, here the fraction of all embedding rows changed
  since the baseline, summed over the servers' header words, so every server decides the
  same);
* **quantization** (``strategy.quantization`` = ``none | symmetric | asymmetric | adaptive |
  kmeans``, ``strategy.bits`` = 2, 3, 4, 8 or ``auto``: from the expected number of restores,
  ≤ 1 → 2, ≤ 3 → 3, ≤ 20 → 4, else 8) of the rows' weights (``kernels.quantize``). The
  optimizer state (the row-wise Adagrad accumulator column) is saved **fp32, unquantized**,
  as are the global row ids and the trainers' dense replica (full, in every checkpoint);
* **decoupled**: the training thread copies the changed rows (the *stall*), the background
  writer quantizes, packs, checksums and writes them (the *write time*).

Every server part's manifest entry names its chain (``meta.cnr.parts[part]``: kind, the
checkpoint it is relative to, the baseline), so a restore follows the links back to a
baseline; a corrupted or missing member fails the restore with one message naming it and
the runtime falls back to the next older checkpoint. Pruning keeps the newest ``keep``
checkpoints and every member of their chains.

Invariants: with ``quantization = "none"`` a restore is bit-exact (the failure-free
``param_checksum``); every row of a shard is in each baseline, and each row changed since
the baseline is in the chain's diffs (a snapshot discarded by a recovery, or a failed
write, makes the server's next checkpoint a baseline).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, ClassVar

import numpy as np

from mpiec.checkpoint import BackgroundWriter, CheckpointError, CheckpointStore, PartInfo
from mpiec.errors import ConfigError
from mpiec.kernels.quantize import QuantizedRows, dequantize, quantize, row_l2_error
from mpiec.kernels.tracking import bitset_clear, bitset_count, bitset_new, bitset_rows, bitset_set
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.base import RecoveryPlan, Scope
from mpiec.strategies.checkpointing import expected_mtbf_s
from mpiec.strategies.costs import CostModel
from mpiec.strategies.legacy_ckpt import DEFAULTS as CKPT_DEFAULTS
from mpiec.strategies.legacy_ckpt import LegacyFullCheckpoint

DIFF_MODES = ("one-shot", "consecutive", "intermittent")
QUANTIZATIONS = ("none", "symmetric", "asymmetric", "adaptive", "kmeans")
BITS = (2, 3, 4, 8)
OPTIMIZER_STATE = "fp32 unquantized"  # how the optimizer state is saved (docs, result summary)
CNR_DEFAULTS: dict[str, Any] = {**CKPT_DEFAULTS, "mode": "async", "diff": "one-shot",
                                "quantization": "none", "bits": "auto"}
_MS_BITS = 24  # a server's header word: rows changed since the baseline << 24 | last part's write ms


# -- the rules (pure functions: unit-tested) --------------------------------------------------------
def intermittent_rebaseline(sizes: list[float]) -> bool:
    """Check-N-Run's intermittent rule: with ``sizes = [S_1, …, S_i]`` (the diffs since the
    baseline relative to a full checkpoint, ``S_i`` the one due now), take a new baseline when
    ``1 + S_1 + … + S_i ≤ (i + 1) · S_i``: the checkpoint due now would cost at least what
    a baseline plus the diffs so far cost per checkpoint on average."""
    if not sizes:
        return False
    return 1.0 + float(sum(sizes)) <= (len(sizes) + 1) * float(sizes[-1])


def bits_for_restores(restores: float) -> int:
    """Check-N-Run's bit width from the expected number of restores: ≤1 → 2, ≤3 → 3, ≤20 → 4, else 8."""
    for limit, bits in ((1, 2), (3, 3), (20, 4)):
        if restores <= limit:
            return bits
    return 8


def expected_restores(cfg: Any) -> float:
    """Restores a run expects: the kill plan's trainer and server kills; else
    ``failures.timeout_s / failures.mtbf_s``; else one when an MTBF is given, 0 otherwise."""
    from mpiec.faults import parse_kill_plans

    kills = [k for k in parse_kill_plans(cfg.failures.kill, cfg) if k.role in (SERVER, TRAINER)]
    if kills:
        return float(len(kills))
    mtbf_s, _ = expected_mtbf_s(cfg)
    if mtbf_s:
        return cfg.failures.timeout_s / mtbf_s if cfg.failures.timeout_s > 0 else 1.0
    return 0.0


def cnr_bits(cfg: Any, params: dict[str, Any]) -> int:
    """Bits per saved weight: 32 without quantization, else ``strategy.bits`` or the auto rule."""
    if params.get("quantization", "none") == "none":
        return 32
    bits = params.get("bits", "auto")
    return bits_for_restores(expected_restores(cfg)) if bits == "auto" else int(bits)


def chain_of(store: CheckpointStore, step: int, part: str) -> list[tuple[int, str]]:
    """``[(step, kind), …]`` to apply in order to restore ``part`` as of checkpoint ``step``:
    a baseline, then the diffs on top (``consecutive``: every one since the baseline).
    ``CheckpointError`` naming the member whose manifest is missing or says no chain."""
    out: list[tuple[int, str]] = []
    s = step
    while True:
        try:
            entry = store.manifest(s)["meta"]["cnr"]["parts"][part]
            kind, prev = str(entry["kind"]), int(entry["prev"])
        except CheckpointError as exc:
            raise CheckpointError(f"chain of step {step} ({part}) needs checkpoint {s}: {exc}") from None
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{store.step_dir(s)}: no Check-N-Run chain for {part} in its "
                                  "manifest (not a cnr checkpoint)") from None
        out.append((s, kind))
        if kind == "baseline":
            return out[::-1]
        if prev >= s or len(out) > 100000:
            raise CheckpointError(f"{store.step_dir(s)}: {part}'s chain link to step {prev} is invalid")
        s = prev


def encode_rows(rows: np.ndarray, dim: int, method: str,
                bits: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(arrays to write, per-row L2 error of the weights) for float32 rows ``[n, dim + state]``:
    ``none`` keeps the rows as ``table``; a quantizer writes ``packed`` codes with their fp16
    ``scale`` / ``bias`` / ``codebook`` and the optimizer ``state`` columns in fp32."""
    if method == "none":
        return {"table": rows}, np.zeros(rows.shape[0])
    weights = np.ascontiguousarray(rows[:, :dim])
    q = quantize(weights, method, bits)
    out = {"packed": q.packed}
    for name in ("scale", "bias", "codebook"):
        if getattr(q, name) is not None:
            out[name] = getattr(q, name)
    if rows.shape[1] > dim:
        out["state"] = np.ascontiguousarray(rows[:, dim:])
    return out, row_l2_error(weights, dequantize(q)) if len(weights) else np.zeros(0)


def decode_rows(arrays: dict[str, np.ndarray], dim: int, method: str, bits: int) -> np.ndarray:
    """The float32 rows ``[n, dim + state]`` a part restores (``encode_rows`` inverted)."""
    if "table" in arrays:
        return np.asarray(arrays["table"])
    q = QuantizedRows(method, bits, dim, np.asarray(arrays["packed"]), arrays.get("scale"),
                      arrays.get("bias"), arrays.get("codebook"))
    w = dequantize(q)
    if "state" in arrays:
        return np.hstack([w, np.asarray(arrays["state"], dtype=np.float32)])
    return w


class QuantizingStore:
    """What a server's ``BackgroundWriter`` writes through: quantizes and packs the snapshot in
    the writer thread, then the store writes it. ``seconds`` of the part include the
    quantization; its time and the rows' errors are kept for the training thread (``take``)."""

    def __init__(self, store: CheckpointStore, dim: int, method: str, bits: int) -> None:
        self.store, self.dim, self.method, self.bits = store, dim, method, bits
        self._lock = threading.Lock()
        self._results: dict[int, tuple[np.ndarray, float]] = {}

    def write_part(self, step: int, part: str, arrays: dict[str, np.ndarray]) -> PartInfo:
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


class CheckNRun(LegacyFullCheckpoint):
    name = "cnr"
    description = "Check-N-Run: modified-row differential, quantized, decoupled checkpoints (NSDI'22)"
    lossless = True  # with quantization the restored rows are approximate: the contract runs it unquantized
    cost = CostModel("rollback", interval="young")
    DEFAULTS: ClassVar[dict[str, Any]] = CNR_DEFAULTS
    summary_rules: ClassVar[dict[str, str]] = {
        **LegacyFullCheckpoint.summary_rules,
        "cnr_diff": "first", "cnr_quantization": "first", "cnr_bits": "first",
        "cnr_optimizer_state": "first", "cnr_expected_restores": "first",
        "baseline_checkpoints": "first", "diff_checkpoints": "first", "rows_saved": "first",
        "full_checkpoint_bytes": "first", "write_reduction": "first", "capacity_bytes": "first",
        "capacity_reduction": "first", "checkpoint_quantize_s": "max",
        "quant_row_error_max": "first", "quant_row_error_mean": "first",
        "restore_row_error_max": "max", "restore_row_error_mean": "max", "restore_error_servers": "sum",
    }

    @classmethod
    def validate_params(cls, cfg: Any) -> None:
        super().validate_params(cfg)
        p = cfg.strategy.params
        if p.get("diff", "one-shot") not in DIFF_MODES:
            raise ConfigError(f"strategy.diff must be one of {', '.join(DIFF_MODES)}, got {p.get('diff')!r}")
        if p.get("quantization", "none") not in QUANTIZATIONS:
            raise ConfigError(f"strategy.quantization must be one of {', '.join(QUANTIZATIONS)}, "
                              f"got {p.get('quantization')!r}")
        bits = p.get("bits", "auto")
        if bits != "auto" and (isinstance(bits, bool) or bits not in BITS):
            raise ConfigError(f"strategy.bits must be 2, 3, 4, 8 or 'auto', got {bits!r}")

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.diff = str(self.p["diff"])
        self.method = str(self.p["quantization"])
        self.bits = cnr_bits(cfg, self.p)
        self.total_rows = int(sum(cfg.data.cardinalities))
        # server: tracking and the chain it is writing
        self.since_last: np.ndarray | None = None
        self.since_base: np.ndarray | None = None
        self.base = -1  # this server's current baseline (-1: none, the next checkpoint is one)
        self.prev = -1  # its newest checkpoint (what a consecutive diff is relative to)
        self.sizes: list[float] = []  # S_1..S_i of the diffs since the baseline (intermittent)
        self.counts: np.ndarray | None = None  # every server's rows changed since its baseline (words)
        self.qstore: QuantizingStore | None = None
        self.sent: dict[int, dict[str, Any]] = {}  # step -> what the monitor gets with the part
        self.errors: dict[int, np.ndarray | None] = {}  # step -> per-slot error of the restored rows
        self.quantize_s = 0.0
        self.restore_errors: list[tuple[float, float]] = []  # (max, mean) row error of each restore
        # monitor
        self.extra: dict[int, dict[str, dict[str, Any]]] = {}
        self.full_bytes: list[int] = []
        self.capacity = 0
        self.quant_errors: list[tuple[float, float, int]] = []  # (max, sum, rows) per server part

    def bind(self, ctx: Any, role: Any) -> None:
        super().bind(ctx, role)
        if ctx.slot.role != SERVER:
            return
        n = role.shard.table.shape[0]
        self.since_last, self.since_base = bitset_new(n), bitset_new(n)
        self.base = self.prev = -1
        self.sizes = []
        self.qstore = QuantizingStore(self.store, role.shard.dim, self.method, self.bits)
        if self.writer is not None:  # the server's writer quantizes before it writes
            self.writer.close()
            self.writer = BackgroundWriter(self.qstore)

    # -- tracking ------------------------------------------------------------------------------
    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        if self.since_last is not None:
            bitset_set(self.since_last, slots)
            bitset_set(self.since_base, slots)

    def header_word(self, step: int) -> int:
        if self.ctx.slot.role == SERVER:  # rows changed since the baseline, and ckpt's part time
            ms = min(int(self.max_part_s * 1e3), (1 << _MS_BITS) - 1)
            return (int(bitset_count(self.since_base)) << _MS_BITS) | ms
        return super().header_word(step)

    def after_step(self, step: int, words: np.ndarray | None = None) -> None:
        if words is not None:
            words = np.array(words, dtype=np.int64)
            t = self.cfg.layout.trainers
            self.counts = words[t:] >> _MS_BITS
            words[t:] = (words[t:] & ((1 << _MS_BITS) - 1)) * 1000  # ckpt reads microseconds
        super().after_step(step, words)

    # -- the checkpoint (servers; trainer 0 writes ckpt's full dense part) ---------------------------
    def next_kind(self) -> tuple[str, float]:
        """Server: baseline or diff now, and the diff's size relative to a full checkpoint."""
        size = float(self.counts.sum()) / max(self.total_rows, 1) if self.counts is not None else 1.0
        if self.base < 0:
            return "baseline", 1.0
        if self.diff == "intermittent" and intermittent_rebaseline(self.sizes + [size]):
            return "baseline", 1.0
        return "diff", size

    def save(self, step: int, name: str) -> None:
        if self.ctx.slot.role != SERVER:
            return super().save(step, name)
        t0 = time.perf_counter()
        shard = self.role.shard
        kind, size = self.next_kind()
        if kind == "baseline":
            slots = np.flatnonzero(shard.global_rows >= 0)
        else:
            slots = bitset_rows(self.since_last if self.diff == "consecutive" else self.since_base)
            slots = slots[shard.global_rows[slots] >= 0]
        snap = {"global_rows": shard.global_rows[slots], "table": shard.table[slots]}  # copies
        prev = self.prev if self.diff == "consecutive" or kind == "baseline" else self.base
        self.sent[step] = {"part": name, "kind": kind, "prev": step if kind == "baseline" else prev,
                           "baseline": step if kind == "baseline" else self.base, "rows": int(slots.size),
                           "size": size, "sizes": [] if kind == "baseline" else self.sizes + [size],
                           "slots": slots, "full_bytes": int((shard.global_rows >= 0).sum())
                           * (shard.table.shape[1] * 4 + 8)}
        bitset_clear(self.since_last)
        if kind == "baseline":
            bitset_clear(self.since_base)
            self.base, self.sizes = step, []
        else:
            self.sizes = self.sizes + [size]
        self.prev = step
        stall = time.perf_counter() - t0
        self.critical_s += stall
        if self.writer is not None:
            self.writer.submit(step, name, snap)
            self.submitted.append((step, self.ctx.epoch))
            self.stalls[(step, self.ctx.epoch)] = stall
            return
        info = self.write_now(step, name, snap, store=self.qstore)
        if info is not None:  # sync: the write is on the training thread too
            self.report(step, info, self.ctx.epoch, stall=time.perf_counter() - t0)
        else:
            self.base = -1  # a failed write breaks the chain: the next checkpoint is a baseline
        self.critical_s += time.perf_counter() - t0 - stall

    def background(self, step: int) -> None:
        super().background(step)
        if self.ctx.slot.role == SERVER:
            pending = {s for s, _ in self.submitted}
            failed = [s for s in self.sent if s not in pending]  # written parts were reported
            if failed:  # a failed write breaks the chain: the next checkpoint is a baseline
                self.base = -1
                for s in failed:
                    del self.sent[s]

    def report(self, step: int, info: PartInfo, epoch: int, stall: float | None = None,
               rows: int | None = None) -> None:
        if self.ctx.slot.role == SERVER:
            sent = self.sent.pop(step, None)
            errors, quant_s = self.qstore.take(step)
            self.quantize_s += quant_s
            if sent is not None:
                slots = sent.pop("slots")
                prev = self.errors.get(sent["prev"]) if sent["kind"] == "diff" else np.zeros(
                    self.role.shard.table.shape[0])
                state = None
                if prev is not None and errors is not None:
                    state = prev.copy()
                    state[slots] = errors
                self.errors[step] = state
                for s in sorted(self.errors)[:-8]:
                    del self.errors[s]
                err = errors if errors is not None and errors.size else np.zeros(1)
                sent.update({"quantize_s": quant_s, "err_max": float(err.max()),
                             "err_sum": float(err.sum()) if errors is not None else 0.0})
                self.ctx.tell_monitor(("cnr", step, epoch, sent))
                rows = sent["rows"]
        super().report(step, info, epoch, stall, rows)

    # -- monitor: commit, prune, figures ---------------------------------------------------------
    def on_message(self, source: Slot, payload: Any) -> None:
        if payload[0] == "cnr":
            _, step, epoch, extra = payload
            if epoch == self.ctx.epoch:
                self.extra.setdefault(step, {})[extra["part"]] = extra
            return
        super().on_message(source, payload)

    def commit_meta(self, step: int) -> dict[str, Any]:
        parts = {part: {k: e[k] for k in ("kind", "prev", "baseline", "rows", "sizes")}
                 for part, e in self.extra.get(step, {}).items()}
        return {"cnr": {"diff": self.diff, "quantization": self.method, "bits": self.bits,
                        "dim": self.cfg.model.dim, "optimizer_state": OPTIMIZER_STATE, "parts": parts}}

    def chains(self, step: int) -> dict[str, list[tuple[int, str]]]:
        """Monitor: every server part's chain of complete checkpoint ``step``."""
        parts = self.store.manifest(step)["parts"]
        return {p: chain_of(self.store, step, p) for p in parts if p.startswith("server-")}

    def prune(self) -> None:
        kept = self.store.complete_steps()[:int(self.p["keep"])]
        needed: set[int] = set()
        for s in kept:
            try:
                needed |= {m for chain in self.chains(s).values() for m, _ in chain}
            except CheckpointError:
                continue  # a broken chain is never restored from; its members may go
        self.store.prune(int(self.p["keep"]), also_keep=needed)

    def committed(self, step: int, parts: dict[str, PartInfo]) -> tuple[str, int]:
        extra = self.extra.pop(step, {})
        for s in [s for s in self.extra if s < step]:
            del self.extra[s]
        kinds = {e["kind"] for e in extra.values()}
        kind = "baseline" if "baseline" in kinds else "diff"
        trainer = parts["trainer"].bytes if "trainer" in parts else 0
        self.full_bytes.append(sum(e["full_bytes"] for e in extra.values()) + trainer)
        try:  # bytes that must be kept to restore this checkpoint: every member of its chains
            members = {m for chain in self.chains(step).values() for m, _ in chain}
            capacity = trainer + sum(p["bytes"] for m in members
                                     for name, p in self.store.manifest(m)["parts"].items()
                                     if name.startswith("server-"))
            self.capacity = max(self.capacity, capacity)
        except CheckpointError:
            pass
        for e in extra.values():
            self.quant_errors.append((e["err_max"], e["err_sum"], e["rows"]))
        return kind, self.bits

    # -- recovery --------------------------------------------------------------------------------
    def load_shard(self, step: int) -> None:
        """This server's rows as of checkpoint ``step``: each chain's baseline, then its diffs."""
        try:
            self._load_chain(step)
        except CheckpointError as exc:  # one line on the rank's stderr too, naming the member
            print(f"mpiec: cnr server {self.ctx.slot.index}: {exc}", file=sys.stderr, flush=True)
            raise

    def _load_chain(self, step: int) -> None:
        mine = f"server-{self.ctx.slot.index}"
        man = self.store.manifest(step)
        same = man.get("meta", {}).get("servers") == self.cfg.layout.servers
        parts = [mine] if same else sorted(p for p in man["parts"] if p.startswith("server-"))
        shard = self.role.shard
        changed = np.zeros(shard.table.shape[0], dtype=bool)  # rows in the diffs: since the baseline
        loaded = 0
        for part in parts:
            chain = chain_of(self.store, step, part)
            for m, kind in chain:
                try:
                    arrays = self.store.read_part(m, part)
                    cnr = self.store.manifest(m)["meta"]["cnr"]
                    table = decode_rows(arrays, int(cnr["dim"]), str(cnr["quantization"]), int(cnr["bits"]))
                except (CheckpointError, KeyError, ValueError) as exc:
                    what = ", ".join(f"{k} {s}" for s, k in chain)
                    raise CheckpointError(f"corrupted chain: {kind} {m} of checkpoint {step} "
                                          f"({what}) is unusable: {exc}") from None
                n = self.role.load_rows(arrays["global_rows"], table)
                if kind == "baseline":
                    loaded += n
                else:
                    changed |= np.isin(shard.global_rows, arrays["global_rows"])
        if loaded != self.role.n_rows():
            raise CheckpointError(f"the baselines of checkpoint {step} hold {loaded} of this server's "
                                  f"{self.role.n_rows()} rows")
        # tracking as right after writing checkpoint ``step`` (another placement: a new chain)
        bitset_clear(self.since_last)
        bitset_clear(self.since_base)
        entry = man["meta"]["cnr"]["parts"].get(mine) if same else None
        if entry:
            bitset_set(self.since_base, np.flatnonzero(changed))
            self.base, self.prev, self.sizes = int(entry["baseline"]), step, list(entry["sizes"])
        else:
            self.base, self.prev, self.sizes = -1, -1, []
        errors = self.errors.get(step)
        real = shard.global_rows >= 0
        if errors is not None and real.any():
            self.restore_errors.append((float(errors[real].max()), float(errors[real].mean())))

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        ok = super().restore(plan, step, replaced)
        if ok and self.ctx.slot.role == SERVER and step < 0:  # the initial rows: no chain yet
            bitset_clear(self.since_last)
            bitset_clear(self.since_base)
            self.base, self.prev, self.sizes = -1, -1, []
            self.restore_errors.append((0.0, 0.0))
        return ok

    def on_recovered(self, plan: RecoveryPlan) -> None:
        super().on_recovered(plan)
        self.extra.clear()
        if self.ctx.slot.role != SERVER:
            return
        if plan.scope is not Scope.ROLLBACK:
            # the survivors keep their rows, but a checkpoint in flight may never be committed
            # (its writes belong to the old epoch): start a new chain with the next checkpoint
            self.base = -1
        self.sent.clear()  # parts of the old epoch are never reported
        self.qstore.drop_except(set())
        self.errors = {s: e for s, e in self.errors.items() if s <= plan.restored}

    # -- results ---------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        out = super().summary()
        role = self.ctx.slot.role if self.ctx is not None else ""
        if role == SERVER:
            out["checkpoint_quantize_s"] = self.quantize_s
            errs = self.restore_errors
            if errs:
                out["restore_row_error_max"] = max(e[0] for e in errs)
                out["restore_row_error_mean"] = max(e[1] for e in errs)
                out["restore_error_servers"] = 1
        if self.ctx is not None and self.ctx.rank == 0:
            written = sum(r[2] for r in self.rows)
            full = float(np.mean(self.full_bytes)) if self.full_bytes else 0.0
            qrows = sum(r for _m, _s, r in self.quant_errors)
            out.update({
                "cnr_diff": self.diff, "cnr_quantization": self.method, "cnr_bits": self.bits,
                "cnr_optimizer_state": OPTIMIZER_STATE,
                "cnr_expected_restores": expected_restores(self.cfg),
                "baseline_checkpoints": sum(1 for r in self.rows if r[1] == "baseline"),
                "diff_checkpoints": sum(1 for r in self.rows if r[1] == "diff"),
                "rows_saved": sum(r[5] for r in self.rows),
                "full_checkpoint_bytes": full,
                "write_reduction": full * len(self.rows) / written if written else math.nan,
                "capacity_bytes": self.capacity,
                "capacity_reduction": full / self.capacity if self.capacity else math.nan,
                "quant_row_error_max": max((m for m, _s, _r in self.quant_errors), default=0.0),
                "quant_row_error_mean": sum(s for _m, s, _r in self.quant_errors) / qrows if qrows else 0.0,
            })
        return out


__all__ = ["CheckNRun", "QuantizingStore", "bits_for_restores", "chain_of", "cnr_bits", "decode_rows",
           "encode_rows", "expected_restores", "intermittent_rebaseline"]
