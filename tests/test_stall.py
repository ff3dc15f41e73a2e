"""The ``MPIEC_STALL`` test hook's plans (``mpiec.stall``)."""

from __future__ import annotations

import pytest

from mpiec.errors import ConfigError
from mpiec.stall import parse_stalls


def test_stall_plans_parse_and_bad_ones_are_refused():
    (a, b) = parse_stalls("server:0@step=20:0.5, trainer:1@step=30:.25")
    assert (a.role, a.index, a.step, a.seconds) == ("server", 0, 20, 0.5) and b.seconds == 0.25
    assert parse_stalls("") == []
    with pytest.raises(ConfigError):
        parse_stalls("server:0@20:0.5")
