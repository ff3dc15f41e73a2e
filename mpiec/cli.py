"""The ``mpiec`` command: run, bench, config, report, kernels, simulate, reproduce.

Owns argument parsing and exit codes. Invariants: a user error (bad config,
kill plan, data file, result file) prints one line ``mpiec: error: ...`` and
exits 2 with no traceback, before any rank starts; ``run`` exits 0 when the
run completed, 1 when it was lost, 3 when it crashed, timed out or was
interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mpiec import __version__
from mpiec.cli_args import (
    BENCH_DESCRIPTION,
    BENCH_HELP,
    EPILOG_BENCH,
    add_bench_command_args,
    add_config_args,
    positive,
)
from mpiec.config import Config
from mpiec.errors import MpiecError
from mpiec.launch.bench import cmd_bench
from mpiec.launch.resolve import load_config

if TYPE_CHECKING:
    from mpiec.strategies.api.base import Strategy

EPILOG_RUN = """kill plans (repeat --kill, or separate plans with ';'):
  server:2@step=300        the rank holding server slot 2 dies at the start of step 300
  server:2@step=300+5ms    it dies 5 ms into step 300 (mid-step, whatever the machine's speed)
  trainer:0@time=12.5      trainer 0 dies 12.5 s after training started (units: ms, s, m, min, h)
  parity:1@step=40         dedicated parity rank 1 (needs layout.parity_ranks)
  spare:0@time=3           spare 0 dies while it waits
  node:1@step=20           every rank of node 1 dies at once (nodes: layout.ranks_per_node, or hosts)
  server:1@end             server 1 dies after the last step, before its final report (real failures)
  random:mtbf=60s,seed=7   exponential inter-arrival times (mean mtbf), uniform victims; options:
                           seed=N (default 0), targets=server+trainer (default; also parity, spare, node),
                           max=N kills (default 64, at most training.steps)
result file: DIR/NAME.h5 in --out DIR (default: output.dir, "results"); NAME is output.name or
  PRESET-STRATEGY-sSEED-TIME, with -2, -3, ... added if another run has that name
time limit: --timeout, else failures.timeout_s, else 180 s + 2 s x training.steps (at most
  1 day); past it every rank prints its Python stacks, then the whole process group is killed
exit codes:
  0  the run completed
  1  the run was lost to a failure its strategy could not survive (the result file says so)
  2  bad input (config, kill plan, data file, output, checkpoint or log folder, --resume): one line
     naming it, before any rank starts
  3  a crash, the time limit, or an interruption (Ctrl-C, SIGTERM, SIGHUP)
examples:
  mpiec run --preset tiny --out results/
  mpiec run --strategy none --kill server:1@step=10 --set training.steps=50
"""


def config_from(args: argparse.Namespace, strategy: str | None = None, memory: bool = True) -> Config:
    return load_config(preset=args.preset, config_file=args.config, sets=args.sets,
                       strategy=strategy if strategy is not None else getattr(args, "strategy", None),
                       kill=args.kill, steps=args.steps, memory=memory)


def resume_config(args: argparse.Namespace) -> tuple[Config, str]:
    """``run --resume DIR``: the checkpoint's own config, under the command line's overrides
    (``--config FILE``, the shortcuts, ``--set``; ``launcher.check_resume`` then refuses what the
    checkpoint cannot continue into)."""
    from mpiec.storage.checkpoint import CheckpointStore, resolve_checkpoint

    root, step = resolve_checkpoint(args.resume)
    store = CheckpointStore(root)
    if step != store.latest():
        # The run would restart before newer committed checkpoints, whose steps it must not overwrite.
        raise MpiecError(f"--resume {args.resume}: {root} holds a newer checkpoint (step {store.latest()}); "
                         "to resume from an older one, copy its step directory into an empty directory")
    saved = store.manifest(step).get("meta", {}).get("config")
    if not isinstance(saved, dict) or not isinstance(saved.get("failures"), dict) \
            or not isinstance(saved.get("output"), dict):
        raise MpiecError(f"{root}: the checkpoint of step {step} does not record its run's config")
    # The run is the checkpoint's: its preset labels the result (reports group runs by it), and the
    # preset's values are under the checkpoint's anyway; another --preset would only mislabel it.
    if args.preset is not None and args.preset != saved.get("preset"):
        raise MpiecError(f"--resume {args.resume}: the checkpoint's run used preset '{saved.get('preset')}', "
                         f"not '{args.preset}'; leave --preset out (a resumed run keeps its checkpoint's "
                         "config and preset; change keys with --set)")
    saved["failures"]["kill"] = []  # the kills of the first run already happened
    saved["output"]["name"] = ""
    cfg = load_config(config_file=args.config, sets=args.sets, strategy=args.strategy, kill=args.kill,
                      steps=args.steps, base=saved)
    written = (saved.get("strategy") or {}).get("name")
    if cfg.strategy.name != written:
        raise MpiecError(f"--resume: the checkpoint was written by strategy '{written}', "
                         f"not '{cfg.strategy.name}'")
    return cfg, str(root)


def cmd_run(args: argparse.Namespace) -> int:
    from mpiec.launch.launcher import launch

    cfg, resume = resume_config(args) if args.resume else (config_from(args), "")
    out = Path(args.out or cfg.output.dir)
    outcome = launch(cfg, out, timeout=args.timeout, resume=resume, hostfile=args.hostfile)
    if outcome.message:
        print(f"mpiec: {outcome.message}", file=sys.stderr)
    if outcome.path:
        print(f"result file: {outcome.path}")
    return outcome.code


def cmd_config(args: argparse.Namespace) -> int:
    if args.explain is not None:
        from mpiec.launch.resolve import explain

        print("\n".join(explain(args.explain)))
        return 0
    # Not this machine's memory: a config is resolved here for a cluster too (mpiec run and the
    # ranks check the memory where they start).
    cfg = config_from(args, memory=False)
    if args.ranks:
        print(cfg.n_ranks)
        return 0
    text = cfg.to_json()
    if args.write:
        from mpiec.analysis.report import check_output_path

        check_output_path(args.write, [args.config] if args.config else [], "--write")
        Path(args.write).write_text(text + "\n")
        print(f"wrote {args.write} ({cfg.n_ranks} ranks)", file=sys.stderr)
    else:
        import json

        print(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
    return 0


def key_lines(cls: type[Strategy]) -> list[str]:
    """``mpiec strategies --keys``: the ``strategy.KEY`` keys of strategy ``cls``, one line each,
    aligned: the typed ones of its ``Params`` (type, default, range, help), then the names that only its
    ``param_keys()`` knows (a strategy not yet migrated to ``Params``: no help yet)."""
    import dataclasses

    from mpiec.config.schema import default_text
    from mpiec.strategies.api.params import keys

    typed = keys(cls.Params) if dataclasses.is_dataclass(cls.Params) else []
    rows = [(k.name, f"{k.type} = {default_text(k.default)}" + (f" ({k.rule})" if k.rule else ""),
             k.help or "(no help yet)") for k in typed]
    rows += [(name, "", "(no help yet)") for name in sorted(set(cls.param_keys()) - {k.name for k in typed})]
    if not rows:
        return ["(no keys of its own)"]
    w_name = max(len(n) for n, _, _ in rows)
    w_type = max(len(t) for _, t, _ in rows)  # 0: no typed key, no type column
    return ["  ".join([n.ljust(w_name), *([t.ljust(w_type)] if w_type else []), h]) for n, t, h in rows]


def cmd_strategies(args: argparse.Namespace) -> int:
    from mpiec.strategies import STRATEGIES

    problems = list(STRATEGIES.problems)  # plug-ins left out when the registry was built
    for name in STRATEGIES:
        try:
            cls = STRATEGIES[name]
        except MpiecError as exc:  # a plug-in that does not load: said at the end, never fatal
            problems.append(str(exc))
            continue
        origin = STRATEGIES.origin(name)
        print(f"{name:10s} {cls.description}" + (f" [{origin}]" if origin != "built-in" else ""))
        if args.keys:
            for line in key_lines(cls):
                print(f"{'':10s}   {line}".rstrip())
    if problems:
        print("\nleft out:")
        for problem in problems:
            print(f"  {problem}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpiec", description="MPI benchmark suite for fault-tolerant DLRM training.")
    parser.add_argument("--version", action="version", version=f"mpiec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="train once with one strategy, print and save the result",
                         description="Train the configured DLRM once with one fault-tolerance strategy "
                                     "under mpiexec (1 monitor + trainers + servers + parity ranks + "
                                     "spares), kill ranks as planned, stream progress, write one HDF5 "
                                     "result file and print its summary.",
                         epilog=EPILOG_RUN, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(run)
    run.add_argument("--out", metavar="DIR",
                     help="directory for the result file (default: output.dir, \"results\")")
    run.add_argument("--timeout", type=positive, metavar="SECONDS",
                     help="kill the run after this many seconds (default: failures.timeout_s, "
                          "else 180 s + 2 s x training.steps, at most 1 day)")
    run.add_argument("--resume", metavar="DIR",
                     help="restart a killed or preempted run from the newest complete checkpoint in DIR "
                          "(its config and preset, under --config/--kill/--set overrides: e.g. another "
                          "layout.servers, not another model; no other --preset)")
    run.add_argument("--hostfile", metavar="FILE",
                     help="run across the hosts of FILE ('HOST [slots=N]' lines): the monitor on the first, "
                          "the nodes of layout.ranks_per_node on the hosts in turn (default: the ranks "
                          "spread in blocks, one node per host)")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help=BENCH_HELP, description=BENCH_DESCRIPTION, epilog=EPILOG_BENCH,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_command_args(bench)
    bench.set_defaults(func=cmd_bench)

    config = sub.add_parser("config", help="print or write the resolved config (for job scripts)",
                            description="Resolve and validate a config (preset < --config < shortcuts < "
                                        "--set) and print it as JSON, write it for "
                                        "'python -m mpiec.worker FILE.json' (job scripts), or print the "
                                        "number of ranks it needs. Never overwrites a result file or "
                                        "its own --config.")
    add_config_args(config)
    config.add_argument("--write", metavar="FILE.json", help="write the resolved config here")
    config.add_argument("--ranks", action="store_true", help="print the number of MPI ranks it needs")
    config.add_argument("--explain", nargs="?", const="", metavar="KEY",
                        help="print a key's type, default, range or choices and help (a key such as "
                             "training.steps, a section such as layout, a strategy's strategy.KEY or "
                             "NAME.KEY; no KEY: every key of the config's sections), then exit")
    config.set_defaults(func=cmd_config)

    strategies = sub.add_parser("strategies", help="list the available strategies",
                                description="List the fault-tolerance strategies 'mpiec run --strategy' "
                                            "and 'mpiec bench' accept, one line each (a plug-in's line "
                                            "names its package), then the plug-ins left out and why.")
    strategies.add_argument("--keys", action="store_true",
                            help="also list each strategy's keys: name, type = default, help (set them "
                                 "with --set strategy.KEY=VALUE, or NAME:KEY=VALUE in bench --strategies)")
    strategies.set_defaults(func=cmd_strategies)

    report = sub.add_parser("report", help="tables (and plots) from a directory of result files",
                            add_help=False)
    report.set_defaults(func=None)  # main() hands its arguments to mpiec.analysis.report
    kernels = sub.add_parser("kernels", help="micro-benchmark the numba kernels", add_help=False)
    kernels.set_defaults(func=None)  # main() hands its arguments to mpiec.benchmarks.kernels_cli
    simulate = sub.add_parser("simulate", help="model a job at cluster scale, calibrated by measured runs",
                              add_help=False)
    simulate.set_defaults(func=None)  # main() hands its arguments to mpiec.simulate.cli
    reproduce = sub.add_parser("reproduce", add_help=False,
                               help="re-measure the source papers' headline claims, with verdicts")
    reproduce.set_defaults(func=None)  # main() hands its arguments to mpiec.reproduce.cli
    return parser


def keep_mpi_uninitialised() -> None:
    """This process launches ranks and reads results; it is never an MPI process itself.

    Validating a config imports strategy modules, and some import ``mpi4py.MPI``, which by
    default calls ``MPI_Init``: a singleton init that costs ~1 s here (Open MPI's ofi probe)
    before ``mpiexec`` even starts. Leaves things alone if MPI was imported already (tests).
    """
    if "mpi4py.MPI" not in sys.modules:
        import mpi4py

        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False


def defer_kernels() -> None:
    """Load kernel modules (and numba) only when a kernel is used (``mpiec.kernels.defer``).

    This process validates configs, launches ranks and reads results: most commands never call
    a kernel, yet validating a strategy imports its modules (numba's import is 0.3-0.5 CPU-s,
    paid before ``mpiec run`` starts any rank). Leaves things alone if numba was imported
    already (tests calling ``main`` in their own process)."""
    if "numba" not in sys.modules:
        from mpiec import kernels

        kernels.defer()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    keep_mpi_uninitialised()
    defer_kernels()
    try:
        if argv and argv[0] == "report":
            from mpiec.analysis.report import main as report_main

            return report_main(argv[1:])
        if argv and argv[0] == "kernels":
            from mpiec.benchmarks.kernels_cli import main as kernels_main

            return kernels_main(argv[1:])
        if argv and argv[0] == "reproduce":
            from mpiec.reproduce.cli import main as reproduce_main

            return reproduce_main(argv[1:])
        if argv and argv[0] == "simulate":
            from mpiec.simulate.cli import main as simulate_main

            return simulate_main(argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args)
    except MpiecError as exc:
        print(f"mpiec: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output path that cannot be created or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"mpiec: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mpiec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
