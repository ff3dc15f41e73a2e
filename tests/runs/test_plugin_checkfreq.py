"""The checkpointing example plug-in ``examples/mpiec-checkfreq``: the checkpoint kit with its own
schedule part (CheckFreq's overhead budget), installed through the entry-point group
``mpiec.strategies`` (CI installs it: ``pip install -e examples/mpiec-checkfreq``).

Its budget rule is checked on a fake clock (no MPI); under a real server kill it rolls back to its
last checkpoint and ends with the failure-free checksum. The contract test (``test_contract.py``)
runs it too, as every registered strategy.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
from run_helpers import mpiec

ENTRY = "mpiec_checkfreq:CheckFreq"


def installed() -> None:
    names = {ep.name: ep.value for ep in metadata.entry_points(group="mpiec.strategies")}
    if "checkfreq" not in names:
        pytest.fail("the checkpointing example plug-in is not installed: run 'pip install -e "
                    "examples/mpiec-checkfreq' (entry point 'checkfreq' of group mpiec.strategies)")
    assert names["checkfreq"] == ENTRY


def test_the_checkpointing_plug_in_is_installed():
    installed()


def test_the_budget_checkpoints_every_t_save_over_overhead_seconds():
    installed()
    from mpiec_checkfreq import Budget, BudgetSchedule

    clock = [0.0]
    s = BudgetSchedule(Budget("checkfreq", overhead=0.1), first=3, total_steps=100, now=lambda: clock[0])
    assert [s.due(step) for step in range(3)] == [False, False, True]  # the first one measures t_save
    s.started(2)
    assert not s.due(3)  # no measurement yet: no second checkpoint
    s.observe(np.array([500_000]))  # a part took 0.5 s: with a 10 % budget, one every 5 s
    clock[0] = 4.9
    assert not s.due(4)
    clock[0] = 5.0
    assert s.due(5)
    s.started(5)
    s.restarted()  # a recovery: the budget's clock starts again
    assert not s.due(6)
    clock[0] = 20.0
    assert s.due(50) and not s.due(99)  # the last step never checkpoints: nothing left to protect
    assert s.figures()["checkpoint_interval_s"] == pytest.approx(5.0)


@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free("--preset", "tiny")["param_checksum"]  # shared: tests/runs/conftest.py


@pytest.mark.mpirun
@pytest.mark.kill
@pytest.mark.timeout(600)
def test_server_kill_rolls_back_to_the_budgets_checkpoint_losslessly(reference, tmp_path):
    installed()
    run = mpiec(["run", "--preset", "tiny", "--strategy", "checkfreq", "--set", "layout.spares=1",
                 "--set", "strategy.overhead=0.5", "--kill", "server:1@step=25"], out=tmp_path, timeout=540)
    assert run.code == 0, run.stdout + run.stderr
    s = run.result().summary
    assert s["param_checksum"] == reference and not s["lost"]
    assert s["recoveries"] == 1 and s["restores"] == 1 and s["checkpoints"] >= 1
    assert s["checkpoint_interval_rule"] == "checkfreq" and s["checkpoint_overhead_budget"] == 0.5
