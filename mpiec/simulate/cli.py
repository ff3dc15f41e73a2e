"""``mpiec simulate``: the calibrated discrete-event model at cluster scale, from the command line.

Owns the command's arguments, where its costs come from, and what it prints and writes. Three uses:

* default: every strategy on the job (``--preset``, ``--set``) as it grows (``--nodes``), under node
  failures (``--published``, ``--mtbf-node-h``, ``--weibull-shape``, ``--trace``, ``--failures-at``):
  the table of ETTR, time lost and lost samples per strategy and node count, the crossovers, and
  optionally CSV, Markdown and a plot;
* ``--predict FILES``: the model replays measured runs (their config and kill plan) and prints
  predicted against measured time lost, failure-free overhead and lost samples;
* ``--show-costs`` / ``--save-costs FILE``: the calibrated costs.

Costs come from ``--calibrate`` (result files or directories, fitted by ``calibrate.py``), from
``--costs FILE`` (a JSON written by ``--save-costs``), or else from the reference calibration shipped
in ``reference.py`` (measured runs of this suite; its provenance is printed).

Invariants: bad input is one line ``mpiec: error: ...`` on stderr and exit code 2 (``MpiecError``),
checked before the simulation runs: every number flag within bounds generous for real use (nodes up
to ``MAX_NODES``, hours up to ``MAX_HOURS``, ...) and the sweep's simulated events within
``model.MAX_EVENTS`` (estimated before it starts, enforced while it runs), so nothing runs without
end; outputs never overwrite an input or a result file
(``mpiec.analysis.report.check_output_path``); ``main(argv)`` returns the exit code.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
import textwrap
from pathlib import Path

from mpiec.errors import MpiecError
from mpiec.reproduce.papers import PAPERS
from mpiec.storage.model import PROFILES
from mpiec.strategies.api.cover import CorruptionCover

from .checkpoint_io import storage_model
from .corruption import PER_DEFECTIVE_H, PREVALENCE, check_prevalence, corruption_row, format_rows, parse_band
from .costs import Costs, load_costs
from .diffs import DIFF_POLICIES
from .failure_args import add_failure_arguments, check_failure_arguments, failure_process
from .failures import HOUR_S
from .job import MAX_NODES, MAX_RANKS_PER_NODE, Job
from .policies import Setup, baseline, build_policy, modelled, not_modelled
from .scale import CI_KEYS
from .step import DEFAULT_NETWORK_GBPS, Hardware

__all__ = ["build_parser", "main"]

PROG = "mpiec simulate"
DEFAULT_NODES = "8,64,512,2048,10000"
DEFAULT_PRESET = "mlperf-dlrmv2"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Extrapolate measured fault-tolerance costs to cluster scale: a discrete-event model of one "
            "DLRM training job (trainers, embedding servers, step time, node failures) runs every "
            "strategy with costs calibrated from mpiec result files, and prints ETTR, time lost and "
            "lost samples per strategy as the job grows, and where the strategies cross over.", 78),
        epilog="examples:\n"
        "  mpiec simulate                 # reference costs, MLPerf DLRMv2 shape, Llama 3 failure rate\n"
        "  mpiec simulate --calibrate results/ --nodes 8,1000,10000 --plot scale.png\n"
        "  mpiec simulate --calibrate results/ --predict other-results/   # validate against unseen runs\n"
        "  mpiec simulate --mtbf-node-h 5000 --weibull-shape 0.7 --hours 72\n"
        "  mpiec simulate --trace fault_trace.json --trace-scale 1 --nodes 512\n"
        "docs/simulate.md describes the model, its calibration and its validation.")
    g = p.add_argument_group("costs")
    g.add_argument("--calibrate", nargs="+", metavar="PATH",
                   help="result files or directories (recursively *.h5) to calibrate the costs from")
    g.add_argument("--costs", metavar="FILE", help="costs JSON written by --save-costs")
    g.add_argument("--save-costs", metavar="FILE", help="write the costs used to FILE (JSON)")
    g.add_argument("--show-costs", action="store_true", help="print the costs used")
    g.add_argument("--predict", nargs="+", metavar="PATH",
                   help="replay these measured runs (result files or directories: config and kill "
                   "plan) and print predicted against measured time lost, overhead and lost samples")
    j = p.add_argument_group("job")
    j.add_argument("--preset", default=DEFAULT_PRESET,
                   help=f"model and data shape (default: {DEFAULT_PRESET})")
    j.add_argument("--config", metavar="FILE", help="config file (TOML, or JSON from mpiec config --write)")
    j.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, repeatable")
    j.add_argument("--nodes", default=DEFAULT_NODES, metavar="LIST",
                   help=f"node counts, comma-separated (default: {DEFAULT_NODES})")
    j.add_argument("--trainers-per-node", type=int, default=1, metavar="N", help="trainers on each node (1)")
    j.add_argument("--servers-per-node", type=int, default=1, metavar="N",
                   help="embedding servers on each node (1)")
    j.add_argument("--k", type=int, default=4, help="ecrm: data rows per stripe at scale (4)")
    j.add_argument("--r", type=int, default=1, help="ecrm: parity rows per stripe at scale (1)")
    j.add_argument("--step-time", type=float, metavar="S",
                   help="seconds per step without protection (default: the calibration's `none` step)")
    j.add_argument("--hours", type=float, default=24.0,
                   help="failure-free length of the job in hours (default 24); sets the steps")
    j.add_argument("--global-batch", type=int, metavar="N", help="samples per step (default: the config's)")
    add_failure_arguments(p.add_argument_group("failures (one source)"))
    h = p.add_argument_group("cluster (the step model, storage, replacement)")
    h.add_argument("--scaling", choices=("strong", "weak"), default="strong",
                   help="strong: the global batch stays the config's as nodes are added (default); weak: the "
                   "batch per trainer stays, the global batch grows with the trainers")
    h.add_argument("--servers", type=int, metavar="N",
                   help="a parameter-server cluster instead of --nodes: N server nodes (with --trainers)")
    h.add_argument("--trainers", type=int, metavar="N", help="... and N trainer nodes, one rank each")
    h.add_argument("--no-step-model", action="store_true",
                   help="take the step as given (--step-time or the calibration's) and ecrm's parity as its "
                   "measured critical-path time, as before the step model")
    h.add_argument("--no-overlap", action="store_true",
                   help="protection work (ecrm's parity) on the critical path in full, as where ranks share "
                   "cores; default: it overlaps the trainers' compute on the servers' own cores")
    h.add_argument("--trainer-speedup", type=float, default=1.0, metavar="X",
                   help="a trainer computes X times as fast as one calibration core (a GPU: more; default 1)")
    h.add_argument("--server-threads", type=int, default=1, metavar="N",
                   help="cores a server's row-parallel work (gather, apply, parity) spreads over (1)")
    h.add_argument("--network-gbps", type=float, default=DEFAULT_NETWORK_GBPS, metavar="G",
                   help=f"network per rank, Gbit/s (default {DEFAULT_NETWORK_GBPS:g}: CPR's 25 Gbit "
                   "Ethernet; an assumption, one host measures no network)")
    h.add_argument("--storage-profile", default="pfs-node", metavar="NAME",
                   help="checkpoint storage: calibrated (the measured writes and reads) or a profile of "
                   f"mpiec.storage ({', '.join(STORAGE_PROFILES)}; default pfs-node: 1 GB/s per node, 2 GB/s "
                   "for the job, 1 ms; sources in docs/checkpoints.md)")
    h.add_argument("--storage-gbps", type=float, metavar="G",
                   help="aggregate storage bandwidth of the job, GB/s")
    h.add_argument("--node-storage-gbps", type=float, metavar="G", help="storage bandwidth per node, GB/s")
    h.add_argument("--storage-latency-ms", type=float, metavar="MS",
                   help="storage latency per part operation")
    h.add_argument("--interval-s", type=float, metavar="S",
                   help="checkpoint every S seconds (Ckpt-30: 1800) instead of each strategy's rule")
    h.add_argument("--replacement", choices=("spare", "reschedule", "shrink"), default="spare",
                   help="spare: a warm spare takes a failed rank's place (the calibrated replace time; "
                   "default); reschedule: no spare, the scheduler brings a new node after --reschedule-s; "
                   "shrink: no spare, the job goes on with fewer ranks (slower) until the new node joins "
                   "after --reschedule-s (layout.replacement = shrink)")
    h.add_argument("--reschedule-s", type=float, metavar="S",
                   help=f"seconds to reschedule a failed rank (default {DEFAULT_RESCHEDULE_S:g}: an "
                   "assumption, see docs/simulate.md)")
    h.add_argument("--spares", type=int, metavar="N",
                   help="idle spare nodes the job holds (--replacement spare): adds the goodput per node "
                   "the job holds, spares included, to compare with --replacement shrink")
    h.add_argument("--cnr-diff", choices=DIFF_POLICIES, help="cnr's diff policy (default: its strategy.diff)")
    h.add_argument("--cnr-bits", choices=("auto", "2", "3", "4", "8", "32"),
                   help="cnr's bits per saved weight: auto = Check-N-Run's rule on the expected restores; "
                   "32 = no quantization (default: its strategy.quantization, none)")
    s = p.add_argument_group("simulation and output")
    s.add_argument("--strategies", metavar="LIST",
                   help=f"comma-separated, from {', '.join(modelled())} (default: every calibrated one)")
    s.add_argument("--target-pls", type=float, metavar="X", help="cpr's PLS target (default: the suite's)")
    s.add_argument("--trials", type=int, default=5,
                   help="seeded trials per point, at least (5); more run until every strategy's ETTR "
                   "interval is within --ci-target")
    s.add_argument("--max-trials", type=int, default=200, help="trials per point at most (200)")
    s.add_argument("--ci-target", type=float, default=0.05, metavar="X",
                   help="half-width of the 95 %% interval of ETTR, relative to it, to stop at (0.05)")
    s.add_argument("--paper", choices=sorted(PAPERS),
                   help="a paper's cluster and workload (its figures: mpiec/reproduce/papers.py); prints its "
                   "headline beside the simulated figure")
    s.add_argument("--seed", type=int, default=0, help="seed of the failure draws (0)")
    c = p.add_argument_group("silent corruption (--corruption)")
    c.add_argument("--corruption", nargs="?", const="", metavar="VARIANTS",
                   help="also print how likely the final model carries an embedding row corrupted silently "
                   "that the strategy never repaired, per job size: for the simulated strategies at their "
                   "defaults, or for VARIANTS spelled as mpiec bench --strategies spells them "
                   "(ecrm:code=rs:k=2:r=2:verify_every=10)")
    c.add_argument("--sdc-prevalence", type=float, default=PREVALENCE, metavar="P",
                   help=f"share of machines with a silent-corruption defect (default {PREVALENCE:g}: "
                   "published, Meta arXiv:2203.08989)")
    c.add_argument("--sdc-per-defective-h", metavar="LO,HI",
                   help=f"corruptions a defective machine leaves in its shard per hour, a band (default "
                   f"{PER_DEFECTIVE_H[0]:g},{PER_DEFECTIVE_H[1]:g}: assumed, not published)")
    s.add_argument("--no-speed", action="store_true",
                   help="--predict: keep the costs at the calibration's speed instead of the run's")
    s.add_argument("--no-agree-scaling", action="store_true",
                   help="keep shrink+agree at its measured time instead of scaling it with log2(ranks)")
    s.add_argument("--csv", metavar="FILE", help="write the table as CSV")
    s.add_argument("--markdown", metavar="FILE", help="write the table and crossovers as Markdown")
    s.add_argument("--plot", metavar="FILE", help="plot ETTR, time lost and goodput against nodes (PNG/PDF)")
    return p


#: Bounds of the command's numbers: generous for real use, and small enough that no product of them
#: overflows a float or runs without end (the simulated events have their own bound, MAX_EVENTS).
MAX_HOURS = 1e6  # 114 years of failure-free training
STEP_TIMES = (1e-6, 86400.0)  # a microsecond to a day per step
MAX_NODE_COUNTS = 100  # node counts in one --nodes list
MAX_TRIALS = 1000
MAX_GLOBAL_BATCH = 10**12


def _nodes(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise MpiecError(f"--nodes must be whole numbers separated by commas, got '{_clip(text)}'") from None
    if not out or out[0] < 1:
        raise MpiecError(f"--nodes needs node counts >= 1, got '{_clip(text)}'")
    if out[-1] > MAX_NODES:
        raise MpiecError(f"--nodes: at most {MAX_NODES:,} nodes, got {out[-1]:,}")
    if len(out) > MAX_NODE_COUNTS:
        raise MpiecError(f"--nodes: at most {MAX_NODE_COUNTS} node counts, got {len(out)}")
    return out


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1e4 and float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _positive(value: float | None, flag: str, high: float = math.inf, low: float = 0.0,
              low_included: bool = False) -> None:
    """A number flag in ``(low, high]`` (``[low, high]``; None: not given); nan and inf never pass."""
    if value is not None and not (math.isfinite(value) and (low <= value if low_included else low < value)
                                  and value <= high):
        lower = f"{'>=' if low_included else '>'} {_fmt(low)}"
        upper = f" and <= {_fmt(high)}" if math.isfinite(high) else ""
        raise MpiecError(f"{flag} must be a number {lower}{upper}, got {value:g}")


def _whole(value: int | None, flag: str, low: int, high: int, shown_high: str = "") -> None:
    if value is not None and not low <= value <= high:
        raise MpiecError(f"{flag} must be a whole number in {low:,}..{shown_high or f'{high:,}'}, "
                         f"got {_clip(f'{value:,}')}")


def _costs(args: argparse.Namespace) -> tuple[Costs, str]:
    if args.calibrate and args.costs:
        raise MpiecError("--calibrate and --costs both give the costs: use one")
    if args.costs:
        return load_costs(args.costs), f"costs file {args.costs}"
    if args.calibrate:
        from mpiec.analysis.read import load_results

        from .calibrate import calibrate

        results = load_results(args.calibrate)
        if not results:
            raise MpiecError(f"--calibrate: no result file (*.h5) in {' '.join(args.calibrate)}")
        return calibrate(results), f"calibrated from {len(results)} result file(s)"
    from .reference import reference_costs

    return reference_costs(), "reference calibration (mpiec.simulate.reference; --calibrate for yours)"


def _strategies(args: argparse.Namespace, costs: Costs) -> list[str]:
    if args.strategies:
        names = [x.strip() for x in args.strategies.split(",") if x.strip()]
        models, why_not = modelled(), not_modelled()
        for n in names:
            if n in why_not:
                raise MpiecError(f"strategy '{n}' is {why_not[n]}")
            if n not in models:
                raise MpiecError(f"unknown strategy '{n}' (the simulator models {', '.join(models)})")
        return names
    return [s for s, m in modelled().items() if m.unprotected or s in costs.strategies]


def _print_costs(costs: Costs, out) -> None:
    rt = costs.runtime
    if costs.step is not None:
        st = costs.step
        print(f"step (CPU, {st.runs} failure-free runs): trainer {st.trainer.latency_s * 1e3:.2f} ms + "
              f"{st.trainer.rate_Bps / 1e9:.2f} G multiply-adds/s; server "
              f"{st.server.latency_s * 1e3:.2f} ms + {st.server.rate_Bps / 1e6:.0f} MB of rows/s", file=out)
    print(f"runtime: detection {rt.detect_s:.3f} s, shrink+agree {rt.shrink_agree_s:.3f} s "
          f"(at {rt.ranks} ranks), "
          f"plan {rt.plan_s:.3f} s, replace {rt.replace_s:.3f} s; none's step {rt.step_s * 1e3:.2f} ms "
          f"({rt.recoveries} recoveries)", file=out)
    for name, sc in costs.strategies.items():
        parts = []
        for key in ("write", "read", "rebuild", "parity"):
            lin = getattr(sc, key)
            if lin is not None:
                parts.append(f"{key} {lin.latency_s * 1e3:.1f} ms + {lin.rate_Bps / 1e6:.1f} MB/s "
                             f"({lin.fit})")
        if sc.bytes_ratio != 1.0 or sc.restore_ratio != 1.0:
            parts.append(f"bytes x{sc.bytes_ratio:.2f}, restore x{sc.restore_ratio:.2f}")
        if sc.access_ratio:
            parts.append(f"rows updated x{sc.access_ratio:.2f} of the access model's")
        if sc.parity_cpu is not None:
            pc = sc.parity_cpu
            parts.append(f"parity CPU {pc.latency_s * 1e3:.2f} ms + {pc.rate_Bps / 1e6:.0f} MB/s")
        if sc.rebuild_cpu is not None:
            rc = sc.rebuild_cpu
            parts.append(f"rebuild CPU {rc.latency_s * 1e3:.1f} ms + {rc.rate_Bps / 1e6:.0f} MB/s")
        if sc.replay is not None:
            parts.append(f"replay {1e3 / sc.replay.rate_Bps:.3g} ms per step")
        if sc.partial_coverage:
            parts.append(f"partials keep {100 * sc.partial_coverage:.0f} % of cpr's lost updates")
        if sc.kind == "rebuild":
            parts.append(f"sync restore {sc.sync_restore_s:.3f} s, "
                         f"rebuild slowdown {sc.rebuild_slowdown:.2f}")
        if sc.partial_every:
            parts.append(f"{sc.partial_every:.1f} partials/interval of x{sc.partial_ratio:.2f}")
        parts.append(f"resume extra {sc.resume_extra_s:.3f} s")
        print(f"  {name} ({sc.kind}, {sc.recoveries} recoveries): " + "; ".join(parts), file=out)
    if costs.note:
        print(f"notes: {costs.note}", file=out)


def _predict(args: argparse.Namespace, costs: Costs) -> int:
    from mpiec.analysis.read import load_results

    from .calibrate import measure
    from .predict import predict

    runs = [measure(r) for r in load_results(args.predict)]
    if not runs:
        raise MpiecError(f"--predict: no result file (*.h5) in {' '.join(args.predict)}")
    rows = predict(costs, runs, speed=not args.no_speed)
    if not rows:
        raise MpiecError("--predict: nothing to compare (runs with failures, or failure-free runs with a "
                         "failure-free `none` run of the same config)")
    print(f"{'run':<44} {'strategy':<8} {'quantity':<22} {'predicted':>10} {'measured':>10} {'error':>7}")
    for c in rows:
        err = f"{100 * c.error:+.0f}%" if math.isfinite(c.error) else "—"
        print(f"{c.run[:44]:<44} {c.strategy:<8} {c.quantity:<22} {c.predicted:>10.4g} "
              f"{c.measured:>10.4g} {err:>7}")
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    from mpiec.analysis.report import check_output_path

    inputs = [*(args.calibrate or []), *(args.predict or []), *([args.costs] if args.costs else [])]
    for flag in ("save_costs", "csv", "markdown", "plot"):
        target = getattr(args, flag)
        if target:
            check_output_path(target, inputs, f"--{flag.replace('_', '-')}")
            if not Path(target).resolve().parent.is_dir():
                raise MpiecError(f"--{flag.replace('_', '-')} {target}: directory does not exist")
    if args.plot:
        from mpiec.analysis.plots import matplotlib_available

        if not matplotlib_available():
            raise MpiecError("--plot needs matplotlib (pip install 'mpiec[plot]')")


STORAGE_PROFILES = ("calibrated", *PROFILES)
#: Seconds to bring a new node when there is no warm spare: an assumption (CPR names rescheduling
#: as one of full recovery's four costs but its figure was not found; docs/simulate.md), of the order
#: of a batch scheduler's requeue and a container start.
DEFAULT_RESCHEDULE_S = 300.0


def _check_numbers(args: argparse.Namespace) -> None:
    _positive(args.hours, "--hours", MAX_HOURS)
    check_prevalence(args.sdc_prevalence)
    parse_band(args.sdc_per_defective_h)
    _positive(args.step_time, "--step-time", STEP_TIMES[1], low=STEP_TIMES[0], low_included=True)
    _positive(args.target_pls, "--target-pls", 1.0)  # cpr's rule for strategy.target_pls
    check_failure_arguments(args)
    _whole(args.trials, "--trials", 1, MAX_TRIALS)
    _whole(args.max_trials, "--max-trials", 1, MAX_TRIALS)
    _positive(args.ci_target, "--ci-target", 1.0)
    # the suite's training.seed range; a trial's seed is --seed + its index
    _whole(args.seed, "--seed", 0, 2**63 - 1 - MAX_TRIALS, shown_high="2^63 - 1001")
    _whole(args.global_batch, "--global-batch", 1, MAX_GLOBAL_BATCH)
    _whole(args.trainers_per_node, "--trainers-per-node", 0, MAX_RANKS_PER_NODE)
    _whole(args.servers_per_node, "--servers-per-node", 0, MAX_RANKS_PER_NODE)
    _whole(args.k, "--k", 1, 255)  # the suite's ecrm limits (GF(2^8) codes)
    _whole(args.r, "--r", 1, 4)
    _whole(args.servers, "--servers", 1, MAX_NODES)
    _whole(args.trainers, "--trainers", 1, MAX_NODES)
    if (args.servers is None) != (args.trainers is None):
        raise MpiecError("--servers and --trainers go together (a parameter-server cluster)")
    _positive(args.trainer_speedup, "--trainer-speedup", 1e6)
    _whole(args.server_threads, "--server-threads", 1, 4096)
    _positive(args.network_gbps, "--network-gbps", 1e5)
    _positive(args.interval_s, "--interval-s", MAX_HOURS * HOUR_S)
    _positive(args.reschedule_s, "--reschedule-s", 1e6, low_included=True)
    if args.reschedule_s is not None and args.replacement == "spare":
        raise MpiecError("--reschedule-s needs --replacement reschedule or shrink")
    if args.spares is not None:
        _whole(args.spares, "--spares", 0, 1_000_000)
        if args.replacement != "spare":
            raise MpiecError(f"--spares needs --replacement spare (--replacement {args.replacement} "
                             "holds none)")


def _setup(args: argparse.Namespace, costs: Costs, flags: dict | None = None) -> Setup:
    """The cluster of the flags (``flags``: a paper's, over the command line's)."""
    a = argparse.Namespace(**{**vars(args), **(flags or {})})
    storage = storage_model(a.storage_profile, a.storage_gbps, a.node_storage_gbps, a.storage_latency_ms)
    hw = None
    if not a.no_step_model:
        if costs.step is None:
            raise MpiecError("these costs have no CPU per step by role (calibrated before the step model, or "
                             "from files without failure-free runs): recalibrate, or give --no-step-model")
        hw = Hardware(trainer_speedup=float(a.trainer_speedup), server_threads=int(a.server_threads),
                      network_Bps=float(a.network_gbps) * 1e9 / 8, overlap=not a.no_overlap)
    reschedule = None
    if a.replacement in ("reschedule", "shrink"):
        reschedule = a.reschedule_s if a.reschedule_s is not None else DEFAULT_RESCHEDULE_S
    bits = None if a.cnr_bits is None else (0 if a.cnr_bits == "auto" else int(a.cnr_bits))
    return Setup(hardware=hw, storage=storage, interval_s=a.interval_s, reschedule_s=reschedule,
                 diff=a.cnr_diff, bits=bits, shrink=a.replacement == "shrink", spares=int(a.spares or 0))


def _with_speed(setup: Setup, costs: Costs, job: Job, step_s: float) -> Setup:
    """``setup`` with the step model's speed set so that none's step on ``job`` is ``step_s``."""
    if setup.hardware is None:
        return setup
    none = build_policy(baseline(), costs, job, math.inf, setup=setup).step_s
    hw = dataclasses.replace(setup.hardware, speed=step_s / none)
    return dataclasses.replace(setup, hardware=hw)


def run(args: argparse.Namespace) -> int:
    from mpiec.launch.resolve import load_config

    from .scale import Trials, crossovers, format_crossovers, format_table, plot, sweep

    _check_outputs(args)
    _check_numbers(args)
    nodes = _nodes(args.nodes)
    costs, source = _costs(args)
    if args.save_costs:
        Path(args.save_costs).write_text(costs.to_json() + "\n")
    if args.show_costs:
        print(f"costs: {source}")
        _print_costs(costs, sys.stdout)
    if args.predict:
        return _predict(args, costs)
    if args.paper:
        from .paper_run import run_paper

        return run_paper(args, costs, source, _setup)
    cfg = load_config(preset=args.preset, config_file=args.config, sets=args.set, memory=False)
    setup = _setup(args, costs)
    base = Job.from_config(cfg, costs.runtime.step_s)
    base = dataclasses.replace(base, k=args.k, r=args.r, global_batch=args.global_batch or base.global_batch)
    dedicated = (args.servers, args.trainers) if args.servers else None
    first = base.with_ranks(*dedicated, scaling=args.scaling) if dedicated else \
        base.at_scale(nodes[0], args.trainers_per_node, args.servers_per_node, scaling=args.scaling)
    if args.step_time:
        setup = _with_speed(setup, costs, first, args.step_time)
        step_s = args.step_time
    else:
        step_s = build_policy(baseline(), costs, first, math.inf, setup=setup).step_s if setup.hardware \
            else costs.runtime.step_s
    if not STEP_TIMES[0] <= step_s <= STEP_TIMES[1]:  # a costs file's step time: --step-time's bounds
        raise MpiecError(f"the step time {step_s:g} s of the {source} is outside {STEP_TIMES[0]:g}.."
                         f"{STEP_TIMES[1]:g} s: give --step-time")
    steps = max(1, round(args.hours * HOUR_S / step_s))
    base = dataclasses.replace(base, steps=steps, step_s=step_s)
    sizes = [sum(dedicated)] if dedicated else nodes
    process = failure_process(args, max(sizes))
    # a trace maps its nodes per job size
    processes = {n: failure_process(args, n) for n in sizes} if args.trace else process
    names = _strategies(args, costs)
    covers = _corruption_covers(args, names) if args.corruption is not None else {}

    def header() -> None:
        given = " (--step-time)" if args.step_time else \
            (" (step model)" if setup.hardware else " (calibration)")
        where = (f"{args.servers} server node(s) and {args.trainers} trainer node(s)" if dedicated else
                 f"per node {args.trainers_per_node} trainer(s), {args.servers_per_node} server(s)")
        print(f"job: {base.preset}, {base.rows:,} embedding rows x {base.row_bytes} B "
              f"({base.table_bytes / 2**30:.3g} GiB), dense {base.dense_bytes / 2**20:.3g} MiB, global batch "
              f"{first.global_batch:,} ({args.scaling} scaling), step {step_s * 1e3:.3g} ms{given} at "
              f"{sizes[0]:,} nodes, {args.hours:g} h failure-free; {where}; ecrm k={args.k}, r={args.r}")
        print(f"failures: {process.describe()}; costs: {source}")
        if setup.hardware:
            print(f"cluster: {setup.hardware.describe()}")
        print(f"storage: {setup.storage.describe() if setup.storage else 'the calibrated writes and reads'}; "
              + (f"replacement: none, the job shrinks and grows back {setup.reschedule_s:g} s after "
                 "each recovery" if setup.shrink else f"replacement: rescheduled in {setup.reschedule_s:g} s"
                 if setup.reschedule_s is not None else "replacement: warm spares"
                 + (f", {setup.spares} held idle" if setup.spares else ""))
              + (f"; checkpoints every {setup.interval_s:g} s" if setup.interval_s else ""))
        print(f"trials: at least {args.trials}, until the 95 % interval of ETTR is within "
              f"±{100 * args.ci_target:g} % (at most {args.max_trials}); seed {args.seed}; "
              "each figure is the mean ± the half-width of its 95 % Student-t interval over the trials "
              "(det.: the same in every trial, no interval)")

    # the sweep checks its event bound before it prints the header, so a refused input is one line
    rows = sweep(costs, base, nodes, names, processes, Trials(args.trials, max(args.trials, args.max_trials),
                 args.ci_target), args.seed, target_pls=args.target_pls,
                 trainers_per_node=args.trainers_per_node, servers_per_node=args.servers_per_node,
                 scale_agree=not args.no_agree_scaling, on_start=header, setup=setup, scaling=args.scaling,
                 dedicated=dedicated)
    table = format_table(rows)
    cross = format_crossovers(crossovers(rows))
    print(table)
    print(cross)
    if setup.hardware:
        print("the step model's critical path (none's step, and a server's protection work exposed):")
        models = modelled()  # the strategies with protection work every step: rebuild (parity)
        for r in rows:
            if r.step_path and (models[r.strategy].kind == "rebuild" or r.strategy == names[0]) and \
                    r.nodes in (min(sizes), max(sizes)):
                print(f"  {r.nodes:,} nodes, {r.strategy}: {r.step_path}")
    print("ETTR = 1 - (time lost + checkpoint stall" + (" + throughput lost while shrunk" if setup.shrink
                                                         else "")
          + ") / wall (the runtime's definition); goodput = samples "
          "kept per second over failure-free none's; time lost per failure as the runtime measures it "
          "(kill -> back to 95 % speed + re-executed steps)"
          + ("; goodput / node = goodput x nodes / (nodes + idle spares)" if setup.spares or setup.shrink
             else ""))
    if args.corruption is not None:
        holders = [(n, args.servers if dedicated else n * bool(args.servers_per_node)) for n in sizes]
        print(_corruption_table(args, covers, holders))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            fields = [f.name for f in dataclasses.fields(rows[0]) if f.name != "ci"]
            w.writerow([*fields, *(f"{k}_ci95" for k in CI_KEYS)])
            for r in rows:
                w.writerow([*(getattr(r, k) for k in fields), *(r.ci.get(k, math.nan) for k in CI_KEYS)])
    if args.markdown:
        Path(args.markdown).write_text(format_table(rows, markdown=True) + "\n\n" + cross + "\n")
    if args.plot:
        plot(rows, args.plot, f"{base.preset}, {process.describe()}, step {step_s * 1e3:.3g} ms")
        print(f"plot: {args.plot}")
    return 0


Covers = dict[tuple[int | None, bool], tuple[CorruptionCover, list[str]]]


def _corruption_covers(args: argparse.Namespace, names: list[str]) -> Covers:
    """``--corruption``: each variant's declared cover under the job's config (the simulated
    strategies' defaults unless variants are given); variants that declare the same, together."""
    from mpiec.launch.bench import variant_config
    from mpiec.strategies import get_strategy_class

    variants = [v.strip() for v in args.corruption.split(",") if v.strip()] or names
    spec = argparse.Namespace(preset=args.preset, config=args.config, sets=list(args.set or []), steps=None)
    same: Covers = {}
    for v in variants:
        cfg = variant_config(spec, v, [], memory=False)
        c = get_strategy_class(cfg.strategy.name)(cfg).corruption_cover()
        same.setdefault((c.rows_within, c.rows_repaired), (c, []))[1].append(v)
    return same


def _corruption_table(args: argparse.Namespace, covers: Covers, sizes: list[tuple[int, int]]) -> str:
    """The ``--corruption`` table at every job size (``sizes``: (nodes, nodes holding a shard))."""
    band = parse_band(args.sdc_per_defective_h)
    rows = [corruption_row(", ".join(vs), c, shards, args.hours, args.sdc_prevalence, band)
            for _, shards in sizes for c, vs in covers.values()]
    return format_rows(rows, args.sdc_prevalence, band, args.hours)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except MpiecError as exc:
        print(f"mpiec: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output that cannot be written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"mpiec: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
