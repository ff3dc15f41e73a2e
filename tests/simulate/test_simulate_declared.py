"""The simulator reads what a strategy declares (its ``CostModel``), never its name: the project's rule
"roles and studies never branch on a strategy's name" held for ``mpiec/simulate`` (no MPI,
milliseconds)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mpiec.simulate
from mpiec.simulate.policies import baseline, modelled
from mpiec.strategies import STRATEGIES

SIMULATE = Path(mpiec.simulate.__file__).parent
#: data, not a branch: a paper's preset names the strategies the paper compares
DATA = {"papers.py"}
#: what holds a strategy's name where a branch would read it
SUBJECT = re.compile(r"^(name|s|n)$|strategy(\.name)?$")
TAKES_A_NAME = {"build_policy", "cost_model", "get_strategy_class", "param_default"}


def _names(node: ast.AST) -> set[str]:
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {x.value for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str)}


def _branches(path: Path, strategies: set[str]) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and SUBJECT.search(ast.unparse(node.left)):
            if any(_names(c) & strategies for c in node.comparators):
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).split(".")[-1] in TAKES_A_NAME:
            if _names(node.args[0]) & strategies:
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_simulator_never_branches_on_a_strategy_name():
    strategies = set(STRATEGIES)
    found = [b for p in sorted(SIMULATE.glob("*.py")) if p.name not in DATA for b in _branches(p, strategies)]
    assert not found, "read the strategy's cost model instead:\n" + "\n".join(found)


def test_the_check_sees_a_name_branch(tmp_path):
    """The scan above is not vacuous: it finds the branches it forbids."""
    path = tmp_path / "probe.py"
    path.write_text('if m.strategy == "ecrm": pass\nif name in ("cpr-mfu", "x"): pass\n'
                    'build_policy("none", c)\n')
    assert len(_branches(path, set(STRATEGIES))) == 3


def test_what_the_simulator_reads_is_declared():
    models = modelled()
    assert models[baseline()].unprotected and not models[baseline()].takes_checkpoints
    for name, m in models.items():
        if m.partials_over is not None:  # partial checkpoints over a modelled strategy of the same kind
            assert m.partials_over in models and models[m.partials_over].kind == m.kind, name
