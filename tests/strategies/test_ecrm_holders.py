"""``HolderComm``: the old holder numbering over a communicator of the survivors (one rank here:
holder 1 of 3, holders 0 and 2 dropped)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from mpiec.comm import alltoallv_buffers
from mpiec.strategies.ecrm.holders import HolderComm


@pytest.fixture
def comm():
    return HolderComm(MPI.COMM_SELF, [1], 3)


def test_rank_size_and_gathers_name_the_old_holders(comm):
    assert (comm.Get_rank(), comm.Get_size(), comm.lost) == (1, 3, [0, 2])
    assert comm.allgather(("x", 7)) == [None, ("x", 7), None]
    assert comm.allreduce(5) == 5 and comm.bcast("b", root=1) == "b"
    send = np.array([4, 5], dtype=np.int64)
    recv = np.full(6, -1, dtype=np.int64)
    comm.Allgather([send, 2, MPI.INT64_T], [recv, 2, MPI.INT64_T])
    assert recv.tolist() == [0, 0, 4, 5, 0, 0]


def test_all_to_all_passes_the_survivors_blocks_on(comm):
    counts = np.array([0, 2, 0], dtype=np.int64)
    got = np.full(3, -1, dtype=np.int64)
    comm.Alltoall([counts, 1, MPI.INT64_T], [got, 1, MPI.INT64_T])
    assert got.tolist() == [0, 2, 0]
    rows = np.arange(6, dtype=np.uint8).reshape(2, 3)
    back = np.zeros((2, 3), dtype=np.uint8)
    comm.Alltoallv(*alltoallv_buffers(rows, counts, back, got, 3))
    assert np.array_equal(back, rows)


def test_rows_to_a_dropped_holder_are_refused(comm):
    counts = np.array([1, 0, 0], dtype=np.int64)
    with pytest.raises(RuntimeError, match="lost holders"):
        comm.Alltoall([counts, 1, MPI.INT64_T], [np.zeros(3, np.int64), 1, MPI.INT64_T])
    with pytest.raises(ValueError, match="does not fit"):
        HolderComm(MPI.COMM_SELF, [3], 3)
