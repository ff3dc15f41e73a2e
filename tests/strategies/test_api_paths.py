"""The strategy API's older public paths keep working for plug-ins (issue 39: the API moved to
``mpiec/strategies/api/``): ``mpiec.strategies.base`` and its siblings re-export every public name
(``__all__``) of the API module of the same name, as the same objects."""

from __future__ import annotations

import importlib

import pytest

#: the modules plug-ins imported before the move (the examples did: base, agents, env, params,
#: costs, and ``from mpiec.strategies import compose``)
OLD_PATHS = ("base", "agents", "env", "params", "costs", "compose")


@pytest.mark.parametrize("name", OLD_PATHS)
def test_old_path_re_exports_the_api_module(name: str):
    old = importlib.import_module(f"mpiec.strategies.{name}")
    api = importlib.import_module(f"mpiec.strategies.api.{name}")
    public = set(api.__all__)
    missing = sorted(n for n in public if getattr(old, n, None) is not getattr(api, n))
    assert not missing, f"mpiec.strategies.{name} lacks (or differs in) {missing}"


def test_the_examples_imports_resolve():
    from mpiec.strategies import compose
    from mpiec.strategies.agents import Coordinator, ServerAgent, TrainerAgent
    from mpiec.strategies.api import compose as api_compose
    from mpiec.strategies.api.base import Strategy as ApiStrategy
    from mpiec.strategies.base import Failure, RecoveryPlan, Scope, Strategy
    from mpiec.strategies.costs import CostModel
    from mpiec.strategies.env import DenseState, RankEnv, ShardState
    from mpiec.strategies.params import param

    assert Strategy is ApiStrategy and compose.trainer is api_compose.trainer
    assert all((Coordinator, ServerAgent, TrainerAgent, Failure, RecoveryPlan, Scope, CostModel,
                DenseState, RankEnv, ShardState, param))
