"""Which measured runs the calibration uses (``simulate.calibrate._usable``)."""

from types import SimpleNamespace

from mpiec.launch.resolve import load_config
from mpiec.simulate.calibrate import _usable


def run(summary: dict, *sets: str) -> SimpleNamespace:
    return SimpleNamespace(summary=summary, cfg=load_config("tiny", sets=list(sets)))


def test_a_run_with_a_runtime_detector_on_is_no_measure_of_its_strategy():
    done = {"complete": True, "lost": False, "emulated": False}
    assert _usable(run(done))
    assert not _usable(run(done, "failures.message_checksums=true"))
    assert not _usable(run(done, "failures.dense_check_every=1"))
    assert not _usable(run({**done, "lost": True})) and not _usable(run({**done, "emulated": True}))
