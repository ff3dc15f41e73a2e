"""The strategy registry: names, lazy imports, and the error for an unknown name."""

import subprocess
import sys

import pytest

from mpiec.errors import ConfigError
from mpiec.strategies import STRATEGIES, available, get_strategy_class
from mpiec.strategies.api.base import Strategy


def test_every_registered_class_is_a_strategy_named_as_its_key():
    assert len(STRATEGIES) == len(available()) >= 9
    for name, cls in STRATEGIES.items():
        assert issubclass(cls, Strategy) and cls.name == name


def test_an_unknown_name_lists_the_available_ones():
    with pytest.raises(ConfigError, match="unknown strategy 'nope'.*ckpt"):
        get_strategy_class("nope")


def test_asking_for_one_strategy_imports_no_other_and_no_mpi():
    code = ("import sys\n"
            "from mpiec.strategies import get_strategy_class\n"
            "get_strategy_class('ckpt')\n"
            "print(sorted(m for m in sys.modules if m.startswith('mpiec.strategies.')))\n"
            "print('mpi4py.MPI' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, mpi = out.splitlines()
    assert "ecrm" not in loaded and "cnr" not in loaded and "mpiec.strategies.ckpt" in loaded
    assert mpi == "False"


class _EntryPoint:
    def __init__(self, name: str, value: str, dist: str) -> None:
        self.name, self.value = name, value
        self.dist = type("Dist", (), {"name": dist})()


def test_a_plugin_registers_by_entry_point_and_cannot_take_a_builtin_name(monkeypatch):
    from importlib import metadata

    from mpiec.strategies import BUILTIN, Registry

    eps = [_EntryPoint("mine", "mpiec.strategies.none:NoProtection", "my-pkg"),
           _EntryPoint("ckpt", "my_pkg:Evil", "evil-pkg")]
    monkeypatch.setattr(metadata, "entry_points", lambda group: eps if group == "mpiec.strategies" else [])
    reg = Registry(BUILTIN, "mpiec.strategies")
    assert "mine" in reg and reg.origin("mine") == "plug-in (my-pkg)" and reg.origin("ckpt") == "built-in"
    assert reg.problems == ["plug-in 'ckpt' of package evil-pkg ignored: the name is taken by the built-in "
                            "strategy"]
    with pytest.raises(ConfigError, match="not a mpiec.strategies.api.base.Strategy subclass whose name is"):
        reg["mine"]  # the class is none's: its name is not the entry point's


def test_a_plugin_that_does_not_import_is_named_with_its_error():
    from mpiec.strategies import Registry

    reg = Registry({"broken": "no_such_module_xyz:Thing"})
    with pytest.raises(ConfigError, match="strategy 'broken' .*no_such_module_xyz:Thing.* does not load"):
        reg["broken"]


def test_a_plugin_raising_anything_at_import_is_one_line_and_left_out_of_usable(tmp_path, monkeypatch):
    """Issue 36, item 14: only ImportError and AttributeError were caught; a RuntimeError at import
    broke every command that lists the strategies."""
    from mpiec.strategies import Registry

    (tmp_path / "h36_boom_mod.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry({"ckpt": "mpiec.strategies.ckpt:FullCheckpoint", "boom": "h36_boom_mod:Thing"})
    with pytest.raises(ConfigError, match=r"strategy 'boom' .* does not load: RuntimeError: boom at import$"):
        reg["boom"]
    names, problems = reg.usable()
    assert names == ["ckpt"] and len(problems) == 1 and "boom at import" in problems[0]


def test_merge_summaries_names_a_key_without_a_rule_instead_of_raising():
    from mpiec.strategies.api.base import merge_summaries

    problems: list[str] = []
    merged = merge_summaries({"a": "sum"}, [{"a": 1, "b": 5}, {"a": 2, "b": 7}, None], problems)  # type: ignore[list-item]
    assert merged == {"a": 3, "b": 5}
    assert problems == ["summary key 'b' has no merge rule in summary_rules (kept as 'first')",
                        "a summary() returned NoneType, not a dict (left out)"]
    with pytest.raises(KeyError):
        merge_summaries({}, [{"b": 1}])
