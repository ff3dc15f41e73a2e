"""The runs a reproduction makes: experiments (one ``mpiec bench`` each), their scale, and the machine.

Owns ``Scale`` (smoke / quick / full: how many repetitions, how big), ``Experiment`` (one bench:
strategies, config overrides, kill plan, repetitions), ``run_experiment`` (runs it through
``mpiec.launch.bench.Bench``, or reuses a finished directory), ``Regime`` rows (which of a paper's ratios a
run keeps, and which it does not), ``Machine`` (what the page says about the host) and the
``Paper`` protocol every paper module implements; ``Realized`` (a planned ratio against the one the
runs realized, with its tolerance and why) and ``Gate`` (whether an experiment's runs may be judged:
its planned ratios realized and its bench not disturbed, ``claims.judge(gate=)``).

Invariants:

* every run goes through ``mpiec bench``: the same seed and the same explicit kills for every
  strategy of an experiment, failure-free twins, interleaved repetitions, kills at spread phases
  of a checkpoint interval, ``bench.json`` beside the result files;
* an experiment's directory is complete when its ``bench.json`` is well formed and lists every run
  with a result file that reads back; ``reuse`` reads such a directory instead of running again
  (and only such a one: a malformed ``bench.json`` or a truncated result file makes it incomplete,
  moved aside, never deleted, with one line saying why);
* ``check_directory`` refuses, before any run, a directory that ``run_experiment`` would refuse;
* nothing here computes a verdict (``claims.judge`` does): a ``Gate`` only says why the runs may
  not be judged; a bench is disturbed when other processes took more than
  ``analysis.tables.DISTURBED_SHARE`` of the CPU (median over its runs, the bench's own trust line);
* the machine a figure is computed for is the one recorded with the runs (``Machine.of_runs``),
  never the one remaking a page (``--reuse``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mpiec.errors import MpiecError

__all__ = ["SCALES", "Experiment", "Gate", "Machine", "Paper", "Realized", "Regime", "RegimeRow", "RunSet",
           "Scale", "check_directory", "disturbance", "run_experiment"]


@dataclass(frozen=True)
class Scale:
    """How big a reproduction is: ``smoke`` (the test suite: seconds per paper, checks the tables and
    the verdict logic, not the papers' numbers), ``quick`` (under 20 min on 2 idle cores) or
    ``full`` (under an hour)."""

    name: str
    repeat: int  # repetitions of each comparison (a median's 95 % interval needs >= 6; fewer: its range)

    def pick(self, smoke: Any, quick: Any, full: Any) -> Any:
        """The value for this scale."""
        return {"smoke": smoke, "quick": quick, "full": full}[self.name]


SCALES = {"smoke": Scale("smoke", 1), "quick": Scale("quick", 3), "full": Scale("full", 5)}


@dataclass(frozen=True)
class Experiment:
    """One ``mpiec bench``: ``strategies`` (variants, e.g. ``ckpt:interval_s=7.5``) failure-free and, with
    ``kills``, under that explicit kill plan; ``sets`` are ``--set KEY=VALUE`` overrides of ``preset``."""

    key: str  # directory name, unique within the paper
    what: str  # one line for the progress and the page
    strategies: tuple[str, ...]
    preset: str = "tiny"
    sets: tuple[str, ...] = ()
    kills: tuple[str, ...] = ()  # an explicit kill plan; empty = failure-free runs only
    repeat: int = 1
    failure_free: bool = True
    steps: int | None = None
    timeout: float | None = None  # per run; default: the bench's

    def __post_init__(self) -> None:
        if not self.strategies:
            raise ValueError(f"experiment {self.key}: no strategy")
        if not self.failure_free and not self.kills:
            raise ValueError(f"experiment {self.key}: neither failure-free runs nor kills")

    @property
    def n_runs(self) -> int:
        """Runs the bench will make (its baseline ``none`` included when missing, warm-up excluded)."""
        variants = list(self.strategies)
        baseline_added = "none" not in variants and self.failure_free
        k = len(variants) + (1 if baseline_added else 0)
        per_round = (k if self.failure_free else 0) + (len(variants) if self.kills else 0)
        return per_round * self.repeat + (1 if self.repeat > 1 else 0)

    def bench_argv(self, out: Path, quiet: bool = True) -> list[str]:
        """This experiment as an ``mpiec bench`` command line (without ``mpiec``)."""
        argv = ["bench", "--preset", self.preset, "--strategies", ",".join(self.strategies),
                "--repeat", str(self.repeat), "--max-kills", str(max(1, len(self.kills))), "--no-report",
                "--out", str(out)]
        argv += [x for s in self.sets for x in ("--set", s)]
        argv += [x for k in self.kills for x in ("--kill", k)] if self.kills else ["--scenario", "none"]
        argv += ["--no-failure-free"] if not self.failure_free else []
        argv += ["--steps", str(self.steps)] if self.steps is not None else []
        argv += ["--timeout", repr(self.timeout)] if self.timeout is not None else []
        return argv + (["--quiet"] if quiet else [])

    def args(self, out: Path, quiet: bool = True) -> argparse.Namespace:
        """The ``mpiec bench`` arguments of this experiment, parsed by the command's own options (its
        defaults and checks, whatever options the bench gains: ``mpiec.cli_args``, which ``mpiec.cli``
        builds the command from; not ``mpiec.cli`` itself, which imports ``mpiec.reproduce.cli``)."""
        from mpiec.cli_args import bench_parser

        command, *argv = self.bench_argv(out, quiet)
        assert command == "bench"
        return bench_parser().parse_args(argv)


@dataclass
class RunSet:
    """An experiment's outcome: its result files read back, where they are, how long it took."""

    experiment: Experiment
    directory: Path
    results: list[Any] = field(default_factory=list)  # mpiec.results.RunResult
    seconds: float = 0.0
    reused: bool = False
    problems: list[str] = field(default_factory=list)  # runs without a result file, with their message

    def of(self, variant: str, failure: bool | None = None) -> list[Any]:
        """The results of ``variant`` (``failure``: only failure runs / only failure-free ones)."""
        from mpiec.analysis.metrics import failure_run
        from mpiec.analysis.metrics import variant as variant_of

        return [r for r in self.results if variant_of(r) == variant
                and (failure is None or failure_run(r) == failure)]


def _manifest(directory: Path) -> tuple[list[dict], str]:
    """The runs ``bench.json`` lists, or ``([], why not)``: it is missing, unreadable or malformed
    (each run an object whose ``path``, where given, is a file name in ``directory``)."""
    doc = directory / "bench.json"
    if not doc.is_file():
        return [], "no bench.json"
    try:
        data = json.loads(doc.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [], f"bench.json cannot be read ({exc})"
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        return [], "bench.json is malformed (its 'runs' is not a list of objects)"
    for r in runs:
        path = r.get("path")
        if path is not None and not (isinstance(path, str) and path and Path(path).name == path):
            return [], f"bench.json is malformed (a run's path is {path!r}, not a file name)"
    return runs, ""


def _problem(r: dict) -> str:
    """A run of ``bench.json`` without a result file, as the page lists it."""
    kind = "failure run" if r.get("failure") else "failure-free run"
    repeat = r.get("repeat", 0)
    n = repeat + 1 if isinstance(repeat, int) and not isinstance(repeat, bool) else "?"
    return f"{r.get('variant')} {kind} {n}: {r.get('message') or 'no result file'}"


def _read_complete(rs: RunSet) -> str:
    """Read a finished experiment into ``rs``: '' when it is complete (every run listed, with a result
    file that reads back), else why not (``rs`` then left empty)."""
    from mpiec.errors import ResultFileError
    from mpiec.results import read_result

    runs, why = _manifest(rs.directory)
    if why or not runs:
        return why or "bench.json lists no run"
    results = []
    for r in runs:
        if not r.get("path") or not (rs.directory / r["path"]).is_file():
            return f"{_problem(r)} (no result file)"
        try:
            results.append(read_result(rs.directory / r["path"]))
        except ResultFileError as exc:  # a truncated or damaged file: run it again
            return str(exc)
    rs.results = results
    return ""


def _read(rs: RunSet) -> None:
    """The results of a bench that just ran; the runs without a (readable) result file as problems."""
    from mpiec.errors import ResultFileError
    from mpiec.results import read_result

    runs, why = _manifest(rs.directory)
    if why:
        rs.problems.append(why)
    for r in runs:
        if r.get("path") and (rs.directory / r["path"]).is_file():
            try:
                rs.results.append(read_result(rs.directory / r["path"]))
            except ResultFileError as exc:
                rs.problems.append(f"{_problem(r)} ({exc})")
        else:
            rs.problems.append(_problem(r))


def check_directory(directory: Path, *, reuse: bool = False) -> None:
    """Refuse (``MpiecError``, one line) what ``run_experiment`` would refuse, before any run starts:
    a path that is not a folder, or (without ``reuse``) a folder that already holds files."""
    if directory.exists() and not directory.is_dir():
        raise MpiecError(f"{directory} is not a folder: choose another --out")
    if not reuse and directory.is_dir() and any(directory.iterdir()):
        raise MpiecError(f"{directory} is not empty (an earlier reproduction's runs?): choose another --out, "
                         "or pass --reuse to keep its complete experiments")


def run_experiment(exp: Experiment, directory: Path, *, reuse: bool = False, quiet: bool = True) -> RunSet:
    """Run ``exp`` into ``directory`` (or read it back when ``reuse`` and it is complete; an incomplete
    one is then moved aside, never deleted, and run again). Raises ``KeyboardInterrupt`` when the
    bench was interrupted (Ctrl-C, SIGTERM, SIGHUP): the runs it finished stay in ``directory``."""
    from mpiec.launch.bench import Bench

    rs = RunSet(exp, directory)
    why = _read_complete(rs) if reuse and directory.is_dir() else "no folder"
    if not why:
        rs.reused = True
        return rs
    if reuse and directory.is_dir() and any(directory.iterdir()):
        aside = directory.with_name(f"{directory.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
        directory.rename(aside)  # kept, not deleted: its files may still be worth reading
        print(f"[mpiec reproduce] {directory} was incomplete ({why}): moved to {aside.name}, running it "
              "again", flush=True)
    check_directory(directory)
    t0 = time.monotonic()
    Bench(exp.args(directory, quiet)).run()
    rs.seconds = time.monotonic() - t0
    if (directory / "bench.json").is_file():
        _read(rs)
    else:
        rs.problems.append("the bench wrote no bench.json (no run finished)")
    if any(p.endswith(": interrupted") for p in rs.problems):
        raise KeyboardInterrupt  # Ctrl-C, SIGTERM, SIGHUP stopped the bench: stop the reproduction too
    return rs


@dataclass(frozen=True)
class RegimeRow:
    """One ratio or size of a paper's setup: the paper's value, this run's, and whether it is kept."""

    quantity: str
    paper: str
    here: str
    kept: bool | None  # True kept, False not kept, None: not applicable / only described
    note: str = ""  # how the run keeps it, or why it cannot (and the source tag of the paper's value)
    #: a constant chosen to produce a paper's figure: which one (the table says "calibrated", and a
    #: claim whose judged figure follows from it is "calibrated (not a test)")
    calibrated: str = ""
    band: str = ""  # an [U] assumption's plausible band and its source (``claims.Assumption.text``)

    @property
    def status(self) -> str:
        """The 'kept' column: ``calibrated``, ``kept``, ``not kept`` or —."""
        if self.calibrated:
            return "calibrated"
        return {True: "kept", False: "not kept", None: "—"}[self.kept]


@dataclass(frozen=True)
class Regime:
    """What a paper's reproduction keeps of the paper's setup."""

    summary: str  # one paragraph: the compression (e.g. one paper minute = 0.25 s) and the layout
    rows: tuple[RegimeRow, ...]


@dataclass(frozen=True)
class Realized:
    """A ratio an experiment planned, the one its runs realized, and the tolerance (``lo``..``hi``,
    in the quantity's unit) within which the runs still stand for the planned regime, with ``why``."""

    quantity: str  # "save time / MTBF"
    planned: float
    realized: float
    lo: float
    hi: float
    why: str  # why this tolerance (stated before the run)
    unit: str = ""

    @staticmethod
    def factor(quantity: str, planned: float, realized: float, factor: float, why: str,
               unit: str = "") -> Realized:
        """Realized within ``factor`` times the planned figure, either way."""
        return Realized(quantity, planned, realized, planned / factor, planned * factor, why, unit)

    @property
    def ok(self) -> bool:
        """Realized and within the tolerance (an unknown realized figure is not realized)."""
        return math.isfinite(self.realized) and self.lo <= self.realized <= self.hi

    def text(self) -> str:
        """``save time / MTBF 12.6 % realized, planned 0.35 % (tolerance 0.175–0.7 %)``."""
        got = f"{self.realized:.3g}{self.unit}" if math.isfinite(self.realized) else "not measured"
        return (f"{self.quantity} {got} realized, planned {self.planned:.3g}{self.unit} (tolerance "
                f"{self.lo:.3g}–{self.hi:.3g}{self.unit})")


def disturbance(results: Iterable[Any]) -> str:
    """'' when the runs' host was quiet, else why not: the median share of the CPU other processes took
    during the runs (``other_cpu_share``) above ``analysis.tables.DISTURBED_SHARE``. Runs that recorded
    no share (older result files) do not count."""
    from mpiec.analysis.tables import DISTURBED_SHARE

    other = [float(r.summary["other_cpu_share"]) for r in results
             if isinstance(r.summary.get("other_cpu_share"), int | float)
             and math.isfinite(float(r.summary["other_cpu_share"]))]
    if not other:
        return ""
    med = statistics.median(other)
    if med <= DISTURBED_SHARE:
        return ""
    return (f"other processes took {100 * med:.0f} % of the CPU (median over {len(other)} runs, more than "
            f"{100 * DISTURBED_SHARE:.0f} %)")


@dataclass(frozen=True)
class Gate:
    """Whether runs may be judged: ``checks`` (the planned ratios against the realized ones),
    ``unrealized`` (each failed check's text) and ``disturbed`` (why the bench was not quiet, or '').
    ``claims.judge(gate=)`` gives ``not judged`` when either is set. ``a + b``: both gates' checks."""

    checks: tuple[Realized, ...] = ()
    disturbed: str = ""

    @staticmethod
    def of(checks: Iterable[Realized] = (), results: Iterable[Any] = ()) -> Gate:
        """The gate of ``results`` (their disturbance) with ``checks``."""
        return Gate(tuple(checks), disturbance(results))

    @property
    def unrealized(self) -> tuple[str, ...]:
        return tuple(c.text() + f" ({c.why})" for c in self.checks if not c.ok)

    @property
    def ok(self) -> bool:
        return not self.disturbed and not self.unrealized

    def __add__(self, other: Gate) -> Gate:
        return Gate(self.checks + other.checks, "; ".join(x for x in (self.disturbed, other.disturbed) if x))


@dataclass(frozen=True)
class Machine:
    """The host a reproduction ran on, as the page states it."""

    cores: int
    cpu: str
    memory_gb: float
    load_start: float
    python: str
    host: str

    @staticmethod
    def here() -> Machine:
        cpu = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        except (ValueError, OSError, AttributeError):
            mem = float("nan")
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = float("nan")
        return Machine(os.cpu_count() or 1, cpu, float(mem), float(load), platform.python_version(),
                       platform.node())

    @staticmethod
    def of_runs(results: Iterable[Any], recorded: Machine | None = None) -> Machine:
        """The machine the runs ran on: ``recorded`` (the one ``reproduce.json`` kept with them) or
        this one, with the core count the runs themselves recorded (``host_cores``, the most common)
        where they did: findings made from reused runs on another host are those of the runs'."""
        base = recorded or Machine.here()
        cores = [int(r.summary.get("host_cores") or 0) for r in results]
        cores = [c for c in cores if c > 0]
        if not cores:
            return base
        return dataclasses.replace(base, cores=Counter(cores).most_common(1)[0][0])

    def shares_cores(self, n_ranks: int) -> bool:
        return n_ranks > self.cores

    def line(self) -> str:
        return (f"{self.cores} cores ({self.cpu}), {self.memory_gb:.0f} GiB, load {self.load_start:.2f} "
                f"at the start, Python {self.python}")


class Paper(Protocol):
    """A paper module (``mpiec.reproduce.ecrec``, ``.cpr``, ``.cnr``): its claims, the regime of its
    reproduction, the experiments that measure them, and the findings (verdicts via ``claims.judge``)."""

    name: str  # "ecrec"
    title: str  # "ECRM / ECRec (Liu, Kosaian, Rashmi; PVLDB 2023)"
    #: one paragraph: what the suite can and cannot establish about the paper on a small shared
    #: machine, and what a cluster run (``jobscripts/reproduce.sbatch``) would add (the page prints it)
    scope: str

    def claims(self) -> Sequence[Any]:
        """Every claim this module judges (``claims.Claim``), in the page's order."""
        ...

    def regime(self, scale: Scale) -> Regime:
        """The ratios this reproduction keeps at ``scale``."""
        ...

    def experiments(self, scale: Scale) -> list[Experiment]:
        """The benches to run, in order."""
        ...

    def findings(self, runs: dict[str, RunSet], scale: Scale, machine: Machine) -> list[Any]:
        """One ``claims.Finding`` per claim, from the experiments' runs (keyed by ``Experiment.key``); a
        claim whose runs are missing still gets a finding (``judge`` on an unknown figure)."""
        ...

    def plots(self, runs: dict[str, RunSet], outdir: Path) -> list[Path]:
        """The figures the claims need (PNG), written into ``outdir``; [] without matplotlib."""
        ...
