"""The result reader's typed accessors: what a summary or config holds as JSON, decoded in one place."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

from mpiec.results import overheads, recoveries, strategy_params, unfired_kills


def _r(summary: dict, config: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(summary=summary, config=config if config is not None else {})


def test_recoveries_decode_the_breakdown_and_tolerate_what_is_not_one():
    rec = {"epoch": 1, "kill": 2.5, "detection_s": 0.1, "time_lost_s": 1.0}
    assert recoveries(_r({"recovery_breakdown": json.dumps([rec, 3])})) == [rec]  # non-dicts left out
    assert recoveries(_r({"recovery_breakdown": [rec]})) == [rec]  # already a list
    for raw in (None, "", "not json", json.dumps({"a": 1})):
        assert recoveries(_r({"recovery_breakdown": raw})) == []
    assert recoveries(_r({})) == []


def test_unfired_kills_tell_unreadable_from_absent():
    doc = [{"kill": "server:1@step=5", "why": "ended first"}]
    assert unfired_kills(_r({"kills_unfired": json.dumps(doc)})) == doc
    assert unfired_kills(_r({})) == [] and unfired_kills(_r({"kills_unfired": "{}"})) == []
    assert unfired_kills(_r({"kills_unfired": "[oops"})) is None


def test_strategy_params_read_only_what_the_config_gave():
    assert strategy_params(_r({}, {"strategy": {"name": "cpr", "params": {"target_pls": 0.1}}})) == \
        {"target_pls": 0.1}
    for cfg in ({}, {"strategy": "cpr"}, {"strategy": {"params": None}}, {"strategy": {"params": [1]}}):
        assert strategy_params(_r({}, cfg)) == {}


def test_overheads_take_the_injected_stalls_out_of_the_time_lost():
    ov = overheads(_r({"time_lost_s": 5.0, "stall_time_lost_s": 2.0, "checkpoint_critical_s": 1.5,
                       "unproductive_s": 7.0}))
    assert (ov.recovery_time_lost_s, ov.checkpoint_critical_s, ov.unproductive_s) == (3.0, 1.5, 7.0)
    bare = overheads(_r({"time_lost_s": 4.0, "stall_time_lost_s": float("nan")}))
    assert bare.stall_time_lost_s == 0.0 and bare.recovery_time_lost_s == 4.0
    assert math.isnan(bare.checkpoint_critical_s) and math.isnan(bare.unproductive_s)
    assert math.isnan(overheads(_r({"checkpoint_critical_s": True})).checkpoint_critical_s)  # not a figure
