"""The failure flags of ``mpiec simulate``: where failures come from and how nodes fail.

Owns the command-line side of ``failures.py``: the flags, their bounds and one-line errors, and the
arrival process they describe. ``cli.py`` uses it in three calls::

    add_failure_arguments(parser.add_argument_group("failures (one source)"))   # build_parser()
    check_failure_arguments(args)        # in run(), with the other number checks, before anything runs
    process = failure_process(args, n)   # one process per node count (a trace maps its nodes per size)

``failure_process`` reads ``args.seed`` (the CLI's own flag; 0 when absent) to map trace nodes, and
runs ``check_failure_arguments`` itself, so a caller that skips it still gets the one-line errors.

Invariants: every number is finite and within the bounds below (``FAILURE_BOUNDS`` is the table
``docs/simulate.md`` quotes), a bad one is a one-line ``MpiecError`` naming the flag; one failure
source at most (``--published``, ``--mtbf-node-h``, ``--trace``, ``--failures-at``; none: the Llama 3
figure); the node-lifetime flags (``--lifetime``, ``--lognormal-sigma``, lemons, repairs, bursts) only
with a lifetime source (``--published``, ``--mtbf-node-h`` or the default), not with a trace or
given times; a flag that only qualifies another (``--lemon-factor``, ``--burst-size``,
``--repair-law``, ``--repair-holds-slot``, ``--lognormal-sigma``) is refused without it. With none of
the new flags the process is the one the CLI built before they existed (same arrivals, same seed).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Literal, cast

from mpiec.errors import MpiecError

from .failures import (
    BURST_SIZES,
    DEFAULT_LOGNORMAL_SIGMA,
    HOUR_S,
    INFINITEHBD_BURSTS,
    INFINITEHBD_LEMONS,
    INFINITEHBD_REPAIR_H,
    LEMON_FACTORS,
    LIFETIME_LAWS,
    LOGNORMAL_SIGMAS,
    PUBLISHED,
    REPAIR_LAWS,
    WEIBULL_SHAPES,
    ArrivalProcess,
    NodeRenewal,
    Replay,
    trace_arrivals,
)

__all__ = ["DEFAULTS", "FAILURE_BOUNDS", "MAX_MTBF_NODE_H", "MAX_REPAIR_H", "add_failure_arguments",
           "check_failure_arguments", "failure_process"]

MAX_MTBF_NODE_H = 1e9  # a node failing once in 114,000 years: no failure at any scale
MAX_REPAIR_H = 1e6  # 114 years, cli.MAX_HOURS
DEFAULT_PUBLISHED = "llama3"

#: What an absent new flag means (argparse keeps None, so "given" can be told from "default").
DEFAULTS: dict[str, Any] = {
    "lognormal_sigma": DEFAULT_LOGNORMAL_SIGMA,
    "lemon_fraction": 0.0,
    "lemon_factor": INFINITEHBD_LEMONS[1],
    "repair_h": 0.0,
    "repair_law": "exponential",
    "burst_p": 0.0,
    "burst_size": INFINITEHBD_BURSTS[1],
}

#: flag: (low, high, low included) for the number flags; nan and inf never pass.
FAILURE_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "--mtbf-node-h": (0.0, MAX_MTBF_NODE_H, False),
    "--trace-scale": (0.0, math.inf, False),
    "--lognormal-sigma": (*LOGNORMAL_SIGMAS, True),
    "--lemon-fraction": (0.0, 1.0, True),
    "--lemon-factor": (*LEMON_FACTORS, True),
    "--repair-h": (0.0, MAX_REPAIR_H, True),
    "--burst-p": (0.0, 1.0, True),
}

_LIFETIME_FLAGS = ("lifetime", "lognormal_sigma", "lemon_fraction", "lemon_factor", "repair_h", "repair_law",
                   "repair_holds_slot", "burst_p", "burst_size")


def add_failure_arguments(group: Any) -> None:
    """Add the failure flags to ``group`` (an argparse parser or argument group)."""
    llama, hbd = PUBLISHED["llama3"], PUBLISHED["infinitehbd"]
    group.add_argument("--published", choices=sorted(PUBLISHED), default=None,
                       help=f"node MTBF from a published figure (default: llama3, "
                       f"{llama.mtbf_node_h:,.0f} h: Llama 3, arXiv:2407.21783; infinitehbd: "
                       f"{hbd.mtbf_node_h:,.0f} h, the InfiniteHBD fault trace, 400 servers)")
    group.add_argument("--mtbf-node-h", type=float, metavar="H", help="node MTBF in hours")
    group.add_argument("--weibull-shape", type=float, default=1.0, metavar="K",
                       help="Weibull shape of node lifetimes (1 = exponential, the default; another value "
                       "implies --lifetime weibull)")
    group.add_argument("--lifetime", choices=LIFETIME_LAWS, default=None,
                       help="law of node lifetimes, its mean the node MTBF (default: exponential, or "
                       "weibull when --weibull-shape is not 1)")
    group.add_argument("--lognormal-sigma", type=float, metavar="S",
                       help="--lifetime lognormal: sigma of log(lifetime) (default "
                       f"{DEFAULT_LOGNORMAL_SIGMA:g}, an assumption, not a published fit)")
    lemon_f, lemon_x = INFINITEHBD_LEMONS
    group.add_argument("--lemon-fraction", type=float, metavar="X",
                       help="share of nodes that are lemons, failing --lemon-factor times as often "
                       f"(default 0: none; the InfiniteHBD trace fits {lemon_f:g} x {lemon_x:g}, "
                       "see failures.py)")
    group.add_argument("--lemon-factor", type=float, metavar="X",
                       help=f"how many times more often a lemon fails (default {lemon_x:g}, the InfiniteHBD "
                       "trace's fit)")
    group.add_argument("--repair-h", type=float, metavar="H",
                       help="mean hours a failed node is away for repair (default 0: not modelled; the "
                       f"InfiniteHBD trace: median {INFINITEHBD_REPAIR_H['median']:g} h, mean "
                       f"{INFINITEHBD_REPAIR_H['mean']:g} h)")
    group.add_argument("--repair-law", choices=REPAIR_LAWS, default=None,
                       help="law of repair times with --repair-h as mean (default exponential: the trace's "
                       "repairs are far from fixed)")
    group.add_argument("--repair-holds-slot", action="store_true",
                       help="no spare: a failed node's slot fails next at failure + repair + a new lifetime "
                       "(default: a spare takes the slot at once)")
    burst_p, burst_size = INFINITEHBD_BURSTS
    group.add_argument("--burst-p", type=float, metavar="P",
                       help=f"probability that a failure takes --burst-size nodes down at once (default 0; "
                       f"the InfiniteHBD trace: {burst_p:g})")
    group.add_argument("--burst-size", type=int, metavar="N",
                       help="nodes a correlated failure takes down, the failed one included "
                       f"({BURST_SIZES[0]}..{BURST_SIZES[1]}; default {burst_size}: the InfiniteHBD "
                       "trace's mean, 2.83)")
    group.add_argument("--trace", metavar="FILE",
                       help="replay a node fault trace (InfiniteHBD JSON or LANL CSV)")
    group.add_argument("--trace-scale", type=float, default=1.0, metavar="X",
                       help="trace seconds per simulated second (default 1: real time)")
    group.add_argument("--trace-mapping", choices=("sample", "fold"), default="sample",
                       help="sample: one trace node per job node (default); fold: every trace node mapped")
    group.add_argument("--failures-at", metavar="HOURS", help="failure times in hours, comma-separated "
                       "(nodes drawn with --seed)")


def _get(args: argparse.Namespace, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1e4 and float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _number(value: float | None, flag: str) -> None:
    """``value`` within ``FAILURE_BOUNDS[flag]`` (None: not given), as cli.py's ``_positive`` says it."""
    if value is None:
        return
    low, high, low_included = FAILURE_BOUNDS[flag]
    if not (math.isfinite(value) and (low <= value if low_included else low < value) and value <= high):
        lower = f"{'>=' if low_included else '>'} {_fmt(low)}"
        upper = f" and <= {_fmt(high)}" if math.isfinite(high) else ""
        raise MpiecError(f"{flag} must be a number {lower}{upper}, got {value:g}")


def _given(args: argparse.Namespace, name: str) -> bool:
    value = _get(args, name)
    return value is not None and value is not False


def _law(args: argparse.Namespace) -> str:
    shape = _get(args, "weibull_shape", 1.0)
    law = _get(args, "lifetime")
    if law is None:
        return "weibull" if shape != 1.0 else "exponential"
    if law != "weibull" and shape != 1.0:
        raise MpiecError(f"--weibull-shape {shape:g} is a Weibull lifetime: it does not go with "
                         f"--lifetime {law}")
    return str(law)


def check_failure_arguments(args: argparse.Namespace) -> None:
    """Refuse, with one line naming the flag, any failure flag out of bounds or out of place."""
    for flag in ("--mtbf-node-h", "--trace-scale", "--lognormal-sigma", "--lemon-fraction", "--lemon-factor",
                 "--repair-h", "--burst-p"):
        _number(_get(args, flag[2:].replace("-", "_")), flag)
    shape = _get(args, "weibull_shape", 1.0)
    low, high = WEIBULL_SHAPES
    if not low <= shape <= high:
        raise MpiecError(f"--weibull-shape must be a number in [{low:g}, {high:g}], got {shape:g}")
    size = _get(args, "burst_size")
    if size is not None and not BURST_SIZES[0] <= size <= BURST_SIZES[1]:
        raise MpiecError(f"--burst-size must be a whole number in {BURST_SIZES[0]}..{BURST_SIZES[1]}, "
                         f"got {size:,}")
    given = [x for x in ("published", "mtbf_node_h", "trace", "failures_at") if _get(args, x)]
    if len(given) > 1:
        raise MpiecError("give one failure source: --published, --mtbf-node-h, --trace or --failures-at")
    if given and given[0] in ("trace", "failures_at"):
        extra = [x for x in _LIFETIME_FLAGS if _given(args, x)]
        if extra:
            raise MpiecError(f"--{extra[0].replace('_', '-')} shapes node lifetimes (--published, "
                             f"--mtbf-node-h): it does not apply to --{given[0].replace('_', '-')}")
        return
    law = _law(args)
    if _given(args, "lognormal_sigma") and law != "lognormal":
        raise MpiecError("--lognormal-sigma needs --lifetime lognormal")
    for flag, needs in (("lemon_factor", "lemon_fraction"), ("burst_size", "burst_p"),
                        ("repair_law", "repair_h"), ("repair_holds_slot", "repair_h")):
        if _given(args, flag) and not _get(args, needs):
            raise MpiecError(f"--{flag.replace('_', '-')} needs --{needs.replace('_', '-')} > 0")


def failure_process(args: argparse.Namespace, nodes: int) -> ArrivalProcess:
    """The arrival process the failure flags describe, for a job of ``nodes`` nodes (a trace maps its
    nodes onto them; the other processes do not depend on ``nodes``)."""
    check_failure_arguments(args)
    if _get(args, "trace"):
        return trace_arrivals(args.trace, nodes, _get(args, "trace_scale", 1.0), _get(args, "seed", 0),
                              _get(args, "trace_mapping", "sample"))
    failures_at = _get(args, "failures_at")
    if failures_at:
        try:
            times = tuple(float(x) * HOUR_S for x in failures_at.split(",") if x.strip())
        except ValueError:
            raise MpiecError(f"--failures-at must be hours separated by commas, "
                             f"got '{failures_at}'") from None
        return Replay(times)
    mtbf_h = _get(args, "mtbf_node_h")
    if mtbf_h is None:
        mtbf_h = PUBLISHED[_get(args, "published") or DEFAULT_PUBLISHED].mtbf_node_h

    def value(name: str) -> Any:
        v = _get(args, name)
        return DEFAULTS[name] if v is None else v

    law = _law(args)
    return NodeRenewal(
        mtbf_h * HOUR_S, _get(args, "weibull_shape", 1.0),
        law=cast(Literal["exponential", "weibull", "lognormal"], law),
        sigma=value("lognormal_sigma"),
        # without lemons the factor is moot: 1, NodeRenewal's own default (equal processes compare equal)
        lemon_fraction=value("lemon_fraction"),
        lemon_factor=value("lemon_factor") if value("lemon_fraction") > 0 else 1.0,
        repair_s=value("repair_h") * HOUR_S, repair_law=value("repair_law"),
        repair_holds_slot=bool(_get(args, "repair_holds_slot", False)),
        burst_p=value("burst_p"), burst_size=value("burst_size"))
