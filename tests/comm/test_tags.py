"""The tag rule (``mpiec.comm.tags``): runtime and strategy tags apart, and the audit that enforces it."""

import numpy as np
import pytest
from mpi4py import MPI

from mpiec.comm import Comms
from mpiec.comm.tags import AUDIT_ENV, RUNTIME_TAGS, STRATEGY_TAGS, TagError, TagRange, audited
from mpiec.strategies.api.env import RankEnv


def test_runtime_and_strategy_tags_are_apart_and_below_the_smallest_tag_ub():
    assert not set(RUNTIME_TAGS) & set(range(STRATEGY_TAGS.base, STRATEGY_TAGS.base + STRATEGY_TAGS.size))
    assert STRATEGY_TAGS[len(STRATEGY_TAGS) - 1] < 32767


def test_a_range_indexes_and_slices_within_itself():
    tags = TagRange(1000, 10)
    assert tags[0] == 1000 and tags[9] == 1009 and 1009 in tags and 1010 not in tags
    with pytest.raises(IndexError):
        tags[10]
    part = tags.slice(4, 3)
    assert (part[0], part[2], str(part)) == (1004, 1006, "1004..1006")
    with pytest.raises(IndexError):
        tags.slice(8, 3)


def _self_comms() -> Comms:
    return Comms(world=MPI.COMM_SELF.Dup(), data=None, trainers=None, servers=MPI.COMM_SELF.Dup())


def test_the_audit_passes_the_strategy_s_tags_and_refuses_any_other():
    comms = _self_comms()
    checked = audited(comms)
    servers = checked.servers_comm()
    got = np.empty(2)
    reqs = [servers.Irecv(got, source=0, tag=STRATEGY_TAGS[1]),
            servers.Isend(np.arange(2.0), dest=0, tag=STRATEGY_TAGS[1])]
    MPI.Request.Waitall(reqs)
    assert got.tolist() == [0.0, 1.0]
    servers.send("x", dest=0, tag=STRATEGY_TAGS[0])
    assert servers.recv(source=0, tag=STRATEGY_TAGS[0]) == "x"
    with pytest.raises(TagError, match="Isend on servers with tag 7301"):
        servers.Isend(np.zeros(1), dest=0, tag=7301)
    with pytest.raises(TagError, match="with tag 0"):  # a send's default tag
        servers.send("x", dest=0)
    with pytest.raises(TagError, match="ANY_TAG"):  # would take another part's message
        servers.Iprobe(source=0)
    with pytest.raises(TagError, match="Sendrecv on servers with ANY_TAG"):
        servers.Sendrecv(np.zeros(1), dest=0, sendtag=STRATEGY_TAGS[0], recvbuf=np.zeros(1), source=0)
    with pytest.raises(TagError, match="on world"):
        checked.world.Iprobe(source=0, tag=STRATEGY_TAGS[0])
    assert servers.Get_size() == 1 and servers.py2f() == comms.servers_comm().py2f()  # the same handle
    comms.free()
    comms.world.Free()


class _View:
    def __init__(self, comms):
        self.comms = comms


def test_rank_env_hands_out_its_tags_and_audits_only_when_asked(monkeypatch):
    comms = _self_comms()
    monkeypatch.delenv(AUDIT_ENV, raising=False)
    plain = RankEnv(_View(comms))
    assert plain.tags == STRATEGY_TAGS and plain.comms is comms  # off: the runtime's own objects
    monkeypatch.setenv(AUDIT_ENV, "1")
    view = _View(comms)
    env = RankEnv(view)
    first = env.comms
    assert first is not comms and first is env.comms  # wrapped once per set of communicators
    with pytest.raises(TagError):
        first.servers_comm().Isend(np.zeros(1), dest=0, tag=5)
    view.comms = _self_comms()  # a recovery rebuilt them: new wrappers of the new handles
    assert env.comms is not first and env.comms.servers_comm().py2f() == view.comms.servers_comm().py2f()
    for c in (comms, view.comms):
        c.free()
        c.world.Free()
