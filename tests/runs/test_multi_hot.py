"""Launched runs with multi-hot embedding bags (``data.multi_hot``, #10 item 16).

Every test launches real ranks with mpiexec and is bounded by a timeout.
"""

from __future__ import annotations

import numpy as np
import pytest
from run_helpers import mpiec

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(240)]

BAGS = [2, 1, 3, 1, 1, 4, 1, 1, 1, 2, 1, 1, 5, 1, 1, 1, 1, 2, 1, 1, 8, 1, 1, 1, 3, 1]  # 26 tables of tiny


def _set(bags: list[int]) -> list[str]:
    return ["--set", f"data.multi_hot={bags}"]


def test_tiny_multi_hot_trains_deterministically(tmp_path):
    runs = [mpiec(["run", "--preset", "tiny", "--steps", "15", *_set(BAGS)], out=tmp_path / f"r{i}")
            for i in range(2)]
    for run in runs:
        assert run.code == 0, run.stdout + run.stderr
    res = runs[0].result()
    s = res.summary
    assert s["steps_completed"] == 15 and not s["lost"] and s["dense_replicas_consistent"]
    assert res.config["data"]["multi_hot"] == BAGS and res.attrs["multi_hot"] == BAGS
    assert 0.75 <= s["teacher_auc"] <= 0.85  # the multi-hot teacher (tiny: 2000 eval samples)
    assert 0.0 < s["final_auc"] <= 1.0 and np.isfinite(s["final_logloss"])
    tl = res.timeline
    assert np.array_equal(tl["step"], np.arange(15)) and np.all(np.isfinite(tl["loss"]))
    assert len(s["param_checksum"]) == 64
    assert runs[1].result().summary["param_checksum"] == s["param_checksum"]


def test_one_id_per_table_is_the_one_hot_run_bit_for_bit(tmp_path):
    """multi_hot = [1] * 26 takes the multi-hot code path with bags of one: same checksum as the
    default (one-hot) run; a real bag changes it."""
    plain = mpiec(["run", "--preset", "tiny", "--steps", "15"], out=tmp_path / "plain")
    ones = mpiec(["run", "--preset", "tiny", "--steps", "15", *_set([1] * 26)], out=tmp_path / "ones")
    bag = mpiec(["run", "--preset", "tiny", "--steps", "15", *_set([2] + [1] * 25)], out=tmp_path / "bag")
    for run in (plain, ones, bag):
        assert run.code == 0, run.stdout + run.stderr
    a, b, c = (r.result() for r in (plain, ones, bag))
    assert a.attrs["multi_hot"] == [] and b.attrs["multi_hot"] == [1] * 26
    assert a.summary["param_checksum"] == b.summary["param_checksum"] != c.summary["param_checksum"]
    assert a.summary["final_auc"] == b.summary["final_auc"]
    np.testing.assert_array_equal(a.timeline["loss"], b.timeline["loss"])
