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

from .costs import Costs, load_costs
from .failures import HOUR_S, PUBLISHED, WEIBULL_SHAPES, ArrivalProcess, NodeRenewal, Replay, trace_arrivals
from .job import MAX_NODES, MAX_RANKS_PER_NODE
from .policies import modelled, not_modelled

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
    f = p.add_argument_group("failures (one source)")
    f.add_argument("--published", choices=sorted(PUBLISHED), default=None,
                   help="node MTBF from a published figure (default: llama3)")
    f.add_argument("--mtbf-node-h", type=float, metavar="H", help="node MTBF in hours")
    f.add_argument("--weibull-shape", type=float, default=1.0, metavar="K",
                   help="Weibull shape of node lifetimes (1 = exponential, the default)")
    f.add_argument("--trace", metavar="FILE", help="replay a node fault trace (InfiniteHBD JSON or LANL CSV)")
    f.add_argument("--trace-scale", type=float, default=1.0, metavar="X",
                   help="trace seconds per simulated second (default 1: real time)")
    f.add_argument("--trace-mapping", choices=("sample", "fold"), default="sample",
                   help="sample: one trace node per job node (default); fold: every trace node mapped")
    f.add_argument("--failures-at", metavar="HOURS", help="failure times in hours, comma-separated "
                   "(nodes drawn with --seed)")
    s = p.add_argument_group("simulation and output")
    s.add_argument("--strategies", metavar="LIST",
                   help=f"comma-separated, from {', '.join(modelled())} (default: every calibrated one)")
    s.add_argument("--target-pls", type=float, metavar="X", help="cpr's PLS target (default: the suite's)")
    s.add_argument("--trials", type=int, default=5, help="seeded trials averaged per point (5)")
    s.add_argument("--seed", type=int, default=0, help="seed of the failure draws (0)")
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
MAX_MTBF_NODE_H = 1e9  # a node failing once in 114,000 years: no failure at any scale
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


def _process(args: argparse.Namespace, nodes: int) -> ArrivalProcess:
    given = [x for x in ("published", "mtbf_node_h", "trace", "failures_at") if getattr(args, x)]
    if len(given) > 1:
        raise MpiecError("give one failure source: --published, --mtbf-node-h, --trace or --failures-at")
    if args.trace:
        return trace_arrivals(args.trace, nodes, args.trace_scale, args.seed, args.trace_mapping)
    if args.failures_at:
        try:
            times = tuple(float(x) * HOUR_S for x in args.failures_at.split(",") if x.strip())
        except ValueError:
            raise MpiecError(f"--failures-at must be hours separated by commas, "
                             f"got '{args.failures_at}'") from None
        return Replay(times)
    if args.mtbf_node_h is not None:
        return NodeRenewal(args.mtbf_node_h * HOUR_S, args.weibull_shape)
    pub = PUBLISHED[args.published or "llama3"]
    return NodeRenewal(pub.mtbf_node_h * HOUR_S, args.weibull_shape)


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
    return [s for s in modelled() if s == "none" or s in costs.strategies]


def _print_costs(costs: Costs, out) -> None:
    rt = costs.runtime
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
        if sc.unique_fraction:
            parts.append(f"{sc.unique_fraction:.3f} rows updated per lookup")
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


def run(args: argparse.Namespace) -> int:
    from mpiec.config import load_config

    from .job import Job
    from .scale import crossovers, format_crossovers, format_table, plot, sweep

    _check_outputs(args)
    _positive(args.hours, "--hours", MAX_HOURS)
    _positive(args.step_time, "--step-time", STEP_TIMES[1], low=STEP_TIMES[0], low_included=True)
    _positive(args.trace_scale, "--trace-scale")
    _positive(args.mtbf_node_h, "--mtbf-node-h", MAX_MTBF_NODE_H)
    _positive(args.target_pls, "--target-pls", 1.0)  # cpr's rule for strategy.target_pls
    low_shape, high_shape = WEIBULL_SHAPES
    if not low_shape <= args.weibull_shape <= high_shape:
        raise MpiecError(f"--weibull-shape must be a number in [{low_shape:g}, {high_shape:g}], "
                         f"got {args.weibull_shape:g}")
    _whole(args.trials, "--trials", 1, MAX_TRIALS)
    # the suite's training.seed range; a trial's seed is --seed + its index
    _whole(args.seed, "--seed", 0, 2**63 - 1 - MAX_TRIALS, shown_high="2^63 - 1001")
    _whole(args.global_batch, "--global-batch", 1, MAX_GLOBAL_BATCH)
    _whole(args.trainers_per_node, "--trainers-per-node", 0, MAX_RANKS_PER_NODE)
    _whole(args.servers_per_node, "--servers-per-node", 0, MAX_RANKS_PER_NODE)
    _whole(args.k, "--k", 1, 255)  # the suite's ecrm limits (GF(2^8) codes)
    _whole(args.r, "--r", 1, 4)
    nodes = _nodes(args.nodes)
    costs, source = _costs(args)
    if args.save_costs:
        Path(args.save_costs).write_text(costs.to_json() + "\n")
    if args.show_costs:
        print(f"costs: {source}")
        _print_costs(costs, sys.stdout)
    if args.predict:
        return _predict(args, costs)
    cfg = load_config(preset=args.preset, config_file=args.config, sets=args.set, memory=False)
    step_s = args.step_time or costs.runtime.step_s
    if not STEP_TIMES[0] <= step_s <= STEP_TIMES[1]:  # a costs file's step time: --step-time's bounds
        raise MpiecError(f"the step time {step_s:g} s of the {source} is outside {STEP_TIMES[0]:g}.."
                         f"{STEP_TIMES[1]:g} s: give --step-time")
    base = Job.from_config(cfg, step_s)
    steps = max(1, round(args.hours * HOUR_S / step_s))
    base = dataclasses.replace(base, steps=steps, k=args.k, r=args.r,
                               global_batch=args.global_batch or base.global_batch)
    process = _process(args, max(nodes))
    # a trace maps its nodes per job size
    processes = {n: _process(args, n) for n in nodes} if args.trace else process
    names = _strategies(args, costs)

    def header() -> None:
        given = "" if args.step_time else " (calibration)"
        print(f"job: {base.preset}, {base.rows:,} embedding rows x {base.row_bytes} B "
              f"({base.table_bytes / 2**30:.3g} GiB), dense {base.dense_bytes / 2**20:.3g} MiB, global batch "
              f"{base.global_batch:,}, step {step_s * 1e3:.3g} ms{given}, "
              f"{args.hours:g} h failure-free ({steps:,} steps); per node {args.trainers_per_node} "
              f"trainer(s), {args.servers_per_node} server(s); ecrm k={args.k}, r={args.r}")
        print(f"failures: {process.describe()}; costs: {source}; {args.trials} trial(s), seed {args.seed}")

    # the sweep checks its event bound before it prints the header, so a refused input is one line
    rows = sweep(costs, base, nodes, names, processes, args.trials, args.seed, target_pls=args.target_pls,
                 trainers_per_node=args.trainers_per_node, servers_per_node=args.servers_per_node,
                 scale_agree=not args.no_agree_scaling, on_start=header)
    table = format_table(rows)
    cross = format_crossovers(crossovers(rows))
    print(table)
    print(cross)
    print("ETTR = 1 - (time lost + checkpoint stall) / wall (the runtime's definition); goodput = samples "
          "kept per second over failure-free none's; time lost per failure as the runtime measures it "
          "(kill -> back to 95 % speed + re-executed steps)")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            fields = [f.name for f in dataclasses.fields(rows[0])]
            w.writerow(fields)
            for r in rows:
                w.writerow([getattr(r, k) for k in fields])
    if args.markdown:
        Path(args.markdown).write_text(format_table(rows, markdown=True) + "\n\n" + cross + "\n")
    if args.plot:
        plot(rows, args.plot, f"{base.preset}, {process.describe()}, step {step_s * 1e3:.3g} ms")
        print(f"plot: {args.plot}")
    return 0


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
