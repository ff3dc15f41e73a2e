"""The job as it grows: every strategy simulated at each node count, averaged over seeded trials,
where the strategies cross over, and the table and plot of it.

Owns ``sweep`` (nodes × strategies × trials → ``ScaleRow``), ``crossovers`` and their rendering.
Invariants: a sweep's events are estimated and refused past its ``EventBudget`` before it runs,
and its runs pay their events from the same budget; one trial draws its failures once
(``failures.Schedule``) and every strategy of that trial replays the same ones; a strategy that
does not finish within ``cap`` × the failure-free wall time is reported with ``finished < 1`` and
ETTR 0 for those trials (``none`` at scale: it restarts from scratch at every failure); a
crossover is a sign change of the goodput difference between two consecutive node counts, placed
by linear interpolation in log(nodes).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from mpiec.analysis.stats import mean_t

from .costs import Costs
from .failures import ArrivalProcess, Schedule
from .job import Job
from .model import FAILURE_EVENTS, EventBudget, Failure, Outcome, Policy, simulate
from .policies import Setup, build_policy

__all__ = ["CI_KEYS", "Crossover", "ScaleRow", "Trials", "crossovers", "format_crossovers", "format_table",
           "half_width", "plot", "servers_per_failure", "sweep"]


@dataclass(frozen=True)
class ScaleRow:
    nodes: int
    strategy: str
    servers: int
    interval: str  # checkpoint interval in steps and its rule, "" without checkpoints
    failures: float  # mean per trial
    time_lost_per_failure_s: float
    time_lost_h: float  # mean total per trial
    lost_samples: float
    overhead: float  # failure-free, vs none
    ettr: float
    goodput: float  # kept samples/s over none's failure-free throughput
    finished: float  # fraction of trials that finished within the cap
    unrecoverable: float
    trials: int
    step_s: float = math.nan  # none's step on this job (the step model's, or the given one)
    run_step_s: float = math.nan  # the strategy's failure-free step (protection work exposed)
    step_path: str = ""  # the step model's critical path, when it ran
    # goodput over every node the job holds, idle spares included (nan: no spare count given)
    per_node: float = math.nan
    # half-widths of the 95 % Student-t intervals over the trials (``half_width``: nan with one trial, 0
    # where every trial gave the same figure)
    ci: dict[str, float] = field(default_factory=dict)


#: the figures a row gives an interval for (means over the trials)
CI_KEYS = ("failures", "time_lost_per_failure_s", "time_lost_h", "lost_samples", "ettr", "goodput")


def half_width(values: Iterable[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % Student-t interval) of independent trials (``stats.mean_t``); the
    half-width is 0 where every trial gave the same figure (one figure: nothing to narrow) and nan with
    fewer than two trials."""
    e = mean_t(values)
    return e.value, (0.0 if e.deterministic else e.half_width)


def _failures(schedule: Schedule, job: Job, hold_repair: bool = False) -> Iterator[Failure]:
    i = 0
    while True:
        a = schedule[i]
        if a is None:
            return
        servers: list[int] = []
        trainers = 0
        for node in (a.node, *a.also):
            s, t = job.lost_with(node)
            servers.extend(s)
            trainers += t
        yield Failure(time_s=a.time_s, servers=tuple(servers), trainers=trainers,
                      label=f"node:{a.node}" + (f"+{len(a.also)}" if a.also else ""),
                      wait_s=a.repair_s if hold_repair else 0.0)
        i += 1


def servers_per_failure(process: ArrivalProcess, job: Job) -> float:
    """Servers one arrival of ``process`` takes on ``job``, on average: the process's own figure
    (``servers_per_failure(job)``, e.g. a paper's bursts of servers), else its nodes per arrival
    (bursts: ``1 + burst_p (burst_size - 1)``) times a node's servers (dedicated layouts: the
    servers' share of the nodes)."""
    own = getattr(process, "servers_per_failure", None)
    if callable(own):
        return float(own(job))
    burst_p, burst_size = float(getattr(process, "burst_p", 0.0)), float(getattr(process, "burst_size", 1))
    nodes = 1.0 + burst_p * (burst_size - 1.0)
    return nodes * (job.servers / max(1, job.nodes) if job.dedicated else job.servers_per_node)


@dataclass(frozen=True)
class Trials:
    """How many seeded trials a point runs: at least ``low``; more, in rounds, until the 95 %
    interval of every strategy's ETTR is within ``±target`` of its mean (relative), at most ``high``."""

    low: int = 5
    high: int = 200
    target: float = 0.05

    def settled(self, outs: dict[str, list[Outcome]]) -> bool:
        for runs in outs.values():
            mean, half = half_width(o.ettr for o in runs)
            if not math.isfinite(mean) or mean <= 0:
                continue  # all trials at 0 (the job never finishes): nothing to narrow
            if not (math.isfinite(half) and half <= self.target * mean):
                return False
        return True


def sweep(costs: Costs, job: Job, nodes: list[int], strategies: list[str],
          process: ArrivalProcess | dict[int, ArrivalProcess], trials: int | Trials = 5, seed: int = 0,
          cap: float = 10.0, target_pls: float | None = None, trainers_per_node: int = 1,
          servers_per_node: int = 1, scale_agree: bool = True, budget: EventBudget | None = None,
          on_start: Callable[[], None] | None = None, setup: Setup | None = None,
          scaling: str = "strong", dedicated: tuple[int, int] | None = None) -> list[ScaleRow]:
    """Every strategy at every node count, in seeded trials (``trials``: a fixed number, or a
    ``Trials`` rule that runs more until the intervals are narrow). ``process``: one arrival
    process, or one per node count (a trace maps its nodes per job size). ``setup``: hardware,
    storage, interval and replacement (``policies.Setup``); ``scaling``: ``strong`` (the global batch
    fixed) or ``weak`` (the batch per trainer fixed); ``dedicated = (servers, trainers)``: one job of
    that many server and trainer nodes instead of ``nodes`` co-located ones.

    The whole sweep's events are estimated first (at the least trials) and refused past ``budget``
    (``MAX_EVENTS``) before any of it runs; ``on_start`` is called once that check passed (the CLI
    prints its header then). The runs pay their actual events from the same budget: extra rounds
    stop early, rather than fail, when the budget left would not cover one more."""
    rule = trials if isinstance(trials, Trials) else Trials(trials, trials)
    budget = budget or EventBudget()
    points = []
    sizes = [sum(dedicated)] if dedicated else nodes
    for n in sizes:
        proc = process[n] if isinstance(process, dict) else process
        if dedicated:
            j = job.with_ranks(*dedicated, scaling=scaling)
        else:
            j = job.at_scale(n, trainers_per_node, servers_per_node, scaling=scaling)
        mtbf = proc.job_mtbf_s(n)
        lost = servers_per_failure(proc, j)
        policies = {s: build_policy(s, costs, j, mtbf, target_pls=target_pls, scale_agree=scale_agree,
                                    setup=setup, servers_per_failure=lost) for s in strategies}
        points.append((n, j, proc, mtbf, policies))
    per_trial = [_events(j, proc, n, mtbf, policies, 1, cap) for n, j, proc, mtbf, policies in points]
    events = sum(_events(j, proc, n, mtbf, policies, rule.low, cap) for n, j, proc, mtbf, policies in points)
    budget.check(events, f"this sweep ({len(sizes)} node count(s) x {len(strategies)} strategies x "
                         f"{rule.low} trial(s))")
    if on_start is not None:
        on_start()
    rows: list[ScaleRow] = []
    for (n, j, proc, _mtbf, policies), cost in zip(points, per_trial, strict=True):
        # the job trains its failure-free hours at none's step on this job (every policy's step_s;
        # the step model's when it runs)
        step0 = policies[strategies[0]].step_s
        steps = max(1, round(j.steps * j.step_s / step0))
        ff_wall = steps * step0
        per_strategy: dict[str, list[Outcome]] = {s: [] for s in strategies}
        t = 0
        while t < rule.high:
            schedule = Schedule(proc, n, seed + t)
            hold_repair = bool(getattr(proc, "repair_holds_slot", False))  # the slot waits for the repair
            for s in strategies:
                per_strategy[s].append(simulate(policies[s], steps, _failures(schedule, j, hold_repair),
                                                cap_s=cap * ff_wall, budget=budget))
            t += 1
            if t >= rule.low and (rule.settled(per_strategy) or budget.left < 2 * cost):
                break
        for s in strategies:
            rows.append(_row(n, s, j, policies[s], per_strategy[s], steps, ff_wall, budget, setup, costs))
    return rows


def _row(n: int, s: str, j: Job, p: Policy, outs: list[Outcome], steps: int, ff_wall: float,
         budget: EventBudget, setup: Setup | None, costs: Costs) -> ScaleRow:
    ff = simulate(p, steps, budget=budget)
    fails = [o.failures for o in outs]
    lost = [o.time_lost_s for o in outs]
    per_failure = [o.time_lost_s / o.failures for o in outs if o.failures]
    values: dict[str, list[float]] = {
              "failures": [float(x) for x in fails], "time_lost_per_failure_s": per_failure,
              "time_lost_h": [x / 3600.0 for x in lost], "lost_samples": [o.lost_samples for o in outs],
              "ettr": [o.ettr for o in outs], "goodput": [o.goodput_ratio for o in outs]}
    ci = {k: half_width(v)[1] for k, v in values.items()}
    path = ""
    if setup is not None and setup.hardware is not None and costs.step is not None:
        from .policies import step_model

        sc = costs.strategies.get(s)
        if sc is not None:
            path = step_model(costs, sc, j, setup.hardware).describe()
    return ScaleRow(
        nodes=n, strategy=s, servers=j.servers,
        interval=_interval(p.interval_steps, p.interval_rule, steps),
        failures=statistics.fmean(fails),
        time_lost_per_failure_s=sum(lost) / sum(fails) if sum(fails) else math.nan,
        time_lost_h=statistics.fmean(lost) / 3600.0,
        lost_samples=statistics.fmean(o.lost_samples for o in outs),
        overhead=1.0 - ff_wall / ff.wall_s,
        ettr=statistics.fmean(o.ettr for o in outs),
        goodput=statistics.fmean(o.goodput_ratio for o in outs),
        finished=statistics.fmean(1.0 if o.finished else 0.0 for o in outs),
        unrecoverable=statistics.fmean(o.unrecoverable for o in outs), trials=len(outs),
        step_s=p.step_s, run_step_s=p.run_step_s, step_path=path, ci=ci,
        per_node=(statistics.fmean(o.goodput_ratio for o in outs) * n / (n + setup.spares)
                  if setup is not None and (setup.spares or setup.shrink) else math.nan))


def _events(job: Job, process: ArrivalProcess, nodes: int, mtbf_s: float, policies: dict[str, Policy],
            trials: int, cap: float) -> float:
    """Events one node count of a sweep is expected to take (an estimate for ``EventBudget.check``):
    per trial the node lifetimes drawn at the start and, per strategy, its checkpoints plus a few
    events per failure over the longest run the cap allows; per strategy one failure-free run."""
    failures = min(cap * job.steps * job.step_s / mtbf_s if mtbf_s > 0 else math.inf,
                   process.arrival_bound(nodes))
    total: float = trials * process.start_events(nodes)
    for p in policies.values():
        checkpoints = sum(job.steps / every for every in (p.interval_steps, p.partial_every_steps) if every)
        # a failure: its own cost and up to two turns of the loop (the stretch it cuts, a slowed one)
        total += (trials + 1) * (1 + checkpoints) + trials * (FAILURE_EVENTS + 2) * failures
    return total


def _interval(steps: int | None, rule: str, job_steps: int) -> str:
    if not steps:
        return ""
    if steps >= job_steps:  # the rule asks for less than one checkpoint in the whole job
        return f"none ({steps:,} > the job, {rule})"
    return f"{steps:,} ({rule})"


@dataclass(frozen=True)
class Crossover:
    better: str  # ahead after the crossing (at more nodes)
    worse: str
    low: int  # between these node counts
    high: int
    at: float  # interpolated node count


def crossovers(rows: list[ScaleRow]) -> list[Crossover]:
    """Where one strategy's goodput overtakes another's as the job grows."""
    by: dict[str, dict[int, float]] = {}
    for r in rows:
        by.setdefault(r.strategy, {})[r.nodes] = r.goodput
    nodes = sorted({r.nodes for r in rows})
    names = list(by)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for lo, hi in zip(nodes, nodes[1:], strict=False):
                d0 = by[a][lo] - by[b][lo]
                d1 = by[a][hi] - by[b][hi]
                if d0 == 0 or d1 == 0 or (d0 > 0) == (d1 > 0):
                    continue
                f = d0 / (d0 - d1)
                at = math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo)))
                better, worse = (a, b) if d1 > 0 else (b, a)
                out.append(Crossover(better, worse, lo, hi, at))
    return sorted(out, key=lambda c: c.at)


HEADER = ["nodes", "strategy", "ckpt interval (steps, rule)", "step ms", "failures", "time lost / failure s",
          "time lost h", "lost samples", "overhead %", "ETTR", "goodput %", "trials"]


def _pm(r: ScaleRow, key: str, spec: str, scale: float = 1.0) -> str:
    """``mean ± half-width`` of a row's figure (the interval over its trials)."""
    x = getattr(r, key) * scale
    if not math.isfinite(x):
        return "—"
    half = r.ci.get(key, math.nan) * scale
    # one value (time lost per failure when one trial had failures) has no interval: say so; the same
    # figure in every trial is one figure, not an interval of width 0
    if half == 0:
        return format(x, spec) + " det."
    return format(x, spec) + (f" ± {format(half, spec)}" if math.isfinite(half) else " (n=1)")


def _cells(r: ScaleRow) -> list[str]:
    ettr = _pm(r, "ettr", ".4f") + ("" if r.finished == 1 else f" ({r.finished:.0%} finish)")
    extra = f" ({r.unrecoverable:g} unrecov.)" if r.unrecoverable else ""
    step = (f"{r.run_step_s * 1e3:.3g}" if math.isfinite(r.run_step_s) else "—")
    return [f"{r.nodes:,}", r.strategy, r.interval or "—", step, _pm(r, "failures", ".1f") + extra,
            _pm(r, "time_lost_per_failure_s", ".3g"), _pm(r, "time_lost_h", ".3g"),
            _pm(r, "lost_samples", ".3g") if r.lost_samples else "0", f"{100 * r.overhead:.2f}", ettr,
            _pm(r, "goodput", ".2f", 100.0), str(r.trials)]


def format_table(rows: list[ScaleRow], markdown: bool = False) -> str:
    body = [_cells(r) for r in rows]
    header = list(HEADER)
    if any(math.isfinite(r.per_node) for r in rows):  # spares held idle, or a shrinking job
        header.insert(-1, "goodput / node %")
        for r, cells in zip(rows, body, strict=True):
            cells.insert(-1, f"{100 * r.per_node:.2f}" if math.isfinite(r.per_node) else "—")
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in body])
    widths = [max(len(h), *(len(c[i]) for c in body)) for i, h in enumerate(header)]
    left = {1, 2}
    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(c) for c in body)])


def format_crossovers(cs: list[Crossover]) -> str:
    if not cs:
        return "no crossover: the ranking by goodput is the same at every node count"
    return "\n".join(f"{c.better} overtakes {c.worse} at about {c.at:,.0f} nodes "
                     f"(between {c.low:,} and {c.high:,})" for c in cs)


def plot(rows: list[ScaleRow], path: str, title: str) -> None:
    """ETTR, time lost per failure and goodput against nodes (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.strategy for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    panels = [("ettr", "ETTR (productive / wall time)"),
              ("time_lost_per_failure_s", "time lost per failure (s)"),
              ("goodput", "goodput (% of failure-free none)")]
    for ax, (key, label) in zip(axes, panels, strict=True):
        for s in names:
            pts = [(r.nodes, getattr(r, key) * (100 if key == "goodput" else 1)) for r in rows
                   if r.strategy == s and math.isfinite(getattr(r, key))]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
        ax.set_xscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].set_yscale("log")
    axes[0].legend(title="strategy")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
