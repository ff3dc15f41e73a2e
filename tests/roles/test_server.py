"""Server apply and the strategy hook, in-process (no MPI traffic: apply is local)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mpiec.comm import Comms
from mpiec.data.rng import init_embedding_rows
from mpiec.launch.resolve import load_config
from mpiec.layout import initial_slots
from mpiec.roles.context import RankContext
from mpiec.roles.server import Server
from mpiec.strategies.api.agents import ServerAgent
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.env import RankEnv


class RecorderAgent(ServerAgent):
    def __init__(self, env):
        super().__init__(env)
        self.calls = []

    def after_apply(self, step, slots, old, delta, replayed=False):
        self.calls.append((step, slots.copy(), old.copy(), delta.copy()))


class Recorder(Strategy):
    name = "recorder"
    needs_delta = True
    needs_old = True

    def server(self, env, role):
        return RecorderAgent(env)


def make_server(server: int = 1) -> tuple[Server, RankContext]:
    cfg = load_config("tiny")
    slots = initial_slots(2, 2, 0, 0)
    world = SimpleNamespace(Get_rank=lambda: 3 + server, Get_size=lambda: len(slots))
    ctx = RankContext(cfg=cfg, slots=slots, comms=Comms(world=world, data=None, trainers=None),
                      ulfm=False, t0_wall=0.0, out_path=__import__("pathlib").Path("/nonexistent/x.h5"))
    ctx.strategy = Recorder(cfg)
    server = Server(ctx)
    ctx.agent = ctx.strategy.server(RankEnv(ctx), server)
    return server, ctx


def test_shard_rows_are_the_pure_initial_rows():
    server, ctx = make_server(1)
    rows = ctx.placement.rows_of(1)
    g = rows[[0, 5, -1]]
    t = np.searchsorted(ctx.offsets, g, side="right") - 1
    for slot, (row, table) in zip([0, 5, rows.size - 1], zip(g, t, strict=True), strict=True):
        card = ctx.cfg.data.cardinalities[table]
        expect = init_embedding_rows(1, int(table), card, np.array([row - ctx.offsets[table]]), 8)[0]
        assert np.array_equal(server.shard.table[slot, :8], expect)
    assert np.all(server.shard.table[:, 8] == 0)  # Adagrad state starts at zero


def test_apply_sums_duplicates_and_hands_old_and_delta_to_the_strategy():
    server, ctx = make_server(0)
    table = server.shard.table
    before = table.copy()
    slots = np.array([7, 2, 7, 9, 2, 7], dtype=np.int64)
    grads = np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32)
    server.apply(4, slots, grads, np.array([3, 3]))  # two trainers: one pass in push order
    (step, got, old, delta), = ctx.agent.calls
    assert step == 4 and got.tolist() == [2, 7, 9]
    assert np.array_equal(old, before[[2, 7, 9]])
    new = table[[2, 7, 9]]
    assert np.array_equal(delta, old.view(np.uint8) ^ new.view(np.uint8))
    untouched = np.setdiff1d(np.arange(table.shape[0]), [2, 7, 9])
    assert np.array_equal(table[untouched], before[untouched])
    # row 7 got the sum of its three gradients, in message order
    g7 = grads[0] + grads[2] + grads[5]
    acc = np.float32(np.mean(g7 * g7))
    assert np.isclose(table[7, 8], acc, rtol=1e-6)
    assert np.allclose(table[7, :8], before[7, :8] - 0.05 * g7 / (np.sqrt(acc) + 1e-8), rtol=1e-5)
