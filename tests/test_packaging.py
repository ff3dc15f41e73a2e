"""pyproject.toml lists every package of the tree: a plain ``pip install .`` (not editable) ships
them all (it once left out ``mpiec.strategies.ecrm`` and ``.log``: ``import mpiec.strategies`` failed)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_packages() -> set[str]:
    """Dotted names of the directories holding an ``__init__.py``, with pyproject's package-dir
    mapping (``kernels`` -> ``mpiec.kernels``, ``analysis`` -> ``mpiec.analysis``)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    out = set()
    for name, directory in cfg["package-dir"].items():
        base = ROOT / directory
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            if "__pycache__" not in rel:
                out.add(".".join((name, *rel)))
    return out


def test_every_package_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing, stale = tree_packages() - listed, listed - tree_packages()
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert not stale, f"listed in pyproject.toml but no such package: {sorted(stale)}"
