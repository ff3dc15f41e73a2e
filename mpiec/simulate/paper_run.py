"""``mpiec simulate --paper NAME``: a paper's setup simulated, its headline beside the figures.

Owns running a ``papers.Paper``: each variant (a strategy with its own interval or stripe) is swept
on the paper's dedicated cluster with the paper's failures and the preset's cluster flags, in seeded
trials until the intervals are narrow; then the paper's verdict lines set the paper's figure beside
the simulated one, and the inputs are listed as calibrated here or assumed (with their tags).
Invariant: the printed figures are the sweep's rows and the policies it ran, nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable

from mpiec.errors import MpiecError

from .access import changed_fraction
from .costs import Costs
from .failures import HOUR_S, Replay
from .job import Job
from .model import Policy
from .papers import Paper, Variant, preset
from .policies import Setup, baseline, build_policy, cost_model
from .scale import ScaleRow, Trials, servers_per_failure, sweep

__all__ = ["paper_results", "run_paper"]


def _metrics(row: ScaleRow, policy: Policy, job: Job, costs: Costs, steps: int) -> dict[str, float]:
    sc = costs.strategies.get(policy.name)
    every = policy.interval_steps or 0
    per_hour = HOUR_S / policy.run_step_s / every if every else 0.0
    return {
        "overhead": row.overhead, "ettr": row.ettr, "ettr_ci": row.ci.get("ettr", math.nan),
        "time_lost_per_failure_s": row.time_lost_per_failure_s,
        "rebuild_drop": 1.0 - 1.0 / (1.0 + policy.rebuild_slowdown),
        # kill -> the state back in full: the restore, or the rebuild's end (re-executed steps aside)
        "recovery_s": policy.latency_s + (policy.restore_s if policy.kind != "rebuild" else policy.rebuild_s),
        "pls": row.lost_samples / max(1, steps * job.global_batch),
        "write_bytes": policy.ckpt_bytes * per_hour, "capacity_bytes": policy.restore_bytes,
        "changed_fraction": changed_fraction(job, every, sc.access_ratio or 1.0) if sc and every
        else math.nan,
    }


def paper_results(args: argparse.Namespace, costs: Costs, source: str,
                  make_setup: Callable[[argparse.Namespace, Costs, dict], Setup],
                  ) -> tuple[dict[str, dict[str, float]], list[tuple[Variant, ScaleRow]]]:
    """Each variant of ``args.paper`` simulated: its figures (``overhead``, ``recovery_s``, …) by label,
    and the sweep's rows (what ``run_paper`` prints; ``mpiec reproduce`` sets the figures beside its
    own)."""
    from mpiec.launch.resolve import load_config

    paper: Paper = preset(args.paper)
    cfg = load_config(preset=paper.preset, sets=[*paper.sets, *args.set], memory=False)
    setup = make_setup(args, costs, dict(paper.flags))
    scaling = str(paper.flags.get("scaling", "strong"))
    missing = sorted({v.strategy for v in paper.variants if not cost_model(v.strategy).unprotected}
                     - set(costs.strategies))
    if missing:
        raise MpiecError(f"--paper {paper.key} compares {', '.join(missing)}, which the costs ({source}) do "
                         "not calibrate: add measured runs of them")
    process = paper.failures or Replay(())
    results: dict[str, dict[str, float]] = {}
    rows_out: list[tuple[Variant, ScaleRow]] = []
    for v in paper.variants:
        base = Job.from_config(cfg, costs.runtime.step_s)
        job = base.with_ranks(paper.servers, paper.trainers, k=v.k, r=1, scaling=scaling)
        vs = dataclasses.replace(setup, interval_s=v.interval_s if v.interval_s else setup.interval_s)
        step = build_policy(baseline(), costs, job, math.inf, setup=vs).step_s
        job = dataclasses.replace(job, steps=max(1, round(paper.hours * HOUR_S / step)), step_s=step)
        n = job.nodes
        trials = Trials(args.trials, max(args.trials, args.max_trials), args.ci_target)
        rows = sweep(costs, job, [n], [v.strategy], process, trials, args.seed, target_pls=args.target_pls,
                     setup=vs, scaling=scaling, dedicated=(job.servers, job.trainers))
        policy = build_policy(v.strategy, costs, job, process.job_mtbf_s(n), target_pls=args.target_pls,
                              setup=vs, servers_per_failure=servers_per_failure(process, job))
        results[v.label] = _metrics(rows[0], policy, job, costs, job.steps)
        rows_out.append((v, rows[0]))
    return results, rows_out


def run_paper(args: argparse.Namespace, costs: Costs, source: str,
              make_setup: Callable[[argparse.Namespace, Costs, dict], Setup]) -> int:
    paper: Paper = preset(args.paper)
    results, rows_out = paper_results(args, costs, source, make_setup)
    print(f"paper: {paper.title}")
    print(f"headline: {paper.headline}")
    print(f"{'variant':<16} {'strategy':<9} {'interval':<26} {'step ms':>8} {'overhead %':>10} "
          f"{'time lost/failure s':>20} {'ETTR':>18} {'trials':>6}")
    for v, r in rows_out:
        half = r.ci.get("ettr", math.nan)
        # no ± where every trial gave the same ETTR (half-width 0: one figure, no interval)
        ettr = f"{r.ettr:.4f}" + (f" ± {half:.4f}" if math.isfinite(half) and half > 0 else "")
        lost = f"{r.time_lost_per_failure_s:.3g}" if math.isfinite(r.time_lost_per_failure_s) else "—"
        print(f"{v.label:<16} {v.strategy:<9} {r.interval or '—':<26} {r.run_step_s * 1e3:>8.3g} "
              f"{100 * r.overhead:>10.2f} {lost:>20} {ettr:>18} {r.trials:>6}")
        if r.step_path:
            print(f"{'':<16} step: {r.step_path}")
    print("verdicts (paper | simulated):")
    for what, claim, value, half, unit in (paper.verdicts(results) if paper.verdicts else []):
        wide = math.isfinite(half) and abs(half) > 1e-9 * max(1.0, abs(value))  # not just rounding
        shown = "—" if not math.isfinite(value) else \
            f"{value:.3g}" + (f" ± {half:.2g}" if wide else "") + f" {unit}"
        print(f"  {what}: paper {claim} | simulated {shown}")
    print("(a figure without ± is the same in every trial: a failure-free quantity, or one given failure "
          "whose time is fixed; ± is the half-width of the 95 % interval over the trials)")
    print("inputs: " + "; ".join(paper.inputs()))
    print("calibrated here (" + source + "): " + "; ".join(paper.calibrated))
    print("assumed: " + "; ".join(paper.assumed))
    return 0
