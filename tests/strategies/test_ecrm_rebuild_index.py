"""The rebuild's request indexes by residue-class arithmetic equal stripes.member_index."""

from __future__ import annotations

import numpy as np
import pytest

from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.rebuilder import class_index
from mpiec.strategies.ecrm.stripes import member_index


@pytest.mark.parametrize(("servers", "k", "r", "dedicated", "order"), [
    (2, 1, 1, False, None), (4, 2, 2, False, None), (5, 3, 2, False, [2, 0, 4, 1, 3]),
    (3, 3, 2, True, None), (6, 4, 1, False, None), (7, 3, 1, False, [6, 5, 4, 3, 2, 1, 0]),
])
def test_class_index_is_member_index(servers: int, k: int, r: int, dedicated: bool, order: list[int] | None
                                     ) -> None:
    pl = RowPlacement(1003, servers, k, r, dedicated, order)
    for residue in range(servers):
        stripes = np.arange(residue, pl.n_stripes, servers, dtype=np.int64)
        for x in range(k + r):
            got = class_index(pl, stripes // servers, residue, x)
            assert np.array_equal(got, member_index(pl, stripes, x))


@pytest.mark.parametrize(("servers", "k", "r"), [(2, 1, 1), (4, 2, 2), (6, 4, 1)])
def test_a_data_slot_is_its_stripe_block_times_k(servers: int, k: int, r: int) -> None:
    """The rebuilding server asks for the members of its slot ``t``'s stripe ``q * S + residue``
    with ``q = t // k`` (``Rebuilder.decode``)."""
    pl = RowPlacement(1003, servers, k, r)
    for server in range(servers):
        stripes, _ = pl.data_stripes(server)
        assert np.array_equal(np.arange(stripes.size) // k, stripes // servers)
