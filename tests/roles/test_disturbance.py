"""The disturbance probe: what else the host did over a window, and the step-time spread."""

from __future__ import annotations

import math
import os
import time

import numpy as np

from mpiec.roles.context import peak_rss_mb, reset_peak_rss
from mpiec.roles.disturbance import DisturbanceProbe, step_time_spread


def test_step_time_spread_is_the_iqr_over_the_median_after_warm_up():
    dt = np.array([9.0] * 5 + [1.0, 1.0, 2.0, 2.0, 3.0])
    q1, med, q3 = np.percentile([1.0, 1.0, 2.0, 2.0, 3.0], [25, 50, 75])
    assert step_time_spread(dt) == (q3 - q1) / med
    assert math.isnan(step_time_spread(np.ones(7)[:6]))


def test_the_probe_measures_shares_between_0_and_1_over_a_window():
    probe = DisturbanceProbe([os.getpid()])
    probe.start()
    t = time.monotonic()
    while time.monotonic() - t < 0.2:  # this process is the "run": its parent's children count as the run
        pass
    s = probe.summary(np.full(20, 0.01))
    assert s["host_cores"] == os.cpu_count() and s["host_load_1m"] >= 0
    assert 0 <= s["other_cpu_share"] <= 1 and 0 <= s["run_cpu_share"]
    assert s["step_time_spread"] == 0.0
    unstarted = DisturbanceProbe([]).summary(None)
    assert math.isnan(unstarted["other_cpu_share"]) and math.isnan(unstarted["step_time_spread"])


def test_peak_rss_restarts_after_reset():
    big = np.ones(20_000_000)  # 160 MB
    high = peak_rss_mb()
    del big
    reset_peak_rss()
    assert peak_rss_mb() < high - 100
