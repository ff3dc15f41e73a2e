"""CPR (Maeng et al., MLSys 2021, arXiv 2011.02999): its headline claims re-measured in a
time-compressed regime that keeps the production pattern's ratios.

Owns the paper's claims (figure, source tag, thresholds and why), the regime of the reproduction,
the benches that measure it, the findings (verdicts only through ``claims.judge``) and two figures
(AUC loss against PLS; the checkpoint-related overheads with their intervals).

**The production pattern [S]** (the authors' slides): 18 embedding servers, 20 trainers, a 50 h run
with 5 failures, each failing 4 randomly chosen servers (MTBF 10 h, 22 % of the shards per failure).
Full recovery (every server rolls back to the last checkpoint, the lost steps are re-executed)
costs 13 % on average; partial recovery removes over 91 % of it for 0.0008 AUC; CPR-MFU / -SSU take
the checkpoint-related overhead from 8.2–8.5 % to 0.53–0.68 % [P].

**Compression.** ``SERVERS`` = 8 shards (15 ranks with the spares: what 2 cores start in seconds;
2 of 8 per failure keeps the paper's 22 % of the shards per failure at 25 %, and CPR's interval
rule ``2 · N · MTBF_shard · PLS`` at 8 · PLS · MTBF against the paper's 9 · PLS · MTBF), ``EVENTS``
= 2 failure events of 2 servers killed at the same step, one MTBF ``M`` (steps) apart, the run
``(EVENTS + 1) · M`` steps long. Rounds (``scale.repeat``) move every kill by an evenly spread share of
the MFU/SSU full interval (the phases of every strategy's interval), so a median is over phases. Each
round is its own bench of failure runs only: training is deterministic, so one failure-free ``none`` run
(``baseline``) is every strategy's failure-free reference, and the bench spreads kill phases only from
failure-free runs, so the rounds move the kills themselves. ``pls-sweep`` runs ``cpr`` at more PLS
targets under round 1's kills.

**Save and load cost [U].** The paper does not give its checkpoint write time. Assumed: saving one
shard takes ``SAVE_OVER_MTBF`` = 0.35 % of the MTBF, the ratio at which Young's optimum interval
gives full recovery the paper's 8.2–8.5 % (``sqrt(2 · t_save / MTBF)`` ≈ 8.4 %); loading reads at
the same bandwidth with cold reads. The run's ``[storage]`` write/read bandwidth per rank is set from
it for the shard's bytes at ``STEP_S`` a step (the step time the sizing assumes; the findings show
the realized ratio, which the machine's own write cost — fsync, commit, 8 writers on 2 cores —
raises). Rescheduling (the fourth cost of full recovery in the paper) is not modelled: mpiec's
detection, shrink/agree and replacement are taken out of the overheads.

**MTBF and the interval rules.** Every run is given ``failures.mtbf_steps`` = M, the time
between failure *events* (Young's interval for full recovery: one rollback per event). mpiec's own
estimate from a kill plan counts every killed server as a failure (right for CPR's PLS rule, √2
too short for Young with 2 servers per event), so it is set explicitly, and the ``cpr`` variants get
``target_pls`` = PLS / 2 so that their interval is CPR's rule at the per-server MTBF M / 2.

**Measured.** Checkpoint-related overhead of a failure run = (unproductive time − rescheduling) /
(wall − rescheduling): checkpoint stall on the training thread, restore, re-executed steps and
degraded steps, over the run's own failure-free pace (``docs/measurement.md``), so host load from
other jobs does not enter it; the raw ``1 − throughput / none's`` is shown beside. AUC loss = the
failure-free ``none`` run's final AUC − the run's (training is deterministic: every strategy's
failure-free run ends with ``none``'s parameters). PLS = ``cpr``'s ``pls``. Beside the measured
overheads, a bound without the machine's own write cost: each checkpoint's stall replaced by its rows'
bytes at the storage model's bandwidth (``model_stall``). The share of ckpt's overhead a variant
removes: 1 − the geometric mean of the per-round overhead ratios (the rounds share their kills: paired,
Student t on the log ratios). MFU/SSU against plain cpr: 1 − the ratio of their mean AUC losses over
the same rounds (paired, Fieller's interval); when plain cpr's loss is not above what the smallest
perturbation costs (the cpr run with the fewest lost samples), the variants cannot be told apart.
PLS against the AUC loss: Spearman's ρ, with an interval from 10 points. Every interval comes from
``mpiec.analysis.stats``; none is computed here.

**What is a test here (issue 37).** The 13 % average and the > 30 % at P90 are statistics of the
production fleet: ``cannot be measured here``. Full recovery's 8.2–8.5 % follows from the calibrated
``SAVE_OVER_MTBF`` and the share partial recovery removes from the calibrated ``TARGET_PLS``: both
``calibrated (not a test)``, their figures shown. What is judged: full recovery's measured overhead
over Young's prediction at the save cost the run realized (``full-recovery-young``); the MFU/SSU
reductions, re-judged over ``SAVE_BAND`` (ckpt's overhead scaled as the square root of the save
cost, the variants' stall linearly, their other costs not at all); partial recovery's AUC loss at
``TARGET_PLS`` and at ``PLS_BAND``'s ends (the sweep's runs); PLS against the loss; MFU/SSU's loss
against plain cpr's and their quality against full recovery's. Every one is gated (``gate_of``) on
the realized save cost and PLS being within their tolerances and on a quiet bench.

Invariants: verdicts only from ``claims.judge``; every figure computed from result files (the
paper's figures are the constants below, each with its tag); a claim whose runs are missing still
gets a finding.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mpiec.analysis.metrics import failure_run, number
from mpiec.analysis.stats import Estimate, mean_sd, median, paired, ratio_of_means, spearman
from mpiec.config import LayoutConfig
from mpiec.reproduce.papers import CPR
from mpiec.results import overheads, recoveries, strategy_params

from .claims import Assumption, Band, Claim, Finding, Measured, Rule, figure, judge, measured, measured_from
from .experiment import Experiment, Gate, Machine, Realized, Regime, RegimeRow, RunSet, Scale

__all__ = ["CLAIMS", "PAPER", "CprPaper", "Figures", "Plan", "auc_loss", "avoided_share", "gate_of",
           "findings_of", "model_stall", "overhead", "plan_of", "share_removed"]

# -- the paper's figures (source tags: claims.TAGS) --------------------------------------------------
FULL_RECOVERY_PCT = 13.0  # [S] failure handling costs 13 % on average in production (slides)
FULL_RECOVERY_P90_PCT = 30.0  # [S] ... and over 30 % at P90
REMOVED_PCT = 91.0  # [S] partial recovery removed over 91 % of it ...
REMOVED_LOSS = 0.0008  # [S] ... for 0.0008 AUC
CKPT_RELATED_PCT = (8.2, 8.5)  # [P] full recovery's checkpoint-related overhead
MFU_SSU_PCT = (0.53, 0.68)  # [P] the same under CPR-MFU / CPR-SSU
PAPER_SERVERS, PAPER_TRAINERS = CPR.servers, CPR.trainers  # [S] (mpiec.reproduce.papers, as simulate --paper)
PAPER_RUN_H, PAPER_FAILURES, PAPER_PER_FAILURE = CPR.run_h, CPR.failures, CPR.per_failure  # [S]

# -- assumptions of the reproduction [U] ------------------------------------------------------------
#: t_save / MTBF, **calibrated**: Young's optimum full-recovery overhead sqrt(2 · ρ) = 8.37 % at ρ = 0.0035
#: ([P]: 8.2–8.5 %), so full recovery's overhead follows from it (``full-recovery-overhead``: calibrated).
SAVE_OVER_MTBF = 0.0035
#: CPR's PLS target (mpiec's default), **calibrated**: with the paper's 18 shards and 4 per failure it gives
#: T = 0.45 MTBF, where t_save / T = 0.78 % is 9 % of the 8.4 %: the slides' 91 % removed. The share
#: partial recovery removes therefore follows from it (``partial-removes``: calibrated, not a test).
TARGET_PLS = CPR.pls_target.nominal
#: MFU / SSU: full checkpoints at twice plain cpr's PLS target (twice its interval), partial ones every
#: quarter of that; MFU saves a third of the rows each time (3 partials = the full checkpoint the doubled
#: interval saves: equal bytes); SSU the rows of a 10 % sub-sample of the steps. The paper's fractions and
#: schedules are not known.
PARTIAL_TARGET_FACTOR = 2.0
MFU_FRACTION = 1 / 3
SSU_RATE = 0.1
#: Sizing only: the step time the storage bandwidth is computed for (15 ranks of the tiny-derived model on
#: 2 cores); the findings report the realized t_save / MTBF.
STEP_S = 0.003
#: The tiny preset's tables times this: a shard (≈ 690 kB at 8 shards) outweighs the dense part (≈ 105 kB)
#: trainer 0 writes, as embeddings outweigh the MLP in production.
TABLE_SCALE = 8
SERVERS, PER_EVENT, EVENTS, TRAINERS = 8, 2, 2, 2
#: ΔAUC below this is not counted as a loss MFU/SSU could improve on (a rule, not a measurement).
AUC_FLOOR = 1e-4
#: Evaluation samples of the final AUC (tiny's 2000 leave the AUC of two nearby models ~0.001 apart by the
#: order of a few predictions alone, more than the effect of a PLS of a few %); evaluated once, at the end.
EVAL_SAMPLES = 20000


@dataclass(frozen=True)
class Plan:
    """The sizes of one scale."""

    servers: int
    events: int
    per_event: int
    mtbf_steps: int  # M: steps between failure events
    rounds: int
    strategies: tuple[str, ...]  # roles in the recovery rounds: ckpt, cpr, cpr-mfu, cpr-ssu
    sweep: tuple[float, ...]  # effective PLS targets of the sweep (besides TARGET_PLS)
    trainers: int = TRAINERS

    @property
    def steps(self) -> int:
        return (self.events + 1) * self.mtbf_steps

    @property
    def spares(self) -> int:
        return self.events * self.per_event

    @property
    def n_ranks(self) -> int:
        return LayoutConfig(trainers=self.trainers, servers=self.servers, spares=self.spares).n_ranks

    @property
    def cpr_interval(self) -> int:
        """Plain cpr's full-checkpoint interval (steps): CPR's rule at the per-server MTBF."""
        return int(round(2 * self.servers * (self.mtbf_steps / self.per_event) * TARGET_PLS))


def plan_of(scale: Scale) -> Plan:
    """Smoke: 2 shards, one kill, short runs, 3 runs of 6 ranks (the tables and the verdict logic only);
    quick and full: the regime, 3 and 5 rounds, full with the longer MTBF (the machine's own write cost
    weighs less against it). The sweep gives PLS-vs-loss its points with the rounds' cpr runs: 11 at
    full, 10 at quick (``analysis.stats.SPEARMAN_MIN_N``: fewer have no interval, and the quick run
    judged 6 points 'not reproduced' where the full run's 11 said 'partly')."""
    all4 = ("ckpt", "cpr", "cpr-mfu", "cpr-ssu")
    return scale.pick(
        Plan(2, 1, 1, 30, 1, ("ckpt", "cpr"), ()),
        Plan(SERVERS, EVENTS, PER_EVENT, 600, scale.repeat, all4, (0.01, 0.02, 0.03, 0.1, 0.2, 0.5, 1.0)),
        Plan(SERVERS, EVENTS, PER_EVENT, 1000, scale.repeat, all4, (0.01, 0.02, 0.1, 0.2, 0.5, 1.0)),
    )


# -- the model's sizes (from the tiny preset) ---------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _tiny() -> Any:
    from mpiec.launch.resolve import load_config

    return load_config(preset="tiny", memory=False)


def table_rows() -> list[int]:
    return [TABLE_SCALE * c for c in _tiny().data.cardinalities]


def shard_bytes(servers: int) -> float:
    """Bytes of one server's checkpoint part: rows × (fp32 weights + Adagrad's accumulator + 8-byte id)."""
    cfg = _tiny()
    per_row = 4 * (cfg.model.dim + (1 if cfg.training.optimizer == "adagrad" else 0)) + 8
    return sum(table_rows()) / servers * per_row


def save_s(p: Plan) -> float:
    """The storage model's write time of a shard: SAVE_OVER_MTBF of the MTBF at STEP_S a step."""
    return SAVE_OVER_MTBF * p.mtbf_steps * STEP_S


def bandwidth_mb_s(p: Plan) -> float:
    return shard_bytes(p.servers) / save_s(p) / 1e6


def variants(p: Plan) -> dict[str, str]:
    """role → ``mpiec bench`` variant; cpr targets divided by the servers per event (module docstring)."""
    t = TARGET_PLS / p.per_event
    tp = PARTIAL_TARGET_FACTOR * t
    out = {"ckpt": "ckpt", "cpr": f"cpr:target_pls={t:.6g}",
           "cpr-mfu": f"cpr-mfu:target_pls={tp:.6g}:mfu_fraction={MFU_FRACTION:.4f}",
           "cpr-ssu": f"cpr-ssu:target_pls={tp:.6g}:ssu_rate={SSU_RATE:g}"}
    return {k: v for k, v in out.items() if k in p.strategies}


def kills(p: Plan, shift: int) -> tuple[str, ...]:
    """Event j (1..events) at step j · M + shift kills ``per_event`` servers, a different group each time."""
    out = []
    for j in range(1, p.events + 1):
        first = (j - 1) * (p.servers // max(p.events, 1)) + 1
        step = j * p.mtbf_steps + shift
        out += [f"server:{(first + i) % p.servers}@step={step}" for i in range(p.per_event)]
    return tuple(out)


def shift_of(p: Plan, i: int) -> int:
    """Round i's kill shift: i / rounds of the MFU/SSU full interval (twice cpr's)."""
    return int(round(i * PARTIAL_TARGET_FACTOR * p.cpr_interval / max(p.rounds, 1)))


def sets(p: Plan) -> tuple[str, ...]:
    bw = bandwidth_mb_s(p)
    return (f"layout.servers={p.servers}", f"layout.trainers={p.trainers}", f"layout.spares={p.spares}",
            "training.eval_every=0", f"data.eval_samples={EVAL_SAMPLES}",
            f"data.cardinalities=[{','.join(str(c) for c in table_rows())}]",
            f"failures.mtbf_steps={p.mtbf_steps}", "storage.profile=local", f"storage.write_mb_s={bw:.6g}",
            f"storage.read_mb_s={bw:.6g}", "storage.latency_ms=0", "storage.aggregate_mb_s=0",
            "storage.cold_reads=true")


# -- the claims ---------------------------------------------------------------------------------------
def _claim(key: str, text: str, figure: str, tag: str, rule: Rule, unit: str = "", quote: str = "") -> Claim:
    return Claim("cpr", key, text, figure, tag, rule, unit, quote=quote)


#: Why the accuracy thresholds are where they are (the slides' figure is 0.0008; rounded up to 0.001,
#: and twice that still below the 0.001-0.002 DLRM work commonly treats as significant [U]).
_AUC_WHY = ("the slides' 0.0008 rounded up to 0.001 (reproduced); 0.002, still below what DLRM work treats "
            "as a significant AUC change, is the equivalence margin (partly), which the 95 % interval must "
            "not cross. The slides say 'loss' without the metric: it is read as AUC here [U]")
_REMOVE_WHY = ("8.2–8.5 % → 0.53–0.68 % is a 92–94 % reduction: 90 % reproduces it, 75 % (most of the "
               "overhead removed) is partly; no effect is 0 % removed")
_AVOID_WHY = ("a quarter of plain cpr's loss avoided is a clear gain; any avoided share whose interval "
              "clears 0 is partly")
CLAIMS: tuple[Claim, ...] = (
    _claim("full-recovery-average", "failure handling under full recovery costs 13 % of the training time "
           "on average over the production fleet", f"{FULL_RECOVERY_PCT:g} %", "S",
           Rule("at_most", FULL_RECOVERY_PCT, 2 * FULL_RECOVERY_PCT,
                why="the fleet's average; not judged here (a statistic over production jobs)"), " %",
           quote="failure handling costs 13 % on average"),
    _claim("full-recovery-p90", "failure handling under full recovery costs over 30 % of the training time "
           "at the 90th percentile of the production jobs",
           f"> {FULL_RECOVERY_P90_PCT:g} % at P90", "S",
           Rule("at_least", FULL_RECOVERY_P90_PCT, FULL_RECOVERY_P90_PCT / 2,
                why="a percentile over production jobs; not judged here"), " %",
           quote="over 30 % at P90"),
    _claim("full-recovery-overhead", "full recovery's checkpoint-related overhead (checkpoint stalls, "
           "reload and re-executed steps) at Young's interval", f"{CKPT_RELATED_PCT[0]:g}–"
           f"{CKPT_RELATED_PCT[1]:g} %", "P",
           Rule("at_most", CKPT_RELATED_PCT[1], 2 * CKPT_RELATED_PCT[1],
                why="the paper's upper end; not judged here: the save cost is calibrated to give it"), " %",
           quote="checkpoint-related overhead of 8.2–8.5 % (full recovery)"),
    # What is not calibrated in the full-recovery figure: whether the measured overhead is what Young's
    # model predicts at the save cost the run realized (the model the 8.2-8.5 % rests on).
    _claim("full-recovery-young", "full recovery's measured checkpoint-related overhead over Young's "
           "prediction sqrt(2 · t_save / MTBF) at the save cost the run realized",
           "= Young's optimum (8.2–8.5 % at the paper's save cost)", "U",
           Rule("at_most", 1.25, 1.5,
                why="Young's expected overhead is a first-order model and 2 failure events a run make the "
                    "lost work depend on the kill's phase: within 25 % above the prediction reproduces it, "
                    "within 50 % partly; below the prediction passes (a lucky phase, or a lower bound met)"),
           "× Young's"),
    _claim("partial-removes", "partial recovery removes > 90 % of full recovery's overhead",
           f"{REMOVED_PCT:g} % removed", "S", Rule("at_least", 90.0, 75.0, why=_REMOVE_WHY, null=0.0), " %",
           quote="partial recovery removes over 91 % of the overhead"),
    _claim("partial-accuracy", "partial recovery costs about 0.001 AUC or less at that overhead",
           f"{REMOVED_LOSS:g} 'loss' (metric not stated; read as AUC [U])", "S",
           Rule("at_most", 0.001, 0.002, why=_AUC_WHY, equivalence=True), quote="for a 0.0008 loss"),
    _claim("pls-vs-loss", "the accuracy loss grows with the portion of lost samples (PLS)",
           "monotone (CPR's model)", "U",
           Rule("at_least", 0.8, 0.5, why="ρ = 1 is a monotone rise; 0.8 'nearly every step of the sweep'; "
                                         "0.5 a clear but loose trend; no effect is ρ = 0", null=0.0)),
    _claim("mfu-overhead", "CPR-MFU cuts full recovery's checkpoint-related overhead from 8.2–8.5 % to "
           "0.53–0.68 %", "92–94 % reduction", "P", Rule("at_least", 90.0, 75.0, why=_REMOVE_WHY, null=0.0),
           " %", quote="reduce the checkpoint-related overhead from 8.2–8.5 % to 0.53–0.68 %"),
    _claim("ssu-overhead", "CPR-SSU cuts full recovery's checkpoint-related overhead from 8.2–8.5 % to "
           "0.53–0.68 %", "92–94 % reduction", "P", Rule("at_least", 90.0, 75.0, why=_REMOVE_WHY, null=0.0),
           " %", quote="reduce the checkpoint-related overhead from 8.2–8.5 % to 0.53–0.68 %"),
    _claim("mfu-accuracy", "CPR-MFU loses less accuracy than plain partial recovery at equal checkpoint "
           "bytes", "less loss", "S", Rule("at_least", 25.0, 0.0, why=_AVOID_WHY, null=0.0), " %"),
    _claim("ssu-accuracy", "CPR-SSU loses less accuracy than plain partial recovery at equal checkpoint "
           "bytes", "less loss", "S", Rule("at_least", 25.0, 0.0, why=_AVOID_WHY, null=0.0), " %"),
    _claim("mfu-quality", "CPR-MFU's model quality is on par with full recovery's (AUC of full recovery − "
           "MFU's, same kills)", "on par", "P", Rule("at_most", 0.001, 0.002, why=_AUC_WHY, equivalence=True),
           quote="maintaining model quality on par with full recovery"),
    _claim("ssu-quality", "CPR-SSU's model quality is on par with full recovery's (AUC of full recovery − "
           "SSU's, same kills)", "on par", "P", Rule("at_most", 0.001, 0.002, why=_AUC_WHY, equivalence=True),
           quote="maintaining model quality on par with full recovery"),
)
_BY_KEY = {c.key: c for c in CLAIMS}

#: The [U] assumptions the verdicts rest on, with their plausible bands. The save cost: 36 s to 6 min of
#: checkpoint write against the slides' 10 h MTBF, over which Young's full-recovery overhead spans 4.5–14 %,
#: the paper's 8.2–8.5 % and the fleet's 13 % inside it.
SAVE_BAND = Assumption("save-over-mtbf", "save time / MTBF", 100 * SAVE_OVER_MTBF, 0.1, 1.0,
                       "36 s to 6 min of write against the slides' 10 h MTBF: Young's overhead 4.5–14 %, the "
                       "paper's 8.2–8.5 % and the fleet's 13 % inside", " %")
#: mpiec's PLS target; the paper's is not given: a factor of 5 below, 2 above (the sweep runs both ends).
PLS_BAND = Assumption("pls-target", "PLS target", TARGET_PLS, CPR.pls_target.low, CPR.pls_target.high,
                      f"the paper's target is not given: {CPR.pls_target.low_source}; "
                      f"{CPR.pls_target.high_source} (the sweep's ends; mpiec.reproduce.papers)")
#: Tolerances of the realized regime (``experiment.Realized``), with why.
SAVE_TOLERANCE = (2.0, "Young's overhead grows as sqrt(t_save / MTBF): beyond a factor 2 the prediction "
                       "moves by > 41 % and the run stands for another save cost")
PLS_TOLERANCE = (2.0, "CPR's interval rule sets the expected PLS; beyond a factor 2 the run is at another "
                      "point of the trade-off (the sweep covers those)")


# -- figures from result files ------------------------------------------------------------------------
RESCHEDULING = ("detection_s", "shrink_agree_s", "plan_s", "replace_s")


def overhead(r: Any) -> dict[str, float]:
    """Checkpoint-related overhead of a failure run, % (module docstring), with its parts (s): ``pct``,
    ``wall``, ``rescheduling``, ``stall`` (checkpoint stall), ``lost`` (time lost less rescheduling)."""
    tl = r.timeline
    wall = float(tl["t_end"][-1]) if len(tl) else math.nan
    resched = sum(number(rec.get(k)) for rec in recoveries(r) for k in RESCHEDULING
                  if math.isfinite(number(rec.get(k))))
    ov = overheads(r)
    stall = ov.checkpoint_critical_s if math.isfinite(ov.checkpoint_critical_s) else 0.0
    lost = ov.recovery_time_lost_s
    unprod = ov.unproductive_s
    if not math.isfinite(unprod):
        unprod = lost + stall
    related = unprod - resched
    pct = 100.0 * related / (wall - resched) if wall - resched > 0 else math.nan
    # the bound without the machine's own write cost: each checkpoint's stall at the storage model's time
    model = model_stall(r)
    bound = related - stall + model
    base = wall - resched - stall + model
    pct_model = 100.0 * bound / base if base > 0 else math.nan
    return {"pct": pct, "wall": wall, "rescheduling": resched, "stall": stall, "lost": lost - resched,
            "model_stall": model, "pct_model": pct_model}


def model_stall(r: Any) -> float:
    """Seconds the run's checkpoints would stall training at the storage model's write bandwidth alone:
    per checkpoint, one server's share of its embedding rows (the parts are written in parallel); nan
    without a modelled bandwidth or row counts."""
    cfg = r.config if isinstance(r.config, dict) else {}
    storage, layout, model = (cfg.get(k) or {} for k in ("storage", "layout", "model"))
    bw, servers = number(storage.get("write_mb_s")), number(layout.get("servers"))
    dim = number(model.get("dim"))
    rows = r.checkpoints["rows"] if len(r.checkpoints) else np.zeros(0)
    if not (bw > 0 and servers > 0 and dim > 0) or (rows < 0).any():
        return math.nan
    accum = 1 if (cfg.get("training") or {}).get("optimizer", "adagrad") == "adagrad" else 0
    per_row = 4 * (dim + accum) + 8
    return float(rows.sum()) / servers * per_row / (bw * 1e6)


def auc_loss(r: Any, ref: Any) -> float:
    """Final AUC of the failure-free reference − the run's (positive: the run lost accuracy)."""
    return number(ref.summary.get("final_auc")) - number(r.summary.get("final_auc"))


def _lost(r: Any) -> bool:
    return bool(r.summary.get("lost"))


def _fmt(e: Estimate, spec: str = ".3g", unit: str = "") -> str:
    return figure(e, spec, unit)


@dataclass
class Figures:
    """What the findings are computed from: per recovery round, the failure run of each strategy; the
    sweep's cpr runs; the failure-free reference."""

    rounds: list[dict[str, Any]]
    sweep: list[Any]
    reference: Any | None
    baseline_throughput: float = math.nan

    @staticmethod
    def of(runs: dict[str, RunSet]) -> Figures:
        ref = None
        base = runs.get("baseline")
        if base is not None:
            clean = [r for r in base.results if r.strategy == "none" and not failure_run(r) and not _lost(r)]
            ref = clean[0] if clean else None
        rounds = []
        keys = sorted((k for k in runs if k.startswith("recovery-r")), key=lambda k: int(k.rsplit("r", 1)[1]))
        for key in keys:
            rounds.append({r.strategy: r for r in runs[key].results if failure_run(r) and not _lost(r)})
        sweep_rs = runs.get("pls-sweep")
        sweep = ([r for r in sweep_rs.results if failure_run(r) and not _lost(r)]
                 if sweep_rs is not None else [])
        thr = number(ref.summary.get("throughput_sps")) if ref is not None else math.nan
        return Figures(rounds, sweep, ref, thr)

    def runs_of(self, strategy: str) -> list[Any]:
        return [rd[strategy] for rd in self.rounds if strategy in rd]

    def overheads(self, strategy: str, key: str = "pct") -> list[float]:
        return [overhead(r)[key] for r in self.runs_of(strategy)]

    def paired(self, a: str, b: str) -> list[tuple[Any, Any]]:
        return [(rd[a], rd[b]) for rd in self.rounds if a in rd and b in rd]


def _realized(fig: Figures) -> dict[str, float]:
    """t_save / MTBF and the step time the ckpt runs realized: their full checkpoints' slowest part
    over M steps at the run's median step time."""
    from mpiec.results import decode

    ratios, steps, saves, young, worst = [], [], [], [], []
    gaps: list[float] = []  # the intervals before the first failure, one per run
    after: list[float] = []  # ... and after it
    for r in fig.runs_of("ckpt"):
        ck, tl = r.checkpoints, r.timeline
        mtbf = number((r.config.get("failures") or {}).get("mtbf_steps"))
        if not len(ck) or len(tl) < 6 or not mtbf > 0:
            continue
        full = np.array([decode(k) == "full" for k in ck["kind"]], dtype=bool)
        if not full.any():
            continue
        t_save = float(np.median(ck["seconds"][full]))
        step = float(np.median(tl["dt"][5:]))
        ratios.append(t_save / (mtbf * step))
        steps.append(step)
        saves.append(t_save)
        worst.append(float(np.max(ck["seconds"][full])))
        # the intervals ckpt used before and after its first failure (median gaps of its checkpoints' steps)
        # against Young's at the median write
        first = min((int(k.rsplit("=", 1)[1]) for k in (r.config.get("failures") or {}).get("kill", [])
                     if "@step=" in k), default=10**9)
        at = np.unique(ck["step"][full])
        for sel, out in ((at < first, gaps), (at >= first, after)):
            out.append(float(np.median(np.diff(at[sel]))) if sel.sum() > 1 else math.nan)
        young.append(math.sqrt(2 * t_save * mtbf * step) / step)

    def med(v: list[float]) -> float:
        v = [x for x in v if math.isfinite(x)]
        return float(np.median(v)) if v else math.nan

    return {"save_over_mtbf": med(ratios), "step_s": med(steps), "t_save_s": med(saves),
            "gap_steps": med(gaps), "gap_after_steps": med(after), "young_steps": med(young),
            "worst_write_s": med(worst)}


def _raw_overhead(fig: Figures, strategy: str) -> Estimate:
    """1 − throughput / the none run's (rescheduling and host noise included), %."""
    if not fig.baseline_throughput > 0:
        return Estimate(math.nan)
    return median([100.0 * (1 - number(r.summary.get("throughput_sps")) / fig.baseline_throughput)
                   for r in fig.runs_of(strategy)])


def _machine_note(p: Plan, machine: Machine) -> str:
    if not machine.shares_cores(p.n_ranks):
        return ""
    return (f" {p.n_ranks} ranks share {machine.cores} cores: the servers' checkpoint writes (copy, CRC, "
            "fsync) and restores queue for the cores, which inflates every checkpoint's stall beyond the "
            "storage model's time.")


def gate_of(fig: Figures, real: dict[str, float], results: Sequence[Any] = ()) -> Gate:
    """Whether the runs stand for the planned regime: the realized save cost and PLS within their
    tolerances (``SAVE_TOLERANCE``, ``PLS_TOLERANCE``), and the benches not disturbed."""
    pls = median([number(r.summary.get("pls")) for r in fig.runs_of("cpr")])
    checks = []
    if fig.runs_of("ckpt"):
        checks.append(Realized.factor("save time / MTBF", 100 * SAVE_OVER_MTBF, 100 * real["save_over_mtbf"],
                                      SAVE_TOLERANCE[0], SAVE_TOLERANCE[1], " %"))
    if fig.runs_of("cpr"):
        checks.append(Realized.factor("PLS of plain cpr", TARGET_PLS, pls.value, PLS_TOLERANCE[0],
                                      PLS_TOLERANCE[1]))
    return Gate.of(checks, results)


def _young_ratio(r: Any) -> float:
    """A ckpt run's checkpoint-related overhead over Young's prediction at its own save cost:
    ``sqrt(2 · t_save / MTBF)`` with t_save the median of its full checkpoints' writes, the MTBF its
    ``failures.mtbf_steps`` at its median step time."""
    from mpiec.results import decode

    ck, tl = r.checkpoints, r.timeline
    mtbf = number((r.config.get("failures") or {}).get("mtbf_steps"))
    if not len(ck) or len(tl) < 6 or not mtbf > 0:
        return math.nan
    full = np.array([decode(k) == "full" for k in ck["kind"]], dtype=bool)
    if not full.any():
        return math.nan
    rho = float(np.median(ck["seconds"][full])) / (mtbf * float(np.median(tl["dt"][5:])))
    young = 100.0 * math.sqrt(2 * rho)
    return overhead(r)["pct"] / young if young > 0 else math.nan


def _scaled_removed(fig: Figures, v: str, x_pct: float) -> Measured:
    """The share of ckpt's overhead ``v`` removes, were the save cost ``x_pct`` % of the MTBF instead of the
    assumed one, from the same rounds: ckpt at Young's interval scales as sqrt(t_save) (its interval
    follows the save cost), ``v``'s checkpoint stall linearly (its interval is set by PLS, not by t_save),
    the rest of ``v``'s overhead (restore, degraded steps) not at all."""
    k = x_pct / (100 * SAVE_OVER_MTBF)
    pairs = fig.paired("ckpt", v)
    ck, vv = [], []
    for a, b in pairs:
        oa, ob = overhead(a), overhead(b)
        base = ob["wall"] - ob["rescheduling"]
        stall = 100.0 * ob["stall"] / base if base > 0 else math.nan
        ck.append(oa["pct"] * math.sqrt(k))
        vv.append(stall * k + (ob["pct"] - stall))
    return measured(share_removed(vv, ck))


def _sweep_run(fig: Figures, p: Plan, target: float) -> Any | None:
    """The sweep's cpr run at PLS target ``target`` (the variant's per-server target times servers per
    event), or None."""
    for r in fig.sweep:
        t = number(strategy_params(r).get("target_pls"))
        if math.isfinite(t) and math.isclose(t * p.per_event, target, rel_tol=1e-3):
            return r
    return None


def findings_of(fig: Figures, p: Plan, machine: Machine, results: Sequence[Any] = ()) -> list[Finding]:
    """One finding per claim from ``fig`` (the logic ``CprPaper.findings`` runs; unit-testable);
    ``results``: every result file read (their disturbance gates the verdicts)."""
    out: list[Finding] = []
    real = _realized(fig)
    gate = gate_of(fig, real, results)
    mnote = _machine_note(p, machine)
    regime_note = (f"Regime: the assumed save cost t_save = {100 * SAVE_OVER_MTBF:.2g} % of the MTBF [U]; "
                   f"realized {100 * real['save_over_mtbf']:.2g} % (the write's median "
                   f"{1e3 * real['t_save_s']:.3g} ms over M = {p.mtbf_steps} steps of "
                   f"{1e3 * real['step_s']:.3g} ms)."
                   if math.isfinite(real["save_over_mtbf"]) else
                   f"Regime: the assumed save cost t_save = {100 * SAVE_OVER_MTBF:.2g} % of the MTBF [U].")
    ov = {s: median(fig.overheads(s)) for s in ("ckpt", "cpr", "cpr-mfu", "cpr-ssu")}
    ckpt_m = measured(ov["ckpt"], f"ckpt's checkpoint-related overhead over {ov['ckpt'].n} failure runs")

    # 1. the fleet's statistics: not measurable on one machine
    fleet = ("a statistic over the production fleet's jobs (their failures, rescheduling and save costs): "
             "one machine running one regime cannot measure it")
    out.append(_finding(_BY_KEY["full-recovery-average"], ckpt_m,
                        "The figure shown is this regime's full-recovery overhead, not a fleet average.",
                        limit=fleet))
    out.append(_finding(_BY_KEY["full-recovery-p90"], Measured(math.nan, how="a percentile over jobs"),
                        limit=fleet))

    # 2. full recovery's 8.2-8.5 %: follows from the calibrated save cost
    raw = _raw_overhead(fig, "ckpt")
    ckpt_model = median(fig.overheads("ckpt", "pct_model"))
    resched = [overhead(r)["rescheduling"] / max(1, int(r.summary.get("recoveries") or 1))
               for r in fig.runs_of("ckpt")]
    note = (f"1 − throughput / none's: {_fmt(raw, '.3g', ' %')} (rescheduling and host noise included); with "
            f"every write at the storage model's time: {_fmt(ckpt_model, '.3g', ' %')}. {regime_note} "
            "Rescheduling is not modelled: mpiec's detection, shrink and replacement "
            + (f"({np.median(resched):.3g} s per failure) " if resched else "") + "are left out." + mnote)
    extra = {"ckpt_overhead_pct": ov["ckpt"].value, "ckpt_raw_overhead_pct": raw.value,
             "realized_save_over_mtbf": real["save_over_mtbf"], "assumed_save_over_mtbf": SAVE_OVER_MTBF}
    out.append(_finding(_BY_KEY["full-recovery-overhead"], ckpt_m, note, extra, gate=gate,
                        calibrated=f"SAVE_OVER_MTBF = {100 * SAVE_OVER_MTBF:.2g} % was chosen so that "
                                   f"Young's rule gives the paper's {CKPT_RELATED_PCT[0]:g}–"
                                   f"{CKPT_RELATED_PCT[1]:g} %"))

    # 3. ... what is not calibrated: the measured overhead against Young's at the realized save cost
    c = _BY_KEY["full-recovery-young"]
    m = measured_from([_young_ratio(r) for r in fig.runs_of("ckpt")],
                      "per ckpt failure run: its checkpoint-related overhead / sqrt(2 · its median full "
                      "write / (M · its median step)), the median over the rounds")
    young_note = (f"Measured {_fmt(ov['ckpt'], '.3g', ' %')} against Young's "
                  f"{100 * math.sqrt(2 * real['save_over_mtbf']):.3g} % at the realized save cost "
                  f"{100 * real['save_over_mtbf']:.2g} % of the MTBF (above 1: more than the model)."
                  if math.isfinite(real["save_over_mtbf"]) else "")
    if math.isfinite(real["gap_steps"]):
        young_note += (f" ckpt's checkpoints came {real['gap_steps']:.3g} steps apart before the first "
                       f"failure and {real['gap_after_steps']:.3g} after it (medians); Young's rule at the "
                       f"median write gives {real['young_steps']:.3g}")
        if real["gap_after_steps"] > 1.5 * real["gap_steps"]:
            young_note += (f": ckpt takes t_save as the running maximum of every part's write (the slowest "
                           f"{1e3 * real['worst_write_s']:.3g} ms, median over the runs), so one slow write, "
                           "e.g. a replacement's first, lengthens every later interval")
        young_note += "."
    out.append(_finding(c, m, young_note + mnote, extra, gate=gate))

    # 4. the share of it partial recovery removes: follows from the calibrated PLS target
    out.append(_removed(_BY_KEY["partial-removes"], fig, "cpr", ov,
                        _per_failure_note(fig, p, real["step_s"]) + regime_note + mnote, gate=gate,
                        calibrated=f"TARGET_PLS = {TARGET_PLS:g} was derived from the slides' "
                                   f"{REMOVED_PCT:g} % removed (CPR's interval at that PLS against "
                                   "Young's at the calibrated save cost)"))

    # 5. partial recovery's accuracy cost, at the PLS target and at the ends of its band (the sweep)
    c = _BY_KEY["partial-accuracy"]
    if fig.reference is None:
        out.append(_finding(c, Measured(math.nan, how="the failure-free reference run is missing"),
                            gate=gate))
    else:
        ref = fig.reference
        losses = [auc_loss(r, ref) for r in fig.runs_of("cpr")]
        pls = median([number(r.summary.get("pls")) for r in fig.runs_of("cpr")])
        m = measured_from(losses, f"failure-free AUC − cpr's final AUC over {len(losses)} failure runs")
        ends = {x: _sweep_run(fig, p, x) for x in (PLS_BAND.low, PLS_BAND.high)}
        end_m = {x: (measured_from([auc_loss(r, ref)], f"the sweep's cpr run at PLS target {x:g}")
                     if r is not None else Measured(math.nan, how=f"no sweep run at PLS target {x:g}"))
                 for x, r in ends.items()}
        end_m[PLS_BAND.value] = m
        bands = [Band(PLS_BAND, end_m.__getitem__, exact_ends_only=True)] if any(
            r is not None for r in ends.values()) else []
        out.append(_finding(c, m, f"At measured PLS {_fmt(pls, '.3g')} (target {TARGET_PLS:g} [U], not the "
                            "paper's, which is not given) on the tiny-derived model, still learning: updates "
                            "lost then cost more AUC than late in a long production run. The band's ends are "
                            "one sweep run each (no interval).", {"pls": pls.value}, gate=gate, bands=bands))

    # 6. PLS against the AUC loss (every cpr run: the sweep and the rounds)
    c = _BY_KEY["pls-vs-loss"]
    pts = [(r, number(r.summary.get("pls"))) for r in [*fig.runs_of("cpr"), *fig.sweep]]
    if fig.reference is None or len(pts) < 3:
        out.append(_finding(c, Measured(math.nan, how=f"{len(pts)} cpr failure runs (3 needed) or no "
                                                       "failure-free reference"), gate=gate))
    else:
        xs = [x for _, x in pts]
        ys = [auc_loss(r, fig.reference) for r, _ in pts]
        e = spearman(xs, ys)
        m = measured(e, f"Spearman ρ of measured PLS and AUC loss over {len(pts)} cpr failure runs "
                        f"(PLS {min(xs):.3g}–{max(xs):.3g}), {e.method or 'no interval'}")
        out.append(_finding(c, m, "", {"points": len(pts), "pls_min": min(xs), "pls_max": max(xs),
                                       "loss_at_max_pls": ys[int(np.argmax(xs))]}, gate=gate))

    # 7. MFU / SSU overhead against full recovery's, over the save cost's band
    for key, v in (("mfu-overhead", "cpr-mfu"), ("ssu-overhead", "cpr-ssu")):
        band = Band(SAVE_BAND, functools.partial(_scaled_removed, fig, v))
        out.append(_removed(_BY_KEY[key], fig, v, ov, regime_note + _partial_note(fig, v) + mnote, gate=gate,
                            bands=[band] if fig.paired("ckpt", v) else []))

    # 8. MFU / SSU accuracy against plain cpr's at about equal bytes
    for key, v in (("mfu-accuracy", "cpr-mfu"), ("ssu-accuracy", "cpr-ssu")):
        out.append(_accuracy(_BY_KEY[key], fig, v, gate))

    # 9. MFU / SSU model quality against full recovery's (ckpt re-executes every lost step)
    for key, v in (("mfu-quality", "cpr-mfu"), ("ssu-quality", "cpr-ssu")):
        out.append(_quality(_BY_KEY[key], fig, v, gate))
    return out


def _quality(c: Claim, fig: Figures, v: str, gate: Gate) -> Finding:
    """Full recovery's final AUC − ``v``'s, paired by round (the same kills), Student t."""
    pairs = fig.paired("ckpt", v)
    if not pairs:
        return _finding(c, Measured(math.nan, how=f"no round with both ckpt and {v}"), gate=gate)
    e = paired([number(a.summary.get("final_auc")) for a, _ in pairs],
               [number(b.summary.get("final_auc")) for _, b in pairs])
    m = measured(e, f"mean over {e.n} rounds with the same kills of ckpt's final AUC − {v}'s (paired t)")
    return _finding(c, m, "Full recovery re-executes every lost step: its final AUC is the failure-free "
                          "run's (deterministic training).", gate=gate)


def _finding(c: Claim, m: Measured, note: str = "", extra: dict[str, Any] | None = None,
             limit: str = "", **kw: Any) -> Finding:
    """``judge`` with ``extra`` kept beside (``kw``: ``gate``, ``calibrated``, ``bands``)."""
    f = judge(c, m, limit=limit, note=note, **kw)
    if extra:
        f.extra.update({k: v for k, v in extra.items() if isinstance(v, str | int | float | bool)})
    return f


def share_removed(ov_v: Sequence[float], ov_ckpt: Sequence[float]) -> Estimate:
    """1 − the geometric mean over the rounds of ``ov_v / ov_ckpt`` (the same round's overheads, %),
    with the paired Student-t interval on the log ratios (``analysis.stats.paired``): the rounds are
    blocks (the same kills), so the round's own conditions cancel in the ratio."""
    return paired(ov_v, ov_ckpt, "ratio").mapped(lambda r: 100.0 * (1.0 - r), increasing=False)


def _removed(c: Claim, fig: Figures, v: str, ov: dict[str, Estimate], note: str, **kw: Any) -> Finding:
    """1 − overhead(v) / overhead(ckpt), paired by round, %."""
    pairs = fig.paired("ckpt", v)
    per = {key: ([overhead(b)[key] for _, b in pairs], [overhead(a)[key] for a, _ in pairs])
           for key in ("pct", "pct_model")}
    removed = share_removed(*per["pct"])
    bound_e = share_removed(*per["pct_model"])
    if math.isfinite(bound_e.value):
        note = (f"With every write at the storage model's time (the machine's own write cost taken out): "
                f"ckpt {_fmt(median(fig.overheads('ckpt', 'pct_model')), '.3g', ' %')}, {v} "
                f"{_fmt(median(fig.overheads(v, 'pct_model')), '.3g', ' %')}, removed "
                f"{_fmt(bound_e, '.3g', ' %')}. " + note)
    m = measured(removed, f"1 − the geometric mean over {removed.n} rounds with the same kills of {v}'s "
                          "checkpoint-related overhead / ckpt's (paired by round, Student t on the log "
                          "ratios)")
    text = (f"Overheads: ckpt {_fmt(ov['ckpt'], '.3g', ' %')}, {v} {_fmt(ov[v], '.3g', ' %')}. " if v in ov
            else "")
    extra = {"ckpt_overhead_pct": ov["ckpt"].value, f"{v}_overhead_pct": ov[v].value if v in ov else math.nan,
             f"{v}_raw_overhead_pct": _raw_overhead(fig, v).value,
             "removed_pct_storage_model_bound": bound_e.value}
    return _finding(c, m, text + note, extra, **kw)


def _per_failure_note(fig: Figures, p: Plan, step_s: float) -> str:
    """cpr's own cost per failure (restore, degraded and interrupted steps) against the MTBF: fixed
    costs that the time compression does not shrink."""
    per = [overhead(r)["lost"] / max(1, int(r.summary.get("recoveries") or 1)) for r in fig.runs_of("cpr")]
    per = [x for x in per if math.isfinite(x)]
    if not per or not step_s > 0:
        return ""
    x = float(np.median(per))
    return (f"cpr's own cost per failure (restore, the interrupted and degraded steps): {x:.3g} s = "
            f"{100 * x / (p.mtbf_steps * step_s):.2g} % of the MTBF, where the paper's regime has the load "
            f"of {p.per_event} shards ≈ {100 * SAVE_OVER_MTBF:.2g} %: a fixed cost the compression does not "
            "shrink. ")


def _partial_note(fig: Figures, v: str) -> str:
    """The stall per full and per partial checkpoint of ``v``'s runs (a partial's fixed cost)."""
    from mpiec.results import decode

    full: list[float] = []  # stall of each full checkpoint, s
    part: list[float] = []  # ... of each partial one
    fb: list[float] = []  # bytes of each full checkpoint
    pb: list[float] = []  # ... of each partial one
    for r in fig.runs_of(v):
        ck = r.checkpoints
        for kind, b, st in zip(ck["kind"], ck["bytes"], ck["stall_s"], strict=True):
            (full if decode(kind) == "full" else part).append(float(st))
            (fb if decode(kind) == "full" else pb).append(float(b))
    if not full or not part:
        return ""
    return (f" {v}: a full checkpoint stalls training {1e3 * np.median(full):.3g} ms for "
            f"{np.median(fb) / 1e6:.3g} MB, a partial one {1e3 * np.median(part):.3g} ms for "
            f"{np.median(pb) / 1e6:.3g} MB ({len(part)} partials): each server writes and commits its own "
            "partial on the training thread.")


def avoided_share(lc: Sequence[float], lv: Sequence[float]) -> Estimate:
    """100 · (1 − mean(lv) / mean(lc)), %: the share of plain cpr's AUC loss (``lc``, per round) that a
    variant (``lv``, the same rounds: paired) avoids, with Fieller's interval of the paired ratio of
    means (``analysis.stats.ratio_of_means``); nan when cpr's mean loss is not above ``AUC_FLOOR``."""
    a, b = np.asarray(lc, float), np.asarray(lv, float)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if not len(a) or not float(np.mean(a)) > AUC_FLOOR:
        return Estimate(math.nan, n=len(a))
    return ratio_of_means(list(b), list(a)).mapped(lambda r: 100.0 * (1.0 - r), increasing=False)


def _accuracy(c: Claim, fig: Figures, v: str, gate: Gate | None = None) -> Finding:
    """Share of plain cpr's AUC loss that ``v`` avoids under the same kills (``avoided_share``); the bytes
    ratio and the perturbation floor beside."""
    if fig.reference is None:
        return _finding(c, Measured(math.nan, how="the failure-free reference run is missing"), gate=gate)
    pairs = fig.paired("cpr", v)
    lc = [auc_loss(a, fig.reference) for a, _ in pairs]
    lv = [auc_loss(b, fig.reference) for _, b in pairs]
    ratios = [number(b.summary.get("checkpoint_bytes")) / number(a.summary.get("checkpoint_bytes"))
              for a, b in pairs if number(a.summary.get("checkpoint_bytes")) > 0]
    bytes_ratio = median(ratios)
    losses = {"cpr": median(lc), v: median(lv)}
    note = (f"AUC loss: cpr {_fmt(losses['cpr'], '.2g')}, {v} {_fmt(losses[v], '.2g')}; {v} wrote "
            f"{_fmt(bytes_ratio, '.2f')} of cpr's checkpoint bytes.")
    # what the smallest perturbation costs: the cpr run that lost the fewest samples (PLS > 0)
    runs = [*fig.runs_of("cpr"), *fig.sweep]
    small = sorted(x for x in ((number(r.summary.get("pls")), auc_loss(r, fig.reference)) for r in runs)
                   if x[0] > 0 and math.isfinite(x[1]))
    # the noise floor: what the smallest perturbation (the cpr run that lost the fewest samples) costs;
    # a loss of that order is the perturbed trajectory, not the updates lost
    floor = max(AUC_FLOOR, small[0][1]) if small else AUC_FLOOR
    extra = {"bytes_ratio": bytes_ratio.value, "cpr_loss": losses["cpr"].value, f"{v}_loss": losses[v].value,
             "auc_noise_floor": floor}
    m = measured(avoided_share(lc, lv), f"1 − mean({v}'s AUC loss) / mean(plain cpr's) over {len(pairs)} "
                                        "rounds with the same kills, paired (Fieller's interval)")
    if pairs and small and losses["cpr"].value <= floor:
        why = (f"plain cpr's median AUC loss ({losses['cpr'].value:.2g}) is not above the perturbation's "
               f"noise: the cpr run with the fewest lost samples (PLS {small[0][0]:.2g}) lost "
               f"{small[0][1]:.2g} AUC, so which variant loses less cannot be told at this PLS on this model")
        return _finding(c, m, note, extra, limit=why, gate=gate)
    if pairs and not m.known:
        why = (f"plain cpr's mean AUC loss over the rounds ({mean_sd(lc)[0]:.2g}) is not above "
               f"{AUC_FLOOR:g}: nothing measurable to improve on")
        return _finding(c, m, note, extra, limit=why, gate=gate)
    return _finding(c, m, note, extra, gate=gate)


# -- the paper module -------------------------------------------------------------------------------
class CprPaper:
    """The ``Paper`` of CPR."""

    name = "cpr"
    title = "CPR (Maeng et al., MLSys 2021)"
    scope = (
        "**What this machine can and cannot establish.** It can establish CPR's mechanism on real "
        "kills: that partial recovery loses only the updates since the last checkpoint of the failed "
        "shards (PLS as CPR's rule predicts), that MFU/SSU's partial checkpoints lose less than plain "
        "partial recovery at equal bytes, how the AUC loss grows with PLS, and whether full recovery's "
        "measured overhead follows Young's model at the save cost the run realized. It cannot establish "
        "the paper's overhead percentages as a test: the save cost is calibrated to give 8.2-8.5 % and "
        "the PLS target to give the 91 % removed (both shown as calibrated); the 13 % average and the "
        "> 30 % at P90 are fleet statistics; AUC differences are measured on the suite's synthetic data, "
        "not Criteo Terabyte. A cluster run (`jobscripts/reproduce.sbatch`) gives each of the 15 ranks a "
        "core, so the realized save cost is the storage's rather than the shared cores', and its "
        "overheads are throughput; the calibrated figures stay calibrated unless the save cost is "
        "measured on the cluster's storage and the calibration dropped.")

    def claims(self) -> Sequence[Claim]:
        return CLAIMS

    def regime(self, scale: Scale) -> Regime:
        p = plan_of(scale)
        m_s = p.mtbf_steps * STEP_S
        compression = PAPER_RUN_H / PAPER_FAILURES * 3600 / m_s
        young = math.sqrt(2 * save_s(p) * m_s) / m_s
        t_cpr = p.cpr_interval / p.mtbf_steps
        paper_cpr = 2 * PAPER_SERVERS * TARGET_PLS / PAPER_PER_FAILURE
        summary = (f"One paper MTBF (10 h) = M = {p.mtbf_steps} steps ≈ {m_s:.3g} s at {1e3 * STEP_S:g} ms "
                   f"a step (≈ {compression:,.0f}x compressed); {p.servers} embedding servers, {p.trainers} "
                   f"trainers, {p.spares} spares ({p.n_ranks} ranks), {p.events} failure event(s) of "
                   f"{p.per_event} servers in a run of {p.steps} steps, {p.rounds} round(s) at spread "
                   f"phases; the tiny preset's tables x{TABLE_SCALE} ({sum(table_rows()):,} rows); "
                   f"storage model: {bandwidth_mb_s(p):.3g} MB/s per rank write and read, cold reads.")
        rows = (
            RegimeRow("embedding servers (shards)", f"{PAPER_SERVERS} [S]", str(p.servers), False,
                      "fewer: every rank is a process on 2 cores (start-up ~0.6 s each); 8 keeps the "
                      "share per failure and CPR's interval per PLS close"),
            RegimeRow("trainers", f"{PAPER_TRAINERS} [S]", str(p.trainers), False,
                      "they enter no ratio: a trainer failure is not in the pattern"),
            RegimeRow("servers failed per failure", f"{PAPER_PER_FAILURE} of {PAPER_SERVERS} = "
                      f"{PAPER_PER_FAILURE / PAPER_SERVERS:.0%} [S]",
                      f"{p.per_event} of {p.servers} = {p.per_event / p.servers:.0%}", True,
                      "killed at the same step"),
            RegimeRow("failures per run", f"{PAPER_FAILURES} in {PAPER_RUN_H:g} h [S]",
                      f"{p.events} in {p.steps} steps", False,
                      "each killed server needs a spare rank: more events, more ranks on 2 cores"),
            RegimeRow("save time / MTBF", f"{SAVE_OVER_MTBF:.2%} [U]",
                      f"{save_s(p) / m_s:.2%} planned ({1e3 * save_s(p):.3g} ms)", True,
                      "the storage model's write time of a shard; the machine's own write cost adds to it "
                      f"(the realized ratio is checked: within {SAVE_TOLERANCE[0]:g}x)",
                      calibrated="chosen so that Young's rule gives the paper's 8.2–8.5 % "
                                 "(full-recovery-overhead is therefore not a test)", band=SAVE_BAND.text()),
            RegimeRow("load time / MTBF", "not given [U]: = save", f"{save_s(p) / m_s:.2%}", True,
                      "read bandwidth = write bandwidth, cold reads"),
            RegimeRow("Young's interval / MTBF (full recovery)", f"{math.sqrt(2 * SAVE_OVER_MTBF):.3f} [U]",
                      f"{young:.3f} planned", True,
                      "ckpt measures t_save at its first checkpoint; the bench passes the event MTBF "
                      "(failures.mtbf_steps)"),
            RegimeRow("CPR interval / MTBF", f"{paper_cpr:.2f} (PLS {TARGET_PLS:g} [U])", f"{t_cpr:.2f}",
                      True, "2 · N_shards · per-server MTBF · PLS"),
            RegimeRow("PLS target", "not given [U]", f"{TARGET_PLS:g}", True,
                      f"the realized PLS of plain cpr is checked: within {PLS_TOLERANCE[0]:g}x; the sweep "
                      "runs the band's ends",
                      calibrated=f"derived from the slides' {REMOVED_PCT:g} % removed (partial-removes is "
                                 "therefore not a test)", band=PLS_BAND.text()),
            RegimeRow("MFU / SSU schedule", "not known [U]",
                      f"full every {PARTIAL_TARGET_FACTOR:g}x cpr's interval, partials every quarter of it: "
                      f"MFU {MFU_FRACTION:.2f} of the rows, SSU rows of a {SSU_RATE:g} step sample",
                      None, "MFU sized to cpr's bytes; SSU's bytes are measured"),
            RegimeRow("rescheduling", "part of the 13 % [S]", "not modelled", False,
                      "ULFM detection and replacement (~0.1 s) are taken out of the overheads; no verdict "
                      "rests on it (the 13 % and its P90 are fleet statistics: cannot be measured here)"),
            RegimeRow("model", "Criteo Terabyte DLRM [P]", f"tiny x{TABLE_SCALE} tables, synthetic data",
                      False, "minutes of training: the model is still learning when updates are lost"),
        )
        return Regime(summary, rows)

    def experiments(self, scale: Scale) -> list[Experiment]:
        p = plan_of(scale)
        common: dict[str, Any] = {"preset": "tiny", "sets": sets(p), "steps": p.steps}
        v = variants(p)
        out = [Experiment("baseline", "failure-free none: the reference AUC and throughput", ("none",),
                          failure_free=True, repeat=1, **common)]
        for i in range(p.rounds):
            out.append(Experiment(
                f"recovery-r{i}", f"{', '.join(v)} under {p.events} failure(s) of {p.per_event} servers, "
                f"round {i + 1}/{p.rounds} (kills {shift_of(p, i)} steps later)",
                tuple(v.values()), kills=kills(p, shift_of(p, i)), failure_free=False, repeat=1, **common))
        if p.sweep:
            targets = tuple(f"cpr:target_pls={t / p.per_event:.6g}" for t in p.sweep)
            out.append(Experiment("pls-sweep", f"cpr at PLS targets {', '.join(f'{t:g}' for t in p.sweep)} "
                                  "under round 1's failures", targets, kills=kills(p, 0), failure_free=False,
                                  repeat=1, **common))
        return out

    def findings(self, runs: dict[str, RunSet], scale: Scale, machine: Machine) -> list[Finding]:
        return findings_of(Figures.of(runs), plan_of(scale), machine,
                           [r for rs in runs.values() for r in rs.results])

    def plots(self, runs: dict[str, RunSet], outdir: Path) -> list[Path]:
        from mpiec.analysis.plots import matplotlib_available, pyplot, save_figure

        if not matplotlib_available():
            return []
        plt = pyplot()
        fig = Figures.of(runs)
        outdir.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        if fig.reference is not None:
            f, ax = plt.subplots(figsize=(5.5, 3.6))
            groups = (("cpr, recovery rounds", fig.runs_of("cpr"), "o"), ("cpr, PLS sweep", fig.sweep, "s"),
                      ("cpr-mfu", fig.runs_of("cpr-mfu"), "^"), ("cpr-ssu", fig.runs_of("cpr-ssu"), "v"))
            for label, rs, mark in groups:
                if rs:
                    ax.scatter([number(r.summary.get("pls")) for r in rs],
                               [auc_loss(r, fig.reference) for r in rs], marker=mark, label=label)
            ax.axhline(0.0, color="grey", lw=0.5)
            ax.set_xlabel("portion of lost samples (measured PLS)")
            ax.set_ylabel("AUC loss vs failure-free")
            ax.set_title("CPR: AUC loss against PLS")
            ax.legend(fontsize=8)
            written += save_figure(plt, f, outdir, "cpr-auc-vs-pls")
        names = [s for s in ("ckpt", "cpr", "cpr-mfu", "cpr-ssu") if fig.runs_of(s)]
        if names:
            est = [median(fig.overheads(s)) for s in names]
            f, ax = plt.subplots(figsize=(5.5, 3.6))
            vals = [e.value for e in est]
            # only a real 95 % interval is drawn as an error bar; a range of too few rounds is not
            err = [[e.value - e.lo if e.is_ci95 else 0 for e in est],
                   [e.hi - e.value if e.is_ci95 else 0 for e in est]]
            ax.bar(names, vals, yerr=err, capsize=4, color=["#b55", "#58b", "#5a5", "#a85"][:len(names)])
            ax.set_ylabel("checkpoint-related overhead, %")
            shown = ("median and 95 % interval over the rounds" if all(e.is_ci95 for e in est) else
                     f"median over {min(e.n for e in est)}+ rounds (error bars: 95 % intervals; "
                     "none where too few rounds)")
            ax.set_title(f"Same failures: {shown}", fontsize=9)
            written += save_figure(plt, f, outdir, "cpr-overheads")
        return written


PAPER = CprPaper()
