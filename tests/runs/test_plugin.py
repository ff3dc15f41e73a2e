"""A third-party strategy as an installed plug-in: the example package ``examples/mpiec-replica``.

Registered through the entry-point group ``mpiec.strategies`` (CI installs it: ``pip install -e
examples/mpiec-replica``), it runs under ``mpiec bench`` beside built-ins: failure-free it trains
what ``none`` trains, and it recovers the bench's server kill losslessly (it claims ``lossless``).
The contract test (``test_contract.py``) runs it too, as every registered strategy.
"""

from __future__ import annotations

from importlib import metadata

import pytest
from run_helpers import mpiec

from mpiec.results import read_result

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(300)]


def test_the_example_plug_in_is_installed():
    names = {ep.name: ep.value for ep in metadata.entry_points(group="mpiec.strategies")}
    if "replica" not in names:
        pytest.fail("the example plug-in is not installed: run 'pip install -e examples/mpiec-replica' "
                    "(entry point 'replica' of group mpiec.strategies)")
    assert names["replica"] == "mpiec_replica:Replication"


def test_bench_runs_the_plug_in_beside_built_ins(tmp_path):
    test_the_example_plug_in_is_installed()
    run = mpiec(["bench", "--preset", "tiny", "--steps", "20", "--strategies", "none,replica,ckpt",
                 "--no-report", "--quiet"], out=tmp_path, timeout=240)
    assert run.code == 0, run.stdout + run.stderr
    by_name = {p.stem: read_result(p).summary for p in tmp_path.glob("*.h5")}
    assert {"tiny-replica-ff-s1", "tiny-replica-server-s1"} <= set(by_name), sorted(by_name)
    reference = by_name["tiny-none-ff-s1"]["param_checksum"]
    ff, fail = by_name["tiny-replica-ff-s1"], by_name["tiny-replica-server-s1"]
    assert ff["param_checksum"] == reference and not ff["lost"]
    assert fail["kills_fired"] == 1 and fail["recoveries"] == 1 and not fail["lost"]
    assert fail["param_checksum"] == reference  # lossless: back at the failure-free checksum
    assert fail["rebuilds"] == 1 and fail["replica_bytes_sent"] > 0
