"""Fixtures of the kernel tests: the two GF(2^8) paths (portable and GFNI), each test run on both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mpiec.kernels import gf256

GF_PATHS = [pytest.param(False, id="portable"),
            pytest.param(True, id="gfni", marks=pytest.mark.skipif(
                not gf256.CPU_HAS_GFNI, reason="this CPU has no GFNI: only the portable path can run"))]


@pytest.fixture
def restore_path() -> Iterator[None]:
    """The process's GF path back to its default (``use_gfni(None)``) after the test."""
    yield
    gf256.use_gfni(None)


@pytest.fixture(params=GF_PATHS)
def gfni(request: pytest.FixtureRequest, restore_path: None) -> bool:
    """Each GF path in turn, switched on for the test (and restored after it): True for GFNI."""
    gf256.use_gfni(request.param)
    return bool(request.param)
