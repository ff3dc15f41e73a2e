"""The strategy API's structural rules (issue 23), read from the code.

* no strategy module tests the role it runs on: an agent is built for one role by its strategy's
  factory, so ``slot.role`` comparisons, ``Slot(TRAINER, 0)`` checks and ``rank == 0`` (the
  monitor) have no place in a hook;
* no strategy subclasses another strategy to reuse it (checkpointing is composed of components);
* every registered strategy is a factory of agents, not the transitional one-object adapter.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mpiec.strategies import BUILTIN, STRATEGIES

ROOT = Path(__file__).resolve().parents[2] / "mpiec" / "strategies"
#: the registry and the API (``api/``, and its older public paths: re-exports kept for plug-ins),
#: which define the roles' hooks; ``api/compose.py`` is checked like a strategy's code
_API_PARTS = ("base", "agents", "env", "params", "header", "plan", "costs")
API = {"__init__.py", "api/__init__.py", *(f"{prefix}{m}.py" for prefix in ("", "api/") for m in _API_PARTS)}
ROLE_TESTS = re.compile(r"\b(ctx|env)\.slot\.role\b|\b(ctx|env)\.slot\s*(==|!=)|\b(ctx|env)\.rank\s*==\s*0\b"
                        r"|^\s*(if|elif)\s+role\s*(==|!=|in\b|not in\b)")


def strategy_sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if p.relative_to(ROOT).as_posix() not in API)


def test_no_strategy_module_tests_the_role_it_runs_on():
    found = []
    for path in strategy_sources():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if ROLE_TESTS.search(code):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "strategy code testing its role:\n" + "\n".join(found)


def test_no_strategy_subclasses_another_strategy():
    """(A private, unregistered base shared by the variants of one strategy, such as cpr's, is no
    other strategy.)"""
    classes = {name: STRATEGIES[name] for name in BUILTIN}
    registered = set(classes.values())
    for name, cls in classes.items():
        parents = [b for b in cls.__mro__[1:] if b in registered]
        assert not parents, f"strategy '{name}' ({cls.__name__}) subclasses {[p.__name__ for p in parents]}"


def test_no_strategy_module_reaches_into_the_runtime():
    for path in strategy_sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpiec.roles"):
                raise AssertionError(f"{path.relative_to(ROOT)} imports {node.module}: strategies see their "
                                     "rank through strategies.env (RankEnv, DenseState, ShardState)")
