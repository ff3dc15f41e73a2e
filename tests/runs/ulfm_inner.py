"""mpiec.comm under a real mpiexec (pytest-mpi); run by test_comm_under_mpiexec, not collected alone.

Run by hand: mpiexec --with-ft ulfm -n 4 python -m pytest --with-mpi tests/runs/ulfm_inner.py
The kill test must stay last: it leaves the world with one rank fewer.
"""

from __future__ import annotations

import atexit
import os
import sys

import numpy as np
import pytest
from mpi4py import MPI

from mpiec.comm import PeerFailure, agree_min, build_comms, returning, shrink, ulfm_available, wait
from mpiec.failures.faults import die_now
from mpiec.layout import Slot


@pytest.mark.mpi(min_size=4)
def test_agree_min_is_the_minimum():
    world = returning(MPI.COMM_WORLD.Dup())
    r = world.Get_rank()
    assert agree_min(world, 1000 - 7 * r) == 1000 - 7 * (world.Get_size() - 1)
    assert agree_min(world, 12345) == 12345


@pytest.mark.mpi(min_size=4)
def test_data_comm_is_ordered_by_slot_not_world_rank():
    world = returning(MPI.COMM_WORLD.Dup())
    slots = [Slot("monitor", 0), Slot("server", 0), Slot("trainer", 1), Slot("trainer", 0)]
    me = slots[world.Get_rank()]
    comms = build_comms(world, me, n_trainers=2, n_servers=1)
    if me.role == "monitor":
        assert comms.data is None and comms.trainers is None
    else:
        expected = {"trainer": me.index, "server": 2 + me.index}[me.role]
        assert comms.data.Get_rank() == expected
        if me.role == "trainer":
            assert comms.trainers.Get_rank() == me.index


def _end_without_finalize() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.mark.mpi(min_size=4)
def test_killed_rank_is_detected_and_shrunk_away():
    if not ulfm_available():
        pytest.skip("needs mpiexec --with-ft ulfm")
    world = returning(MPI.COMM_WORLD.Dup())
    world.Barrier()
    if world.Get_rank() == 2:
        die_now()
    buf = np.zeros(world.Get_size(), dtype=np.int64)
    with pytest.raises(PeerFailure):
        wait(world.Iallreduce(MPI.IN_PLACE, buf, MPI.SUM), "test")
    world.Revoke()
    new, dead = shrink(world)
    # MPI_Finalize after a real failure can wait for good (Open MPI 5, as the worker knows: it
    # skips it too): end the survivors after pytest's report, before mpi4py's finalize (atexit
    # runs the last registered first)
    atexit.register(_end_without_finalize)
    assert dead == [2] and new.Get_size() == world.Get_size() - 1
    assert agree_min(new, new.Get_rank() + 3) == 3
