"""Fixtures for the analysis tests: small synthetic result files (built by ``synthetic``)."""

from __future__ import annotations

import pytest
from synthetic import write_bench, write_run


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "results"
    (d / "sub").mkdir(parents=True)
    write_run(d / "none.h5", "none", throughput=1000.0)
    write_run(d / "sub" / "ecrm.h5", "ecrm", throughput=900.0, kill_at=20,
              summary={"recovery_latency_s": 0.25, "parity_bytes": 3 * 2**20})
    write_run(d / "cpr.h5", "cpr", throughput=800.0, kill_at=20, emulated=True,
              summary={"lost_samples": 128, "checkpoint_bytes": 4096})
    return d


@pytest.fixture
def make_run():
    """The ``write_run`` factory: ``make_run(path, strategy, **options)``."""
    return write_run


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    """A bench's result files, written once per test module: tests only read them."""
    return write_bench(tmp_path_factory.mktemp("bench"))
