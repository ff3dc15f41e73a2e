"""``mpiec bench``: every strategy failure-free and under one failure scenario, then one comparison.

Owns the bench's plan: the built-in failure scenarios, the settings that make the
comparison fair, the order of the runs, the progress line with its ETA, and the
hand-over of the result files to the analysis package (tables, plots, HTML).

Invariants:

* **Same failures for all.** Every strategy variant runs once failure-free and once
  under the scenario's kill plan; the plan is resolved once, before the failure runs
  (a ``random:`` plan and a trace become the same explicit kill times for every
  strategy), so every failure run sees the same kills at the same steps or times.
* **Twins differ only in ``failures`` and ``output``.** A variant's failure-free run and
  its failure run have the same config otherwise (spares included), so the analysis
  pairs them (ΔAUC, lossless) and the failure-free one measures the overhead.
* **Fair intervals.** A checkpointing strategy whose interval comes from a rule
  (Young's formula for ``ckpt``, the PLS target for ``cpr``) gets the scenario's MTBF
  through ``failures.mtbf_s`` / ``failures.mtbf_steps`` in both of its runs, unless the
  user set one; a variant with an explicit interval keeps it.
* **Spares cover the kills**: ``layout.spares`` is raised to the number of kills planned (not at
  all without failure runs), except for a variant that shrinks instead
  (``ckpt:replacement=shrink``): it runs without spares, beside the same strategy with them.
* Bad input (unknown scenario, strategy, malformed trace, what ``launch`` would refuse of a
  variant, a ``--repeat`` above ``MAX_REPEAT``, a checkpoint directory several runs would share)
  fails before any run starts, and the bench says how long it may take before it starts; with the
  default strategy list, a plug-in that does not load is named and left out.
* **Names**: a run's file name is a plain name inside ``--out`` whatever its variant's values hold
  (``run_label``: ``dir=/../x`` leaves no path in it).
* Ctrl-C (SIGTERM, SIGHUP) in any run, the warm-up included, stops the bench with a non-zero exit.
* **A crash is no row**: a run that crashed (exit 3: a rank's exception, a time limit) is marked
  ``crashed`` in ``bench.json``, left out of the tables (a line after them says which and why),
  and the bench exits 3.
* **Repeated and interleaved** (``--repeat N``, ``run_plan``): every variant runs N times
  failure-free and N times under the scenario, round by round; each round runs every variant once
  (its failure-free run, then its failure run) in an order rotated by one each round, ``none``
  first in the first round and last in the last round, so drift over the bench shows in the
  baseline's own repeats. One unmeasured warm-up run (its file is discarded) fills the kernel
  caches before the first measured run.
* **Kills at spread phases**: in round ``i`` of N, a strategy with a checkpoint interval of I steps
  (known from its failure-free run, or stated by the variant, e.g. ``ckpt:interval=10``) has every
  kill shifted by ``round(i * I / N)`` steps (a kill at a time: that many steps of the baseline's
  mean step time), so a rollback's expected re-execution is measured, not one draw; ``bench.json``
  records each run's shift.
* **Cores**: with a core per rank the ranks are bound to cores and the throughput overhead is the
  headline; where ranks share cores the headline is the CPU cost per step (the bench says which).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from mpiec.config import Config
from mpiec.errors import MpiecError
from mpiec.failures.corruption import is_flip
from mpiec.launch.resolve import load_config

__all__ = ["MAX_REPEAT", "SCENARIOS", "Bench", "PlannedRun", "add_bench_args", "check_before_launch", "clock",
           "cmd_bench", "core_case", "duration_line", "kill_shift", "rotation", "run_label", "run_plan",
           "scenario_plans", "shifted_kills"]

#: Built-in scenarios: name → what it kills (the help text). "Training time" is the failure-free
#: ``none`` run's: the kills happen at the same wall-clock moments for every strategy, mid-step,
#: like real failures (a kill at a fixed step can land right after some strategy's checkpoint).
SCENARIOS = {
    "server": "server 1 (0 with one server) at half the training time",
    "trainer": "the last trainer at half the training time",
    "two-servers": "server 0 at 35 %% and server 1 at 70 %% of the training time",
    "random": "exponential inter-arrival times at --mtbf over servers and trainers (at most --max-kills)",
    "corruption": "no kill: one bit of an embedding row's weights flips at 35 %% of the steps (bit 22, the "
                  "mantissa's highest; the row drawn from the seed among all rows, the same under every "
                  "strategy's placement, flipped by the server that holds it)",
    "none": "no failure run: failure-free runs only",
}
FIXED_KILLS = {"server": 1, "trainer": 1, "two-servers": 2, "corruption": 0}


def scenario_plans(name: str, cfg: Config, *, horizon_s: float, mtbf_s: float, max_kills: int,
                   seed: int) -> list[str]:
    """The kill plans of a built-in scenario for ``cfg``'s layout; ``horizon_s`` is the training
    time of the failure-free baseline run, or 0 when there is none (then fixed kills are placed at
    steps instead: the middle step, 35 % and 70 % of the steps)."""
    servers, trainers = cfg.layout.servers, cfg.layout.trainers
    if horizon_s > 0:
        def at(f: float) -> str:
            return f"time={horizon_s * f:.3f}"
    else:
        def at(f: float) -> str:
            return f"step={max(1, int(cfg.training.steps * f))}"
    if name == "server":
        return [f"server:{min(1, servers - 1)}@{at(0.5)}"]
    if name == "trainer":
        return [f"trainer:{trainers - 1}@{at(0.5)}"]
    if name == "two-servers":
        return [f"server:0@{at(0.35)}", f"server:{min(1, servers - 1)}@{at(0.7)}"]
    if name == "corruption":  # a flip is placed by step whatever the horizon: it kills no one
        return [f"flip:server:*@step={max(1, int(cfg.training.steps * 0.35))}:bit=22"]
    if name == "random":
        return [f"random:mtbf={mtbf_s:.3f}s,seed={seed},max={max_kills},targets=server+trainer"]
    if name == "none":
        return []
    raise MpiecError(f"--scenario: unknown scenario '{name}' (known: {', '.join(SCENARIOS)})")


def resolved_kills(plans: list[str], cfg: Config) -> list[str]:
    """The kills a plan fires, one explicit ``slot@when`` plan each (``random:`` drawn once), after its
    silent corruptions (``flip:`` plans, kept as they are: their placement is already fixed)."""
    from mpiec.failures.corruption import parse_flips
    from mpiec.failures.faults import parse_kill_plans

    out = [str(f) for f in parse_flips(plans, cfg)]  # placed by the plan and the seed: as they are
    for k in parse_kill_plans(plans, cfg):
        if k.at_end:
            out.append(str(k))
            continue
        when = f"step={k.step}" if k.step is not None else f"time={k.time:.3f}"
        out.append(f"{k.role}:{k.index}@{when}")
    return out


class PlannedRun(NamedTuple):
    """One run of the bench's plan: a variant, failure-free or under the scenario, in round ``repeat``."""

    variant: str
    failure: bool
    repeat: int


def rotation(i: int, rounds: int, k: int) -> int:
    """How far round ``i`` of ``rounds`` rotates the ``k`` variants: one more each round, the last
    round rotated by one so the first variant (``none``) comes last in it."""
    if k <= 1 or rounds <= 1:
        return 0
    return 1 if i == rounds - 1 else i % k


def run_plan(variants: list[str], contenders: list[str], repeat: int, failure_free: bool = True,
             with_failures: bool = True) -> list[PlannedRun]:
    """The bench's runs in order: ``repeat`` rounds; round ``i`` runs ``variants`` rotated by
    ``rotation(i, repeat, len(variants))``, each variant's failure-free run (``failure_free``) then its
    failure run (``with_failures`` and a variant of ``contenders``)."""
    out: list[PlannedRun] = []
    for i in range(repeat):
        o = rotation(i, repeat, len(variants))
        for v in variants[o:] + variants[:o]:
            if failure_free:
                out.append(PlannedRun(v, False, i))
            if with_failures and v in contenders:
                out.append(PlannedRun(v, True, i))
    return out


def kill_shift(i: int, repeat: int, interval_steps: int | None) -> int:
    """Steps the kills of round ``i`` of ``repeat`` move for a strategy checkpointing every
    ``interval_steps`` (0 without an interval): evenly spread phases of the interval."""
    if not interval_steps or interval_steps <= 1 or repeat <= 1:
        return 0
    return int(round(i * interval_steps / repeat))


_STEP_KILL = re.compile(r"^(?P<slot>[^@]+)@step=(?P<step>\d+)$")
_TIME_KILL = re.compile(r"^(?P<slot>[^@]+)@time=(?P<time>[0-9.eE+-]+)$")


def shifted_kills(kills: list[str], shift_steps: int, step_s: float, steps: int) -> list[str]:
    """``kills`` moved ``shift_steps`` later: a step kill by steps (kept before the last step), a time
    kill by ``shift_steps * step_s`` seconds; other plans unchanged."""
    if not shift_steps:
        return list(kills)
    out = []
    for k in kills:
        m, t = _STEP_KILL.match(k), _TIME_KILL.match(k)
        if m:
            out.append(f"{m['slot']}@step={min(int(m['step']) + shift_steps, max(1, steps - 1))}")
        elif t and step_s > 0:
            out.append(f"{t['slot']}@time={float(t['time']) + shift_steps * step_s:.3f}")
        else:
            out.append(k)
    return out


def core_case(n_ranks: int, cores: int) -> tuple[bool, str]:
    """(ranks bound to cores, the line saying which case the bench is in)."""
    if n_ranks <= cores:
        return True, (f"{n_ranks} ranks on {cores} cores: a core per rank, ranks bound to cores "
                      "(--bind-to core); the headline is the throughput overhead")
    return False, (f"{n_ranks} ranks on {cores} cores: ranks share cores; the headline overhead is the CPU "
                   "cost per step of each role, the throughput overhead beside it")


def add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategies", metavar="A,B:KEY=V,...",
                   help="strategies (variants with their own keys, e.g. none,ckpt:interval=10,"
                        "ckpt:mode=async; replacement=, spares= and virtual_trainers= set the layout: "
                        "ckpt:replacement=shrink) to run (default: all)")
    p.add_argument("--scenario", default=None, choices=list(SCENARIOS),
                   help="failure scenario of the failure runs (default: server; --kill and --trace "
                        "replace it): " + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    p.add_argument("--mtbf", metavar="SECONDS", type=float, default=None,
                   help="MTBF of the random scenario (default: a third of the failure-free none run's "
                        "training time)")
    p.add_argument("--max-kills", type=int, default=3, metavar="N",
                   help="at most N kills in the random and trace scenarios (default: 3)")
    p.add_argument("--trace", metavar="FILE",
                   help="replay a node fault trace (InfiniteHBD JSON or LANL CSV) as the failure "
                        "scenario, nodes mapped onto servers and trainers (seeded by training.seed)")
    p.add_argument("--trace-scale", type=float, default=None, metavar="X",
                   help="trace seconds per run second, replaying the trace from its first failure "
                        "(default: the window of --max-kills mean inter-arrival times where that many "
                        "kills fall most evenly, over 80 %% of the failure-free none run's training time)")
    p.add_argument("--trace-mapping", choices=("fold", "sample"), default="fold",
                   help="trace nodes onto slots: fold = every trace node, several per slot (the whole "
                        "trace's arrivals); sample = one trace node per slot, the others dropped "
                        "(default: fold)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run every variant N times failure-free and N times under the scenario, "
                        "interleaved round by round after one unmeasured warm-up run; the tables "
                        "compare with none paired by round (Student-t 95 %% intervals from N = 2) and "
                        "show medians with their order-statistic interval (95 %% from N = 6, the range "
                        "of the runs below) (default: 1)")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the unmeasured warm-up run of a repeated bench")
    p.add_argument("--no-failure-free", action="store_true",
                   help="skip the failure-free runs (no overhead, no lossless check)")
    p.add_argument("--no-report", action="store_true", help="print the tables only (no plots, no HTML)")


#: keys of a variant that set the layout, not the strategy (``ckpt:replacement=shrink``)
LAYOUT_KEYS = ("replacement", "spares", "virtual_trainers")
#: keys of a variant that set the runtime's corruption detectors (``none:message_checksums=true``):
#: their failure-free cost is an overhead against ``none`` like a strategy's
DETECTOR_KEYS = ("dense_check_every", "shard_check_every", "message_checksums")


def variant_config(args: argparse.Namespace, variant: str, kill: list[str], memory: bool = True) -> Config:
    """``ckpt:interval=10:mode=async``: a strategy with its own keys (``LAYOUT_KEYS`` set
    ``layout.*`` instead: ``ckpt:replacement=shrink``, ``none:virtual_trainers=2``; ``DETECTOR_KEYS``
    ``failures.*``: ``none:message_checksums=true``).
    ``--set strategy.KEY=...`` applies only to the strategies that know KEY; ``memory``: check that
    the ranks fit this machine's memory (a simulated job need not)."""
    from mpiec.strategies import get_strategy_class

    name, *own = variant.split(":")
    cls = get_strategy_class(name.strip())
    sets = []
    for assignment in args.sets:
        key = assignment.partition("=")[0].strip()
        parts = key.split(".")
        if parts[0] == "strategy" and parts[-1] not in ("name",) and len(parts) >= 2:
            if parts[-1] not in cls.param_keys():
                continue
        sets.append(assignment)
    for item in own:
        if "=" not in item:
            raise MpiecError(f"--strategies: '{variant}': expected NAME:KEY=VALUE, got '{item}'")
        key, _, value = item.partition("=")
        if key.strip() in LAYOUT_KEYS:
            value = value.strip()
            sets.append(f"layout.{key.strip()}={value if value.isdigit() else repr(value)}")
        elif key.strip() in DETECTOR_KEYS:
            sets.append(f"failures.{item.strip()}")
        else:
            sets.append(f"strategy.{item}")
    return load_config(preset=args.preset, config_file=args.config, sets=sets, strategy=name.strip(),
                       kill=kill, steps=args.steps, memory=memory)


class Progress:
    """``[mpiec bench] run i/n ...`` lines with the elapsed time and an ETA for the whole bench."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()

    def start(self, what: str) -> None:
        elapsed = time.monotonic() - self.t0
        eta = f", ETA {clock(elapsed / self.done * (self.total - self.done))}" if self.done else ""
        print(f"[mpiec bench] run {self.done + 1}/{self.total}: {what} (elapsed {clock(elapsed)}{eta})",
              flush=True)

    def finish(self) -> None:
        self.done += 1


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
#: a run label's longest form (bytes): output.name has MAX_NAME_BYTES (200) for preset, scenario, seed
MAX_LABEL = 120


def run_label(variant: str) -> str:
    """The variant's part of a run's file name: ``ckpt:interval=10`` -> ``ckpt-interval10``. A
    value with a path, blanks or other characters a file name must not have (``dir=/scratch/x``,
    ``dir=/../x``) keeps only its safe characters, a run of others becomes ``_``, and the name gets
    8 hex digits of the whole variant's hash, so two variants never share a name; at most
    ``MAX_LABEL`` characters. Every result stays a plain file inside ``--out``."""
    import hashlib

    plain = variant.replace(":", "-").replace("=", "")
    label = _UNSAFE.sub("_", plain).lstrip(".-_") or "variant"
    if label == plain and len(label) <= MAX_LABEL:
        return label
    digest = hashlib.sha256(variant.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{label[:MAX_LABEL - 9].rstrip('._-')}-{digest}"


#: at most this many rounds (``--repeat``): beyond, the intervals narrow little and a bench takes days
MAX_REPEAT = 100


def check_before_launch(cfg: Config, timeout: float | None) -> None:
    """What ``launch`` refuses of a run's config (the ``MPIEC_STALL`` hook, storage figures under
    which no checkpoint fits the time limit), checked for every variant before a bench's first run."""
    from mpiec.failures.stall import check_stalls
    from mpiec.launch.launcher import default_timeout
    from mpiec.launch.resolve import check_storage_time

    limit = timeout if timeout is not None else default_timeout(cfg)
    check_stalls(cfg, limit)
    check_storage_time(cfg, limit)


def duration_line(runs: int, warm_up: bool, limit_s: float) -> str:
    """The bench's duration, said before it starts: its bound (every run to its time limit); the
    ETA of the progress lines follows from the runs measured."""
    n = runs + int(warm_up)
    what = f"{runs} runs + the warm-up" if warm_up else f"{runs} runs"
    return (f"duration: at most {clock(n * limit_s)} ({what}, each within its time limit of "
            f"{clock(limit_s)}; --timeout sets it); the ETA follows the first run")


def clock(seconds: float) -> str:
    """A duration for progress lines: ``45s``, ``12m05s``, ``1h07m``."""
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _interval_steps(path: Path) -> int:
    """The checkpoint interval in steps a failure-free run recorded (0: none)."""
    from mpiec.results import read_result

    try:
        v = read_result(path).summary.get("checkpoint_interval_steps")
    except Exception:  # noqa: BLE001 - a bad file only loses the phase spread
        return 0
    return int(v) if isinstance(v, int | float) and v == v and v > 0 else 0


def _training_time(path: Path | None) -> float:
    from mpiec.results import read_result

    if path is None:
        return 0.0
    tl = read_result(path).timeline
    return float(tl["t_end"][-1]) if len(tl) else 0.0


class Bench:
    """The bench's runs, in order: failure-free first (``none`` first), then the failure runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        from mpiec.strategies import STRATEGIES

        self.args = args
        if args.strategies:
            names = [v.strip() for v in args.strategies.split(",")]
        else:  # every strategy that loads: a broken plug-in is named and left out, never fatal
            names, problems = STRATEGIES.usable()
            for problem in problems:
                print(f"[mpiec bench] left out: {problem}", flush=True)
        self.variants = [v for v in names if v]
        if not self.variants:
            raise MpiecError("--strategies names no strategy")
        if args.kill and args.trace:
            raise MpiecError("--kill and --trace both give the failure scenario: use one")
        if args.scenario and (args.kill or args.trace):
            raise MpiecError("--scenario and --kill/--trace both give the failure scenario: use one")
        if not 1 <= getattr(args, "repeat", 1) <= MAX_REPEAT:
            raise MpiecError(f"--repeat must be in [1, {MAX_REPEAT}], got {args.repeat} (the 95 % intervals "
                             f"narrow as 1/sqrt(N): at {MAX_REPEAT}, to a tenth of one run's spread)")
        if args.max_kills < 1:
            raise MpiecError(f"--max-kills must be >= 1, got {args.max_kills}")
        for value, what in ((args.mtbf, "--mtbf"), (args.trace_scale, "--trace-scale")):
            if value is not None and not value > 0:
                raise MpiecError(f"{what} must be > 0, got {value}")
        self.scenario = "custom" if args.kill else "trace" if args.trace else (args.scenario or "server")
        self.flips = self.scenario == "corruption" or any(is_flip(k) for k in args.kill or [])
        self.trace = None
        if args.trace:
            from mpiec.failures.traces import load_trace

            self.trace = load_trace(args.trace)
            if not self.trace:
                raise MpiecError(f"--trace {args.trace}: the trace holds no failure")
        # Validate every variant (and the custom kill plan) before any run starts.
        self.base = {}
        for v in list(self.variants):
            try:
                self.base[v] = variant_config(args, v, list(args.kill))
            except MpiecError as exc:
                if args.strategies or STRATEGIES.origin(v) == "built-in":
                    raise
                # the default list: a plug-in whose own checks fail is left out, never fatal
                print(f"[mpiec bench] left out: {exc}", flush=True)
                self.variants.remove(v)
        for cfg in self.base.values():  # what launch() refuses, refused before the first run
            check_before_launch(cfg, args.timeout)
        # The baseline first (added when missing and failure-free runs are on): its training time
        # sizes the scenario and the strategies' overhead is measured against it.
        self.baseline_added = "none" not in self.variants and not args.no_failure_free
        if "none" in self.variants:
            self.variants.remove("none")
            self.variants.insert(0, "none")
        elif self.baseline_added:  # failure-free only: it is the yardstick, not a contender
            self.variants.insert(0, "none")
            self.base["none"] = variant_config(args, "none", list(args.kill))
        self.first = self.base[self.variants[0]]
        self.out = Path(args.out or Path(self.first.output.dir) / f"bench-{time.strftime('%Y%m%d-%H%M%S')}")
        self.failure_free_s = 0.0  # training time of the first failure-free run
        self.kills: list[str] | None = None  # the scenario's kills, resolved once
        self.spares = 0  # spares every run gets (failure-free twins too)
        self.repeat = int(getattr(args, "repeat", 1) or 1)
        self.intervals: dict[str, int] = {}  # checkpoint interval (steps) of each variant's failure-free run
        self.manifest: list[dict] = []

    def limit_s(self) -> float:
        """Each run's time limit: ``--timeout``, else the longest derived one of the variants."""
        from mpiec.launch.launcher import default_timeout

        return self.args.timeout or max(default_timeout(cfg) for cfg in self.base.values())

    def check_checkpoint_roots(self, runs: list[str]) -> None:
        """Before the first run: a variant whose checkpoint directory does not follow its result file
        (``strategy.dir`` given) would write every one of its runs into one directory, and a run
        refuses a directory holding another run's checkpoints (``checkpoint.check_unused``): refused
        here when the variant runs more than once (``runs``: the variant of every run, the warm-up
        included), else that directory is checked now."""
        from mpiec.storage.checkpoint import check_unused
        from mpiec.strategies import get_strategy_class

        for v in dict.fromkeys(runs):
            strategy = get_strategy_class(self.base[v].strategy.name)(self.base[v])
            root = strategy.checkpoint_root(self.out / "a.h5")
            if root is None or root != strategy.checkpoint_root(self.out / "b.h5"):
                continue  # no checkpoints, or a directory per result file
            if runs.count(v) > 1:
                raise MpiecError(f"{v}: its {runs.count(v)} runs in this bench would all write their "
                                 f"checkpoints into {root} (strategy.dir), and a run needs a checkpoint "
                                 "directory of its own: leave strategy.dir out (each run then writes "
                                 "beside its result file, in --out; put --out where the checkpoints "
                                 "should go)")
            check_unused(root)

    # -- the failure scenario ------------------------------------------------------------------
    def kill_plan(self, cfg: Config) -> list[str]:
        """The scenario as explicit kills, the same for every strategy (resolved once)."""
        a = self.args
        if self.scenario == "custom":
            return resolved_kills(list(a.kill), cfg)
        horizon = self.failure_free_s or 60.0
        if self.scenario == "trace":
            return resolved_kills(self.trace_plans(cfg, horizon), cfg)
        mtbf = a.mtbf or max(1.0, horizon / 3.0)
        return resolved_kills(scenario_plans(self.scenario, cfg, horizon_s=self.failure_free_s, mtbf_s=mtbf,
                                             max_kills=a.max_kills, seed=cfg.training.seed), cfg)

    def trace_plans(self, cfg: Config, horizon: float) -> list[str]:
        """The trace's kills from 10 % to 90 % of ``horizon``, printed with the scale and the rule that
        chose it and the node -> slot map, so a reader can tell which trace failures the run saw."""
        from collections import Counter

        from mpiec.failures.traces import DAY_S, trace_kills, trace_node_map, trace_window

        trace = self.trace
        assert trace is not None  # loaded (and not empty) for the trace scenario
        a, seed, mapping = self.args, cfg.training.seed, self.args.trace_mapping
        targets = [f"server:{i}" for i in range(cfg.layout.servers)] + \
                  [f"trainer:{i}" for i in range(cfg.layout.trainers)]
        replay_s = 0.8 * horizon
        if a.trace_scale:
            scale, from_s = a.trace_scale, 0.0
            rule = "given (--trace-scale), from the trace's first failure"
        else:
            # The whole trace squeezed into the run put its first --max-kills failures, one burst,
            # at 10 % of the run: one recovery. A window at the trace's own rate, where the kills the
            # run can take fall most evenly, makes each kill its own recovery.
            from_s, length = trace_window(trace, targets, kills=a.max_kills, seed=seed, mapping=mapping)
            scale = length / replay_s
            rule = (f"the window of trace days {from_s / DAY_S:.2f}-{(from_s + length) / DAY_S:.2f}: "
                    f"{a.max_kills} mean inter-arrival times, where the first {a.max_kills} kills fall "
                    "most evenly; --trace-scale replays from the trace's start")
        kills = trace_kills(trace, targets, scale=scale, seed=seed, start_s=0.1 * horizon,
                            max_kills=a.max_kills, horizon_s=0.9 * horizon, mapping=mapping, from_s=from_s)
        node_map = trace_node_map(trace, targets, seed=seed, mapping=mapping)
        span_days = max(f.time_s for f in trace) / DAY_S
        nodes = len({f.node for f in trace})
        print(f"[mpiec bench] trace {a.trace}: {len(trace)} failures on {nodes} nodes over "
              f"{span_days:.1f} days; scale {scale:.4g} trace s per run s ({rule}) -> {len(kills)} kills",
              flush=True)
        count = Counter(node_map.values())
        per_slot = ", ".join(f"{t} {count[t]}" for t in targets)
        print(f"[mpiec bench] trace nodes -> slots ({mapping}, seed {seed}): {len(node_map)} of {nodes} "
              f"nodes mapped, per slot: {per_slot}", flush=True)
        for k in kills:
            print(f"[mpiec bench]   {k.describe()}", flush=True)
        return [k.plan for k in kills]

    def fair(self, cfg: Config, failure: bool, repeat: int | None = None,
             kills: list[str] | None = None) -> Config:
        """``cfg`` with the scenario's MTBF for the interval rules, spares for the kills, a name
        (``-r<repeat>`` in a repeated bench), the final model kept when the plan flips bits (the
        corruption table compares it with the twin's); ``kills``: this failure run's (shifted) kills."""
        from mpiec.strategies.checkpointing import expected_mtbf_s

        shifted = kills
        kills = self.kills or []
        cfg = dataclasses.replace(cfg)
        cfg.failures = dataclasses.replace(cfg.failures, kill=list(shifted if shifted is not None else kills)
                                           if failure else [])
        if cfg.layout.replacement != "shrink":  # a shrinking variant runs on the spares it names (0)
            cfg.layout = dataclasses.replace(cfg.layout, spares=max(cfg.layout.spares, self.spares))
        # a flip's damage is measured against the twin's model: both runs keep theirs
        cfg.output = dataclasses.replace(cfg.output, final_model=cfg.output.final_model or self.flips)
        if kills and not (cfg.failures.mtbf_s > 0 or cfg.failures.mtbf_steps > 0):
            probe = dataclasses.replace(cfg, failures=dataclasses.replace(cfg.failures, kill=list(kills)))
            mtbf_s, mtbf_steps = expected_mtbf_s(probe)
            cfg.failures.mtbf_s = mtbf_s or 0.0
            cfg.failures.mtbf_steps = mtbf_steps or 0.0
        label = run_label(cfg.variant)
        cfg.output.name = f"{cfg.preset}-{label}-{self.scenario if failure else 'ff'}-s{cfg.training.seed}"
        if repeat is not None and self.repeat > 1:
            cfg.output.name += f"-r{repeat}"
        return cfg

    def warm_up(self) -> bool:
        """One unmeasured failure-free run (its file discarded) that fills the kernel caches; False
        when it was interrupted (Ctrl-C, SIGTERM, SIGHUP: the bench stops)."""
        from mpiec.launch.launcher import launch

        v = self.variants[-1]
        print(f"[mpiec bench] warm-up run (unmeasured, fills the kernel caches): {v} failure-free",
              flush=True)
        with tempfile.TemporaryDirectory(prefix="mpiec-warmup-") as tmp:
            outcome = launch(self.fair(self.base[v], False), Path(tmp), timeout=self.args.timeout, quiet=True,
                             unique_name=True)
        if outcome.message:
            print(f"[mpiec bench] warm-up: {outcome.message}", flush=True)
        return outcome.message != "interrupted"

    def shift_for(self, v: str, repeat: int) -> tuple[int, list[str]]:
        """(steps, kills) of variant ``v``'s failure run in round ``repeat``: the kills at this round's
        phase of ``v``'s checkpoint interval (from its failure-free run; without one, from an interval
        in steps the variant states, e.g. ``ckpt:interval=10``)."""
        kills = list(self.kills or [])
        from mpiec.launch.resolve import typed_params

        stated = getattr(typed_params(self.base[v]), "interval", None)  # "auto" (the default): none stated
        interval = self.intervals.get(v) or (stated if isinstance(stated, int) and stated > 0 else None)
        shift = kill_shift(repeat, self.repeat, interval)
        steps = self.first.training.steps
        step_s = self.failure_free_s / steps if steps else 0.0
        return shift, shifted_kills(kills, shift, step_s, steps)

    def bind(self) -> None:
        """Say which core case the bench is in; with a core per rank, bind the ranks to cores."""
        bound, line = core_case(self.fair(self.first, False).n_ranks, os.cpu_count() or 1)
        if bound and "OMPI_MCA_hwloc_base_binding_policy" not in os.environ:
            os.environ["OMPI_MCA_hwloc_base_binding_policy"] = "core"  # Open MPI (mpiexec --bind-to core)
            os.environ.setdefault("PRTE_MCA_hwloc_default_binding_policy", "core")  # its PRRTE launcher
        print(f"[mpiec bench] {line}", flush=True)
        self.bound = bound
        try:  # the storage model the checkpoints are written under (mpiec.storage.model, where there is one)
            from mpiec.launch.resolve import storage_line
        except ImportError:
            return
        try:
            print(f"[mpiec bench] {storage_line(self.first)}", flush=True)
        except Exception as exc:  # noqa: BLE001 - the line is informative only
            print(f"[mpiec bench] storage: unknown ({exc})", flush=True)

    # -- running -----------------------------------------------------------------------------
    def run(self) -> int:
        from mpiec.launch.launcher import EXIT_CRASH, launch

        a = self.args
        failure_free = not a.no_failure_free
        with_failures = self.scenario != "none"
        if not failure_free and not with_failures:
            raise MpiecError("--no-failure-free with --scenario none leaves nothing to run")
        contenders = self.variants[1:] if self.baseline_added else self.variants
        runs: list[tuple[str, bool, int | None]]
        if self.repeat > 1:
            runs = [(r.variant, r.failure, r.repeat) for r in
                    run_plan(self.variants, contenders, self.repeat, failure_free, with_failures)]
        else:
            runs = ([(v, False, None) for v in self.variants] if failure_free else []) + \
                   ([(v, True, None) for v in contenders] if with_failures else [])
        warm = self.repeat > 1 and not getattr(a, "no_warmup", False)
        self.check_checkpoint_roots([v for v, _, _ in runs] + ([self.variants[-1]] if warm else []))
        progress = Progress(len(runs))
        kinds = [x for x, on in (("failure-free", failure_free), (self.scenario, with_failures)) if on]
        times = f" x {self.repeat} repeats, interleaved" if self.repeat > 1 else ""
        print(f"[mpiec bench] {len(self.variants)} strategies x {' + '.join(kinds)}{times} = "
              f"{len(runs)} runs; results in {self.out}", flush=True)
        print(f"[mpiec bench] {duration_line(len(runs), warm, self.limit_s())}", flush=True)
        # A plan sized by the baseline's training time is drawn after that run (the first);
        # a custom one is known now. Either way it is drawn once, for all strategies.
        sized_later = failure_free and self.scenario != "custom"
        self.kills = [] if not with_failures else None if sized_later else self.kill_plan(self.first)
        # Spares for the kills planned: none without failure runs (--scenario none gave every run
        # 3 idle spare ranks), else the scenario's kill count (at most --max-kills if drawn later).
        self.spares = (0 if not with_failures else FIXED_KILLS.get(self.scenario, a.max_kills) if sized_later
                       else sum(not is_flip(k) for k in self.kills or []))  # a flip kills no rank
        self.bind()
        if warm and not self.warm_up():
            print("[mpiec bench] interrupted during the warm-up: no run measured", flush=True)
            return EXIT_CRASH  # like Ctrl-C in any other run: the bench stops, exit non-zero
        paths: list[Path] = []
        left_out: list[str] = []  # the crashed runs, said after the tables
        worst = 0
        for v, failure, rep in runs:
            if with_failures and self.kills is None and self.failure_free_s > 0:
                self.kills = self.kill_plan(self.first)
                plan = "; ".join(self.kills) or "no kill"
                print(f"[mpiec bench] failure scenario '{self.scenario}': {plan}", flush=True)
            if failure and not self.kills:
                print(f"[mpiec bench] {v}: the scenario fires no kill in this run's time; "
                      "failure run skipped", flush=True)
                progress.finish()
                continue
            shift, kills = self.shift_for(v, rep or 0) if failure else (0, [])
            cfg = self.fair(self.base[v], failure, rep, kills if failure else None)
            what = f"{v} {'under ' + self.scenario if failure else 'failure-free'}"
            if rep is not None:
                what += f", repeat {rep + 1}/{self.repeat}"
            if shift:
                what += f", kills {shift} steps later ({'; '.join(kills)})"
            progress.start(what)
            outcome = launch(cfg, self.out, timeout=a.timeout, quiet=a.quiet, unique_name=True)
            progress.finish()
            # a crash (a rank's exception, a time limit) measured nothing: never a row of the tables
            crashed = outcome.code == EXIT_CRASH
            self.manifest.append({"order": len(self.manifest), "variant": v, "failure": failure,
                                  "repeat": rep or 0, "kill": list(cfg.failures.kill),
                                  "kill_shift_steps": shift,
                                  "path": str(outcome.path.name) if outcome.path else None,
                                  "message": outcome.message or "", "crashed": crashed})
            if outcome.path and not crashed and not failure and v not in self.intervals:
                self.intervals[v] = _interval_steps(outcome.path)
            if outcome.message:
                print(f"[mpiec bench] {v}: {outcome.message}", flush=True)
            if crashed:
                left_out.append(f"{what}: {outcome.message or 'crashed'}")
            elif outcome.path:
                paths.append(outcome.path)
                if not failure and not self.failure_free_s:
                    self.failure_free_s = _training_time(outcome.path)
            if outcome.code == EXIT_CRASH:
                worst = EXIT_CRASH
            if outcome.message == "interrupted":  # Ctrl-C, SIGTERM, SIGHUP stop the whole bench
                print("[mpiec bench] interrupted: the remaining runs are skipped", flush=True)
                break
        self.write_manifest()
        self.report(paths)
        if left_out:
            print(f"\n[mpiec bench] left out of the tables: {len(left_out)} run(s) that crashed, hit the "
                  f"time limit or were interrupted (exit code {EXIT_CRASH}):", flush=True)
            for line in left_out:
                print(f"[mpiec bench]   {line}", flush=True)
        return worst

    def write_manifest(self) -> None:
        """``bench.json``: the plan as run (order, repeat, kills and their shift of every run)."""
        if not self.manifest:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {"repeat": self.repeat, "scenario": self.scenario, "kills": list(self.kills or []),
               "n_ranks": self.fair(self.first, False).n_ranks, "cores": os.cpu_count() or 1,
               "bound_to_core": bool(getattr(self, "bound", False)), "intervals": self.intervals,
               "runs": self.manifest}
        (self.out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    def report(self, paths: list[Path]) -> None:
        """Print the failure-free and failure tables; write the report next to the result files."""
        from mpiec.analysis.report import write_report
        from mpiec.analysis.tables import comparison_table
        from mpiec.results import read_result

        if not paths:
            return
        results = [read_result(p) for p in paths]
        print()
        print(comparison_table(results))
        print(f"\nresult files in {self.out}")
        if not self.args.no_report:
            written = write_report(results, self.out)
            html = [p for p in written if p.suffix == ".html"]
            print(f"report: {len(written)} files in {self.out}" + (f", open {html[0]}" if html else ""))


def cmd_bench(args: argparse.Namespace) -> int:
    return Bench(args).run()
