"""The end of a rank's life (``roles/runner.run_rank``): a peer leaving after the final hold is no error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpiec.comm import Comms, PeerFailure
from mpiec.launch.resolve import load_config
from mpiec.layout import initial_slots
from mpiec.roles.context import RankContext
from mpiec.roles.runner import make_agent, run_rank
from mpiec.strategies.api.env import RankEnv


class World:
    """A world of 5 ranks seen from rank 1, whose final hold meets a peer that already left."""

    def __init__(self) -> None:
        self.held = 0

    def Get_rank(self) -> int:
        return 1

    def Get_size(self) -> int:
        return 5

    def Agree(self, flag: int) -> int:
        return flag

    def gather(self, obj: Any, root: int = 0) -> None:
        return None

    def bcast(self, obj: Any, root: int = 0) -> Any:
        self.held += 1
        raise PeerFailure(75, "final hold")


class Role:
    def run(self) -> None:
        pass

    def final_report(self) -> dict[str, Any]:
        return {}


def test_a_peer_gone_after_the_final_hold_does_not_stop_a_rank_that_recovered(tmp_path: Path):
    """Issue 12, item 16: runs that recovered and succeeded printed "stopping: peer failure (MPI error
    class 75) during final hold" (a spawned replacement, on a loaded machine)."""
    cfg = load_config("tiny")
    lay = cfg.layout
    world = World()
    ctx = RankContext(cfg=cfg, slots=initial_slots(lay.trainers, lay.servers, lay.parity_ranks, lay.spares),
                      comms=Comms(world=world, data=None, trainers=None), ulfm=True, t0_wall=0.0,
                      out_path=tmp_path / "run.h5")
    ctx.agent = make_agent(ctx.strategy, RankEnv(ctx), ctx.slot.role, None)
    ctx.ledger.failures_seen = 1  # the hold runs only after a failure
    assert run_rank(ctx, Role()) == "done" and world.held == 1
