"""``ecrm`` over nodes, without MPI: stripes spread so one node failure costs each stripe at most
one member when the node sizes allow it; layouts where a node failure exceeds ``r`` are refused
before launch (``strategy.allow_colocated`` runs them anyway); the stripe helpers stay consistent
under a permuted position order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config
from mpiec.layout import RowPlacement, holder_nodes, layout_nodes, stripe_placement
from mpiec.strategies.ecrm.stripes import (
    member_holder,
    member_index,
    node_losses,
    parity_stripes,
    residue_holders,
    stripe_losses,
)

ACCEPTANCE = ["strategy.k=2", "layout.servers=6", "layout.ranks_per_node=2", "layout.spares=2"]


def ecrm_config(*sets: str):
    return load_config("tiny", strategy="ecrm", sets=list(sets), memory=False)


def node_failures(cfg):
    """For every node: the ``servers`` ranks it holds (what one failure of it takes)."""
    nodes = holder_nodes(cfg.layout)
    return {n: {h for h, m in enumerate(nodes) if m == n} for n in set(nodes) if n >= 0}


# (servers, k, r, ranks_per_node, trainers): node sizes allow distinct nodes (largest node x width <= S)
SPREADABLE = [(6, 2, 1, 2, 2), (8, 3, 1, 2, 2), (9, 2, 1, 3, 3), (12, 3, 1, 3, 1), (10, 2, 2, 2, 2),
              (7, 2, 1, 2, 1), (8, 2, 2, 2, 2), (12, 4, 2, 2, 2), (6, 1, 1, 3, 2)]


@pytest.mark.parametrize("servers,k,r,per_node,trainers", SPREADABLE)
def test_one_node_failure_costs_each_stripe_at_most_one_member(servers, k, r, per_node, trainers):
    code = "xor" if r == 1 else "rs"
    cfg = ecrm_config(f"layout.servers={servers}", f"strategy.k={k}", f"strategy.r={r}",
                      f"strategy.code='{code}'", f"layout.ranks_per_node={per_node}",
                      f"layout.trainers={trainers}")
    pl = stripe_placement(cfg.layout, 5000, k, r)
    # several servers share a node, or the test proves nothing
    shared = max(len(v) for v in node_failures(cfg).values())
    assert shared >= 2
    assert all(len(members) == 1 for _, members in node_losses(pl, holder_nodes(cfg.layout)).values())
    for node, lost in node_failures(cfg).items():  # every node's failure, as the plan sees it
        losses = stripe_losses(pl, lost)
        assert losses and max(len(m) for m in losses.values()) == 1, (node, losses)


def test_the_acceptance_layout_spreads_and_refuses_what_cannot_be_spread():
    cfg = ecrm_config(*ACCEPTANCE)
    assert layout_nodes(cfg.layout) == [-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    pl = stripe_placement(cfg.layout, 5000, 2, 1)
    assert pl.order.tolist() != list(range(6))  # the identity would put servers 0 and 1 in one stripe
    # three servers, one node of two: every stripe spans all three, a node failure takes two
    with pytest.raises(ConfigError) as err:
        ecrm_config("strategy.k=2", "layout.servers=3", "layout.ranks_per_node=2")
    text = str(err.value)
    assert "\n" not in text and "stripe 0" in text and "node 1" in text and "allow_colocated" in text
    assert "member 0 on server 0, member 1 on server 1" in text
    ecrm_config("strategy.k=2", "layout.servers=3", "layout.ranks_per_node=2",
                "strategy.allow_colocated=true")
    with pytest.raises(ConfigError, match="allow_colocated must be true or false"):
        ecrm_config("strategy.allow_colocated=1")


def test_refusal_is_before_launch_on_the_command_line(capsys):
    from mpiec.cli import main

    code = main(["run", "--preset", "tiny", "--strategy", "ecrm", "--set", "strategy.k=2",
                 "--set", "layout.servers=3", "--set", "layout.ranks_per_node=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "node 1" in err[0] and "stripe 0" in err[0]


def test_rs_tolerates_two_members_of_a_stripe_on_one_node():
    # 4 servers, k=2, r=2: every stripe spans every server; two per node is within r = 2
    cfg = ecrm_config("layout.servers=4", "strategy.k=2", "strategy.r=2", "strategy.code='rs'",
                      "layout.ranks_per_node=2")
    pl = stripe_placement(cfg.layout, 5000, 2, 2)
    assert max(len(m) for _, m in node_losses(pl, holder_nodes(cfg.layout)).values()) == 2
    with pytest.raises(ConfigError, match="lose 2 members"):  # r = 1 would not
        ecrm_config("layout.servers=3", "strategy.k=2", "layout.ranks_per_node=2")


def test_dedicated_parity_ranks_count_in_the_check():
    # k = 2 data members over 4 servers, parity rank on the node of the last server: a failure of it
    # takes a data member and the parity of some stripes
    with pytest.raises(ConfigError, match="parity 0"):
        ecrm_config("layout.servers=4", "strategy.k=2", "layout.parity_ranks=1", "layout.trainers=1",
                    "layout.ranks_per_node=2")


def test_layouts_without_nodes_keep_the_identity_order():
    for sets in ([], ["layout.servers=5", "strategy.k=3"], ["layout.ranks_per_node=1", "layout.servers=4"]):
        cfg = ecrm_config(*sets)
        pl = stripe_placement(cfg.layout, 1000, *type_shape(cfg))
        assert pl.order.tolist() == list(range(cfg.layout.servers))


def type_shape(cfg):
    from mpiec.strategies import get_strategy_class

    return get_strategy_class(cfg.strategy.name).stripe_shape(cfg)


@pytest.mark.parametrize("rows,S,k,r,order", [(1000, 6, 2, 1, [0, 2, 4, 1, 3, 5]),
                                              (1001, 5, 2, 2, [4, 0, 3, 1, 2]), (97, 4, 3, 1, [3, 2, 1, 0])])
def test_stripe_helpers_agree_under_a_permuted_order(rows, S, k, r, order):
    pl = RowPlacement(rows, S, k, r, order=order)
    all_rows = np.arange(rows)
    owner, slot = pl.owner(all_rows), pl.local_slot(all_rows)
    for s in range(S):  # still a bijection, slots in global order
        assert np.array_equal(pl.rows_of(s), all_rows[owner == s])
        assert np.array_equal(slot[owner == s], np.arange(np.count_nonzero(owner == s)))
    stripes = np.arange(pl.n_stripes)
    for m in range(k):
        assert np.array_equal(member_holder(pl, stripes, m), pl.owner(stripes * k + m))
    for rank in range(S):
        st, ii = parity_stripes(pl, rank)
        for slot_ in np.flatnonzero(st >= 0):
            assert member_holder(pl, st[slot_:slot_ + 1], k + ii[slot_])[0] == rank
            assert member_index(pl, st[slot_:slot_ + 1], k + ii[slot_])[0] == slot_
        st, mm = pl.data_stripes(rank)
        assert np.array_equal(pl.local_slot(st * k + mm), np.arange(st.size))
    for residue in range(S):
        holders = residue_holders(pl, residue)
        assert holders == [order[(residue + m) % S] for m in range(k + r)]
    with pytest.raises(ValueError, match="permutation"):
        RowPlacement(rows, S, k, r, order=[0] * S)


def test_spread_is_exhaustive_on_small_node_maps():
    """Every assignment of up to 7 servers to nodes whose largest node times the width fits."""
    from mpiec.layout import spread_order, window_collisions

    checked = 0
    for S in range(2, 8):
        for width in range(2, S + 1):
            for nodes in itertools.product(range(3), repeat=S):
                if max(nodes.count(n) for n in set(nodes)) * width > S:
                    continue
                order = spread_order(list(nodes), width)
                assert sorted(order) == list(range(S))
                assert window_collisions(order, list(nodes), width) == 1, (nodes, width, order)
                checked += 1
    assert checked > 500


# -- the factory's decisions (issue 23: agents per role) --------------------------------------------

@pytest.mark.parametrize("sets,problem", [
    (["strategy.r=2"], "strategy.r must be 1"),  # xor has one parity row
    (["strategy.fallback='ckpt'"], "strategy.fallback_interval"),
    (["strategy.k=3"], "strategy.k = 3, r = 1"),  # 4 members on 2 servers
    (["strategy.r=5", "strategy.code='rs'"], "<= 4, got 5"),
    (["strategy.rebuild_budget=0"], "strategy.rebuild_budget must be > 0"),
    (["strategy.exchange='later'"], "strategy.exchange must be"),
])
def test_bad_keys_are_refused_naming_the_key(sets, problem):
    with pytest.raises(ConfigError) as err:
        ecrm_config(*sets)
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_a_rank_is_promoted_only_on_a_slot_it_did_not_start_with():
    from types import SimpleNamespace

    from mpiec.layout import Slot
    from mpiec.strategies.ecrm.strategy import promoted

    cfg = ecrm_config("layout.spares=2")  # monitor, 2 trainers, 2 servers, 2 spares

    def env(first_rank, slot):
        return SimpleNamespace(cfg=cfg, first_rank=first_rank, slot=slot)

    assert not promoted(env(3, Slot("server", 0))) and not promoted(env(4, Slot("server", 1)))
    assert promoted(env(5, Slot("server", 1)))  # spare 0 took server 1
    assert promoted(env(cfg.n_ranks, Slot("server", 0)))  # a process spawned for server 0


def test_the_header_word_is_the_fallbacks_and_the_stripe_shape_is_resolved():
    from mpiec.strategies.ckpt import FullCheckpoint
    from mpiec.strategies.ecrm.strategy import ErasureCoded

    cfg = ecrm_config("layout.servers=4", "strategy.code='rs'", "strategy.r=2", "strategy.fallback='ckpt'",
                      "strategy.fallback_interval=5")
    strategy = ErasureCoded(cfg)
    assert strategy.header().fields == FullCheckpoint(strategy.fallback.cfg).header().fields
    assert not ErasureCoded(ecrm_config()).header().fields  # no fallback: no field
    assert ErasureCoded.stripe_shape(cfg) == (2, 2) and (strategy.k, strategy.r) == (2, 2)
    assert strategy.fallback is not None and strategy.fallback.params.interval == 5
    assert strategy.fallback.records.strategy.name == "ckpt"  # its manifests record ckpt's config
    assert strategy.figures()["parity_placement"] == "rotated" and strategy.figures()["k"] == 2
    assert set(strategy.figures()) <= set(ErasureCoded.summary_rules)


class Env:
    """A ``RankEnv`` stand-in: what a trainer's agent reads, and what it logs."""

    def __init__(self, cfg, slot, tmp) -> None:
        self.cfg, self.slot, self.rank, self.first_rank = cfg, slot, 1, 1
        self.n_trainers, self.n_servers = cfg.layout.trainers, cfg.layout.servers  # the live layout
        self.epoch, self.completed, self.resume_from = 0, -1, ""
        self.out_path = tmp / "run.h5"
        self.events: list = []

    def now(self) -> float:
        return 0.0

    def event(self, kind, step, detail="", at=None) -> None:
        self.events.append((kind, step, detail))


class FakeTrainer:
    def state(self):
        return {"params": np.zeros(3, np.float32)}

    def load_state(self, state):
        pass

    def reset(self):
        pass


def test_trainer_0_keeps_its_gradients_and_carries_the_fallbacks_decision(tmp_path):
    from mpiec.layout import Slot
    from mpiec.strategies.api.base import RecoveryPlan, Scope
    from mpiec.strategies.ecrm.agents import EcrmTrainer
    from mpiec.strategies.ecrm.strategy import ErasureCoded

    cfg = ecrm_config("strategy.fallback='ckpt'", "strategy.fallback_interval=10", "strategy.parity_every=3")
    HEADER = ErasureCoded(cfg).header()
    agent = ErasureCoded(cfg).trainer(Env(cfg, Slot("trainer", 0), tmp_path), FakeTrainer())
    assert [HEADER.get(agent.header_word(s), "schedule.checkpoint") for s in (8, 9, 10)] == [0, 1, 0]
    ecrm = agent.parts[-1]
    assert isinstance(ecrm, EcrmTrainer)
    for step in range(12):
        agent.after_push(step, np.arange(4), np.array([2, 2]), np.ones((4, 2), np.float32))
    assert sorted(ecrm.pushed) == list(range(5, 12))  # 5 steps + parity_every - 1
    agent.on_recovered(RecoveryPlan(Scope.COMMITTED, restored=9))
    assert sorted(ecrm.pushed) == [5, 6, 7, 8, 9]  # steps 10, 11 are executed again
    s = agent.summary()
    assert s["retained_grads_peak_bytes"] > 0 and s["replayed_steps"] == 0 and "restores" in s
    other = ErasureCoded(cfg).trainer(Env(cfg, Slot("trainer", 1), tmp_path), FakeTrainer())
    assert other.header_word(9) == 0  # trainer 0 decides
