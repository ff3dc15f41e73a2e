"""The options of the ``mpiec`` commands: what ``mpiec.cli`` and the modules that build a command
line of their own (``mpiec.reproduce``: one ``mpiec bench`` per experiment) parse alike.

Owns the config options every command shares (``add_config_args``), the time-limit type
(``positive``) and the whole ``mpiec bench`` command (``add_bench_command_args``, its texts, and
``bench_parser``: the command as a standalone parser). Imports no command: ``mpiec.cli`` imports
this module, never the other way round, so that ``mpiec.reproduce`` parses a bench command line
with the command's own defaults and checks without importing ``mpiec.cli`` (which hands
``mpiec reproduce`` to ``mpiec.reproduce.cli``).
"""

from __future__ import annotations

import argparse

from mpiec.config import DEFAULT_PRESET, PRESETS
from mpiec.launch.bench import add_bench_args

__all__ = ["BENCH_DESCRIPTION", "BENCH_HELP", "EPILOG_BENCH", "add_bench_command_args", "add_config_args",
           "bench_parser", "positive"]

BENCH_HELP = "every strategy failure-free and under a failure scenario, compared"

BENCH_DESCRIPTION = ("Run every strategy (or --strategies) failure-free and under one failure scenario "
                     "(default: a server killed at half the training time), with the same seed and the "
                     "same kills for all, one result file per run, then print the failure-free and the "
                     "failure tables and write the report (CSV, Markdown, plots, HTML) next to the result "
                     "files. Checkpoint intervals follow each strategy's own rule at the scenario's MTBF. "
                     "Exit code 3 if any run crashed, else 0.")

EPILOG_BENCH = """examples:
  mpiec bench                                          every strategy, laptop preset, a server kill
  mpiec bench --preset tiny --scenario two-servers
  mpiec bench --strategies none,ckpt,ecrm:code=rs:r=2 --set layout.servers=4 --scenario random --mtbf 20
  mpiec bench --preset tiny --trace FILE.json --trace-scale 86400    one trace day per run second
  mpiec bench --kill server:0@time=5 --kill trainer:1@step=300       a custom scenario
"""


def positive(text: str) -> float:
    """A time limit in seconds: finite, > 0 and at most 1e9 (printed with its precision)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1e9:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 and <= 1e9, got '{text}'")
    return value


def add_config_args(p: argparse.ArgumentParser, strategy: bool = True) -> None:
    """The options that resolve a config: preset < --config < shortcuts < --set."""
    p.add_argument("--preset", choices=PRESETS, default=None,
                   help=f"configuration preset (default: {DEFAULT_PRESET})")
    p.add_argument("--config", metavar="FILE",
                   help="TOML file (or JSON from 'mpiec config --write') overriding the preset")
    if strategy:
        p.add_argument("--strategy", help="fault-tolerance strategy (see 'mpiec strategies')")
    p.add_argument("--kill", action="append", default=[], metavar="PLAN",
                   help="kill plan, repeatable (e.g. server:1@step=10)")
    p.add_argument("--steps", type=int, help="training steps (shortcut for --set training.steps=N)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                   help="override one config key, repeatable (e.g. layout.servers=4)")


def add_bench_command_args(p: argparse.ArgumentParser) -> None:
    """Every option of ``mpiec bench``, added to ``p``."""
    add_config_args(p, strategy=False)
    add_bench_args(p)
    p.add_argument("--out", metavar="DIR",
                   help="directory for the result files and the report (default: output.dir/bench-TIME)")
    p.add_argument("--timeout", type=positive, metavar="SECONDS",
                   help="per-run time limit (default: failures.timeout_s, else 180 s + 2 s x "
                        "training.steps, at most 1 day)")
    p.add_argument("--quiet", action="store_true", help="hide each run's progress lines")


def bench_parser() -> argparse.ArgumentParser:
    """``mpiec bench`` as a parser of its own (its arguments, without ``bench``): the same options,
    defaults and checks as the command, ``command`` set to ``"bench"`` as ``mpiec``'s parser sets it."""
    p = argparse.ArgumentParser(prog="mpiec bench", description=BENCH_DESCRIPTION, epilog=EPILOG_BENCH,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_command_args(p)
    p.set_defaults(command="bench")
    return p
