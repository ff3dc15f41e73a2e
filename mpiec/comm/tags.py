"""MPI message tags: the one table of who uses which tag, and the audit that enforces it.

Owns the tag rule. The runtime's point-to-point messages use the tags below 1000, on ``world``
(the monitor's channel: it receives with ``ANY_TAG`` there) and on the spawn intercommunicator.
A strategy never picks a tag: ``RankEnv.tags`` hands it ``STRATEGY_TAGS`` (tags 1000..1999), and
it sends point-to-point only on ``data``, ``trainers`` and ``servers`` (``world`` is the runtime's).
Only one strategy runs in a run, so every strategy gets the same range; a strategy made of parts
gives each part its own slice (``TagRange.slice``), in an order every rank computes alike.

The audit (``MPIEC_TAG_AUDIT=1``, set by ``mpiec.contract`` for a strategy's runs; off
otherwise): ``audited(comms)`` wraps the communicators a strategy sees so that every
point-to-point call checks its tags, and a tag outside the range (a hand-picked one, a send's
default 0, a receive's ``ANY_TAG``) or any point-to-point call on ``world`` raises ``TagError``.
The wrappers share the runtime's MPI handles (revoke, shrink and rebuild work as before: a
recovery's new ``Comms`` gets new wrappers); the check is a Python comparison, no MPI call.

Invariants: runtime tags and ``STRATEGY_TAGS`` never overlap; tags are below 32767 (the
smallest ``MPI_TAG_UB`` the standard allows).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

if TYPE_CHECKING:
    from mpiec.comm import Comms

# -- the runtime's tags (below 1000) ---------------------------------------------------------------
# ranks -> monitor and monitor -> ranks, on ``world`` (roles.context, roles.trainer, roles.monitor)
TAG_STEPS, TAG_EVAL, TAG_DONE, TAG_CONTROL, TAG_FAILURE, TAG_STRATEGY = 11, 12, 13, 14, 15, 16
TAG_SPAWN = 21  # a spawned process's slot, on the spawn intercommunicator (roles.spawn)
TAG_PROBE = 99  # never sent: probing it only asks "has any peer of world failed?" (comm.check_world)
RUNTIME_TAGS = (TAG_STEPS, TAG_EVAL, TAG_DONE, TAG_CONTROL, TAG_FAILURE, TAG_STRATEGY, TAG_SPAWN, TAG_PROBE)

AUDIT_ENV = "MPIEC_TAG_AUDIT"


class TagError(RuntimeError):
    """A strategy used a tag that is not its own (or point-to-point on ``world``)."""


@dataclass(frozen=True)
class TagRange:
    """Tags ``base .. base + size - 1``; ``tags[i]`` is the ``i``-th (IndexError past the end)."""

    base: int
    size: int

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self.size:
            raise IndexError(f"tag {i} of a range of {self.size} (tags {self})")
        return self.base + i

    def __contains__(self, tag: object) -> bool:
        return isinstance(tag, int) and self.base <= tag < self.base + self.size

    def __len__(self) -> int:
        return self.size

    def slice(self, start: int, size: int) -> TagRange:
        """Tags ``start .. start + size - 1`` of this range (a part's own tags)."""
        if start < 0 or size < 1 or start + size > self.size:
            raise IndexError(f"tags {start}..{start + size - 1} of a range of {self.size}")
        return TagRange(self.base + start, size)

    def __str__(self) -> str:
        return f"{self.base}..{self.base + self.size - 1}"


STRATEGY_TAGS = TagRange(1000, 1000)
assert not any(t in STRATEGY_TAGS for t in RUNTIME_TAGS)


def audit_on() -> bool:
    return os.environ.get(AUDIT_ENV, "") not in ("", "0")


# -- the audit ---------------------------------------------------------------------------------------

# point-to-point methods and where their tags are: (position after self, keyword, default)
_SEND = ((2, "tag", 0),)
_RECV = ((2, "tag", MPI.ANY_TAG),)
_PROBE = ((1, "tag", MPI.ANY_TAG),)
_SENDRECV = ((2, "sendtag", 0), (5, "recvtag", MPI.ANY_TAG))
_SENDRECV_REPLACE = ((2, "sendtag", 0), (4, "recvtag", MPI.ANY_TAG))
_P2P: dict[str, tuple[tuple[int, str, int], ...]] = {
    **{m: _SEND for m in ("Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend",
                          "Send_init", "Ssend_init", "Bsend_init", "Rsend_init",
                          "send", "ssend", "bsend", "isend", "issend", "ibsend")},
    **{m: _RECV for m in ("Recv", "Irecv", "Recv_init", "recv", "irecv")},
    **{m: _PROBE for m in ("Probe", "Iprobe", "Mprobe", "Improbe", "probe", "iprobe", "mprobe", "improbe")},
    **{m: _SENDRECV for m in ("Sendrecv", "Isendrecv", "sendrecv")},
    **{m: _SENDRECV_REPLACE for m in ("Sendrecv_replace", "Isendrecv_replace")},
}


class AuditedComm(MPI.Intracomm):
    """An intracommunicator (the same MPI handle) whose point-to-point calls check their tags."""

    _tags: TagRange = STRATEGY_TAGS
    _name: str = ""

    def _check(self, method: str, args: tuple, kwargs: dict) -> None:
        if self._name == "world":
            raise TagError(f"{method} on world: point-to-point traffic on world is the runtime's "
                           "(a strategy sends on data, trainers or servers)")
        for pos, key, default in _P2P[method]:
            tag = args[pos] if len(args) > pos else kwargs.get(key, default)
            if tag not in self._tags:
                what = "ANY_TAG" if tag == MPI.ANY_TAG else f"tag {tag}"
                raise TagError(f"{method} on {self._name} with {what}: a strategy's tags are "
                               f"RankEnv.tags ({self._tags}), never picked by hand")


def _audited_method(name: str) -> Any:
    base = getattr(MPI.Intracomm, name)

    def method(self: AuditedComm, *args: Any, **kwargs: Any) -> Any:
        self._check(name, args, kwargs)
        return base(self, *args, **kwargs)

    method.__name__ = name
    return method


for _m in _P2P:
    if hasattr(MPI.Intracomm, _m):
        setattr(AuditedComm, _m, _audited_method(_m))


def audited_comm(comm: MPI.Intracomm | None, name: str, tags: TagRange) -> MPI.Intracomm | None:
    if comm is None:
        return None
    wrapped = AuditedComm(comm)
    wrapped._tags, wrapped._name = tags, name
    return wrapped


def audited(comms: Comms, tags: TagRange = STRATEGY_TAGS) -> Comms:
    """``comms`` as a strategy sees them under the audit (the same handles, checked calls)."""
    world = audited_comm(comms.world, "world", tags)
    assert world is not None
    return dataclasses.replace(comms, world=world, data=audited_comm(comms.data, "data", tags),
                               trainers=audited_comm(comms.trainers, "trainers", tags),
                               servers=audited_comm(comms.servers, "servers", tags))


__all__ = ["AUDIT_ENV", "AuditedComm", "RUNTIME_TAGS", "STRATEGY_TAGS", "TAG_CONTROL", "TAG_DONE",
           "TAG_EVAL", "TAG_FAILURE", "TAG_PROBE", "TAG_SPAWN", "TAG_STEPS", "TAG_STRATEGY", "TagError",
           "TagRange", "audit_on", "audited"]
