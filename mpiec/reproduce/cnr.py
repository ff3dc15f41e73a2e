"""Check-N-Run (Eisenman et al., NSDI 2022) re-measured: write and capacity reduction of intermittent,
quantized differential checkpoints, the quantizers' error order, accuracy against restores and bit
width (Fig. 14's two axes), the degradation at the bit width chosen from the expected restores, and
the decoupled snapshot's stall; one implementation check (``bits-rule``: cnr's ``bits=auto`` follows
the paper's table, a property of mpiec, not tallied).

**Gates (issue 37).** The byte ratios are judged only where the reduction experiment realized its
regime (``_gate``): the rows modified per interval within ``ROWS_TOLERANCE`` of the paper's 26 %, the
background writer committing at least ``COMMITTED_MIN`` of the snapshots taken (the reductions count
committed checkpoints only), and a quiet bench. The degradation runs (``sync`` mode, deterministic
training) and the quantizers' error order (a pure function of trained rows) give bit-identical
figures whatever the host's load, so no disturbance gate applies to them. The snapshot stall per
interval is time-compressed (real CPU against a compressed interval): ``cannot be measured here``,
its figure and the writer's committed share shown.

Owns the paper's figures (constants with their source tag, ``claims.TAGS``),
its claims and thresholds, the time-compressed regime (tiny-derived tables sized so that an interval
of ``INTERVAL`` steps modifies about the paper's 26 % of the rows), the benches that measure them,
the findings and the figures. ``PAPER`` is the ``experiment.Paper`` the CLI calls.

Experiments (one ``mpiec bench`` each, same config apart from the strategy and the kills):

* ``reduction`` — failure-free ``cnr`` (intermittent diffs + adaptive quantization, ``bits=auto``
  and 4-bit) and ``ckpt`` (full fp32 checkpoints at the same interval; the bench adds ``none``):
  write and capacity reduction (``cnr``'s summary), the bytes of a real full checkpoint to check
  its definition against, the trained fp32 rows for the quantizers' error order, and ``none``'s
  final logloss, the failure-free reference of every degradation below;
* ``restores-N-phaseI`` — ``cnr`` at 2, 3, 4 bits (one of them as ``bits=auto``) under N server
  kills, in ``sync`` mode so that each restore reads the checkpoint just before its kill (the
  degradation a restore causes must not depend on how far the background writer lagged); the N-th
  kill is at the same step for every N, so more restores only adds earlier ones. Such a run is
  deterministic, and a bench of failure runs alone does not spread its repeats over the checkpoint
  interval (it learns the interval from the failure-free runs), so the repetitions are one bench
  per phase I: every kill shifted by ``round(I * INTERVAL / repeat)`` steps.

Invariants: verdicts come only from ``claims.judge``; no interval is computed here (the levels come
from ``analysis.stats.median``, Fig. 14's trends from ``analysis.stats.spearman``; the concordance
of the cells' medians is shown beside, without one, labelled); no measured
figure is typed here (the paper's figures are constants with their tag); the degradation of a run is
measured against a failure-free run of the same model, data and training config (training is
deterministic, so the strategy of that run does not matter); the restores of a run are counted from
its events (a rollback to the initial state restores nothing quantized and is not counted); every
claim gets a finding at every scale.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from mpiec.analysis.metrics import finite
from mpiec.analysis.stats import spearman
from mpiec.reproduce.papers import CNR

from .claims import Claim, Finding, Measured, Rule, judge, measured, measured_from
from .experiment import Experiment, Gate, Machine, Realized, Regime, RegimeRow, RunSet, Scale

__all__ = ["CLAIMS", "PAPER", "CheckNRunPaper", "bits_rule", "concordance", "degradation_pct",
           "interval_fractions", "quant_errors", "quantized_restores", "rows_modified_per_interval"]

NAME = "cnr"
TITLE = "Check-N-Run (Eisenman et al., NSDI 2022)"

# -- the paper's figures (tags: claims.TAGS) -------------------------------------------------------
PAPER_INTERVAL_MIN = CNR.interval_min  # [S] checkpoint interval (mpiec.reproduce.papers, as simulate --paper)
PAPER_ROWS_PER_INTERVAL = CNR.rows_per_interval  # [S] share of the embedding rows modified per interval
PAPER_STALL_S = 7.0  # [S] snapshot stall per 30-minute interval (the rest is background work)
PAPER_WRITE_REDUCTION = (6.0, 17.0)  # [P] write bandwidth, intermittent + quantized vs full
PAPER_CAPACITY_REDUCTION = (2.5, 8.0)  # [P] storage capacity
PAPER_QUANT_ALONE = (4.0, 13.0)  # [S] reduction by quantization alone
PAPER_DEGRADATION_PCT = 0.01  # [S] accuracy degradation target, percent
#: [S] bit width from the expected restores: <= 1 -> 2-bit, <= 3 -> 3-bit, <= 20 -> 4-bit, else 8-bit.
PAPER_BITS_RULE = ((1.0, 2), (3.0, 3), (20.0, 4))
PAPER_BITS_ELSE = 8
#: [S] Fig. 9: the quantizers' row error, smallest first, at 2 to 4 bits.
PAPER_ERROR_ORDER = ("adaptive", "asymmetric", "symmetric")
ORDER_BITS = (2, 3, 4)
GRID_BITS = (2, 3, 4)  # Fig. 14's bit widths [S]

# -- the regime (tiny-derived; see regime()) --------------------------------------------------------
TABLE_SCALE = 2  # the tiny preset's cardinalities x 2: a dense replica < 1 % of the table bytes
DIM = 64  # per-row metadata (id, optimizer state, fp16 scale/bias) against the weights as in 4-13x
BOTTOM, TOP = (16,), (16,)  # a small dense MLP: in the paper it is negligible against TB of tables
INTERVAL = 12  # steps: ~26 % of the rows of these tables are modified in 12 steps (computed in regime)
STORAGE = CNR.storage_profile  # remote storage [S]; the profile's figures are an assumption [U]
EVAL_SAMPLES = 8192  # one final evaluation on a fixed set: the degradation is deterministic per model
KILL_GAP = 30  # steps between two kills of a restores experiment (2.5 intervals)
KILL_TAIL = 15  # the last kill this many steps before the end (the phase shift adds < INTERVAL)
METHODS = ("symmetric", "asymmetric", "adaptive")
MAX_TRAINED_ROWS = 40000  # rows quantized for claim 3 (all of them at this scale)


@dataclass(frozen=True)
class Setup:
    """What a scale runs: training steps, the numbers of restores, the variants of ``reduction``."""

    steps: int
    restores: tuple[int, ...]
    extra_variants: bool  # ckpt and the 4-bit cnr in ``reduction`` (not at smoke: 3 runs in all)


def setup(scale: Scale) -> Setup:
    return scale.pick(Setup(60, (1,), False), Setup(120, (1, 2, 3), True), Setup(240, (1, 2, 3, 5), True))


def variant(name: str, **params: Any) -> str:
    """A bench variant spelled as the result files record it (``Config.variant``: keys sorted), so that
    ``RunSet.of`` finds its runs."""
    return ":".join([name] + [f"{k}={v}" for k, v in sorted(params.items())])


CNR_PARAMS = {"diff": "intermittent", "quantization": "adaptive", "interval": INTERVAL}
AUTO = variant("cnr", **CNR_PARAMS, bits="auto")  # the paper's configuration (async: cnr's default)
CNR4 = variant("cnr", **CNR_PARAMS, bits=4)  # what the rule picks for 4 to 20 expected restores
CKPT = variant("ckpt", interval=INTERVAL)  # full fp32 checkpoints at the same interval


def sync_variant(bits: int | str) -> str:
    return variant("cnr", **CNR_PARAMS, mode="sync", bits=bits)


# -- the claims (thresholds with their rationale) ---------------------------------------------------
_RHO_WHY = ("Spearman ρ pooled over the other axis (which adds its spread as noise): |ρ| ≥ 0.5 is a clear "
            "monotone trend, ≥ 0.2 a trend; no effect is ρ = 0 (the interval must clear it)")
CLAIMS = (
    Claim(NAME, "write-bandwidth", "intermittent differential checkpoints with adaptive quantization (bits "
          "from the expected restores) write 6-17x fewer bytes than full fp32 checkpoints",
          "6-17x lower", "P",
          Rule("at_least", PAPER_WRITE_REDUCTION[0], 3.0,
               why="the range's lower end (its spread is the models' and the restores expected) reproduces "
                   "it; 3x, the reduction quantization alone gives at 8 bits on fp32 rows with their state, "
                   "is partly: below it the differential part adds nothing", null=1.0), "x",
          quote="reduces the required write bandwidth by 6-17x"),
    Claim(NAME, "capacity", "the storage a restore needs (baseline + diffs, quantized) is 2.5-8x smaller "
          "than one full fp32 checkpoint", "2.5-8x lower", "P",
          Rule("at_least", PAPER_CAPACITY_REDUCTION[0], 1.5,
               why="the range's lower end reproduces it; 1.5x (a third of the bytes saved) is partly; no "
                   "effect is 1x", null=1.0), "x",
          quote="reduces the required storage capacity by 2.5-8x"),
    Claim(NAME, "quantization-error", "on trained embedding rows the row error is adaptive < asymmetric "
          "< symmetric at 2-4 bits (Fig. 9)", "order at 2, 3, 4 bits", "S",
          Rule("at_least", 1.0, 0.6, why="the order at all three widths is Fig. 9; at two of three, partly")),
    Claim(NAME, "degradation-vs-restores", "accuracy degradation grows with the number of restores from "
          "a quantized checkpoint (Fig. 14)", "grows with restores", "S",
          Rule("at_least", 0.5, 0.2, why=_RHO_WHY, null=0.0), ""),
    Claim(NAME, "degradation-vs-bits", "accuracy degradation shrinks as the bit width grows (Fig. 14)",
          "2 > 3 > 4 bits", "S", Rule("at_most", -0.5, -0.2, why=_RHO_WHY, null=0.0), ""),
    Claim(NAME, "auto-degradation", "with the bit width from the expected restores, the accuracy "
          "degradation stays under the target", "< 0.01 %", "S",
          Rule("at_most", PAPER_DEGRADATION_PCT, 10 * PAPER_DEGRADATION_PCT,
               why="the paper's target reproduces it; ten times it (0.1 %, still below what a production "
                   "model's retraining noise moves) is partly"), " %"),
    Claim(NAME, "snapshot-stall", "training stalls only for the snapshot (about 7 s per 30-minute "
          "interval); quantization and the write run in the background within the interval",
          f"{PAPER_STALL_S:g} s / {PAPER_INTERVAL_MIN:g} min = "
          f"{100 * PAPER_STALL_S / (60 * PAPER_INTERVAL_MIN):.2f} %", "S",
          Rule("at_most", 100 * PAPER_STALL_S / (60 * PAPER_INTERVAL_MIN), 1.0,
               why="the paper's ratio; 1 % of the interval is partly"), " %"),
    # mpiec's own check: its bits=auto follows the paper's table (a copy of the rule, not a claim)
    Claim(NAME, "bits-rule", "cnr's bits=auto picks the paper's width for the planned kills: <= 1 -> 2, "
          "<= 3 -> 3, <= 20 -> 4, else 8 bits", "2/3/4/8 bits", "S",
          Rule("at_least", 1.0, 0.5, why="every bits=auto run must follow the table"), check=True),
)
_BY_KEY = {c.key: c for c in CLAIMS}
#: The realized regime's tolerances (``experiment.Realized``), with why.
ROWS_TOLERANCE = (0.05, "the diffs' size is the share of rows modified per interval: ±5 points of the "
                        "paper's 26 % keep the differential part's bytes within a fifth")
COMMITTED_MIN = (0.9, "the reductions count committed checkpoints only: a background writer that commits "
                      "fewer than 90 % of the snapshots taken is not sustaining the interval, and bytes "
                      "it never wrote would flatter the reduction")


# -- pure helpers (unit-tested) --------------------------------------------------------------------
def bits_rule(restores: float) -> int:
    """The paper's bit width for ``restores`` expected restores (``PAPER_BITS_RULE``)."""
    for limit, bits in PAPER_BITS_RULE:
        if restores <= limit:
            return bits
    return PAPER_BITS_ELSE


def kill_plan(n: int, steps: int, shift: int = 0) -> tuple[str, ...]:
    """``n`` server kills, the last ``KILL_TAIL - shift`` steps before the end, ``KILL_GAP`` apart,
    alternating servers (the last one on server 0): a plan of more kills only adds earlier ones."""
    last = steps - KILL_TAIL + shift
    return tuple(f"server:{(n - 1 - j) % 2}@step={last - KILL_GAP * (n - 1 - j)}" for j in range(n))


@lru_cache(maxsize=1)
def cardinalities() -> tuple[int, ...]:
    from mpiec.launch.resolve import load_config

    return tuple(int(c) * TABLE_SCALE for c in load_config(preset="tiny", memory=False).data.cardinalities)


def sets() -> tuple[str, ...]:
    """``--set`` overrides of the tiny preset shared by every run of this paper."""
    cards = ",".join(map(str, cardinalities()))
    return (f"model.dim={DIM}", f"model.bottom={list(BOTTOM)}", f"model.top={list(TOP)}",
            f"data.cardinalities=[{cards}]", f"data.eval_samples={EVAL_SAMPLES}", "training.eval_every=0",
            f"storage.profile='{STORAGE}'")


def config(steps: int) -> Any:
    """The resolved config of this paper's runs (``cnr``, the paper's variant)."""
    from mpiec.launch.resolve import load_config

    own = ["strategy.diff='intermittent'", "strategy.quantization='adaptive'",
           f"strategy.interval={INTERVAL}"]
    return load_config(preset="tiny", sets=[*sets(), *own], strategy="cnr", steps=steps, memory=False)


def interval_fractions(cfg: Any, interval: int, steps: int) -> list[float]:
    """Share of all embedding rows touched (so modified: every touched row gets a gradient) in each
    interval of ``interval`` steps, from the synthetic data generator (samples are a pure function of
    the seed and the global index, so this is what the run trains on)."""
    from mpiec.data.synthetic import SyntheticCriteo

    d = cfg.data
    src = SyntheticCriteo(cfg.training.seed, d.cardinalities, zipf_exponent=d.zipf_exponent,
                          multi_hot=d.multi_hot)
    per_step = cfg.layout.trainers * cfg.training.batch_size
    total = int(sum(d.cardinalities))
    offsets = np.repeat(np.concatenate([[0], np.cumsum(d.cardinalities)[:-1]]), d.bags)
    out = []
    for start in range(0, max(steps - interval + 1, 1), interval):
        ids = np.asarray(src.batch(start * per_step, interval * per_step).ids, dtype=np.int64)
        out.append(len(np.unique(ids + offsets[None, :ids.shape[1]])) / total)
    return out


def rows_modified_per_interval(r: Any) -> float:
    """Measured in a ``cnr`` run: rows of each diff taken right after a baseline (one interval's
    modified rows: intermittent and one-shot diffs are relative to the baseline) over all rows."""
    ck = r.checkpoints
    total = sum(int(c) for c in (r.config.get("data") or {}).get("cardinalities", []))
    if not total or len(ck) < 2:
        return math.nan
    kinds = [_text(k) for k in ck["kind"]]
    vals = [int(ck["rows"][i]) / total for i in range(1, len(ck))
            if kinds[i] == "diff" and kinds[i - 1] == "baseline"]
    return float(np.median(vals)) if vals else math.nan


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes | np.bytes_) else str(x)


def quantized_restores(r: Any) -> int:
    """Rollbacks of a run that restored a checkpoint (the monitor's ``restore_end`` events resuming after
    step 0); a rollback to the initial state restores nothing quantized."""
    n = 0
    for e in r.events:
        if _text(e["kind"]) == "restore_end" and _text(e["role"]) == "monitor":
            words = _text(e["detail"]).split()
            if words and words[-1].isdigit() and int(words[-1]) > 0:
                n += 1
    return n


def _fingerprint(r: Any) -> str:
    c = r.config
    return json.dumps({k: c.get(k) for k in ("model", "data", "training")}, sort_keys=True, default=str)


def reference_for(r: Any, pool: Iterable[Any]) -> Any | None:
    """A failure-free, complete run of ``r``'s model, data and training config (``none`` first): the
    parameters of every failure-free run of that config are the same (deterministic training)."""
    from mpiec.analysis.metrics import failure_run

    key = _fingerprint(r)
    cands = [p for p in pool if p is not r and not failure_run(p) and not p.summary.get("lost")
             and _fingerprint(p) == key and finite(p.summary.get("final_logloss"))]
    cands.sort(key=lambda p: p.strategy != "none")
    return cands[0] if cands else None


def degradation_pct(run_logloss: float, ref_logloss: float) -> float:
    """Accuracy degradation in percent: the relative increase of the final logloss (normalized entropy
    up to the constant of the label entropy, the production models' accuracy metric) over the
    failure-free run's."""
    if not (finite(run_logloss) and finite(ref_logloss)) or ref_logloss <= 0:
        return math.nan
    return 100.0 * (run_logloss / ref_logloss - 1.0)


def concordance(grid: dict[tuple[int, int], list[float]], along: str = "both") -> float:
    """Share of the comparable pairs of cells ``(bits, restores) -> degradations`` ordered as Fig. 14:
    same bits, more restores -> more degradation; same restores, more bits -> less (``along``:
    ``"restores"`` or ``"bits"`` keeps only that kind of pair). Medians per cell; a tie counts half;
    nan without a comparable pair."""
    med = {k: float(np.median(v)) for k, v in grid.items() if len(v)}
    keys = sorted(med)
    score, pairs = 0.0, 0
    for i, (b1, n1) in enumerate(keys):
        for b2, n2 in keys[i + 1:]:
            if b1 == b2 and n1 != n2 and along != "bits":
                lo, hi = (med[(b1, n1)], med[(b2, n2)]) if n1 < n2 else (med[(b2, n2)], med[(b1, n1)])
            elif n1 == n2 and b1 != b2 and along != "restores":
                lo, hi = (med[(b2, n2)], med[(b1, n1)]) if b1 < b2 else (med[(b1, n1)], med[(b2, n2)])
            else:
                continue
            pairs += 1
            score += 1.0 if hi > lo else 0.5 if hi == lo else 0.0
    return score / pairs if pairs else math.nan


def quant_errors(x: np.ndarray, bits: Sequence[int] = ORDER_BITS,
                 methods: Sequence[str] = METHODS) -> dict[tuple[str, int], float]:
    """Mean relative row error ``||x - x'|| / ||x||`` of each method at each bit width, on the rows of
    ``x`` (float32, ``[n, dim]``) with a non-zero norm, quantized row-wise as ``cnr`` writes them."""
    from mpiec.kernels.quantize import dequantize, quantize, row_l2_error

    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1)
    keep = norms > 0
    x, norms = np.ascontiguousarray(x[keep]), norms[keep]
    out = {}
    for m in methods:
        for b in bits:
            err = row_l2_error(x, dequantize(quantize(x, m, b)))
            out[(m, b)] = float(np.mean(err / norms)) if len(x) else math.nan
    return out


def order_share(errors: dict[tuple[str, int], float], bits: Sequence[int] = ORDER_BITS) -> float:
    """Share of ``bits`` at which ``PAPER_ERROR_ORDER`` holds strictly (nan without every figure)."""
    held = []
    for b in bits:
        e = [errors.get((m, b), math.nan) for m in PAPER_ERROR_ORDER]
        if not all(math.isfinite(v) for v in e):
            return math.nan
        held.append(all(e[i] < e[i + 1] for i in range(len(e) - 1)))
    return float(np.mean(held)) if held else math.nan


def trained_rows(r: Any, limit: int = MAX_TRAINED_ROWS) -> np.ndarray | None:
    """The embedding weights training updated (row-wise Adagrad accumulator > 0, else any non-zero row)
    in the newest complete checkpoint of a ``ckpt`` run (fp32); None where there is none."""
    from mpiec.storage.checkpoint import CheckpointError, CheckpointStore

    dim = int((r.config.get("model") or {}).get("dim", 0))
    roots = [Path(str(r.summary.get("checkpoint_dir") or "")), r.path.with_suffix(".ckpt")]
    for root in roots:
        if not str(root) or not root.is_dir():
            continue
        try:
            store = CheckpointStore(root, warn=False)
            step = store.latest()
            if step is None:
                continue
            parts = sorted(p for p in store.manifest(step)["parts"] if p.startswith("server-"))
            rows = []
            for p in parts:
                table = np.asarray(store.read_part(step, p)["table"])
                used = table[:, dim] > 0 if table.shape[1] > dim else np.any(table[:, :dim] != 0, axis=1)
                rows.append(table[used, :dim])
        except (CheckpointError, OSError, KeyError, ValueError):
            continue
        if rows:
            x = np.vstack(rows)
            return np.ascontiguousarray(x[:limit], dtype=np.float32)
    return None


# -- the paper module -------------------------------------------------------------------------------
def _median(values: Iterable[Any]) -> float:
    v = [float(x) for x in values if finite(x)]
    return float(np.median(v)) if v else math.nan


def _fmt(x: float, spec: str = ".3g") -> str:
    return f"{x:{spec}}" if finite(x) else "—"


class CheckNRunPaper:
    """``experiment.Paper`` for Check-N-Run."""

    name = NAME
    title = TITLE
    scope = (
        "**What this machine can and cannot establish.** It can establish the byte ratios of "
        "intermittent quantized diffs against full checkpoints where a regime modifies the paper's "
        "share of rows per interval (gated on that share being realized and on the writer committing "
        "the snapshots), the quantizers' error order on trained rows, and how the degradation follows "
        "the bit width and the number of restores (deterministic runs: bit-identical whatever the "
        "load). It cannot establish the decoupled snapshot's stall or whether the background writer "
        "keeps up at a 30-minute interval: time is compressed about 10^4-fold, so an interval lasts a "
        "fraction of a second against real CPU for the copy and the quantization; nor the 0.01 % "
        "degradation target at the accuracy of a production model of terabytes. A cluster run "
        "(`jobscripts/reproduce.sbatch`) runs the same regime with a core per rank: the byte ratios "
        "and degradations are the same (they do not depend on speed), the stall per interval is closer "
        "to real but still compressed unless the interval is made minutes long.")

    def claims(self) -> Sequence[Claim]:
        return CLAIMS

    # -- regime --------------------------------------------------------------------------------
    def regime(self, scale: Scale) -> Regime:
        from mpiec.kernels.quantize import packed_row_bytes
        from mpiec.launch.resolve import storage_model
        from mpiec.model.dlrm import DLRMShape, n_params

        st = setup(scale)
        cfg = config(st.steps)
        rows = int(sum(cfg.data.cardinalities))
        state = 1 if cfg.training.optimizer == "adagrad" else 0
        full_row = (cfg.model.dim + state) * 4 + 8  # fp32 weights and state, int64 id (ckpt's part)

        def q_row(bits: int) -> int:  # packed codes, fp16 scale and bias, fp32 state, int32 id
            return packed_row_bytes(cfg.model.dim, bits) + 4 + 4 * state + 4

        q_lo, q_hi = full_row / q_row(8), full_row / q_row(2)
        shape = DLRMShape(13, len(cfg.data.cardinalities), cfg.model.dim, tuple(cfg.model.bottom),
                          tuple(cfg.model.top))
        dense = n_params(shape) * 4 * (2 if cfg.training.dense_optimizer == "adagrad" else 1)
        dense_share = dense / (rows * full_row)
        fr = interval_fractions(cfg, INTERVAL, st.steps)
        frac = float(np.mean(fr)) if fr else math.nan
        storage = storage_model(cfg)
        per_server = rows * full_row / cfg.layout.servers
        write_s = (per_server / (storage.write_mb_s * 1e6) + storage.latency_s) if storage.write_mb_s \
            else math.nan
        kills = [kill_plan(n, st.steps) for n in st.restores]  # phase 0
        summary = (f"Tiny-derived tables ({len(cfg.data.cardinalities)} tables, {rows:,} rows = the tiny "
                   f"preset's x{TABLE_SCALE}, dim {cfg.model.dim}), {cfg.layout.trainers} trainers, "
                   f"{cfg.layout.servers} servers, {st.steps} steps of "
                   f"{cfg.layout.trainers * cfg.training.batch_size} samples. One paper interval of "
                   f"{PAPER_INTERVAL_MIN:g} minutes = {INTERVAL} steps (the steps in which the share of rows "
                   "modified is the paper's), a fraction of a second here: time is compressed about "
                   "10^4-fold, so the ratios below are kept in bytes and rows, not in seconds. Storage: "
                   f"{storage.describe()}. Repetitions: {scale.repeat}.")
        rows_out = (
            RegimeRow("checkpoint interval", f"{PAPER_INTERVAL_MIN:g} min [S]", f"{INTERVAL} steps", True,
                      "chosen so that the rows modified per interval are the paper's (next row); its wall "
                      "time is measured (write-bandwidth's extra: interval_s)"),
            RegimeRow("rows modified per interval", f"~{PAPER_ROWS_PER_INTERVAL:.0%} [S]",
                      _fmt(100 * frac, ".1f") + " %",
                      abs(frac - PAPER_ROWS_PER_INTERVAL) <= 0.05 if math.isfinite(frac) else None,
                      f"computed from the data generator over {len(fr)} intervals (rows touched in "
                      f"{INTERVAL} steps / all rows); the runs' own figure (first diff after a baseline) is "
                      "in write-bandwidth's extra"),
            RegimeRow("differential policy", "intermittent, the default [S]", "intermittent", True,
                      "new baseline when 1 + S_1 + ... + S_i <= (i + 1) S_i"),
            RegimeRow("quantization alone (fp32 row / quantized row)",
                      f"{PAPER_QUANT_ALONE[0]:g}-{PAPER_QUANT_ALONE[1]:g}x [S]",
                      f"{q_lo:.1f}x (8-bit) - {q_hi:.1f}x (2-bit)",
                      q_lo <= PAPER_QUANT_ALONE[1] and q_hi >= PAPER_QUANT_ALONE[0],
                      f"dim {cfg.model.dim}: {full_row} B per fp32 row (weights, Adagrad state, id) against "
                      "the packed codes + fp16 scale and bias + fp32 state + int32 id; the dim sets this "
                      "ratio"),
            RegimeRow("dense replica / embedding bytes", "negligible (TB of tables) [U]",
                      f"{100 * dense_share:.2f} %", dense_share <= 0.01,
                      "the dense MLP and its optimizer state are in every checkpoint, fp32, so a large one "
                      "would cap both reductions"),
            RegimeRow("checkpoint storage", "remote storage [S]", storage.name, None,
                      f"a full fp32 part ({per_server / 1e6:.1f} MB per server) takes {_fmt(write_s)} s to "
                      "write under the model; the paper's bandwidth per table byte is not known [U]"),
            RegimeRow("snapshot stall / interval", f"{PAPER_STALL_S:g} s / {PAPER_INTERVAL_MIN:g} min = "
                      f"{100 * PAPER_STALL_S / (60 * PAPER_INTERVAL_MIN):.2f} % [S]", "measured", False,
                      "an interval lasts a fraction of a second on 2 shared cores, so the snapshot copy and "
                      "the background quantization take a larger share of it (write-bandwidth's extra: "
                      "stall_pct, background_per_interval); the byte figures do not depend on it"),
            RegimeRow("restores per run", "1 .. N (Fig. 14) [S]", ", ".join(map(str, st.restores)), True,
                      "server kills with full rollback to the newest checkpoint (sync mode, so the "
                      "checkpoint just before the kill), phase 0: " + " | ".join("; ".join(k) for k in kills)
                      + f"; the other phases shift every kill by up to {INTERVAL - 1} steps"),
            RegimeRow("training after the last restore", "the rest of a long production training [U]",
                      f"{KILL_TAIL - INTERVAL + 1}-{KILL_TAIL} steps (by phase)", False,
                      "the degradation is the restore's near-term effect: on a model trained for seconds, "
                      "tens of further steps move the final logloss by tenths of a percent either way "
                      "(more than the paper's 0.01 % target), which would bury the restore's own effect"),
            RegimeRow("shards", "not known [U]", f"{cfg.layout.servers} servers", None, ""),
        )
        return Regime(summary, rows_out)

    # -- experiments ---------------------------------------------------------------------------
    def experiments(self, scale: Scale) -> list[Experiment]:
        st = setup(scale)
        common = sets()
        variants = (AUTO, CNR4, CKPT) if st.extra_variants else (AUTO,)
        out = [Experiment("reduction", "write and capacity of cnr against full checkpoints, failure-free",
                          variants, sets=common, repeat=scale.repeat, steps=st.steps)]
        for n in st.restores:
            auto = bits_rule(n)
            # bits=auto stands for the width the rule picks; the other widths of Fig. 14 run fixed
            fixed = [b for b in GRID_BITS if b != auto] if st.extra_variants else []
            for i in range(scale.repeat):
                out.append(Experiment(
                    f"restores-{n}-phase{i}", f"cnr at 2/3/4 bits restored {n} time(s), phase {i + 1} of "
                    f"{scale.repeat}", (sync_variant("auto"), *(sync_variant(b) for b in fixed)), sets=common,
                    kills=kill_plan(n, st.steps, round(i * INTERVAL / scale.repeat)), failure_free=False,
                    steps=st.steps))
        return out

    # -- findings ------------------------------------------------------------------------------
    def findings(self, runs: dict[str, RunSet], scale: Scale, machine: Machine) -> list[Finding]:
        pool = [r for rs in runs.values() for r in rs.results]
        red = runs.get("reduction")
        restores = {k: rs for k, rs in runs.items() if k.startswith("restores-")}
        gate = self._gate(red)
        out = [*self._reductions(red, gate), self._quant_order(red)]
        cells = self._cells(restores, pool)
        f_rule, f_deg = self._auto(restores, pool, cells)
        out += [*self._trends(cells), f_deg, self._stall(red, gate), f_rule]
        return out

    def _gate(self, red: RunSet | None) -> Gate:
        """The reduction experiment's realized regime: the rows modified per interval and the share of
        the snapshots taken that the background writer committed (``ROWS_TOLERANCE``,
        ``COMMITTED_MIN``), and whether its bench was quiet."""
        if red is None:
            return Gate()
        t = _timing_extra(red.of(AUTO, failure=False))
        rows, lo = PAPER_ROWS_PER_INTERVAL, ROWS_TOLERANCE[0]
        return Gate.of((Realized("rows modified per interval", rows, t["rows_modified_per_interval"],
                                 rows - lo, rows + lo, ROWS_TOLERANCE[1]),
                        Realized("committed / taken checkpoints", 1.0, t["committed_share"],
                                 COMMITTED_MIN[0], math.inf, COMMITTED_MIN[1])), red.results)

    def _trends(self, cells: dict[tuple[int, int], list[float]]) -> list[Finding]:
        """Fig. 14's two axes: Spearman ρ of the restores (of the bit width) against the degradation over
        every restores run, each degradation centred on the median of its bit width (of its number of
        restores), so that the other axis's spread does not drown the one judged; the interval is
        ``analysis.stats.spearman``'s. The concordance of the cells' medians is shown beside (no
        interval)."""
        pts = [(b, n, d) for (b, n), ds in sorted(cells.items()) for d in ds]
        along = {a: concordance(cells, a) for a in ("bits", "restores")}
        res = _resolution_note(cells)
        out = []
        for key, axis, word in (("degradation-vs-restores", 1, "restores"),
                                ("degradation-vs-bits", 0, "bits")):
            other = 1 - axis
            centre = {k: float(np.median([p[2] for p in pts if p[other] == k]))
                      for k in {p[other] for p in pts}}
            e = spearman([p[axis] for p in pts], [p[2] - centre[p[other]] for p in pts])
            m = measured(e, f"Spearman ρ of the {word} and the degradation (centred on the median of its "
                            f"{'bit width' if axis else 'number of restores'}) over {len(pts)} restores "
                            f"runs, {e.method or 'no interval'}") if pts else \
                Measured(math.nan, how="no restores run with a degradation")
            note = (f"Cells' medians ordered as Fig. 14 along the {word}: {_fmt(along[word], '.2f')} of the "
                    "comparable pairs (0.5 is chance; no interval)." if finite(along[word]) else "")
            f = judge(_BY_KEY[key], m, note=" ".join(x for x in (note, res) if x))
            f.extra[f"order_share_along_{word}"] = along[word]
            if axis == 1:
                f.extra.update({f"degradation_pct_{b}bit_{n}restores": _median(v)
                                for (b, n), v in sorted(cells.items())})
            out.append(f)
        return out

    def _stall(self, red: RunSet | None, gate: Gate) -> Finding:
        """The snapshot stall per interval of the bits=auto runs (the training thread's checkpoint time
        over the committed checkpoints' intervals): time-compressed, so not the paper's ratio."""
        runs = red.of(AUTO, failure=False) if red else []
        m = measured_from(_stall_pcts(runs), "per bits=auto run: checkpoint_critical_s / (checkpoints × the "
                                             f"interval's wall time, {INTERVAL} median steps), %")
        t = _timing_extra(runs)
        limit = ("time is compressed about 10^4-fold: an interval lasts a fraction of a second while the "
                 "snapshot copy and the background quantization and write are real CPU time on shared cores, "
                 "so the stall per interval and whether the writer keeps up are not the paper's ratios (the "
                 "regime table: not kept)")
        note = (f"The background work took {_fmt(t['background_per_interval'], '.2g')} intervals per "
                f"checkpoint; {_fmt(100 * t['committed_share'], '.0f')} % of the snapshots taken before the "
                "last were committed." if runs else "")
        return judge(_BY_KEY["snapshot-stall"], m, limit=limit, note=note, gate=gate)

    def _reductions(self, red: RunSet | None, gate: Gate) -> list[Finding]:
        c_write, c_cap = _BY_KEY["write-bandwidth"], _BY_KEY["capacity"]
        runs = red.of(AUTO, failure=False) if red else []
        extra: dict[str, Any] = {}
        if red is not None:
            for label, v in (("cnr_4bit", CNR4), ("cnr_auto", AUTO)):
                rs = red.of(v, failure=False)
                extra[f"write_reduction_{label}"] = _median(write_reduction(r) for r in rs)
                extra[f"capacity_reduction_{label}"] = _median(r.summary.get("capacity_reduction")
                                                               for r in rs)
            extra.update(_timing_extra(runs))
            ck = red.of(CKPT, failure=False)
            real = _median(r.summary.get("checkpoint_bytes", 0) / r.summary["checkpoints"] for r in ck
                           if r.summary.get("checkpoints"))
            model = _median(r.summary.get("full_checkpoint_bytes") for r in runs
                            if r.summary.get("checkpoints"))
            extra["full_bytes_per_checkpoint_ckpt"] = real
            extra["full_bytes_per_checkpoint_cnr_summary"] = model
            written = _median(r.summary.get("checkpoint_bytes", 0) / r.summary["checkpoints"] for r in runs
                              if r.summary.get("checkpoints"))
            extra["write_reduction_vs_ckpt_bytes"] = real / written if written else math.nan
        bits = sorted({int(r.summary["cnr_bits"]) for r in runs if finite(r.summary.get("cnr_bits"))})
        regime_note = (f"bits=auto chose {'/'.join(map(str, bits)) or '?'}-bit (no failure expected in a "
                       "failure-free run); the 4-bit figure (the width for 4-20 expected restores) is in the "
                       "extra.")
        how = ("median over failure-free runs of bytes a full fp32 checkpoint (every row with its state and "
               "id, plus the dense part; cnr's summary full_checkpoint_bytes) at every committed checkpoint "
               "taken before the last / the bytes those checkpoints wrote, the paper's definition; the last "
               "snapshot is left out as in the committed share (whether its write ends before the run "
               "does is timing, not the design), so the figure is one per seed and layout")
        m_w = measured_from((write_reduction(r) for r in runs), how)
        e = extra.get("write_reduction_vs_ckpt_bytes", math.nan)
        check = (f" Against a real ckpt run's bytes per checkpoint: {_fmt(e)}x." if finite(e) else "")
        share, bg = extra.get("committed_share", math.nan), extra.get("background_per_interval", math.nan)
        if finite(share) and share < 1:  # the figure covers the committed checkpoints only
            check += (f" {share:.0%} of the checkpoints taken before the last were committed: the "
                      f"background quantization and write of one took {_fmt(bg, '.2g')} intervals "
                      "(compressed time on shared cores) and the writer queues snapshots without "
                      "back-pressure.")
        f_w = judge(c_write, m_w, note=regime_note + check, gate=gate)
        f_w.extra.update(extra)
        how_c = ("median of cnr's summary capacity_reduction = one full fp32 checkpoint / the most bytes a "
                 "restore needed (the newest checkpoint's chain: baseline + diff, plus the dense part)")
        f_c = judge(c_cap, measured_from((r.summary.get("capacity_reduction") for r in runs), how_c),
                    note=regime_note, gate=gate)
        f_c.extra.update({k: v for k, v in extra.items() if k.startswith("capacity")})
        return [f_w, f_c]

    def _quant_order(self, red: RunSet | None) -> Finding:
        claim = _BY_KEY["quantization-error"]
        ck = red.of(CKPT, failure=False) if red else []
        x = None
        for r in ck:
            x = trained_rows(r)
            if x is not None and len(x):
                break
        if x is None or not len(x):
            why = ("the reduction experiment did not run" if red is None
                   else "no full fp32 checkpoint to quantize (smoke scale runs no ckpt)" if not ck
                   else "the ckpt runs left no readable checkpoint")
            return judge(claim, Measured(math.nan, how=why))
        errors = quant_errors(x)
        share = order_share(errors)
        how = (f"{len(x):,} trained rows (dim {x.shape[1]}) of a ckpt run's newest fp32 checkpoint, "
               "quantized row-wise as cnr writes them; share of 2, 3, 4 bits at which the mean relative row "
               "error is adaptive < asymmetric < symmetric")
        # deterministic: the quantizers are pure functions of the rows, which a seeded run trains alike
        f = judge(claim, Measured(share, n=len(ORDER_BITS), how=how, method="deterministic",
                                  deterministic=True))
        f.extra.update({f"rel_error_{m}_{b}bit": v for (m, b), v in errors.items()})
        f.extra["rows"] = int(len(x))
        return f

    def _cells(self, restores: dict[str, RunSet], pool: list[Any]) -> dict[tuple[int, int], list[float]]:
        """(bits, quantized restores) -> degradations (%), every failure run of the restores experiments."""
        cells: dict[tuple[int, int], list[float]] = {}
        for rs in restores.values():
            for r in rs.results:
                ref = reference_for(r, pool)
                n = quantized_restores(r)
                bits = r.summary.get("cnr_bits")
                if ref is None or not n or not finite(bits) or r.summary.get("lost"):
                    continue
                d = degradation_pct(r.summary.get("final_logloss"), ref.summary.get("final_logloss"))
                if math.isfinite(d):
                    cells.setdefault((int(bits), n), []).append(d)
        return cells

    def _auto(self, restores: dict[str, RunSet], pool: list[Any],
              cells: dict[tuple[int, int], list[float]]) -> list[Finding]:
        from mpiec.analysis.metrics import planned_kills

        c_rule, c_deg = _BY_KEY["bits-rule"], _BY_KEY["auto-degradation"]
        auto_runs = [r for rs in restores.values() for r in rs.of(sync_variant("auto"))]
        ok, lines = [], []
        per_n: dict[int, list[float]] = {}
        for r in auto_runs:
            expected = len([k for k in planned_kills(r) if str(k).startswith(("server", "trainer"))])
            bits = r.summary.get("cnr_bits")
            if not finite(bits):
                continue
            ok.append(float(int(bits) == bits_rule(expected)))
            lines.append(f"{expected} expected -> {int(bits)}-bit (rule {bits_rule(expected)})")
            ref = reference_for(r, pool)
            if ref is not None and quantized_restores(r):
                d = degradation_pct(r.summary.get("final_logloss"), ref.summary.get("final_logloss"))
                if math.isfinite(d):
                    per_n.setdefault(expected, []).append(d)
        share = float(np.mean(ok)) if ok else math.nan
        how = "share of the bits=auto runs whose cnr_bits is the paper's width for their planned kills"
        # deterministic: the width is a pure function of the planned kills (no noise to bound)
        rule_m = Measured(share, n=len(ok), how=how, method="deterministic", deterministic=bool(ok))
        f_rule = judge(c_rule, rule_m,
                       note="; ".join(sorted(set(lines))) + "." if lines else "")
        worst_n = max(per_n, key=lambda n: _median(per_n[n]), default=None)
        if worst_n is None:
            m = Measured(math.nan, how="no bits=auto failure run restored a quantized checkpoint")
        else:
            how = (f"degradation of the bits=auto runs at {worst_n} restore(s), the worst number of "
                   "restores: relative final-logloss increase over the failure-free run")
            m = measured_from(per_n[worst_n], how)
        res = _resolution(cells)
        limit, note = "", ("Regime: a model trained for seconds, the degradation measured a few steps after "
                           "the last restore (the paper: at the end of a long training).")
        # A one-sided resolution, fixed by the other cells' runs before this figure is read: a model whose
        # response band exceeds the target cannot show a degradation under it (no "reproduced" from
        # noise), but a degradation above the whole band is resolved as a miss. The limit is the
        # test's power, not a choice made after seeing which way the figure fell.
        if math.isfinite(res) and res > PAPER_DEGRADATION_PCT and not (m.known and m.value > res):
            limit = (f"a run of {_steps(pool)} steps cannot resolve the paper's {PAPER_DEGRADATION_PCT:g} % "
                     f"target: restores also improve its final logloss by up to {res:.3g} % (the model's "
                     "response to a perturbation, either sign), and the figure is inside that band")
        elif math.isfinite(res) and res > 0:
            note += f" Restores also improved the final logloss by up to {res:.3g} %, below this figure."
        f_deg = judge(c_deg, m, limit=limit, note=note)
        f_deg.extra.update({f"auto_degradation_pct_{n}restores": _median(v)
                            for n, v in sorted(per_n.items())})
        f_deg.extra["resolution_pct"] = res
        return [f_rule, f_deg]

    # -- plots ---------------------------------------------------------------------------------
    def plots(self, runs: dict[str, RunSet], outdir: Path) -> list[Path]:
        from mpiec.analysis.plots import matplotlib_available, pyplot, save_figure

        if not matplotlib_available():
            return []
        plt = pyplot()

        outdir.mkdir(parents=True, exist_ok=True)
        out: list[Path] = []
        pool = [r for rs in runs.values() for r in rs.results]
        cells = self._cells({k: v for k, v in runs.items() if k.startswith("restores-")}, pool)
        if cells:
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            for b in sorted({b for b, _ in cells}):
                ns = sorted(n for bb, n in cells if bb == b)
                med = [_median(cells[(b, n)]) for n in ns]
                lo = [m - min(cells[(b, n)]) for m, n in zip(med, ns, strict=True)]
                hi = [max(cells[(b, n)]) - m for m, n in zip(med, ns, strict=True)]
                ax.errorbar(ns, med, yerr=[lo, hi], marker="o", capsize=3, label=f"{b}-bit")
            ax.axhline(PAPER_DEGRADATION_PCT, color="grey", ls="--", lw=0.8, label="paper's target")
            ax.axhline(0.0, color="black", lw=0.5)
            ax.set_xticks(sorted({n for _, n in cells}))
            ax.set_xlabel("restores from a quantized checkpoint")
            ax.set_ylabel("degradation (% logloss)")
            # the bars are the phases' min–max (a description, not a confidence interval)
            ax.set_title("Check-N-Run: degradation against restores (Fig. 14)\nmedian over the phases, "
                         "bars: their range (min–max)", fontsize=9)
            ax.legend(fontsize=8)
            out += save_figure(plt, fig, outdir, "cnr-degradation-vs-restores")
        red = runs.get("reduction")
        if red is not None:
            labels, write, cap = [], [], []
            for label, v in (("bits=auto", AUTO), ("4-bit", CNR4)):
                rs = red.of(v, failure=False)
                if rs:
                    bits = _median(r.summary.get("cnr_bits") for r in rs)
                    labels.append(f"{label} ({bits:.0f}-bit)" if v == AUTO and finite(bits) else label)
                    write.append(_median(write_reduction(r) for r in rs))
                    cap.append(_median(r.summary.get("capacity_reduction") for r in rs))
            if labels:
                fig, ax = plt.subplots(figsize=(5.5, 3.6))
                xs = np.arange(len(labels))
                ax.bar(xs - 0.2, write, 0.4, label="write reduction")
                ax.bar(xs + 0.2, cap, 0.4, label="capacity reduction")
                ax.axhspan(*PAPER_WRITE_REDUCTION, color="C0", alpha=0.12, label="paper: write 6-17x")
                ax.axhspan(*PAPER_CAPACITY_REDUCTION, color="C1", alpha=0.12, label="paper: capacity 2.5-8x")
                ax.set_xticks(xs, labels)
                ax.set_ylabel("x less than full fp32 checkpoints")
                ax.set_title("Check-N-Run: intermittent diffs + adaptive quantization")
                ax.legend(fontsize=8)
                out += save_figure(plt, fig, outdir, "cnr-reduction")
        return out


def _timing_extra(runs: list[Any]) -> dict[str, float]:
    """What the compressed time does to the decoupled design: the interval's wall time, the snapshot
    stall and the background work per interval, and the share of the checkpoints taken before the
    last that were committed (``committed_share``)."""
    iv, stall, bg, committed, frac = [], [], [], [], []
    for r in runs:
        s, tl = r.summary, r.timeline
        if not len(tl) or not s.get("checkpoints"):
            continue
        interval_s = INTERVAL * float(np.median(tl["dt"]))
        taken = snapshots_taken(r)
        iv.append(interval_s)
        stall.append(100 * float(s.get("checkpoint_critical_s", math.nan)) / (s["checkpoints"] * interval_s))
        bg.append(float(s.get("checkpoint_write_s", math.nan)) / (s["checkpoints"] * interval_s))
        committed.append(committed_share(r, taken))
        frac.append(rows_modified_per_interval(r))
    return {"interval_s": _median(iv), "stall_pct": _median(stall), "background_per_interval": _median(bg),
            "committed_share": _median(committed), "rows_modified_per_interval": _median(frac)}


def snapshots_taken(r: Any) -> int:
    """How many snapshots a run took: after steps INTERVAL-1, 2*INTERVAL-1, ... (the last step: none)."""
    return (len(r.timeline) - 1) // INTERVAL


def _last_snapshot_step(taken: int) -> int:
    return taken * INTERVAL - 1


def committed_share(r: Any, taken: int) -> float:
    """Of the snapshots taken before the last one, the share the background writer committed.

    The last snapshot is left out: its write may still be running when training ends (the run does not
    wait for it), which says nothing about whether the writer keeps up with the interval; counting it
    put an idle run that committed every other snapshot at 8/9 = 0.89, under ``COMMITTED_MIN``. NaN when
    fewer than two snapshots were taken."""
    if taken < 2:
        return math.nan
    last = _last_snapshot_step(taken)
    steps = r.checkpoints["step"] if len(r.checkpoints) else np.zeros(0, dtype=np.int64)
    return float(np.count_nonzero(np.asarray(steps) < last)) / (taken - 1)


def write_reduction(r: Any) -> float:
    """Full fp32 bytes over the bytes written, for the committed checkpoints taken before the last
    snapshot (``committed_share``'s set). cnr's own summary ``write_reduction`` counts every committed
    checkpoint, so whether the last snapshot's background write ended before training did (timing:
    14.7x or 16x for one seed at quick scale) moved it; without that snapshot the figure is a
    function of the seed and the layout. NaN without a checkpoint in that set."""
    full, taken = r.summary.get("full_checkpoint_bytes"), snapshots_taken(r)
    if not finite(full) or taken < 2 or not len(r.checkpoints):
        return math.nan
    steps, written = np.asarray(r.checkpoints["step"]), np.asarray(r.checkpoints["bytes"], dtype=np.float64)
    before = steps < _last_snapshot_step(taken)
    total = float(written[before].sum())
    return float(full) * int(before.sum()) / total if total else math.nan


def _stall_pcts(runs: list[Any]) -> list[float]:
    """Per run: the training thread's checkpoint time over its checkpoints' intervals, % (the interval's
    wall time: ``INTERVAL`` median steps)."""
    out = []
    for r in runs:
        s, tl = r.summary, r.timeline
        if len(tl) and s.get("checkpoints"):
            interval_s = INTERVAL * float(np.median(tl["dt"]))
            stall = float(s.get("checkpoint_critical_s", math.nan))
            out.append(100 * stall / (s["checkpoints"] * interval_s))
    return out


def _resolution(cells: dict[tuple[int, int], list[float]]) -> float:
    """How far the final logloss moves against the degradation's sign: the largest improvement (a
    negative degradation, in %) of any restores run; 0 when none improved, nan without runs."""
    vals = [v for vs in cells.values() for v in vs]
    if not vals:
        return math.nan
    return float(max(0.0, -min(vals)))


def _resolution_note(cells: dict[tuple[int, int], list[float]]) -> str:
    res = _resolution(cells)
    if not math.isfinite(res) or res == 0:
        return ""
    return (f"Some restores improved the final logloss (by up to {res:.3g} %): at this scale the model's "
            "response to a perturbation has either sign, which blurs the order.")


def _steps(pool: list[Any]) -> int:
    return int(max(((r.config.get("training") or {}).get("steps", 0) for r in pool), default=0))


PAPER = CheckNRunPaper()
