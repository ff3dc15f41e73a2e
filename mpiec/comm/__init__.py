"""Communicators and failure handling (ULFM), the only module that talks ULFM.

Owns: detecting ULFM at start-up, the communicators of a run (``world`` with
every rank, ``data`` with trainers and servers ordered by role slot,
``trainers`` with the trainers ordered by index), turning an MPI error into a
``PeerFailure`` and the revoke → shrink → agree sequence. The tag table and its audit sit beside
it in ``mpiec.comm.tags``.

Invariants:

* every communicator uses ``MPI.ERRORS_RETURN``: a dead peer surfaces as an
  exception in the rank that waits for it, never as an abort of the job;
* the first rank to see a failure revokes ``world`` (and the derived
  communicators), so every survivor, wherever it is blocked, leaves its
  operation with ``MPI_ERR_REVOKED`` and joins the recovery;
* members of ``data`` and ``trainers`` are ordered by their role slot, so
  reductions run in the same order before and after a spare takes a slot over
  (that is what keeps recovered runs bit-identical);
* without ULFM, mpi4py silently turns ``Shrink`` into a dup and ``Agree`` into
  an allreduce; ``ulfm_available()`` is therefore decided from the library and
  its run-time switch, and recovery refuses to run without it.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from mpi4py import MPI

from mpiec.comm.tags import TAG_PROBE  # never sent: probing it only asks "has any peer of world failed?"
from mpiec.layout import TRAINER, Slot, data_rank, servers_rank

_FAILURE_CLASSES: set[int] = set()
for _name in ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED"):
    if hasattr(MPI, _name):
        _FAILURE_CLASSES.add(getattr(MPI, _name))


class PeerFailure(Exception):
    """A peer died (or another rank revoked the communicator after seeing one)."""

    def __init__(self, error_class: int, where: str) -> None:
        super().__init__(f"peer failure (MPI error class {error_class}) during {where}")
        self.error_class = error_class
        self.where = where


def mpi_library() -> tuple[str, str]:
    """(library name, full version string) of the MPI in use."""
    version = MPI.Get_library_version().strip().splitlines()[0]
    if "Open MPI" in version:
        name = "Open MPI"
    elif "MPICH" in version:
        name = "MPICH"
    elif "Intel" in version:
        name = "Intel MPI"
    else:
        name = version.split(",")[0]
    return name, version


def ulfm_available() -> bool:
    """True when failures can be survived: Open MPI with ``--with-ft ulfm`` active."""
    name, _ = mpi_library()
    if not all(hasattr(MPI.Comm, f) for f in ("Revoke", "Shrink", "Agree")):
        return False
    if name != "Open MPI":
        return False  # mpi4py's MPICH wheel has no usable ULFM
    return os.environ.get("OMPI_MCA_mpi_ft_enable", "").lower() in ("1", "true", "yes", "on")


def failure_class(exc: BaseException) -> int | None:
    """The MPI error class if ``exc`` reports a failed or revoked peer."""
    if isinstance(exc, MPI.Exception):
        cls = exc.Get_error_class()
        if cls in _FAILURE_CLASSES:
            return cls
    return None


CommT = TypeVar("CommT", bound=MPI.Comm)


def returning(comm: CommT) -> CommT:
    """``comm``, set to return errors (a dead peer becomes an exception, not an abort)."""
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    return comm


def intracomm(comm: MPI.Comm) -> MPI.Intracomm:
    """The communicator an intracommunicator's ``Split`` or ``Shrink`` returned, typed as one
    (mpi4py's stubs declare those on ``Comm``, returning ``Comm``; on an ``Intracomm`` they return
    an ``Intracomm``)."""
    return cast(MPI.Intracomm, comm)


@dataclass
class Comms:
    """The communicators of one rank, rebuilt after every recovery."""

    world: MPI.Intracomm
    data: MPI.Intracomm | None  # trainers + servers, ordered by ``layout.data_rank``; None elsewhere
    trainers: MPI.Intracomm | None  # trainers only, by index
    servers: MPI.Intracomm | None = None  # servers then dedicated parity ranks (``layout.servers_rank``)

    # The communicators a role knows it is a member of (trainers and servers: ``data``; trainers:
    # ``trainers``; servers and parity ranks: ``servers``), typed as present.
    def data_comm(self) -> MPI.Intracomm:
        """``data``, on a trainer or server."""
        return _member(self.data, "data")

    def trainers_comm(self) -> MPI.Intracomm:
        """``trainers``, on a trainer."""
        return _member(self.trainers, "trainers")

    def servers_comm(self) -> MPI.Intracomm:
        """``servers``, on a server or parity rank."""
        return _member(self.servers, "servers")

    def free(self) -> None:
        for c in (self.trainers, self.data, self.servers):
            if c is not None and c != MPI.COMM_NULL:
                try:
                    c.Free()
                except MPI.Exception:
                    pass

    def revoke(self) -> None:
        """Interrupt every rank blocked on any of our communicators (ULFM only)."""
        for c in (self.world, self.data, self.trainers, self.servers):
            if c is not None and c != MPI.COMM_NULL:
                try:
                    c.Revoke()
                except MPI.Exception:
                    pass


def _member(comm: MPI.Intracomm | None, name: str) -> MPI.Intracomm:
    if comm is None:
        raise RuntimeError(f"this rank is not a member of the {name} communicator")
    return comm


def build_comms(world: MPI.Intracomm, slot: Slot, n_trainers: int, n_servers: int) -> Comms:
    """Split ``world`` into the data, trainer and server communicators, ordered by slot.

    Collective over ``world``. The keys are ``layout.data_rank`` / ``servers_rank``, so a
    spare that takes a slot over gets the rank its predecessor had.
    """
    def split(rank: int | None) -> MPI.Intracomm | None:
        c = intracomm(world.Split(MPI.UNDEFINED if rank is None else 0, 0 if rank is None else rank))
        return returning(c) if c != MPI.COMM_NULL else None

    data = split(data_rank(slot, n_trainers))
    trainers = split(slot.index if slot.role == TRAINER else None)
    servers = split(servers_rank(slot, n_servers))
    return Comms(world=world, data=data, trainers=trainers, servers=servers)




def check_world(world: MPI.Intracomm) -> None:
    """Raise ``PeerFailure`` if any rank of ``world`` died or ``world`` was revoked.

    Data ranks call it once per step: a spare (or any rank outside their
    communicators) that dies is otherwise seen by nobody until the end.
    """
    with guard("failure check"):
        world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_PROBE)


@contextmanager
def guard(where: str, nonblocking_collective: bool = False) -> Iterator[None]:
    """Turn a failed or revoked peer inside the block into ``PeerFailure``.

    ``nonblocking_collective`` (a recovery's collectives): Open MPI's libnbc reports a round it
    cannot start because a peer died as ``MPI_ERR_OTHER`` ("Error in NBC_Start_round()"), seen in
    about 1 of 10 double server kills here; under ULFM that is a peer failure too. So is a pickled
    object that arrives garbled (seen once in 5 runs with a second server kill ~30 ms into an
    ``ecrm`` handover: an ``allgather`` that the dying peer took part in).
    """
    try:
        yield
    except (pickle.UnpicklingError, EOFError) as exc:
        if not (nonblocking_collective and _NBC_ERRORS):
            raise
        raise PeerFailure(MPI.ERR_OTHER, f"{where} (a garbled message: {exc})") from None
    except MPI.Exception as exc:
        cls = failure_class(exc)
        if cls is None and nonblocking_collective and _NBC_ERRORS and exc.Get_error_class() in _NBC_ERRORS:
            cls = exc.Get_error_class()
        if cls is None:
            raise
        raise PeerFailure(cls, where) from None


_NBC_ERRORS: set[int] = set()  # filled by configure_nbc_errors() when ULFM is on


def configure_nbc_errors(ulfm: bool) -> None:
    """Under ULFM, count ``MPI_ERR_OTHER`` from a nonblocking collective as a peer failure."""
    _NBC_ERRORS.clear()
    if ulfm:
        _NBC_ERRORS.add(MPI.ERR_OTHER)


class WaitPolicy:
    """How a rank waits for communication: ``spin`` in MPI, or poll and ``sleep``.

    Spinning gives the lowest latency on dedicated cores. When ranks outnumber
    cores, spinning ranks steal the CPU from the ones computing (measured here:
    a trainer's step 3× slower), so waiting ranks poll with a short sleep
    instead. Chosen once at start-up (``configure``), the same for a whole run.
    """

    sleep = False
    min_s, max_s = 20e-6, 2e-4


def configure_waiting(oversubscribed: bool, mode: str = "auto") -> None:
    WaitPolicy.sleep = mode == "sleep" or (mode == "auto" and oversubscribed)


def _poll(test: Callable[[], bool]) -> None:
    pause = WaitPolicy.min_s
    while not test():
        time.sleep(pause)
        pause = min(pause * 2, WaitPolicy.max_s)


def wait(req: MPI.Request, where: str) -> None:
    """Complete ``req``; a failed or revoked peer becomes ``PeerFailure``."""
    with guard(where, nonblocking_collective=True):
        if WaitPolicy.sleep:
            _poll(req.Test)
        else:
            req.Wait()


def waitall(reqs: list[MPI.Request], where: str) -> None:
    """Complete every request. One at a time on purpose: ``Waitall`` reports a dead
    peer as ``MPI_ERR_IN_STATUS``, hiding the failure class in the statuses."""
    with guard(where, nonblocking_collective=True):
        if WaitPolicy.sleep:
            _poll(lambda: all([r.Test() for r in reqs]))
        else:
            for r in reqs:
                r.Wait()


def recv(comm: MPI.Intracomm, source: int, tag: int, where: str, status: MPI.Status | None = None,
         max_pause: float = 5e-3) -> Any:
    """A pickled receive that sleeps while it waits (monitor and spares are not latency-bound);
    the message as sent (its type is the sender's and receiver's agreement, as with ``comm.recv``)."""
    with guard(where):
        pause = WaitPolicy.min_s
        while True:
            msg = comm.improbe(source=source, tag=tag, status=status)
            if msg is not None:
                return msg.recv()
            time.sleep(pause)
            pause = min(pause * 2, max_pause)


def oversubscribed(world: MPI.Intracomm) -> bool:
    """More ranks on this node than cores."""
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_size()
    node.Free()
    return local > (os.cpu_count() or 1)


def shrink(world: MPI.Intracomm) -> tuple[MPI.Intracomm, list[int]]:
    """Survivors' new world and the *old* world ranks that died (ULFM only)."""
    new = returning(intracomm(world.Shrink()))
    old_group, new_group = world.Get_group(), new.Get_group()
    survivors = set(MPI.Group.Translate_ranks(new_group, list(range(new.Get_size())), old_group))
    dead = sorted(set(range(world.Get_size())) - survivors)
    old_group.Free()
    new_group.Free()
    return new, dead


def failed_ranks(comm: MPI.Comm) -> list[int]:
    """The ranks of ``comm`` this process's MPI library knows to have failed (ULFM's
    ``MPIX_Comm_get_failed``: local, no communication; [] without ULFM or on any error). Safe from
    a second thread while the first is blocked in a collective of ``comm`` (``spawn.SpawnWatch``)."""
    try:
        group = comm.Get_failed()
    except (MPI.Exception, NotImplementedError, AttributeError):
        return []
    try:
        mine = comm.Get_group()
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), mine)
        mine.Free()
        return [r for r in ranks if r != MPI.UNDEFINED]
    except MPI.Exception:
        return []
    finally:
        group.Free()


def agree_min(comm: MPI.Intracomm, value: int, bits: int = 31) -> int:
    """Fault-tolerant agreement on the minimum of non-negative ints ``< 2**bits``.

    ``MPI_Comm_agree`` only computes a bitwise AND of flags, so the minimum is
    found bit by bit from the top: it is ``>= candidate`` iff every rank's value
    is. One Agree per bit; used once per recovery, not per step.
    """
    result = 0
    for bit in range(bits - 1, -1, -1):
        candidate = result | (1 << bit)
        if comm.Agree(1 if value >= candidate else 0):
            result = candidate
    return result


# -- all-to-all of rows (the step's exchanges, and strategies' recovery transfers) -------------

def displacements(counts: np.ndarray) -> np.ndarray:
    d = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=d[1:])
    return d


_MPI_TYPES = {np.dtype(np.int64): MPI.INT64_T, np.dtype(np.float32): MPI.FLOAT, np.dtype(np.uint8): MPI.BYTE}


def alltoallv_buffers(send: np.ndarray, scounts: np.ndarray, recv: np.ndarray, rcounts: np.ndarray,
                      width: int = 1) -> tuple[list, list]:
    """Send and receive buffer specs of an all-to-all of rows of ``width`` elements (int64,
    float32 or uint8); counts are in rows, rows are contiguous by destination/source."""
    mpitype = _MPI_TYPES[send.dtype]
    sc, rc = scounts * width, rcounts * width
    return [send, (sc, displacements(sc)), mpitype], [recv, (rc, displacements(rc)), mpitype]


def ialltoallv(comm: MPI.Intracomm, send: np.ndarray, scounts: np.ndarray, recv: np.ndarray,
               rcounts: np.ndarray, width: int = 1) -> MPI.Request:
    """Post an ``Ialltoallv`` of rows of ``width`` elements; counts are in rows."""
    return comm.Ialltoallv(*alltoallv_buffers(send, scounts, recv, rcounts, width))
