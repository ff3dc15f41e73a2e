"""A rank that dies of an exception is a crash, never a failure (issue 36, item 4;
``mpiec.failures.crashes``).

Throw-away plug-ins (``plugin_helpers``) raise on purpose: a server hook, a factory returning
None, the coordinator's plan on the monitor. Each run ends with exit 3, the traceback on the
console and, where the monitor wrote one, a result file that says ``crashed`` (not ``lost``);
before the crash notes such runs ended lost (exit 1) with "no spare left for server 1", or, after
a monitor-side error, every rank blamed a network partition. A bench leaves a crashed run out of
its tables, says why, and exits non-zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from plugin_helpers import COMMON, CRASH_PLUGINS, install
from run_helpers import mpiec

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(420)]


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    return install(tmp_path, monkeypatch, {"h36common": COMMON}, CRASH_PLUGINS)


def test_a_hook_that_raises_is_a_crash_not_a_lost_run(plugins, tmp_path):
    out = tmp_path / "out"
    run = mpiec(["run", "--preset", "tiny", "--strategy", "h36-hook", "--set", "layout.spares=1",
                 "--timeout", "240"], out=out, timeout=300)
    text = run.stdout + run.stderr
    assert run.code == 3, text
    assert "Traceback" in text and "RuntimeError: h36 plug-in hook failed on purpose" in text
    assert "rank 3 (server:0) at step 10 died of an exception: RuntimeError" in text
    s = run.result().summary
    assert s["crashed"] and not s["lost"] and s["kills_fired"] == 0 and s["param_checksum"] == ""
    assert "server:0" in s["crash_reason"] and "abort_reason" not in s
    assert "no spare" not in text  # the spare was not promoted into the crashed slot
    assert not [p for p in out.iterdir() if p.name.endswith(".crash")]  # the notes are removed


def test_a_factory_returning_none_is_a_crash_that_names_it(plugins, tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--strategy", "h36-no-agent", "--timeout", "240"],
                out=tmp_path / "out", timeout=300)
    text = run.stdout + run.stderr
    assert run.code == 3, text
    assert "FactoryNone.trainer() returned NoneType, not a mpiec.strategies.api.agents.TrainerAgent" in text
    assert "the run crashed: rank 1 (trainer:0) died of an exception: TypeError" in text


def test_a_monitor_side_error_is_said_as_the_monitor_s_crash(plugins, tmp_path):
    run = mpiec(["run", "--preset", "tiny", "--strategy", "h36-plan", "--set", "layout.spares=1",
                 "--kill", "server:1@step=10", "--timeout", "240"], out=tmp_path / "out", timeout=300)
    text = run.stdout + run.stderr
    assert run.code == 3, text
    assert "RuntimeError: h36 coordinator plan failed on purpose" in text
    assert "network partition" not in text
    assert "stopping: the monitor crashed (RuntimeError: h36 coordinator plan failed on purpose" in text
    assert "the run crashed: rank 0 (monitor:0) died of an exception" in text


def test_a_bench_leaves_a_crashed_run_out_of_its_tables_and_fails(plugins, tmp_path):
    out = tmp_path / "bench"
    run = mpiec(["bench", "--preset", "tiny", "--steps", "20", "--strategies", "none,h36-hook",
                 "--scenario", "none", "--no-report", "--quiet", "--timeout", "240"], out=out, timeout=400)
    text = run.stdout + run.stderr
    assert run.code == 3, text
    table = run.stdout[run.stdout.index("\nfailure-free\n"):run.stdout.index("result files in")]
    assert "\nnone " in table and "h36-hook" not in table  # the crashed run is no row
    assert "left out of the tables: 1 run(s) that crashed" in text
    assert "h36-hook failure-free: the run crashed: rank 3 (server:0) at step 10" in text
    runs = json.loads((out / "bench.json").read_text())["runs"]
    assert [(r["variant"], r["crashed"]) for r in runs] == [("none", False), ("h36-hook", True)]


def test_a_crash_under_quiet_hands_its_last_lines_to_the_caller(plugins, tmp_path):
    """``launch(quiet=True)`` (the simulator's validation, the bench) keeps the crash's traceback in
    ``RunOutcome.held``, so a caller's own error can quote it (a CI log keeps only the tail). In a
    process of its own: this one's strategy registry was read before the plug-in was installed."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from mpiec.launch.launcher import EXIT_CRASH, launch
        from mpiec.launch.resolve import load_config
        cfg = load_config(preset="tiny", strategy="h36-hook", sets=["layout.spares=1"])
        outcome = launch(cfg, Path({str(tmp_path / "out")!r}), timeout=240, quiet=True)
        assert outcome.code == EXIT_CRASH, outcome.message
        print("HELD<<" + outcome.held + ">>HELD")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    held = done.stdout.split("HELD<<", 1)[1].split(">>HELD", 1)[0]
    assert "RuntimeError: h36 plug-in hook failed on purpose" in held
    assert 0 < len(held.splitlines()) <= 40
