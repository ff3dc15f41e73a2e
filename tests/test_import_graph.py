"""The package's import graph: no circles, and every arrow runs down the layers (issue 39).

Layers, bottom up: the **foundations** (the root's ``errors`` and ``layout``; the wings ``config/``
(with ``schema``, ``limits``, ``inputs``), ``comm/`` (with ``tags``), ``failures/``, ``storage/``,
``results/``, ``kernels/``, ``data/``, ``model/``), the **strategies** (their API in
``strategies/api/`` below the strategies themselves), **launch/**, the **roles**, and on top the
entry points (``cli``, ``cli_args``, ``worker``, ``contract``), the developer **benchmarks/** and
the studies. The rules:
a foundation imports only foundations (no arrow up into strategies, launch or roles); the API
imports no strategy; a strategy imports only foundations and strategies; launch imports no role,
entry point or benchmark; a benchmark reaches a strategy only through its public surface (the
registry, ``strategies.api``, the names a strategy's package exports); the root holds only the entry
points and the foundations ``errors`` and ``layout`` (``ROOT_MODULES``: a new module goes in a
wing); analysis and simulation never import a role.

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

#: the root's entry points: the commands, the rank's module (``python -m mpiec.worker``), the contract
ENTRY_POINTS = {"mpiec.__main__", "mpiec.cli", "mpiec.cli_args", "mpiec.worker", "mpiec.contract"}
#: the root's foundation modules (``mpiec`` itself: the version)
ROOT_FOUNDATIONS = {"mpiec", "mpiec.errors", "mpiec.layout"}
#: the wings every layer above may build on (``mpiec.config``: the config, its keys, limits and input
#: files; ``mpiec.comm``: communicators, ULFM and the tag table)
FOUNDATION_WINGS = ("mpiec.config", "mpiec.comm", "mpiec.failures", "mpiec.storage", "mpiec.results",
                    "mpiec.kernels", "mpiec.data", "mpiec.model")
#: every module the mpiec/ root may hold (``__init__`` is ``mpiec``): the rest of the package is in wings
ROOT_MODULES = ENTRY_POINTS | ROOT_FOUNDATIONS


def within(module: str, *packages: str) -> bool:
    """``module`` is one of ``packages`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def is_foundation(module: str) -> bool:
    return module in ROOT_FOUNDATIONS or within(module, *FOUNDATION_WINGS)


def arrows(graph: dict[str, set[str]], source, bad) -> dict[str, list[str]]:
    """Module -> its imports ``bad(target)`` says it may not have, for every module ``source(module)``."""
    out = {m: sorted(t for t in targets if bad(t)) for m, targets in graph.items() if source(m)}
    return {m: targets for m, targets in out.items() if targets}


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
    assert {"mpiec.cli", "mpiec.kernels.gf256", "mpiec.analysis.metrics",
            "mpiec.results.accounting"} <= set(graph)
    assert "mpiec.results.accounting" in graph["mpiec.analysis.metrics"]


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


def root_modules() -> set[str]:
    """The modules whose file sits directly in ``mpiec/`` (``mpiec/__init__.py`` as ``mpiec``)."""
    return {m for m, (path, _) in _module_files().items() if path.parent == ROOT / PACKAGE}


def test_the_root_holds_only_entry_points_and_errors_and_layout():
    """A new module at the root belongs in a wing (``config/``, ``comm/``, ``failures/``, ...) unless
    it is a new entry point; then ``ENTRY_POINTS`` says so, and the docs' layout with it."""
    root = root_modules()
    assert "mpiec.cli" in root and "mpiec" in root and "mpiec.config" not in root  # the finder sees the root
    loose = sorted(root - ROOT_MODULES)
    assert not loose, (f"loose modules at the mpiec/ root: {loose}; the root holds only the entry points "
                       f"{sorted(ENTRY_POINTS)} and the foundations {sorted(ROOT_FOUNDATIONS)}: move each "
                       "into the wing of its concern (mpiec/config/, mpiec/comm/, mpiec/failures/, ...)")
    gone = sorted(ROOT_MODULES - root)
    assert not gone, f"listed as root modules but not at the mpiec/ root: {gone} (update ROOT_MODULES)"


def test_foundations_import_only_foundations():
    """No arrow from a foundation up into strategies, launch, roles, benchmarks or a study."""
    bad = arrows(import_graph(), is_foundation, lambda t: not is_foundation(t))
    assert not bad, f"foundation modules importing from above: {bad}"


def test_the_strategy_api_imports_no_strategy():
    bad = arrows(import_graph(), lambda m: within(m, "mpiec.strategies.api"),
                 lambda t: within(t, "mpiec.strategies") and not within(t, "mpiec.strategies.api"))
    assert not bad, f"strategy API modules importing a strategy (or the registry): {bad}"


def test_strategies_rest_on_foundations_only():
    """A strategy sees its rank through ``strategies.api.env``: never launch, a role or an entry point."""
    bad = arrows(import_graph(), lambda m: within(m, "mpiec.strategies"),
                 lambda t: not (is_foundation(t) or within(t, "mpiec.strategies")))
    assert not bad, f"strategy modules importing above the foundations: {bad}"


def test_launch_imports_no_role_entry_point_or_benchmark():
    bad = arrows(import_graph(), lambda m: within(m, "mpiec.launch"),
                 lambda t: within(t, "mpiec.roles", "mpiec.benchmarks") or t in ENTRY_POINTS)
    assert not bad, f"launch modules importing a role, an entry point or a benchmark: {bad}"


def public_strategy_path(target: str) -> bool:
    """The registry, the API, or a strategy's top (its module, or its package's exported names)."""
    return target == "mpiec.strategies" or within(target, "mpiec.strategies.api") or target.count(".") == 2


def test_public_strategy_path():
    assert public_strategy_path("mpiec.strategies.ecrm") and public_strategy_path("mpiec.strategies.cnr")
    assert public_strategy_path("mpiec.strategies.api.base")
    assert not public_strategy_path("mpiec.strategies.ecrm.pipeline")


def test_benchmarks_reach_strategies_through_their_public_surface():
    bad = arrows(import_graph(), lambda m: within(m, "mpiec.benchmarks"),
                 lambda t: within(t, "mpiec.strategies") and not public_strategy_path(t))
    assert not bad, f"benchmarks importing a strategy's inner modules: {bad}"
