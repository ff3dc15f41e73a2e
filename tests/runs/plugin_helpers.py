"""Throw-away strategy plug-ins for tests: real entry points, without installing a package.

``install(tmp_path, monkeypatch, modules, entry_points)`` writes the ``modules`` (name -> source)
and a ``*.dist-info`` folder whose ``entry_points.txt`` registers ``entry_points`` (strategy name
-> ``module:Class``) in the group ``mpiec.strategies``, then puts the folder on ``PYTHONPATH``: the
``mpiec`` commands a test starts (and their ranks, which inherit the environment) see the plug-ins
exactly as an installed package's, while the test process itself and every other test do not.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

#: agents and strategies the crash tests build on (a module of its own: imported by the plug-ins)
COMMON = '''
from mpiec.strategies.api.agents import Coordinator, ServerAgent
from mpiec.strategies.api.base import Strategy


class RaisingServer(ServerAgent):
    """Server 0's hook raises at step 10 (a plug-in bug)."""

    def before_step(self, step):
        if step == 10 and self.env.slot.index == 0:
            raise RuntimeError("h36 plug-in hook failed on purpose")


class HookRaises(Strategy):
    name = "h36-hook"
    description = "test plug-in: a server hook raises"
    recovers = True

    def server(self, env, role):
        return RaisingServer(env)


class FactoryNone(Strategy):
    name = "h36-no-agent"
    description = "test plug-in: the trainer factory returns None"

    def trainer(self, env, role):
        return None


class RaisingCoordinator(Coordinator):
    def plan(self, failure):
        raise RuntimeError("h36 coordinator plan failed on purpose")


class PlanRaises(Strategy):
    name = "h36-plan"
    description = "test plug-in: the coordinator's plan raises (monitor side)"
    recovers = True

    def coordinator(self, env):
        return RaisingCoordinator(env)


class SummaryServer(ServerAgent):
    def summary(self):
        return {"h36_rows": 1}


class NoRule(Strategy):
    name = "h36-no-rule"
    description = "test plug-in: a summary key without a merge rule"

    def server(self, env, role):
        return SummaryServer(env)
'''

CRASH_PLUGINS = {"h36-hook": "h36common:HookRaises", "h36-no-agent": "h36common:FactoryNone",
                 "h36-plan": "h36common:PlanRaises", "h36-no-rule": "h36common:NoRule"}


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, modules: dict[str, str],
            entry_points: dict[str, str]) -> Path:
    """Register ``entry_points`` backed by ``modules`` for the commands this test starts."""
    site = tmp_path / "h36-site"
    site.mkdir(exist_ok=True)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))
    dist = site / "h36_test_plugins-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: h36-test-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[mpiec.strategies]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", str(site) + (os.pathsep + old if old else ""))
    return site
