"""``repair_throughput_vs_twin``: the repair's rate over the failure-free twin's on the same steps."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from mpiec.analysis.metrics import recovery_means, repair_throughput_vs_twin

from mpiec.results import EVAL_DTYPE, TIMELINE_DTYPE
from mpiec.results.accounting import merge_timelines, recovery_breakdown


def steps(first, n, dt, t0, epoch=0):
    tl = np.zeros(n, TIMELINE_DTYPE)
    tl["step"], tl["dt"], tl["samples"], tl["epoch"] = np.arange(first, first + n), dt, 10, epoch
    tl["t_end"] = t0 + dt * np.arange(1, n + 1)
    return tl


def run(tl, breakdown=None):
    summary = {"recovery_breakdown": json.dumps(breakdown or [])}
    return SimpleNamespace(timeline=tl, eval=np.zeros(0, EVAL_DTYPE), summary=summary)


def test_the_rebuild_rate_is_compared_with_the_twins_same_steps():
    # the twin runs steps 50..69 slower than its early steps (say, a costlier part of the data):
    # against its own early pace the run looks slow there, against the twin it is not
    twin = merge_timelines([steps(0, 50, 0.01, 0.0), steps(50, 20, 0.0125, 0.5), steps(70, 30, 0.01, 0.75)])
    tl = merge_timelines([steps(0, 50, 0.01, 0.0), steps(50, 20, 0.0125, 0.8, 1),
                          steps(70, 30, 0.01, 1.05, 1)])
    ranks = [[{"epoch": 1, "detect": 0.55, "agree": 0.6, "replaced": 0.7, "restored": 0.8}]]
    events = [(50, 0.8, "rebuild_start", 3, "server", 1, ""), (50, 1.05, "rebuild_end", 3, "server", 1, "")]
    (b,) = recovery_breakdown(ranks, [float(tl["t_end"][49])], tl, events=events)
    assert b["repair_throughput_ratio"] == pytest.approx(0.8)
    assert repair_throughput_vs_twin(run(tl, [b]), run(twin)) == pytest.approx(1.0)
    assert repair_throughput_vs_twin(run(tl, [b]), run(twin), normalize=True) == pytest.approx(1.0)
    slow_twin = twin.copy()
    slow_twin["t_end"] *= 2  # the host was twice as slow when the twin ran: normalize cancels that
    assert repair_throughput_vs_twin(run(tl, [b]), run(slow_twin)) == pytest.approx(2.0)
    assert repair_throughput_vs_twin(run(tl, [b]), run(slow_twin), normalize=True) == pytest.approx(1.0)
    assert repair_throughput_vs_twin(run(tl, [b]), None) is None
    b.pop("degraded_s")  # a file from before degraded_s: the rest of time_lost_s
    means = recovery_means(run(tl, [b]))
    assert means["degraded_s"] == pytest.approx(b["time_lost_s"] - b["recovery_s"] - b["reexec_s"])
