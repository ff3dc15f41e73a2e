"""``mpiec kernels``' parity-pipeline case between two ranks: it runs, and parity stays exact."""

from __future__ import annotations

import pytest

from mpiec.benchmarks.parity_pipeline import launch


@pytest.mark.mpirun
@pytest.mark.timeout(300)
def test_the_two_rank_pipeline_measures_and_keeps_parity_exact():
    out = launch(rows=300, steps=20)
    assert out["parity_exact"] is True
    assert out["rows"] == 300 and out["wire_bytes"] == 76
    for key in ("stage_ns", "drain_ns", "total_ns", "copy_ns"):
        assert 0 < out[key]["median"] < 1e6
