"""``mpiec kernels`` arguments: sizes and repeats it cannot measure are refused, not run."""

from __future__ import annotations

import pytest

from mpiec.benchmarks.kernels import parse_size
from mpiec.benchmarks.kernels_cli import main


@pytest.mark.parametrize("argv, needle", [
    (["--sizes", "0"], "at least 4KiB"),
    (["--sizes", "1MiB,100"], "at least 4KiB"),
    (["--sizes", "1TiB"], "bad size"),
    (["--sizes", "65GiB"], "at most 64GiB"),
    (["--sizes", "9" * 40], "bad size"),
    (["--sizes", ","], "names no size"),
    (["--repeat", "0"], "--repeat must be >= 1, got 0"),
    (["--repeat", "-1"], "--repeat must be >= 1, got -1"),
])
def test_unmeasurable_arguments_are_refused(argv, needle, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert needle in capsys.readouterr().err


def test_smallest_size_runs(capsys):
    assert parse_size("4KiB") == 4096 and parse_size(" 1 MiB ") == 1 << 20
    assert main(["--quick", "--sizes", "4KiB", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "best of 1" in out and "4KiB" in out and "rs(4,2) encode" in out
