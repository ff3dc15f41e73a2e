"""Node failures: every process of a node dies at once (``node:I`` kill plans), the strategies
recover within their tolerance to the failure-free checksum, replacements come from nodes that lost
nothing, and the result's ``ranks`` table says which node each process belonged to.

The unit tests at the top need no MPI; the runs below start real ranks (tiny preset, 40 steps)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from run_helpers import mpiec, worker_processes

from mpiec.comm import Comms
from mpiec.launch.resolve import load_config
from mpiec.layout import Slot, initial_slots
from mpiec.results import decode
from mpiec.roles.context import RankContext
from mpiec.roles.recovery import make_plan
from mpiec.strategies.api.agents import Coordinator
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.api.env import RankEnv

# 2 trainers, 6 servers, 2 spares, 2 ranks per node: node 0 = the trainers, nodes 1-3 = servers
# (0, 1), (2, 3), (4, 5), node 4 = the spares (the acceptance layout)
NODES = ["--set", "layout.servers=6", "--set", "layout.ranks_per_node=2", "--set", "layout.spares=2"]


def monitor_context(*sets: str, strategy: str = "ckpt", kill: list[str] | None = None) -> RankContext:
    """The monitor's context without MPI (``make_plan`` only reads it)."""
    cfg = load_config("tiny", strategy=strategy, sets=["training.steps=100", *sets], kill=kill)
    lay = cfg.layout
    world = SimpleNamespace(Get_rank=lambda: 0)
    ctx = RankContext(cfg=cfg, slots=initial_slots(lay.trainers, lay.servers, lay.parity_ranks, lay.spares),
                      comms=Comms(world=world, data=None, trainers=None), ulfm=True, t0_wall=time.time(),
                      out_path=Path("/nonexistent/run.h5"))
    ctx.agent = Coordinator(RankEnv(ctx))
    ctx.agent.plan = lambda failure: RecoveryPlan(Scope.COMMITTED)  # type: ignore[method-assign]  # runtime only
    return ctx


def failure(ctx: RankContext, dead: list[Slot], step: int = 30) -> Failure:
    ctx.slots = [s for s in ctx.slots if s not in dead]
    return Failure(step=step, committed=step - 1, dead=dead, survivors=list(ctx.slots))


def test_replacement_prefers_a_spare_on_a_node_that_lost_nothing():
    # 4 ranks per node: node 0 = trainers + servers 0, 1; node 1 = servers 2, 3 + spares 0, 1;
    # node 2 = spare 2. Node 1's first death is seen before the others: spare 0 (lowest) is on the
    # failing node, spare 2 is not.
    ctx = monitor_context("layout.servers=4", "layout.spares=3", "layout.ranks_per_node=4",
                          kill=["node:1@step=30"])
    assert ctx.nodes == [-1, 0, 0, 0, 0, 1, 1, 1, 1, 2]
    plan = make_plan(ctx, failure(ctx, [Slot("server", 2)]))
    assert plan.assignments == {Slot("spare", 2): Slot("server", 2)}
    assert plan.consumed == [0]  # the node kill fired (once, whatever number of its ranks died)
    # without nodes: the lowest spare, as always
    plain = monitor_context("layout.servers=4", "layout.spares=3")
    assert make_plan(plain, failure(plain, [Slot("server", 2)])).assignments == {
        Slot("spare", 0): Slot("server", 2)}


def test_a_promoted_spare_carries_its_node_to_its_slot():
    from mpiec.roles.recovery import dead_nodes

    ctx = monitor_context(*NODES[1::2])
    assert ctx.node_of(Slot("server", 0)) == 1 and ctx.node_of(Slot("spare", 0)) == 4
    ctx.holders[Slot("server", 0)] = ctx.holders.pop(Slot("spare", 0))  # as carry_out adopts a plan
    assert ctx.node_of(Slot("server", 0)) == 4
    dead = [Slot("server", 0), Slot("server", 3)]
    assert dead_nodes(ctx, Failure(step=3, committed=2, dead=dead)) == {4, 2}


def test_older_ranks_tables_read_the_node_as_unknown(tmp_path):
    import h5py

    from mpiec.results import RANKS_DTYPE, ResultWriter, read_result

    p = tmp_path / "old.h5"
    w = ResultWriter(p, {"config": {}, "strategy": "none", "seed": 1, "failure_mode": "ulfm", "ulfm": True})
    ranks = np.zeros(2, RANKS_DTYPE)
    ranks["node"] = [-1, 3]
    w.set_ranks(ranks)
    w.close({})
    assert read_result(p).ranks["node"].tolist() == [-1, 3]
    with h5py.File(p, "a") as f:
        old = f["ranks"][()]
        del f["ranks"]
        f["ranks"] = old[[n for n in RANKS_DTYPE.names if n != "node"]]
        f.attrs["schema_version"] = 2
    assert read_result(p).ranks["node"].tolist() == [-1, -1]


# -- real node kills ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free("--preset", "tiny")["param_checksum"]  # shared: tests/runs/conftest.py


def kills(res) -> list[tuple[int, str, int, str]]:
    return sorted((int(e["rank"]), decode(e["role"]), int(e["role_index"]), decode(e["detail"]))
                  for e in res.events if decode(e["kind"]) == "kill")


@pytest.mark.mpirun
@pytest.mark.kill
@pytest.mark.timeout(400)
@pytest.mark.parametrize("strategy,kill,sets", [
    ("ecrm", "node:1@step=20", ["strategy.k=2"]),  # the acceptance command
    ("ckpt", "node:2@step=25+3ms", ["strategy.interval=10"]),  # mid-step, rollback of every rank
], ids=["ecrm-step", "ckpt-mid-step"])
def test_a_node_kill_recovers_to_the_failure_free_checksum(strategy, kill, sets, reference, tmp_path):
    args = ["run", "--preset", "tiny", "--strategy", strategy, *NODES, "--kill", kill]
    for s in sets:
        args += ["--set", s]
    run = mpiec(args, out=tmp_path, timeout=300)
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    s = res.summary
    assert s["param_checksum"] == reference and s["kills_fired"] == 2 and s["recoveries"] >= 1
    node = int(kill.split(":")[1].split("@")[0])
    servers = [2 * (node - 1), 2 * (node - 1) + 1]  # node n >= 1 holds servers 2(n-1), 2(n-1)+1
    assert kills(res) == [(3 + i, "server", i, kill) for i in servers]  # both died of the node kill
    dying = [float(e["time"]) for e in res.events if decode(e["kind"]) == "kill"]
    assert max(dying) - min(dying) < 0.5  # at once, not a step apart
    nodes = {(decode(r["role"]), int(r["role_index"])): int(r["node"]) for r in res.ranks}
    assert nodes[("monitor", 0)] == -1 and nodes[("trainer", 0)] == nodes[("trainer", 1)] == 0
    assert nodes[("server", servers[0])] == nodes[("server", servers[1])] == 4  # the spares' node took over
    assert time.sleep(0.3) or worker_processes(str(tmp_path)) == []


@pytest.mark.mpirun
@pytest.mark.kill
@pytest.mark.timeout(300)
def test_a_node_kill_beyond_the_tolerance_ends_the_run_with_the_reason(tmp_path):
    """Node 0 holds both trainers: ecrm keeps no copy of the dense replica (a node kill that fired in
    one trainer a step before the other would have been survived: the test for "at once")."""
    run = mpiec(["run", "--preset", "tiny", "--strategy", "ecrm", "--set", "strategy.k=2", *NODES,
                 "--kill", "node:0@step=20"], out=tmp_path, timeout=240)
    assert run.code == 1, run.stdout + run.stderr
    s = run.result().summary
    assert s["lost"] and "every trainer died" in s["abort_reason"] and s["kills_fired"] == 2
