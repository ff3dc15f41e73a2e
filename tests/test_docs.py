"""The documentation stays true to the repository: its links, the paths and config keys it names.

Static (reads text, imports only the config's key declarations), milliseconds:

* every relative link (``[text](path)``, images included) in README.md, docs/**/*.md and the
  examples' READMEs points at a file or folder that exists;
* every repository path a page writes in backticks (``mpiec/...py``, ``docs/...md``, ``kernels/...``,
  ``jobscripts/...``, ``examples/...``, ``scripts/...``, ``tests/...``, ``analysis/...``), alone or
  inside a command, exists; globs and placeholders (``*``, ``<NAME>``, ``...``) are not paths;
* no page or source file points outside the repository (to a shared folder beside the checkout) or
  to a design document that is not in it (``OUTSIDE``);
* every backticked config key of a known section (``training.steps``, ``--set layout.servers=4``)
  is a key ``mpiec/config/__init__.py`` declares (``core_keys``); ``strategy.KEY`` is free-form and skipped.
  A module function named like a key (``spread_order`` of ``mpiec/layout.py``) is written with its
  module (``mpiec.layout.spread_order``), which is not read as a key.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpiec.config import core_keys

ROOT = Path(__file__).resolve().parents[1]

#: the pages checked: the README, every page under docs/ (the lab notes included), the examples'
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/*/README.md")])

#: where the sources and documents of the repository live (a run's results/ or a venv are not read)
SOURCE_ROOTS = ("mpiec", "kernels", "analysis", "jobscripts", "examples", "scripts", "tests", "docs", ".ci")
SOURCE_SUFFIXES = {".py", ".md", ".toml", ".sh", ".sbatch", ".txt", ".cfg", ".ini", ".yml", ".yaml", ""}

LINK = re.compile(r"\]\(([^()\s]+)\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
#: a path, globs and placeholders captured whole (``*``, ``<NAME>``, ``…``) so that they can be left out
PATH = re.compile(r"(?<![\w./-])((?:mpiec|kernels|jobscripts|examples|scripts|docs|tests|analysis)"
                  r"/[\w./*<>…-]*)")
#: a path's kind of target that the check holds to existing (docs/figures/x.png written by a
#: command is an output, not a reference): by its first folder, the suffixes checked
CHECKED_SUFFIXES = {
    "mpiec": {".py", ""}, "docs": {".md", ""}, "tests": {".py", ""}, "analysis": {".py", ""},
    "kernels": None, "jobscripts": None, "examples": None, "scripts": None,
}
SECTIONS = sorted({k.name.split(".")[0] for k in core_keys() if "." in k.name} - {"strategy"})
KEY = re.compile(r"(?<![\w./-])(" + "|".join(SECTIONS) + r")\.([a-z_][a-z0-9_]*)\b")
#: what points outside the repository, spelt in two parts so that this file does not match itself
OUTSIDE = ("../" + "shared", "DESIGN" + ".md")


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_spans(text: str) -> list[str]:
    """Inline code spans of a page; fenced blocks are not spans (they hold commands and code)."""
    return [m.group(2) for m in CODE_SPAN.finditer(FENCE.sub("", text))]


def test_pages_found():
    names = {page_id(p) for p in PAGES}
    assert {"README.md", "docs/architecture.md", "docs/runtime.md", "docs/notes/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_exist(page: Path):
    missing = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor of the page itself
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page_id(page)} links to what does not exist: {missing}"


def repo_paths(text: str) -> set[str]:
    """The repository paths the page's code spans name (globs and placeholders left out)."""
    out = set()
    for span in code_spans(text):
        for raw in PATH.findall(span):
            path = raw.split("::", 1)[0].rstrip(".,:;")
            if any(c in raw for c in "*<>…") or "..." in raw:
                continue
            suffixes = CHECKED_SUFFIXES[path.split("/", 1)[0]]
            if suffixes is not None and Path(path).suffix not in suffixes:
                continue
            out.add(path)
    return out


def test_repo_paths_finds_paths_in_commands():
    text = "`python scripts/crossover.py --page docs/notes/crossover.md` and `mpiec/config/presets/*.toml`"
    assert repo_paths(text) == {"scripts/crossover.py", "docs/notes/crossover.md"}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_backticked_repository_paths_exist(page: Path):
    missing = sorted(p for p in repo_paths(page.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{page_id(page)} names paths that do not exist: {missing}"


def source_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for top in SOURCE_ROOTS:
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts \
                    and not any(part.endswith(".egg-info") for part in p.parts):
                files.append(p)
    return files


def test_nothing_points_outside_the_repository():
    found = []
    for p in source_files():
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue  # not a text file
        found += [f"{page_id(p)}: {word}" for word in OUTSIDE if word in text]
    assert not found, f"pointers outside the repository: {found}"


def config_keys(text: str) -> set[str]:
    return {f"{m.group(1)}.{m.group(2)}" for span in code_spans(text) for m in KEY.finditer(span)}


def test_config_keys_finds_keys_and_skips_module_paths():
    text = "`layout.servers`, `--set training.steps=5`, `mpiec.layout.spread_order`, `strategy.k`"
    assert config_keys(text) == {"layout.servers", "training.steps"}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_backticked_config_keys_exist(page: Path):
    known = {k.name for k in core_keys()}
    unknown = sorted(config_keys(page.read_text()) - known)
    assert not unknown, f"{page_id(page)} names config keys that do not exist: {unknown}"
