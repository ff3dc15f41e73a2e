"""A broken plug-in is refused in one line or left out, never a traceback (issue 36, item 14).

Throw-away plug-ins (``plugin_helpers``: real entry points on ``PYTHONPATH``):

* one that raises at import (not an ``ImportError``) is listed as left out by ``mpiec strategies``,
  ``mpiec bench``'s default list and ``mpiec simulate``, which go on with the others;
* unusable declarations (``Params`` not a dataclass, an unresolvable annotation, a default out of
  range or of the wrong type, an unknown merge rule) and a ``check()`` or ``__init__`` that raises:
  ``mpiec run`` exits 2 with one line naming the plug-in, before any rank starts; the contract
  fails on the bad defaults;
* a summary key without a merge rule costs its merge, not a complete run's result file;
* ``docs/runtime.md`` documents every hook with the arguments the runtime passes.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import COMMON, CRASH_PLUGINS, install
from run_helpers import mpiec

pytestmark = [pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]

BROKEN = '''
from dataclasses import dataclass

from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.params import param


class NotADataclass(Strategy):
    name = "h36-plain"

    class Params:
        interval = 5


@dataclass(frozen=True)
class Unresolved:
    n: "NoSuchType" = param(1, "steps")  # noqa: F821


class Unresolvable(Strategy):
    name = "h36-unresolved"
    Params = Unresolved


@dataclass(frozen=True)
class NegativeDefault:
    n: int = param(-5, "steps", ge=1)


class BadRange(Strategy):
    name = "h36-bad-range"
    Params = NegativeDefault


@dataclass(frozen=True)
class TextDefault:
    n: int = param("8", "steps")


class BadType(Strategy):
    name = "h36-bad-type"
    Params = TextDefault


class UnknownRule(Strategy):
    name = "h36-bad-rule"
    summary_rules = {"rows": "avg"}


class CheckRaises(Strategy):
    name = "h36-check"

    @classmethod
    def check(cls, params, cfg):
        raise KeyError("h36 check failed on purpose")


class InitRaises(Strategy):
    name = "h36-init"

    def __init__(self, cfg):
        raise ValueError("h36 init failed on purpose")
'''

REFUSED = {  # strategy -> what its one line says
    "h36-plain": "Params must be a dataclass",
    "h36-unresolved": "Params annotations do not resolve (NameError",
    "h36-bad-range": "the default of strategy.n must be >= 1, got -5",
    "h36-bad-type": "the default of strategy.n must be an integer, got '8'",
    "h36-bad-rule": "summary_rules {'rows': 'avg'} use no merge rule",
    "h36-check": "validate()/check() raised KeyError: 'h36 check failed on purpose'",
    "h36-init": "__init__ raised ValueError: h36 init failed on purpose",
}


@pytest.fixture
def broken(tmp_path, monkeypatch):
    eps = {name: f"h36broken:{cls}" for name, cls in (
        ("h36-plain", "NotADataclass"), ("h36-unresolved", "Unresolvable"), ("h36-bad-range", "BadRange"),
        ("h36-bad-type", "BadType"), ("h36-bad-rule", "UnknownRule"), ("h36-check", "CheckRaises"),
        ("h36-init", "InitRaises"))}
    eps["h36-boom"] = "h36boom:Anything"
    return install(tmp_path, monkeypatch, {"h36broken": BROKEN,
                                           "h36boom": "raise RuntimeError('h36 import failed on purpose')\n"},
                   eps)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "mpiec", *args], capture_output=True, text=True,
                          timeout=timeout)


BOOM = "strategy 'h36-boom' (plug-in (h36-test-plugins), h36boom:Anything) does not load: RuntimeError: " \
       "h36 import failed on purpose"


def test_a_plugin_raising_at_import_is_left_out_of_strategies(broken):
    run = cli("strategies")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and re.search(r"^ckpt ", run.stdout, re.M)
    left_out = run.stdout.split("\nleft out:\n")[1].splitlines()
    assert f"  {BOOM}" in left_out
    assert sum("h36-boom" in line for line in run.stdout.splitlines()) == 1  # one line naming it


def test_a_plugin_raising_at_import_is_left_out_of_simulate(broken):
    run = cli("simulate")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "10,000 nodes, ecrm" in run.stdout


def test_a_plugin_raising_at_import_is_left_out_of_the_bench_default_list(broken, tmp_path):
    # --no-failure-free with --scenario none leaves nothing to run: the bench stops once every
    # strategy of its default list was validated, before any rank starts
    run = cli("bench", "--preset", "tiny", "--no-failure-free", "--scenario", "none",
              "--out", str(tmp_path / "b"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"[mpiec bench] left out: {BOOM}" in run.stdout
    for name in ("h36-plain", "h36-check", "h36-init"):  # declarations, and checks of a config
        assert f"[mpiec bench] left out: strategy '{name}' (plug-in (h36-test-plugins)" in run.stdout
    assert "Traceback" not in run.stderr and "leaves nothing to run" in run.stderr


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_broken_plugin_is_one_line_and_exit_2_before_any_rank(broken, tmp_path, name):
    run = cli("run", "--preset", "tiny", "--strategy", name, "--timeout", "60", "--out", str(tmp_path / "o"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"strategy '{name}' (plug-in (h36-test-plugins)" in run.stderr and REFUSED[name] in run.stderr
    assert "launching" not in run.stdout and not (tmp_path / "o").exists()


def test_the_contract_fails_on_a_bad_default_before_any_run(broken):
    run = subprocess.run([sys.executable, "-P", "-m", "mpiec.contract", "h36-bad-range"], capture_output=True,
                         text=True, timeout=240)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAIL  declarations" in run.stdout and REFUSED["h36-bad-range"] in run.stdout
    assert "reference run" not in run.stdout


@pytest.mark.mpirun
def test_a_summary_key_without_a_rule_keeps_the_result_file(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, {"h36common": COMMON}, CRASH_PLUGINS)
    run = mpiec(["run", "--preset", "tiny", "--strategy", "h36-no-rule", "--timeout", "200"],
                out=tmp_path / "o", timeout=260)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["steps_completed"] == 40 and not s["lost"] and s["h36_rows"] == 1  # kept by "first"
    assert "summary key 'h36_rows' has no merge rule" in s["summary_merge_problems"]
    assert "warning: strategy h36-no-rule: summary key 'h36_rows' has no merge rule" in run.stdout


def test_runtime_docs_give_every_hook_the_arguments_the_runtime_passes():
    """A plug-in written from the hook table must accept what the runtime passes (``after_apply``'s
    ``replayed`` was missing: such a plug-in died at step 1)."""
    from mpiec.strategies.api import agents

    text = (ROOT / "docs" / "runtime.md").read_text()
    table = text[text.index("| hook | where |"):]
    table = table[:table.index("\n\n")]
    documented = re.findall(r"`(\w+)\(([^`)]*)\)`", table)
    assert {"after_apply", "before_step", "on_pull", "after_step"} <= {n for n, _ in documented}
    classes = (agents.Agent, agents.StepAgent, agents.TrainerAgent, agents.ServerAgent, agents.ParityAgent)
    for name, args in documented:
        if args.strip() == "...":
            continue
        given = [a.strip().split("=")[0] for a in args.split(",") if a.strip()]
        arities = {len(inspect.signature(getattr(c, name)).parameters) - 1
                   for c in classes if name in vars(c)}
        assert len(given) in arities, f"docs/runtime.md documents {name}({args}); the agents take {arities}"
