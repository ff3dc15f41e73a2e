"""The package's import graph has no circles, and analysis/simulation never import a role.

Static (``ast``, nothing is imported): every module of the package (pyproject's package-dir:
``mpiec/``, ``kernels/`` as ``mpiec.kernels``, ``analysis/`` as ``mpiec.analysis``), every
import of an ``mpiec`` module in it, at module level and inside functions alike (a lazy import
still ties the two modules together), relative imports resolved, ``from mpiec.x import y``
counted as importing ``mpiec.x.y`` when ``y`` is a submodule. Imports under
``if TYPE_CHECKING:`` are left out: they never run. ``importlib.import_module`` (the strategy
and paper registries) is not followed.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "mpiec"


def _module_files() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out: dict[str, tuple[Path, bool]] = {}
    for name, directory in dirs.items():
        base = ROOT / directory
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("").parts
            if "__pycache__" in rel:
                continue
            is_pkg = rel[-1] == "__init__"
            out[".".join((name, *(rel[:-1] if is_pkg else rel)))] = (path, is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST):
    """Every Import / ImportFrom below ``node``, except the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:  # the ``else:`` branch does run
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _import_nodes(node)


def _known(name: str, modules: dict) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (itself excluded)."""
    modules = _module_files()
    graph: dict[str, set[str]] = {}
    for module, (path, is_pkg) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = module if is_pkg else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in _import_nodes(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                # ``from mpiec.x import y``: mpiec.x.y if that is a submodule, else mpiec.x
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names]
            for name in names:
                if name == PACKAGE or name.startswith(PACKAGE + "."):
                    target = _known(name, modules)
                    if target is not None and target != module:
                        targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return sorted(out)


def test_graph_sees_the_package():
    graph = import_graph()
    assert {"mpiec.cli", "mpiec.kernels.gf256", "mpiec.analysis.metrics", "mpiec.accounting"} <= set(graph)
    assert "mpiec.accounting" in graph["mpiec.analysis.metrics"]


def test_cycles_finder():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (each line one strongly connected component):\n" + "\n".join(
        "  " + " <-> ".join(component) for component in found)


def test_analysis_and_simulate_do_not_import_roles():
    graph = import_graph()
    bad = {module: sorted(t for t in targets if t == "mpiec.roles" or t.startswith("mpiec.roles."))
           for module, targets in graph.items()
           if module.startswith(("mpiec.analysis", "mpiec.simulate"))}
    bad = {module: targets for module, targets in bad.items() if targets}
    assert not bad, f"analysis / simulation modules importing a role: {bad}"


def test_kernels_import_only_kernels():
    """Kernels are pure functions on arrays: no runtime module (strategies, roles, comm) behind them."""
    graph = import_graph()
    def kernel(name: str) -> bool:
        return name == "mpiec.kernels" or name.startswith("mpiec.kernels.")

    bad = {module: sorted(t for t in targets if not kernel(t))
           for module, targets in graph.items() if kernel(module)}
    bad = {module: targets for module, targets in bad.items() if targets}
    assert not bad, f"kernel modules importing runtime modules: {bad}"
