"""The ``MPIEC_STALL`` test hook's plans (``mpiec.failures.stall``)."""

from __future__ import annotations

import re

import pytest

from mpiec.errors import ConfigError
from mpiec.failures.stall import parse_stalls


def test_stall_plans_parse_and_bad_ones_are_refused():
    (a, b) = parse_stalls("server:0@step=20:0.5, trainer:1@step=30:.25")
    assert (a.role, a.index, a.step, a.seconds) == ("server", 0, 20, 0.5) and b.seconds == 0.25
    assert parse_stalls("") == []
    with pytest.raises(ConfigError):
        parse_stalls("server:0@20:0.5")


@pytest.mark.parametrize("value, needle", [
    ("server:0@20:0.5", "is not ROLE:INDEX@step=STEP:SECONDS"),
    ("server:0@step=10:99999999999", "more than 1e+09 s"),  # was an OverflowError in the rank
    ("server:" + "9" * 5000 + "@step=1:1", "is not ROLE:INDEX"),
    ("server:2@step=10:0.5", "server:2 does not exist (the layout has 2 servers, 0 to 1)"),
    ("trainer:0@step=40:0.5", "step 40 is not a step of the run (training.steps = 40"),
    ("trainer:1@step=5:50,trainer:1@step=6:60", "trainer:1 stalls 110 s in all, not less than"),
])
def test_the_launcher_refuses_a_bad_stall_before_any_rank_starts(value, needle, tmp_path, monkeypatch):
    # Before: a malformed value crashed the ranks (exit 3), a stall at a slot or step the run does
    # not have was ignored silently, an overflowing one crashed the rank that slept.
    from mpiec.launch import launcher
    from mpiec.launch.resolve import load_config

    def ranks_started(*a, **k):
        raise AssertionError("the ranks were started")

    monkeypatch.setattr(launcher, "_launch", ranks_started)
    monkeypatch.setenv("MPIEC_STALL", value)
    cfg = load_config("tiny")  # 2 trainers, 2 servers, 40 steps
    with pytest.raises(ConfigError, match=re.escape(needle)) as err:
        launcher.launch(cfg, tmp_path, timeout=100)
    assert "\n" not in str(err.value) and str(err.value).startswith("MPIEC_STALL: ")
    assert not list(tmp_path.iterdir())


def test_stalls_the_run_has_are_accepted(monkeypatch):
    from mpiec.failures.stall import check_stalls
    from mpiec.launch.resolve import load_config

    cfg = load_config("tiny")
    assert [s.step for s in check_stalls(cfg, 100, "server:1@step=0:0.5,trainer:1@step=39:2")] == [0, 39]
    monkeypatch.delenv("MPIEC_STALL", raising=False)
    assert check_stalls(cfg, 100) == []
