"""The contract every strategy passes, runnable on one strategy: ``python -m mpiec.contract NAME``.

Owns the checks (``tests/runs/test_contract.py`` runs them over every registered strategy, an
installed plug-in included; a plug-in's author runs them on theirs with one command):

* **declarations** — the class loads from the registry under its name, its ``Params`` is a
  dataclass whose defaults are valid values of their fields (type and range), every
  ``summary_rules`` value is a merge rule (``base.check_declarations``; no MPI);
* **failure-free** — a run (with one idle spare) trains exactly what ``none`` trains (same
  ``param_checksum``), all steps, not lost, no kill; the result's ``strategy`` and ``variant``
  attributes name it; every summary key had a merge rule (the monitor keeps a key without one by
  ``first`` and names it in ``summary_merge_problems``, which fails this check);
* **planned kills** — ``KILLS`` (a server, a trainer and a spare) each fire exactly once; a
  strategy that recovers completes in 2 or 3 recoveries, and one that claims ``lossless`` ends
  with the failure-free checksum; one that does not recover says it lost the run;
* **tags** — in every run the strategy's communicators are audited (``mpiec.comm.tags``): a
  point-to-point message with a tag outside ``RankEnv.tags`` (or on ``world``) fails the check;
* **where it diverged** — ``main`` records per-step shard digests in the failure-free run and
  compares them in the run under kills (``roles.digests``); a lossless claim that ends with
  another checksum names the first step, shard and rows that differed.

Each check raises ``ContractError`` (an ``AssertionError``: pytest shows it) with a one-line
reason. Runs go through the ``mpiec`` CLI of the running interpreter (mpiexec underneath).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpiec.comm.tags import AUDIT_ENV
from mpiec.errors import ConfigError
from mpiec.results import RunResult, decode, read_result
from mpiec.roles import digests
from mpiec.strategies import STRATEGIES
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.base import check_declarations as check_class_declarations

STEPS = 30
BASE = ["--preset", "tiny", "--steps", str(STEPS), "--set", "layout.spares=3"]
#: the failure-free check keeps one idle spare (a run with a spare present trains what none trains),
#: not the three the kill check needs: each idle spare costs a launch ~1.7 CPU-s of start-up
FAILURE_FREE = [*BASE, "--set", "layout.spares=1"]
#: the spare's kill fires on the monitor's step notice: a few steps before the server's
KILLS = "server:1@step=10;trainer:0@step=17;spare:1@step=3"
FIRED = [("server", 1), ("spare", 1), ("trainer", 0)]


class ContractError(AssertionError):
    """A strategy breaks the contract (the message says how)."""


@dataclass(frozen=True)
class Case:
    """One strategy configuration the contract runs: ``id`` names it, ``extra`` are CLI arguments
    (``--set strategy.KEY=VALUE``, layout changes); ``lossless`` overrides the class's claim (None:
    the class's ``lossless``), for a variant documented as approximate."""

    id: str
    name: str
    extra: list[str] = field(default_factory=list)
    lossless: bool | None = None


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    out: Path

    def result(self) -> RunResult:
        files = sorted(self.out.glob("*.h5"))
        if len(files) != 1:
            raise ContractError(f"one result file expected in {self.out}, found {len(files)}: "
                                f"{_tail(self)}")
        return read_result(files[0])


def default_cases() -> list[Case]:
    """One case per registered strategy (built-ins and installed plug-ins), with its defaults."""
    return [Case(name, name) for name in sorted(STRATEGIES)]


def strategy_class(name: str) -> type[Strategy]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ContractError(f"no strategy '{name}' (registered: {', '.join(STRATEGIES)}; a plug-in "
                            "registers in the entry-point group 'mpiec.strategies')") from None
    except Exception as exc:  # a plug-in that does not load: the registry says why
        raise ContractError(str(exc)) from None


def claims_lossless(case: Case) -> bool:
    if case.lossless is not None:
        return case.lossless
    return bool(getattr(strategy_class(case.name), "lossless", False))


def run_mpiec(args: list[str], out: Path, timeout: float = 150, env: dict[str, str] | None = None) -> Run:
    """``mpiec ARGS --out OUT`` with the running interpreter, the tag audit on and ``env`` added to
    the environment; a run past ``timeout`` s is a hang."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-P", "-m", "mpiec", *args, "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, AUDIT_ENV: "1", **(env or {})})
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the launcher then kills its ranks
        stdout, stderr = proc.communicate(timeout=30)
        raise ContractError(f"mpiec {' '.join(args)} did not end within {timeout:g} s (a hang):\n"
                            f"{stdout[-1500:]}{stderr[-1500:]}") from None
    return Run(proc.returncode, stdout, stderr, out)


def _tail(run: Run) -> str:
    return (run.stdout[-1500:] + run.stderr[-1500:]).strip()


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ContractError(message)


def _tag_errors(case: Case, run: Run) -> None:
    """A rank stopped by the tag audit: the one-line reason, not the crash's tail."""
    line = next((ln for ln in (run.stdout + run.stderr).splitlines() if "TagError: " in ln), "")
    if line:
        raise ContractError(f"{case.id}: a message with a tag that is not the strategy's "
                            f"({line.split('TagError: ', 1)[1]})")


def _digest_env(mode: str, where: Path | None) -> dict[str, str]:
    return {digests.ENV: f"{mode}:{where}"} if where is not None else {}


def first_divergence(res: RunResult) -> str:
    """The earliest ``diverged`` event of a run that compared shard digests ("" if none)."""
    found = sorted((float(e["time"]), decode(e["detail"])) for e in res.events
                   if decode(e["kind"]) == "diverged")
    return found[0][1] if found else ""


# -- the checks -----------------------------------------------------------------------------------

def check_declarations(name: str) -> str:
    """No MPI: the class loads under its name, its parameters parse, its merge rules exist."""
    cls = strategy_class(name)  # the registry refuses unusable declarations (base.check_declarations)
    _need(cls.name == name, f"class {cls.__qualname__} says name '{cls.name}', registered as '{name}'")
    try:
        check_class_declarations(cls)  # Params a dataclass, its defaults valid values; merge rules known
    except ConfigError as exc:
        raise ContractError(f"{name}: {exc}") from None
    return (f"{cls.__module__}.{cls.__qualname__}, {len(cls.param_keys())} key(s), "
            f"{len(cls.summary_rules)} summary key(s), recovers={cls.recovers}, "
            f"lossless={getattr(cls, 'lossless', False)}")


def reference_checksum(out: Path, extra: list[str] | None = None) -> str:
    """``none``'s failure-free ``param_checksum`` (with the layout of ``extra``, if any)."""
    run = run_mpiec(["run", *BASE, "--strategy", "none", *(extra or [])], out, timeout=120)
    _need(run.code == 0, f"the reference run (strategy none) failed with exit code {run.code}: {_tail(run)}")
    return str(run.result().summary["param_checksum"])


def check_failure_free(case: Case, reference: str, out: Path, record: Path | None = None) -> str:
    """The strategy trains exactly what ``none`` trains (``record``: its shard digests go there)."""
    run = run_mpiec(["run", *FAILURE_FREE, "--strategy", case.name, *case.extra], out, timeout=120,
                    env=_digest_env("record", record))
    _tag_errors(case, run)
    _need(run.code == 0, f"{case.id}: failure-free run ended with exit code {run.code}: {_tail(run)}")
    res = run.result()
    s = res.summary
    _need(s["param_checksum"] == reference,
          f"{case.id}: param_checksum {s['param_checksum'][:16]} differs from none's {reference[:16]}: "
          "a hook changed what training computes (hooks may add work, never change the update)")
    _need(s["steps_completed"] == STEPS and not s["lost"] and s["kills_fired"] == 0,
          f"{case.id}: steps_completed {s['steps_completed']}/{STEPS}, lost {s['lost']}, "
          f"kills_fired {s['kills_fired']}")
    _need(not s.get("summary_merge_problems"),
          f"{case.id}: the monitor could not merge the agents' summaries: {s.get('summary_merge_problems')}")
    strategy, variant = str(res.attrs["strategy"]), str(res.attrs["variant"])
    _need(strategy == case.name and variant.startswith(case.name),
          f"{case.id}: result attributes strategy={strategy!r} variant={variant!r}")
    return f"checksum {reference[:16]} = none's, {STEPS} steps"


def fired_kills(res: RunResult) -> list[tuple[str, int]]:
    """(role, index) of every planned kill that fired, sorted."""
    return sorted((decode(e["role"]), int(e["role_index"])) for e in res.events
                  if decode(e["kind"]) == "kill")


def check_kills(case: Case, reference: str, out: Path, compare: Path | None = None) -> str:
    """Every planned kill fires once; recovery is lossless (if claimed) or the run says it is lost
    (``compare``: the failure-free run's shard digests, to name where a lossless claim failed)."""
    cls = strategy_class(case.name)
    run = run_mpiec(["run", *BASE, "--strategy", case.name, *case.extra, "--kill", KILLS], out, timeout=150,
                    env=_digest_env("compare", compare))
    _tag_errors(case, run)
    _need(run.code in (0, 1), f"{case.id}: exit code {run.code} under --kill {KILLS!r} (0: completed, "
                              f"1: lost; anything else is a crash or bad input): {_tail(run)}")
    res = run.result()
    s, fired = res.summary, fired_kills(res)
    if not cls.recovers:
        _need(run.code == 1 and s["lost"], f"{case.id} does not recover (recovers=False) yet the run "
                                           f"ended with exit code {run.code}, lost={s['lost']}")
        _need(("spare", 1) in fired and ("trainer", 0) not in fired,
              f"{case.id}: kills fired {fired}: the spare's (step 3) and not the trainer's (step 17, "
              "after the run was lost at step 10)")
        return f"lost at the server's kill, as a strategy that does not recover: {s.get('abort_reason', '')}"
    _need(run.code == 0, f"{case.id}: recovers=True but the run ended with exit code {run.code} "
                         f"({s.get('abort_reason', '')}): {_tail(run)}")
    _need(fired == FIRED, f"{case.id}: kills fired {fired}, planned {FIRED}, each exactly once")
    _need(s["kills_fired"] == 3 and 2 <= s["recoveries"] <= 3,
          f"{case.id}: kills_fired {s['kills_fired']} (3 planned), recoveries {s['recoveries']} (2 or 3: "
          "kills close together may share one)")
    if claims_lossless(case):
        where = ""
        if compare is not None and s["param_checksum"] != reference:
            where = first_divergence(res) or ("every server's shard matched the failure-free run's at "
                                              "every step checked: look at the trainers' dense replica")
            where = f"; first divergence: {where}"
        _need(s["param_checksum"] == reference,
              f"{case.id} claims lossless recovery but ended with param_checksum {s['param_checksum'][:16]}, "
              f"the failure-free one is {reference[:16]}{where}")
        return f"{s['recoveries']} recoveries, checksum = the failure-free one (lossless)"
    return f"{s['recoveries']} recoveries (not lossless: checksum {s['param_checksum'][:16]})"


# -- python -m mpiec.contract NAME ---------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mpiec.contract",
        description="Run the strategy contract on one strategy (tiny preset, real ranks): its "
                    "declarations, a failure-free run against none's checksum, and a run under "
                    f"planned kills ({KILLS}). PASS/FAIL per check; exit code 1 if any fails.")
    parser.add_argument("name", help="strategy name (built-in or plug-in: see 'mpiec strategies')")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for the strategy's runs, repeatable "
                             "(e.g. strategy.interval=5 or layout.servers=4)")
    parser.add_argument("--out", type=Path,
                        help="keep the result files here (default: a temporary directory)")
    args = parser.parse_args(argv)
    extra = [a for kv in args.set for a in ("--set", kv)]
    case = Case(args.name + "".join(f":{kv}" for kv in args.set), args.name, extra)
    layout = [a for kv in args.set if kv.startswith("layout.") for a in ("--set", kv)]

    with tempfile.TemporaryDirectory(prefix="mpiec-contract-") as tmp:
        root = args.out or Path(tmp)
        origin = STRATEGIES.origin(args.name) if args.name in STRATEGIES else "not registered"
        print(f"mpiec contract: strategy {case.id} ({origin}), preset tiny, {STEPS} steps", flush=True)
        failed = []
        reference = ""

        def check(title: str, fn: Any) -> Any:
            try:
                value = fn()
            except Exception as exc:  # a ContractError, or a problem the check ran into
                kind = "" if isinstance(exc, ContractError) else f"{type(exc).__name__}: "
                print(f"FAIL  {title}: {kind}{exc}", flush=True)
                failed.append(title)
                return None
            print(f"PASS  {title}: {value}", flush=True)
            return value

        if check("declarations", lambda: check_declarations(args.name)) is not None:
            reference = check("reference run", lambda: reference_checksum(root / "none", layout)) or ""
        if reference:
            shards: Path | None = root / "shard-digests"  # recorded failure-free, compared under kills
            if check("failure-free", lambda: check_failure_free(case, reference, root / "failure-free",
                                                                 shards)) is None:
                shards = None
            check("planned kills", lambda: check_kills(case, reference, root / "kills", shards))
        if failed:
            print(f"FAIL: strategy {case.id} breaks the contract ({', '.join(failed)})")
        else:
            print(f"PASS: strategy {case.id} passes the contract")
        if args.out:
            print(f"result files in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
