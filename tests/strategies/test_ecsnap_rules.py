"""``ecsnap`` without MPI: validation, the shard-level stripe geometry, encode and decode of
padded shards of unequal size, which blocks a decode needs, the commit rule carried in the
header words, and the monitor's plan (snapshot candidates, the disk fallback, the one-line abort)."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from mpiec.kernels.codes import make_code

from mpiec.comm.tags import STRATEGY_TAGS
from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.api.base import Failure, Scope
from mpiec.strategies.ecsnap.agents import FIELDS
from mpiec.strategies.ecsnap.exchange import restore_shards
from mpiec.strategies.ecsnap.geometry import Geometry
from mpiec.strategies.ecsnap.snapshot import Snapshot, decode_block, encode_block
from mpiec.strategies.ecsnap.strategy import ErasureCodedSnapshots


def ecsnap_config(*sets: str):
    return load_config("tiny", strategy="ecsnap", sets=list(sets), memory=False)


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("sets,field", [
    (["strategy.k=2", "strategy.r=1"], "strategy.k = 2, r = 1"),  # 3 members, 2 servers
    (["strategy.r=5", "layout.servers=8"], "strategy.r"),
    (["strategy.code='xor'", "strategy.r=2", "layout.servers=4"], "strategy.r must be 1"),
    (["strategy.code='sum'"], "strategy.code"),
    (["strategy.interval=0"], "strategy.interval"),
    (["strategy.interval='often'"], "strategy.interval"),
    (["strategy.disk_every=-1"], "strategy.disk_every"),
    (["strategy.first=0"], "strategy.first"),
    (["strategy.k=0", "layout.servers=4"], "strategy.k"),
    (["strategy.bogus=1"], "strategy.bogus"),
    (["layout.parity_ranks=1"], "layout.parity_ranks"),
])
def test_invalid_parameters_are_refused_in_one_line_naming_the_field(sets, field):
    with pytest.raises(ConfigError) as err:
        ecsnap_config(*sets)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_defaults_and_auto_k():
    cfg = ecsnap_config("layout.servers=4", "strategy.r=2")
    s = ErasureCodedSnapshots(cfg)
    assert (s.k, s.r, s.code.name) == (2, 2, "rs") and s.interval is None and s.fallback is None
    assert ErasureCodedSnapshots.stripe_shape(cfg) == (1, 0)  # rows stay where ``none`` puts them


# -- geometry ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("S,k,r", [(2, 1, 1), (3, 2, 1), (4, 2, 2), (5, 2, 1), (6, 3, 2), (7, 3, 4)])
def test_every_shard_is_in_one_stripe_and_no_server_holds_parity_of_its_own_stripe(S, k, r):
    geo = Geometry(S, k, r)
    assert sorted(s for st in geo.stripes for s in st.members) == list(range(S))
    for st in geo.stripes:
        assert 1 <= len(st.members) <= k and len(st.holders) == r == len(set(st.holders))
        assert not set(st.members) & set(st.holders)
        for i, h in enumerate(st.holders):
            assert (st.index, i) in geo.held(h)


def test_tolerance_counts_every_lost_member_of_a_stripe_that_lost_data():
    geo = Geometry(4, 2, 1)  # stripes {0,1} parity on 2, {2,3} parity on 0
    assert [st.holders for st in geo.stripes] == [(2,), (0,)]
    assert geo.beyond({1, 3}) is None  # one data block per stripe: decodable
    assert geo.beyond({0, 1}) == (0, [0, 1], [])  # both data blocks of stripe 0
    assert geo.beyond({1, 2}) == (0, [1], [0])  # a data block and its stripe's parity
    assert Geometry(4, 2, 2).beyond({0, 1}) is None  # r = 2: two blocks of one stripe
    assert Geometry(3, 1, 1).beyond({1}) is None


# -- encode and decode of shards of unequal size ------------------------------------------------

def shards(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]


@pytest.mark.parametrize("code,k,r", [("rs", 3, 2), ("rs", 2, 1), ("xor", 3, 1), ("rs", 1, 1), ("rs", 3, 4)])
def test_any_r_lost_shards_of_unequal_size_decode_exactly(code, k, r):
    c = make_code(code, k, r)
    data = shards([1000, 968, 1032][:k])
    size = max(d.size for d in data)
    parity = [encode_block(c, i, data, size) for i in range(r)]
    blocks = {j: data[j] for j in range(k)} | {k + i: parity[i] for i in range(r)}
    for lost in itertools.combinations(range(k + r), r):
        lost_data = [j for j in lost if j < k]
        helpers = [m for m in range(k + r) if m not in lost][:k]
        for j in lost_data:
            got = decode_block(c, k, j, {m: blocks[m] for m in helpers}, size, data[j].size)
            assert np.array_equal(got, data[j]), (lost, j)


def test_a_short_last_stripe_decodes_with_its_missing_members_as_zero_blocks():
    c = make_code("rs", 3, 2)
    data = shards([500, 700])  # k_t = 2 < k = 3
    parity = [encode_block(c, i, data, 700) for i in range(2)]
    got = decode_block(c, 2, 0, {1: data[1], 3 + 1: parity[1]}, 700, 500)
    assert np.array_equal(got, data[0])
    assert np.array_equal(decode_block(c, 2, 1, {3: parity[0], 4: parity[1]}, 700, 700), data[1])


# -- which blocks a recovery needs ---------------------------------------------------------------

def test_a_decode_asks_k_helpers_data_first_and_replaced_holders_get_parity_again():
    geo = Geometry(4, 2, 2)  # stripes {0,1} parity on 2,3; {2,3} parity on 0,1
    have = [False, True, True, True]  # server 0 replaced: its shard and its parity blocks are gone
    plan = geo.recovery_plan(have, have)
    assert plan.problem == ""
    assert plan.decodes == [(0, 0, [(1, 1), (2, 2)])]  # data member 1 on server 1, parity 0 on server 2
    assert plan.reencodes == [(1, 0)]  # stripe 1's parity member 0 lived on server 0
    plan = geo.recovery_plan([False, False, True, True], [False, False, True, True])
    helpers = [(t, j, [h for _, h in used]) for t, j, used in plan.decodes]
    assert helpers == [(0, 0, [2, 3]), (0, 1, [2, 3])]
    assert plan.reencodes == [(1, 0), (1, 1)]


class FlagsComm:
    """The ``allgather`` of a restore's agreement, answered with given flags (no MPI)."""

    def __init__(self, flags):
        self.flags = flags

    def allgather(self, mine):
        return self.flags


def test_a_snapshot_whose_parity_exchange_had_not_completed_is_refused():
    """A survivor holds the copy but its parity is incomplete: the restore refuses the snapshot on
    every server alike (the plan's next candidate, the previous snapshot, is tried)."""
    geo, code = Geometry(2, 1, 1), make_code("rs", 1, 1)
    snap = Snapshot(19, data=np.zeros(8, dtype=np.uint8))
    stale = FlagsComm([(True, False), (False, False)])
    got, problem, _ = restore_shards(stale, geo, code, 0, [8, 8], snap, 19, STRATEGY_TAGS)
    assert got is None and "servers [0]" in problem and "had not completed" in problem
    gone = FlagsComm([(False, False), (False, False)])
    got, problem, _ = restore_shards(gone, geo, code, 0, [8, 8], None, 9, STRATEGY_TAGS)
    assert got is None and problem.startswith("snapshot 9: stripe 0 ")


def test_an_undecodable_stripe_is_named():
    plan = Geometry(2, 1, 1).recovery_plan([False, False], [False, False])
    assert plan.problem.startswith("stripe 0 ") and "server:0" in plan.problem


# -- the commit rule, on a trainer agent (no MPI) ------------------------------------------------

class Env:
    """A ``RankEnv`` stand-in: what the agents read, and what they log and send."""

    def __init__(self, cfg, slot: Slot, tmp: Path | None = None, rank: int = 1) -> None:
        self.cfg, self.slot, self.rank = cfg, slot, rank
        self.n_trainers, self.n_servers = cfg.layout.trainers, cfg.layout.servers  # the live layout
        self.epoch, self.completed, self.resume_from = 0, -1, ""
        self.out_path = (tmp or Path("/nonexistent")) / "run.h5"
        self.placement = SimpleNamespace(n_local=lambda s: 100)
        self.events: list = []
        self.told: list = []

    def now(self) -> float:
        return 0.0

    def event(self, kind, step, detail="", at=None) -> None:
        self.events.append((kind, step, detail))

    def tell_monitor(self, payload) -> None:
        self.told.append(payload)


class FakeTrainer:
    def __init__(self):
        self.params = np.arange(6, dtype=np.float32)
        self.dense_state = np.zeros(6, dtype=np.float32)

    def state(self):
        return {"params": self.params, "dense_state": self.dense_state}

    def load_state(self, state):
        self.params, self.dense_state = np.array(state["params"]), np.array(state["dense_state"])

    def reset(self):
        self.__init__()


def trainer_agent(*sets: str, index: int = 0, tmp: Path | None = None):
    env = Env(ecsnap_config(*sets), Slot(TRAINER, index), tmp)
    agent = ErasureCodedSnapshots(env.cfg).trainer(env, FakeTrainer())
    return agent, env.told, env.events


def pack(**fields: int) -> int:
    """A word of ecsnap's own fields (its layout without the disk fallback)."""
    return ErasureCodedSnapshots(ecsnap_config()).header().view("ecsnap").pack(**fields)


def words(lead: int, done: list[int]) -> np.ndarray:
    """Header words of tiny (2 trainers, 2 servers): trainer 0's, then the servers' done markers."""
    return np.array([pack(snapshot=lead), 0] + [pack(done=d + 1) for d in done], dtype=np.int64)


def test_a_snapshot_commits_when_every_servers_word_says_its_exchange_is_done():
    agent, told, events = trainer_agent("strategy.interval=5")
    assert agent.header_word(3) == 0 and agent.header_word(4) == pack(snapshot=1)
    assert told == [("ecsnap", "start", 4)]
    snaps = agent.parts[0].snaps
    agent.after_step(4, words(1, [-1, -1]))  # the snapshot of step 4 is taken
    assert snaps.building.step == 4 and snaps.committed is None
    agent.parts[0].role.params += 1  # training goes on; the copy stays
    assert snaps.get(4).dense["params"][0] == 0
    assert agent.header_word(9) == 0  # not while one is building
    agent.after_step(5, words(0, [4, -1]))  # one server done: not yet
    assert snaps.committed is None
    agent.after_step(6, words(0, [4, 4]))
    assert snaps.committed.step == 4 and snaps.building is None and snaps.committed.promoted_at == 6
    assert [e[0] for e in events] == ["snapshot"] and told[-1][:3] == ("ecsnap", "commit", 4)
    # the next snapshot keeps the committed one until it commits itself, then reuses its buffers
    agent.after_step(9, words(1, [4, 4]))
    assert sorted(snaps.by_step) == [4, 9] and snaps.committed.step == 4
    old = snaps.get(4).dense["params"]
    agent.after_step(10, words(0, [9, 9]))
    assert sorted(snaps.by_step) == [9] and snaps.spare.dense["params"] is old


def test_only_trainer_0_decides_and_announces():
    agent, told, events = trainer_agent("strategy.interval=5", index=1)
    assert agent.parts[0].schedule is None and agent.header_word(4) == 0 and told == []
    agent.after_step(4, words(1, [-1, -1]))  # trainer 0's word: every trainer takes the snapshot
    agent.after_step(5, words(0, [4, 4]))
    assert agent.parts[0].snaps.committed.step == 4 and events == [] and told == []


# -- the monitor's plan ---------------------------------------------------------------------------

def monitor_agent(*sets: str, tmp: Path | None = None):
    env = Env(ecsnap_config(*sets), Slot("monitor", 0), tmp, rank=0)
    agent = ErasureCodedSnapshots(env.cfg).coordinator(env)
    return agent, env.events


def failure(dead, committed=25, trainers=(0, 1), servers=(0, 1)):
    dead = [Slot(role, i) for role, i in dead]
    survivors = [Slot(TRAINER, i) for i in trainers] + [Slot(SERVER, i) for i in servers]
    return Failure(step=committed + 1, committed=committed, dead=dead,
                   survivors=[s for s in survivors if s not in dead])


def test_a_server_loss_rolls_back_to_the_newest_snapshots_then_the_initial_state():
    agent, _ = monitor_agent("strategy.interval=10")
    agent.on_message(Slot(TRAINER, 0), ("ecsnap", "start", 9))
    plan = agent.plan(failure([(SERVER, 1)], committed=25))
    assert plan.scope is Scope.ROLLBACK and plan.candidates == [19, 9, -1]  # 19: the fixed schedule
    assert plan.kinds == ["snapshot", "snapshot", "initial"]
    assert agent.plan(failure([(TRAINER, 1)])).scope is Scope.COMMITTED  # no shard lost


def test_more_than_r_losses_end_the_run_in_one_line_naming_the_stripe():
    agent, _ = monitor_agent("strategy.interval=10")
    plan = agent.plan(failure([(SERVER, 0), (SERVER, 1)]))
    assert plan.aborts and "\n" not in plan.reason
    assert plan.reason.startswith("stripe 0 ") and "server:0" in plan.reason and "server:1" in plan.reason
    assert "r = 1" in plan.reason and "disk_every = 0" in plan.reason


def test_more_than_r_losses_with_disk_every_fall_back_to_the_disk_checkpoints(tmp_path):
    agent, events = monitor_agent("strategy.interval=10", "strategy.disk_every=10",
                                  f"strategy.dir='{tmp_path / 'ck'}'", tmp=tmp_path)
    agent.parts[0].disk.store.complete_steps = lambda: [19, 9]  # the kit's store, the committer's too
    agent.on_message(Slot(TRAINER, 0), ("ecsnap", "start", 19))
    plan = agent.plan(failure([(SERVER, 0), (SERVER, 1)]))
    assert plan.scope is Scope.ROLLBACK and plan.candidates == [19, 9, -1]
    assert plan.kinds == ["disk", "disk", "initial"] and plan.disk_fallback
    assert events[0][0] == "disk_fallback" and "stripe 0" in events[0][2]
    assert agent.resume_steps() == [19, 9]  # ``mpiec run --resume``: the disk checkpoints


def test_the_disk_fallback_decision_travels_in_the_kits_field_beside_ecsnaps(tmp_path):
    agent, _, _ = trainer_agent("strategy.interval=5", "strategy.disk_every=4", tmp=tmp_path)
    layout = ErasureCodedSnapshots(ecsnap_config("strategy.disk_every=4")).header()
    word = agent.header_word(3)
    assert layout.get(word, "schedule.checkpoint") == 1 and layout.get(word, "ecsnap.snapshot") == 0
    # ecsnap's fields and the kit's decision; the disk writers report no time (the interval is in steps)
    assert list(layout.fields) == [f"ecsnap.{name}" for name, _ in FIELDS] + ["schedule.checkpoint"]
